"""The public functions: validate, convert, allocate, call the kernels, shape the results."""
from __future__ import annotations

import numpy as np

from ._inputs import prepare
from ._kernels.backward import backward
from ._kernels.forward import forward as _forward_kernel
from ._kernels.output import output_errors
from ._results import BPTTResult, ForwardResult, pack_grads
from .params import Params

__all__ = ["grad", "value_and_grad", "bptt", "forward", "loss"]


def _time_major(problem):
    """Kernel inputs (T, B, ...) for x; the unused kind is an empty array of the same type."""
    dtype = problem.dtype
    if problem.ids:
        return np.ascontiguousarray(problem.x.T), np.empty((0, 0, 0), dtype), True
    return np.empty((0, 0), np.int64), np.ascontiguousarray(problem.x.transpose(1, 0, 2)), False


def _targets(problem):
    if problem.y_ids:
        return np.ascontiguousarray(problem.y.T), np.empty((0, 0, 0), problem.dtype)
    return np.empty((0, 0), np.int64), np.ascontiguousarray(problem.y.transpose(1, 0, 2))


def _bias(vector, size, dtype):
    return np.zeros(size, dtype) if vector is None else vector


def _states(problem, x_ids, x_dense, ids):
    """hs (T+1, B, H): hs[0] = h0 and hs[t + 1] = h_t, zero past each length."""
    p = problem.params
    L, H, C = p.sizes
    hs = np.empty((problem.T + 1, problem.B, H), problem.dtype)
    hs[0] = problem.h0
    _forward_kernel(x_ids, x_dense, ids, np.ascontiguousarray(p.U.T),
                    np.ascontiguousarray(p.W.T), _bias(p.b, H, problem.dtype),
                    problem.activation, problem.lengths, hs,
                    np.empty((problem.B, H), problem.dtype))
    return hs


def _final_states(problem, hs):
    return hs[problem.lengths, np.arange(problem.B)]


def _errors(problem, hs):
    """(loss, err (T, B, C))."""
    p = problem.params
    L, H, C = p.sizes
    y_ids, y_dense = _targets(problem)
    err = np.empty((problem.T, problem.B, C), problem.dtype)
    total = output_errors(hs[1:], np.ascontiguousarray(p.V.T), _bias(p.c, C, problem.dtype),
                          problem.loss, y_ids, y_dense, problem.y_ids, problem.lengths, err)
    return float(total), err


def _solve(problem):
    """(loss, Params of gradients, h_final (B, H), dh0 (B, H)) for a validated problem."""
    p, dtype = problem.params, problem.dtype
    L, H, C = p.sizes
    B, T = problem.B, problem.T
    dU, dW, dV = np.zeros_like(p.U), np.zeros_like(p.W), np.zeros_like(p.V)
    db, dc = np.zeros(H, dtype), np.zeros(C, dtype)
    dh0 = np.zeros((B, H), dtype)
    total, h_final = 0.0, problem.h0.copy()
    if B and T:
        x_ids, x_dense, ids = _time_major(problem)
        hs = _states(problem, x_ids, x_dense, ids)
        total, err = _errors(problem, hs)
        h_final = _final_states(problem, hs)
        dU_kernel = np.empty((L, H) if ids else (H, L), dtype)
        backward(hs, err, x_ids, x_dense, ids, p.W, p.V, problem.activation,
                 problem.truncate or 0, problem.stride, problem.lengths,
                 np.empty((T, B, H), dtype), np.empty((2, T, B, H), dtype),
                 dU_kernel, dW, dV, db, dc, dh0)
        dU = np.ascontiguousarray(dU_kernel.T) if ids else dU_kernel
    grads = Params(dU, dW, dV, db if p.b is not None else None, dc if p.c is not None else None)
    return total, grads, h_final, dh0


def bptt(x, y, params, *, truncate=None, stride=1, activation="tanh", loss="softmax_ce",
         h0=None, lengths=None):
    """Loss, gradients, final hidden states and dL/dh0 in one call.

    Parameters
    ----------
    x : array_like
        Integer token ids, (T,) or (B, T), or dense floats, (T, L) or (B, T, L).
    y : array_like
        Integer class ids, (T,) or (B, T), with -1 meaning no loss at that step; or float
        targets, (T, C) or (B, T, C).
    params : fastbptt.Params, dict or tuple
        U (H, L), W (H, H), V (C, H) and optionally b (H,), c (C,), all float32 or all
        float64: that dtype is the compute dtype of the call.
    truncate : int or None
        k: the error of output t flows back through at most the steps t ... lo(t),
        lo(t) = max(0, (t // stride + 1) * stride - k). None means full BPTT.
    stride : int
        s, 1 <= s <= truncate. 1 gives a k-step window per output (document 003's loop
        is truncate=10); s = k gives chunked TBPTT (min-char-rnn).
    activation : {"tanh", "sigmoid", "relu", "identity"}
    loss : {"softmax_ce", "mse"}
        Summed over steps and sequences. For mse, integer y means one-hot targets.
    h0 : array_like, optional
        Initial state, (H,) or (B, H); zeros when omitted.
    lengths : array_like, optional
        (B,) sequence lengths: steps t >= lengths[b] are padding (no loss, state untouched).

    Returns
    -------
    BPTTResult
        ``loss`` (float), ``grads`` (structure of ``params``), ``h_final`` and ``dh0``
        ((H,) for one sequence, (B, H) for a batch; ``dh0`` is zeros when h0 is None).
    """
    problem = prepare(x, y, params, truncate=truncate, stride=stride, activation=activation,
                      loss=loss, h0=h0, lengths=lengths)
    total, grads, h_final, dh0 = _solve(problem)
    if not problem.h0_given:
        dh0[:] = 0
    if problem.single:
        h_final, dh0 = h_final[0], dh0[0]
    return BPTTResult(total, pack_grads(problem, grads), h_final, dh0)


def value_and_grad(x, y, params, **options):
    """``(loss, grads)``: the loss as a Python float and the gradients as in `grad`."""
    result = bptt(x, y, params, **options)
    return result.loss, result.grads


def grad(x, y, params, **options):
    """Gradients of the summed loss, in the structure of ``params``. Options as `bptt`."""
    return bptt(x, y, params, **options).grads


def forward(x, params, *, activation="tanh", h0=None, lengths=None):
    """Hidden states and softmax output probabilities.

    Returns a `ForwardResult` ``(h, p)``: h is (T, H) or (B, T, H), p is (T, C) or
    (B, T, C); both are zero at padding steps.
    """
    problem = prepare(x, None, params, activation=activation, h0=h0, lengths=lengths,
                      need_y=False)
    p = problem.params
    L, H, C = p.sizes
    B, T = problem.B, problem.T
    h = np.zeros((B, T, H), problem.dtype)
    probs = np.zeros((B, T, C), problem.dtype)
    if B and T:
        hs = _states(problem, *_time_major(problem))
        h = hs[1:].transpose(1, 0, 2)
        logits = h @ p.V.T + (0 if p.c is None else p.c)
        logits -= logits.max(axis=-1, keepdims=True)
        np.exp(logits, out=logits)
        probs = logits / logits.sum(axis=-1, keepdims=True)
        probs[~problem.padding_mask()] = 0
        h = np.ascontiguousarray(h)
    if problem.single:
        h, probs = h[0], probs[0]
    return ForwardResult(h, probs)


def loss(x, y, params, *, activation="tanh", loss="softmax_ce", h0=None, lengths=None):
    """The summed loss as a Python float (no gradients)."""
    problem = prepare(x, y, params, activation=activation, loss=loss, h0=h0, lengths=lengths)
    if not (problem.B and problem.T):
        return 0.0
    hs = _states(problem, *_time_major(problem))
    return _errors(problem, hs)[0]
