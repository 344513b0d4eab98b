"""The output layer and loss of SPEC.md §1-§2 on top of the layer VJP (`Forward`).

For each real step: o_t = V h_t + c from the top layer's outputs, the loss L_t and
e_t = dL_t/do_t; then dV = sum e_t h_t^T, dc = sum e_t, and G_t = V^T e_t is the
gradient injected into the layers, exactly as a caller of `fastbptt.layer.vjp` would.
"""
from __future__ import annotations

import numpy as np

from .._blas_flags import ignore_harmless_flags
from .._inputs import HEAD_OPTIONS, known_options, prepare
from .._results import BPTTResult
from ..layer import _caller_states
from ..params import Model
from .stack import Forward

__all__ = ["bptt", "grad", "value_and_grad", "output", "output_error"]


@ignore_harmless_flags
def output(h, V, c):
    """o = V h + c."""
    return V @ h if c is None else V @ h + c


_LOSS_CODES = {"softmax_ce": 0, "mse": 1}


@ignore_harmless_flags
def output_error(o, target, y_ids, loss):
    """(L_t, e_t = dL_t/do_t) for one output vector o; target is a class id or a row;
    loss "softmax_ce" or "mse" (or their codes 0, 1).

    L_t is a NumPy scalar of o's dtype (finite differences run this in extended precision).
    """
    code = _LOSS_CODES.get(loss) if isinstance(loss, str) else loss
    if isinstance(code, bool) or code not in (0, 1):
        raise ValueError(f"loss must be 'softmax_ce' or 'mse' (or their codes 0, 1); got "
                         f"{loss!r}")
    loss = code
    if y_ids:
        if target < 0:                      # -1: no loss at this step
            return 0.0, np.zeros_like(o)
        row = np.zeros_like(o)
        row[target] = 1
    else:
        row = target
    if loss == 1:                           # mse: 1/2 |o - y|^2
        e = o - row
        return 0.5 * (e @ e), e
    m = o.max()                             # softmax_ce with a stable log-sum-exp
    log_p = o - (m + np.log(np.exp(o - m).sum()))
    p = np.exp(log_p)
    return -(row @ log_p), p * row.sum() - row


@ignore_harmless_flags
def solve(problem):
    """(loss, Model of gradients, h_final, dh0, c_final, dc0), states as (S, B, H)."""
    V, c = problem.model.V, problem.model.c
    fw = Forward(problem)
    dV, dc = np.zeros_like(V), np.zeros(V.shape[0], V.dtype)
    G = np.zeros_like(fw.h)
    total = np.float64(0)                   # float64 sum, as the kernels
    for b in range(problem.B):
        for t in range(int(problem.lengths[b])):
            h = fw.h[b, t]
            loss_t, e = output_error(output(h, V, c), problem.y[b, t], problem.y_ids,
                                     problem.loss)
            total += loss_t
            dV += np.outer(e, h)
            dc += e
            G[b, t] = V.T @ e
    layers, _, dh0, dc0 = fw.backward(G)
    grads = Model(layers.layers, dV, None if c is None else dc)
    return float(total), grads, fw.h_final, dh0, fw.c_final, dc0


def bptt(x, y, params, **options):
    """Loss, gradients, final states and dL/dh0, as `fastbptt.bptt` (same options).

    For an LSTM, c_final and dL/dc0 are computed too (`solve`); they are returned when
    `BPTTResult` has fields for them.
    """
    known_options("bptt", options, HEAD_OPTIONS)
    problem = prepare(x, y, params, **options)
    total, grads, h_final, dh0, c_final, dc0 = solve(problem)
    lstm = {"c_final": c_final, "dc0": dc0}
    extra = {k: None if v is None else _caller_states(problem, v) for k, v in lstm.items()
             if k in BPTTResult._fields}
    return BPTTResult(loss=total, grads=problem.rebuild(grads), h_final=_caller_states(
        problem, h_final), dh0=_caller_states(problem, dh0), **extra)


def value_and_grad(x, y, params, **options):
    """(loss, grads), as `fastbptt.value_and_grad`."""
    known_options("value_and_grad", options, HEAD_OPTIONS)
    result = bptt(x, y, params, **options)
    return result.loss, result.grads


def grad(x, y, params, **options):
    """Gradients in the structure of ``params``, as `fastbptt.grad`."""
    known_options("grad", options, HEAD_OPTIONS)
    return bptt(x, y, params, **options).grads
