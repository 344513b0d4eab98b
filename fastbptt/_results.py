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
        (H,) for one sequence, (B, H) for a batch: each sequence's last real state
        (h0 when its length is 0).
    dh0 : ndarray
        dL/dh0, same shape as h_final; zeros when h0 was not given.
    """

    loss: float
    grads: Any
    h_final: np.ndarray
    dh0: np.ndarray


class ForwardResult(NamedTuple):
    """What `fastbptt.forward` returns.

    h : ndarray
        Hidden states, (T, H) or (B, T, H); zeros at padding steps.
    p : ndarray
        Output probabilities softmax(V h + c), (T, C) or (B, T, C); zeros at padding steps.
    """

    h: np.ndarray
    p: np.ndarray


def pack_grads(problem, grads):
    """Gradients (a `Params`) in the structure the caller passed."""
    return problem.rebuild(grads)
