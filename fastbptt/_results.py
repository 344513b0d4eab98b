"""Result containers shared by the kernels' API and the reference."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np


class BPTTResult(NamedTuple):
    """What `fastbptt.bptt` returns.

    loss : float
        Summed over steps and sequences.
    grads
        Gradients in the structure of the params that were passed.
    h_final : ndarray
        Each sequence's last real state (h0 when its length is 0): (H,) for one
        sequence, (B, H) for a batch; for a stack (a `Model`), (S, B, H) or (S, H) with
        S = layers x directions in PyTorch's order.
    dh0 : ndarray
        dL/dh0, same shape as h_final; zeros when h0 was not given.
    c_final, dc0 : ndarray or None
        The LSTM's final cell state and dL/dc0, shaped like h_final (dc0 zeros when
        c0 was not given); None for other cells.
    """

    loss: float
    grads: Any
    h_final: np.ndarray
    dh0: np.ndarray
    c_final: Any = None
    dc0: Any = None


class ForwardResult(NamedTuple):
    """What `fastbptt.forward` returns.

    h : ndarray
        Hidden states, (T, H) or (B, T, H); zeros at padding steps.
    p : ndarray
        Output probabilities softmax(V h + c), (T, C) or (B, T, C); zeros at padding steps.
    """

    h: np.ndarray
    p: np.ndarray


class LayerOutput(NamedTuple):
    """What `fastbptt.layer.vjp` and `fastbptt.layer.forward` return as ``out``.

    h : ndarray
        The top layer's states, (B, T, H D), (T, B, H D) with ``time_major``, or
        (T, H D) (D directions side by side, forward first); zeros at padding steps.
    h_final : ndarray
        Each sequence's last real state, in h0's layout: (B, H) or (H,) for one layer,
        (S, B, H) or (S, H) for a stack, S = layers x directions.
    c_final : ndarray or None
        The LSTM's final cell state, like h_final; None for other cells.
    """

    h: np.ndarray
    h_final: np.ndarray
    c_final: Any = None


class LayerGrads(NamedTuple):
    """What ``back`` of `fastbptt.layer.vjp` returns.

    grads
        The gradients of the layer's params, in the structure that was passed.
    dx : ndarray or None
        dL/dx for dense inputs, shaped like x; None for token ids.
    dh0 : ndarray
        dL/dh0, shaped like h_final; zeros when h0 was not given.
    dc0 : ndarray or None
        The LSTM's dL/dc0, shaped like h_final; zeros when c0 was not given. None for
        other cells.
    """

    grads: Any
    dx: Any
    dh0: np.ndarray
    dc0: Any = None


def pack_grads(problem, grads):
    """Gradients (a `Params`) in the structure the caller passed."""
    return problem.rebuild(grads)


def given_states(problem, dh0, dc0):
    """dL/dh0 and dL/dc0 (S, B, H) as results report them: the gradient of each initial
    state the caller gave, zeros for one they did not (a stack computes both, or neither
    when neither was given: None). dc0 is None for cells other than the LSTM."""
    lstm = problem.cell == "lstm"
    if dh0 is None:
        return np.zeros_like(problem.h0), np.zeros_like(problem.h0) if lstm else None
    if not problem.h0_given:
        dh0[...] = 0
    if lstm and not problem.c0_given:
        dc0[...] = 0
    return dh0, dc0
