"""The readable NumPy reference: the source documents' loops, with their errors fixed.

Written to be read next to SPEC.md, not to be fast. For every sequence it runs the
forward recurrence one step at a time, then, for every output t, walks back through
that output's window t, t-1, ..., lo(t) with outer products, exactly like document
003's ``for bptt_step in range(t, max(-1, t-10), -1)`` loop, generalised to the
truncation rule of SPEC.md §3. The tests and the benchmarks compare the kernels with it.

``grad``, ``value_and_grad`` and ``bptt`` take the same arguments as the package's.
"""
from __future__ import annotations

import numpy as np

from ._inputs import prepare
from ._results import BPTTResult, pack_grads
from .params import Layer, Model

__all__ = ["grad", "value_and_grad", "bptt", "window_start"]


def activate(a, activation):
    """f(a) for activation code 0 tanh, 1 sigmoid, 2 relu, 3 identity."""
    if activation == 0:
        return np.tanh(a)
    if activation == 1:                     # 1 / (1 + e^-a), with e^-|a| so nothing overflows
        e = np.exp(-np.abs(a))
        return np.where(a >= 0, 1 / (1 + e), e / (1 + e))
    if activation == 2:
        return np.maximum(a, 0)
    return a


def derivative(h, activation):
    """f'(a) read off the output h = f(a) (SPEC.md §2)."""
    if activation == 0:
        return 1 - h * h
    if activation == 1:
        return h * (1 - h)
    if activation == 2:
        return (h > 0).astype(h.dtype)
    return np.ones_like(h)


def window_start(t, truncate, stride):
    """lo(t): the earliest step that the error of output t reaches (SPEC.md §3)."""
    if truncate is None:
        return 0
    return max(0, (t // stride + 1) * stride - truncate)


def output_error(o, target, y_ids, loss):
    """(L_t, e_t = dL_t/do_t) for one output vector o; target is a class id or a row.

    L_t is a NumPy scalar of o's dtype (finite differences run this in extended precision).
    """
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


def input_column(problem, b, t):
    """x_t of sequence b as a dense vector (a one-hot column for token ids)."""
    if not problem.ids:
        return problem.x[b, t]
    col = np.zeros(problem.params.U.shape[1], dtype=problem.dtype)
    col[problem.x[b, t]] = 1
    return col


def run_states(problem, b, start, stop, h_before, params=None):
    """States h_start ... h_{stop-1} of sequence b from h_{start-1} = h_before."""
    p = params or problem.params
    hs, h = [], h_before
    for t in range(start, stop):
        a = p.U @ input_column(problem, b, t) + p.W @ h
        if p.b is not None:
            a = a + p.b
        h = activate(a, problem.activation)
        hs.append(h)
    return hs


def output(h, params):
    return params.V @ h if params.c is None else params.V @ h + params.c


def _solve(problem):
    p, act = problem.params, problem.activation
    dU, dW, dV = np.zeros_like(p.U), np.zeros_like(p.W), np.zeros_like(p.V)
    db, dc = np.zeros(p.W.shape[0], p.W.dtype), np.zeros(p.V.shape[0], p.V.dtype)
    h0 = problem.h0[0]
    dh0 = np.zeros_like(h0)
    h_final = h0.copy()
    total = np.float64(0)                   # float64 sum, as the kernels
    for b in range(problem.B):
        n = int(problem.lengths[b])
        # hs[t + 1] is h_t; hs[0] is h0 = h_{-1}
        hs = [h0[b]] + run_states(problem, b, 0, n, h0[b])
        h_final[b] = hs[n]
        for t in range(n):
            loss_t, e = output_error(output(hs[t + 1], p), problem.y[b, t], problem.y_ids,
                                     problem.loss)
            total += loss_t
            dV += np.outer(e, hs[t + 1])
            dc += e
            delta = (p.V.T @ e) * derivative(hs[t + 1], act)
            lo = window_start(t, problem.truncate, problem.stride)
            for r in range(t, lo - 1, -1):
                dU += np.outer(delta, input_column(problem, b, r))
                dW += np.outer(delta, hs[r])            # hs[r] = h_{r-1}
                db += delta
                if r == 0:
                    dh0[b] += p.W.T @ delta
                elif r > lo:
                    delta = (p.W.T @ delta) * derivative(hs[r], act)
    grads = Model(((Layer(dU, dW, db if p.b is not None else None),),), dV,
                  dc if p.c is not None else None)
    return float(total), grads, h_final, dh0


def bptt(x, y, params, *, truncate=None, stride=1, activation="tanh", loss="softmax_ce",
         h0=None, lengths=None, check_finite=True):
    """Loss, gradients, final states and dL/dh0, as `fastbptt.bptt`."""
    problem = prepare(x, y, params, truncate=truncate, stride=stride, activation=activation,
                      loss=loss, h0=h0, lengths=lengths, check_finite=check_finite)
    total, grads, h_final, dh0 = _solve(problem)
    if not problem.h0_given:
        dh0[:] = 0
    return BPTTResult(total, pack_grads(problem, grads),
                      h_final[0] if problem.single else h_final,
                      dh0[0] if problem.single else dh0)


def value_and_grad(x, y, params, **options):
    """(loss, grads), as `fastbptt.value_and_grad`."""
    result = bptt(x, y, params, **options)
    return result.loss, result.grads


def grad(x, y, params, **options):
    """Gradients in the structure of ``params``, as `fastbptt.grad`."""
    return bptt(x, y, params, **options).grads
