"""The public functions: validate, convert, allocate, call the kernels, shape the results."""
from __future__ import annotations

import numpy as np

from ._accept import accept
from ._inputs import prepare
from ._kernels.backward import backward
from ._kernels.forward import forward as _forward_kernel
from ._kernels.matvec import pad_weights, padded, passes
from ._kernels.narrow import NARROW, backward_narrow, forward_narrow, to_feature_major
from ._kernels.output import output_errors
from ._results import BPTTResult, ForwardResult, pack_grads
from ._threads import ensure_default_threads, threads_in_use
from ._workspace import workspace
from .params import Params

__all__ = ["grad", "value_and_grad", "bptt", "forward", "loss"]


def _validate(x, y, params, **options):
    """The validated `Problem`: `accept` for the common case, else `prepare` (which raises
    for anything wrong)."""
    return accept(x, y, params, **options) or prepare(x, y, params, **options)


def _kernel_inputs(problem):
    """x for the kernels, steps as columns t B + b: ids (T B,) or dense (L, T B).

    The kind not in use is an empty array, so each dtype compiles one signature.
    """
    if problem.ids:       # a contiguous view for one sequence, else a copy in C order
        return problem.x.T.reshape(-1), np.empty((0, 0), problem.dtype), True
    dense = np.ascontiguousarray(problem.x.transpose(2, 1, 0)).reshape(-1, problem.T * problem.B)
    return np.empty(0, np.int64), dense, False


def _kernel_targets(problem):
    """y for the kernels: ids (T B,) or dense (C, T B), the other empty."""
    if problem.y_ids:
        return problem.y.T.reshape(-1), np.empty((0, 0), problem.dtype)
    dense = np.ascontiguousarray(problem.y.transpose(2, 1, 0)).reshape(-1, problem.T * problem.B)
    return np.empty(0, np.int64), dense


_ZEROS = {}


def _bias(vector, size, dtype):
    """The bias, or zeros for none (kept from call to call: the kernels only read it)."""
    if vector is not None:
        return vector
    key = (size, dtype)
    zeros = _ZEROS.get(key)
    if zeros is None:
        zeros = _ZEROS[key] = np.zeros(size, dtype)
    return zeros


def _padded_weights(problem):
    """(W^T, W), workspace arrays (H, N) zero-padded to N columns, a whole number of
    vector registers, and starting on 64-byte boundaries.

    The narrow kernels' vector code runs over rows of these (`fastbptt._kernels.matvec`);
    the others use W^T's first H columns. The copy of W is made only when W itself
    cannot serve (`matvec.rows_of_W`).
    """
    W = problem.params.W
    H, dtype = W.shape[0], W.dtype
    shape = (H, padded(H, dtype))
    WTp, Wp = workspace.get("WTp", shape, dtype), workspace.get("Wp", shape, dtype)
    pad_weights(W, WTp, Wp)
    return WTp, Wp


# Most bytes of W the narrow kernels may stream per step, one pass over W per group of
# up to four sequences (`matvec.passes`), when BLAS runs on one thread. Measured here,
# the narrow kernels beat a BLAS product per step below this (H = 512 float32: 2x at
# B = 8, 1.2x at B = 32) and lose above it (H = 1024 float32, B = 16: 0.95x; B = 32: 0.8x).
# With BLAS on two threads they lost from H = 256, B = 32 (0.93x), so they are then
# kept to batches of fewer than NARROW sequences.
NARROW_BYTES = 8 << 20


def _narrow(problem):
    """Whether the batch runs time-major on the narrow kernels (`_kernels.narrow`): below
    NARROW sequences always; for more, on one BLAS thread, when their passes over W
    stay within NARROW_BYTES per step. The choice does not depend on the truncation, so
    that `forward` computes the very states `bptt` does. Chosen once per call (kept on
    the problem), so a thread count changed meanwhile cannot split a call across paths."""
    if problem.narrow is None:
        B = problem.B
        problem.narrow = B < NARROW or (
            threads_in_use() == 1
            and passes.py_func(B) * problem.params.W.nbytes <= NARROW_BYTES)
    return problem.narrow


def _states(problem, x_ids, x_dense, ids, WTp):
    """(states, h_final): all states, h0 first, in a workspace array, zero past each
    sequence's length, and each sequence's last real state (B, H).

    Narrow batches: seqs (T+1, B, N), time-major and zero-padded to N columns.
    Others: hs (H, T+1, B), feature-major.
    """
    ensure_default_threads()
    p, dtype = problem.params, problem.dtype
    L, H, C = problem.sizes
    B, T = problem.B, problem.T
    bias = _bias(p.b, H, dtype)
    if _narrow(problem):
        seqs = workspace.get("seqs", (T + 1, B, WTp.shape[1]), dtype)
        h_final = np.empty((B, H), dtype)
        forward_narrow(x_ids, x_dense, ids, p.U, WTp, bias, problem.activation,
                       problem.lengths, problem.h0, seqs, h_final)
        return seqs, h_final
    hs = workspace.get("hs", (H, T + 1, B), dtype)
    hs[:, 0] = problem.h0.T
    _forward_kernel(x_ids, x_dense, ids, p.U, p.W, bias, problem.activation, problem.lengths,
                    hs, workspace.get("columns", (H * B,), dtype))
    return hs, np.ascontiguousarray(hs[:, problem.lengths, np.arange(B)].T)


def _steps(problem, states):
    """h_1 ... h_T as a 2-D view, step t of sequence b at index t B + b, and whether it is
    time-major ((T B, H)) rather than feature-major ((H, T B))."""
    B, T, H = problem.B, problem.T, problem.params.W.shape[0]
    if _narrow(problem):
        return states[1:].reshape(T * B, states.shape[2])[:, :H], True
    return states.reshape(H, (T + 1) * B)[:, B:], False


def _batch_first(problem, states):
    """(B, T, H) view of h_1 ... h_T."""
    if _narrow(problem):
        return states[1:, :, :problem.params.W.shape[0]].transpose(1, 0, 2)
    return states[:, 1:].transpose(2, 1, 0)


def _errors(problem, states):
    """(loss, err (C, T B))."""
    p = problem.params
    L, H, C = problem.sizes
    y_ids, y_dense = _kernel_targets(problem)
    n = problem.T * problem.B
    err = workspace.get("err", (C, n), problem.dtype)
    total = output_errors(*_steps(problem, states), p.V, _bias(p.c, C, problem.dtype),
                          problem.loss, y_ids, y_dense, problem.y_ids, problem.lengths, err,
                          workspace.get("sums", (6, n), np.float64))
    return float(total), err


def _chunk(problem):
    """Where the backward sweep cuts: T + 1 for full BPTT (never), k for chunks (s = k);
    0 for windows (s < k), which run lag-major instead."""
    k, s = problem.truncate, problem.stride     # None: nothing is cut (`prepare`)
    if k is None:
        return problem.T + 1
    return k if s == k else 0


def _backward(problem, states, err, kernel_inputs, WTp, Wp, grads, dh0):
    """Fill grads (U, W, V, b, c, all arrays) and dh0 (B, H), unless h0 was not given."""
    p, dtype, ws = problem.params, problem.dtype, workspace
    L, H, C = problem.sizes
    B, T = problem.B, problem.T
    chunk = _chunk(problem)
    if _narrow(problem) and chunk:
        N = WTp.shape[1]
        backward_narrow(states, err, *kernel_inputs, Wp, p.W, p.V, problem.activation, chunk,
                        ws.get("dseq", (T * B, N), dtype),
                        ws.get("dUT", (L, N) if kernel_inputs[2] else (0, N), dtype),
                        *grads, dh0 if problem.h0_given else dh0[:0])
        return
    if _narrow(problem):
        hs = ws.get("hs", (H, T + 1, B), dtype)
        to_feature_major(states, hs)
        states = hs
    dh0_t = ws.get("dh0", (H, B if problem.h0_given else 0), dtype)
    backward(states, err, *kernel_inputs, WTp, p.V, problem.activation, chunk,
             problem.truncate or 0, problem.stride, ws.get("delta", (H, T * B), dtype),
             ws.get("fprime", (H, T * B), dtype),
             ws.get("lags", (2, H, T * B) if chunk == 0 else (2, H, 0), dtype),
             *grads, dh0_t)
    if problem.h0_given:
        dh0[:] = dh0_t.T


def _solve(problem):
    """(loss, Params of gradients, h_final (B, H), dh0 (B, H)) for a validated problem.

    dh0 is zeros when h0 was not given (and is then not computed).
    """
    p, dtype = problem.params, problem.dtype
    L, H, C = problem.sizes
    B, T = problem.B, problem.T
    # the kernels overwrite every gradient entry; with no step at all they stay zero
    new = np.empty if B and T else np.zeros
    grads = (new(p.U.shape, dtype), new(p.W.shape, dtype), new(p.V.shape, dtype),
             new(H, dtype), new(C, dtype))
    dh0 = (new if problem.h0_given else np.zeros)((B, H), dtype)
    total, h_final = 0.0, problem.h0.copy()
    if B and T:
        kernel_inputs = _kernel_inputs(problem)
        WTp, Wp = _padded_weights(problem)
        states, h_final = _states(problem, *kernel_inputs, WTp)
        total, err = _errors(problem, states)
        _backward(problem, states, err, kernel_inputs, WTp, Wp, grads, dh0)
    dU, dW, dV, db, dc = grads
    grads = Params(dU, dW, dV, db if p.b is not None else None, dc if p.c is not None else None)
    return total, grads, h_final, dh0


def bptt(x, y, params, *, truncate=None, stride=1, activation="tanh", loss="softmax_ce",
         h0=None, lengths=None, check_finite=True):
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
    check_finite : bool
        Raise ValueError for NaN or inf in params, x, y or h0 (default). False skips the
        scan, which costs one pass over each array (measured: 0.23 ms of W5, 3 us of W2).

    Returns
    -------
    BPTTResult
        ``loss`` (float), ``grads`` (structure of ``params``), ``h_final`` and ``dh0``
        ((H,) for one sequence, (B, H) for a batch; ``dh0`` is zeros when h0 is None).
    """
    problem = _validate(x, y, params, truncate=truncate, stride=stride, activation=activation,
                        loss=loss, h0=h0, lengths=lengths, check_finite=check_finite)
    total, grads, h_final, dh0 = _solve(problem)
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


def forward(x, params, *, activation="tanh", h0=None, lengths=None, check_finite=True):
    """Hidden states and softmax output probabilities.

    Returns a `ForwardResult` ``(h, p)``: h is (T, H) or (B, T, H), p is (T, C) or
    (B, T, C); both are zero at padding steps.
    """
    problem = _validate(x, None, params, activation=activation, h0=h0, lengths=lengths,
                        check_finite=check_finite, need_y=False)
    p = problem.params
    L, H, C = problem.sizes
    B, T = problem.B, problem.T
    h = np.zeros((B, T, H), problem.dtype)
    probs = np.zeros((B, T, C), problem.dtype)
    if B and T:
        states, _ = _states(problem, *_kernel_inputs(problem), _padded_weights(problem)[0])
        h = _batch_first(problem, states)
        logits = h @ p.V.T + (0 if p.c is None else p.c)
        logits -= logits.max(axis=-1, keepdims=True)
        np.exp(logits, out=logits)
        probs = logits / logits.sum(axis=-1, keepdims=True)
        probs[~problem.padding_mask()] = 0
        h = np.array(h, order="C")            # states are reused by the next call
    if problem.single:
        h, probs = h[0], probs[0]
    return ForwardResult(h, probs)


def loss(x, y, params, *, activation="tanh", loss="softmax_ce", h0=None, lengths=None,
         check_finite=True):
    """The summed loss as a Python float (no gradients)."""
    problem = _validate(x, y, params, activation=activation, loss=loss, h0=h0,
                        lengths=lengths, check_finite=check_finite)
    if not (problem.B and problem.T):
        return 0.0
    states, _ = _states(problem, *_kernel_inputs(problem), _padded_weights(problem)[0])
    return _errors(problem, states)[0]
