"""The public functions: validate, convert, allocate, call the kernels, shape the results."""
from __future__ import annotations

import numpy as np

from . import _compile_ahead as compile_ahead
from ._accept import accept
from ._inputs import HEAD_OPTIONS, known_options, prepare
from ._kernels.blas import row_sums
from ._kernels.output import (ERRORS, direction_backward, direction_logits, output_backward_fm,
                              output_backward_tm)
from ._results import BPTTResult, ForwardResult, given_states, pack_grads
from ._stack import bias_or_zeros, forward_pass, run_forward, split, steps
from ._threads import one_blas_thread
from .params import Layer, Model

__all__ = ["grad", "value_and_grad", "bptt", "forward", "loss"]


# When the logits of time-major states come rows first (`output.direction_logits`): for
# at most this many classes (measured faster for C = 16, 65 and 128, slower from 256),
# and at least this many steps times sequences (below, as for W2's 100, the product
# gains less than the second kernel call costs: W2 took 2 to 7% longer).
ROWS_FIRST_CLASSES = 128
ROWS_FIRST_COLUMNS = 1024


def _validate(x, y, params, **options):
    """The validated `Problem`: `accept` for the common case, else `prepare` (which raises
    for anything wrong)."""
    return accept(x, y, params, **options) or prepare(x, y, params, **options)


def _kernel_targets(problem):
    """y for the kernels: ids (T B,) or dense (C, T B), the other None."""
    if problem.y_ids:
        return problem.y.T.reshape(-1), None
    return None, np.ascontiguousarray(problem.y.transpose(2, 1, 0)).reshape(
        -1, problem.T * problem.B)


def _errors(problem, fw):
    """(loss, err (C, T B)) of the output layer over the top layer's states."""
    model = problem.model
    C = problem.sizes[2]
    y_ids, y_dense = _kernel_targets(problem)
    n = problem.T * problem.B
    err = fw.scratch("err", (C, n), problem.dtype)
    states = None                   # err then holds V h_t already
    if not _one_forward_top(fw):
        _logits_by_direction(problem, fw, err)
    elif _rows_first(problem, fw):
        direction_logits(model.V, fw.top(), True, None, err, err, True,
                         fw.scratch("logits rows", (n, C), problem.dtype))
    else:
        states = fw.top()
    total = ERRORS[problem.loss](states, fw.plan.narrow, model.V,
                                 bias_or_zeros(model.c, C, problem.dtype), y_ids, y_dense,
                                 problem.lengths, err, fw.scratch("sums", (6, n), np.float64))
    return float(total), err


def _head_backward(problem, fw, err):
    """dV, dc, and G = V^T e put in place for the top layer's backward pass."""
    model, dtype = problem.model, problem.dtype
    L, H, C = problem.sizes
    dV, dc = np.empty(model.V.shape, dtype), np.empty(C, dtype)
    tm = fw.plan.back_tm
    backward = output_backward_tm if tm else output_backward_fm     # the layout's kernel
    top = fw.dirs[-1]
    fw.convert_states()
    if _one_forward_top(fw):
        states = fw.top() if fw.plan.narrow == tm else steps(fw.backward_arrays(top[0])[0],
                                                             tm, H)
        G = fw.gradient_buffers()[0]
        backward(err, states, model.V, G[:, :H] if tm else G, dV, dc)
        return dV, dc
    for direction, G in zip(top, fw.gradient_buffers()):
        columns = slice(direction.d * H, (direction.d + 1) * H)
        idx = fw.idx if direction.reverse else None
        err_d = fw.scratch("err reordered", err.shape, dtype) if direction.reverse else err
        direction_backward(err, idx, err_d, steps(fw.backward_arrays(direction)[0], tm, H),
                           model.V[:, columns], G[:, :H] if tm else G, dV[:, columns], tm)
    row_sums(err, dc)
    return dV, dc


def _one_forward_top(fw):
    """Whether the top layer is one forward direction (the head reads its states as
    they are)."""
    top = fw.dirs[-1]
    return len(top) == 1 and not top[0].reverse


def _logits_by_direction(problem, fw, err):
    """err <- V h_t summed over the top layer's directions, each product reordered to step
    order where its direction runs in reverse (`output.direction_logits`)."""
    H = problem.sizes[1]
    top = fw.dirs[-1]
    tmp = fw.scratch("logits reordered", err.shape, problem.dtype)
    rows = (fw.scratch("logits rows", err.shape[::-1], problem.dtype)
            if _rows_first(problem, fw) else None)
    for k, direction in enumerate(top):
        columns = slice(direction.d * H, (direction.d + 1) * H)
        direction_logits(problem.model.V[:, columns],
                         steps(direction.states, fw.plan.narrow, H), fw.plan.narrow,
                         fw.idx if direction.reverse else None, err, tmp, k == 0, rows)


def _rows_first(problem, fw):
    """Whether the logits come as h_t^T V^T, transposed (`output.direction_logits`):
    for time-major states, at most `ROWS_FIRST_CLASSES` classes and at least
    `ROWS_FIRST_COLUMNS` steps times sequences."""
    return (fw.plan.narrow and problem.sizes[2] <= ROWS_FIRST_CLASSES
            and problem.T * problem.B >= ROWS_FIRST_COLUMNS)


def _solve(problem):
    """(loss, Model of gradients, h_final, dh0, c_final, dc0) for a validated problem:
    states (S, B, H); dh0 zeros when h0 was not given, dc0 when c0 was not (neither is
    computed when neither was given); c_final and dc0 None for other cells than the LSTM."""
    model = problem.model
    B, T = problem.B, problem.T
    lstm = problem.cell == "lstm"
    if not (B and T):
        grads = Model(tuple(tuple(Layer(*(None if a is None else np.zeros_like(a) for a in d))
                                  for d in layer) for layer in model.layers),
                      np.zeros_like(model.V), None if model.c is None else np.zeros_like(model.c))
        zeros = np.zeros_like(problem.h0)
        return (0.0, grads, problem.h0.copy(), zeros, problem.c0.copy() if lstm else None,
                zeros.copy() if lstm else None)
    outer = compile_ahead.begin(problem)    # a first call's compiles: two processes
    try:
        if split(problem):
            with one_blas_thread():
                total, layers, dV, dc, h_final, c_final, dh0, dc0 = _through(problem)
        else:
            total, layers, dV, dc, h_final, c_final, dh0, dc0 = _through(problem)
    finally:
        compile_ahead.end(outer)
    grads = Model(layers, dV, dc if model.c is not None else None)
    dh0, dc0 = given_states(problem, dh0, dc0)
    return total, grads, h_final, dh0, c_final if lstm else None, dc0


def _through(problem):
    """The forward pass, the head and the backward pass of `_solve`: (loss, layers' grads,
    dV, dc, h_final, c_final, dh0, dc0)."""
    fw = run_forward(problem)
    try:                         # (not `forward_pass`: a generator's context costs W2 1%)
        total, err = _errors(problem, fw)
        dV, dc = _head_backward(problem, fw, err)
        layers, dh0, dc0, _ = fw.backward()
        return total, layers, dV, dc, fw.h_final, fw.c_final, dh0, dc0
    finally:
        fw.release()


def _states_out(problem, array):
    """h_final or dh0 (S, B, H) in the caller's layout: (B, H) or (H,) for one layer
    with its head as before stacks, (S, B, H) or (S, H) for a stack."""
    if not problem.stacked:
        array = array[0]
        return array[0] if problem.single else array
    return array[:, 0] if problem.single else array


def bptt(x, y, params, *, truncate=None, stride=1, activation="tanh", loss="softmax_ce",
         h0=None, lengths=None, check_finite=True, cell=None, c0=None):
    """Loss, gradients, final hidden states and dL/dh0 in one call.

    Parameters
    ----------
    x : array_like
        Integer token ids, (T,) or (B, T), or dense floats, (T, L) or (B, T, L).
    y : array_like
        Integer class ids, (T,) or (B, T), with -1 meaning no loss at that step; or float
        targets, (T, C) or (B, T, C).
    params : fastbptt.Params, dict, tuple or fastbptt.Model
        One Elman layer with its head: U (H, L), W (H, H), V (C, H) and optionally b (H,),
        c (C,). Any cell, stack or directions: a `Model` (``layers[l][d]``, each a `Layer`
        U (G H, in), W (G H, H), b, bh; V (C, H D), c), as `init_params` makes. All
        float32 or all float64: that dtype is the compute dtype of the call.
    truncate : int or None
        k: the error of output t flows back through at most the steps t ... lo(t),
        lo(t) = max(0, (t // stride + 1) * stride - k). None means full BPTT. With
        reverse directions only a truncation that cuts nothing ((⌊(T−1)/s⌋ + 1)·s ≤ k);
        windows (stride < truncate) need one layer.
    stride : int
        s, 1 <= s <= truncate. 1 gives a k-step window per output (document 003's loop
        is truncate=10); s = k gives chunked TBPTT (min-char-rnn).
    activation : {"tanh", "sigmoid", "relu", "identity"}
        The Elman cell's; gated cells take only the default.
    loss : {"softmax_ce", "mse"}
        Summed over steps and sequences. For mse, integer y means one-hot targets.
    h0 : array_like, optional
        Initial state, (H,) or (B, H); for a `Model`, (S, H) or (S, B, H), S = layers x
        directions in PyTorch's order. Zeros when omitted.
    lengths : array_like, optional
        (B,) sequence lengths: steps t >= lengths[b] are padding (no loss, state untouched).
    check_finite : bool
        Raise ValueError for NaN or inf in params, x, y, h0 or c0 (default). False skips
        the scan, which costs one pass over each array (measured: 0.23 ms of W5, 3 us of
        W2).
    cell : {"elman", "gru", "lstm"} or None
        None reads the cell off W's shape (G H rows, G = 1, 3, 4); given, it must agree.
    c0 : array_like, optional
        The LSTM's initial cell state, shaped like h0; zeros when omitted.

    Returns
    -------
    BPTTResult
        ``loss`` (float), ``grads`` (structure of ``params``), ``h_final`` and ``dh0``
        (shaped like h0: (H,) for one sequence, (B, H) for a batch, with a leading S for a
        `Model`; ``dh0`` is zeros when h0 is None), and for an LSTM ``c_final`` and
        ``dc0`` likewise (``dc0`` zeros when c0 is None).
    """
    problem = _validate(x, y, params, truncate=truncate, stride=stride, activation=activation,
                        loss=loss, h0=h0, lengths=lengths, check_finite=check_finite,
                        cell=cell, c0=c0)
    total, grads, h_final, dh0, c_final, dc0 = _solve(problem)
    if c_final is None:
        return BPTTResult(total, pack_grads(problem, grads), _states_out(problem, h_final),
                          _states_out(problem, dh0))
    return BPTTResult(total, pack_grads(problem, grads), _states_out(problem, h_final),
                      _states_out(problem, dh0), _states_out(problem, c_final),
                      _states_out(problem, dc0))


def value_and_grad(x, y, params, **options):
    """``(loss, grads)``: the loss as a Python float and the gradients as in `grad`."""
    known_options("value_and_grad", options, HEAD_OPTIONS)
    result = bptt(x, y, params, **options)
    return result.loss, result.grads


def grad(x, y, params, **options):
    """Gradients of the summed loss, in the structure of ``params``. Options as `bptt`."""
    known_options("grad", options, HEAD_OPTIONS)
    return bptt(x, y, params, **options).grads


def forward(x, params, *, activation="tanh", h0=None, lengths=None, check_finite=True,
            cell=None, c0=None):
    """Hidden states of the top layer and softmax output probabilities.

    x, params and the options are as for `bptt`. Returns a `ForwardResult` ``(h, p)``: h
    is (T, H D) or (B, T, H D) (D directions), p is (T, C) or (B, T, C); both are zero at
    padding steps.
    """
    problem = _validate(x, None, params, activation=activation, h0=h0, lengths=lengths,
                        check_finite=check_finite, need_y=False, cell=cell, c0=c0)
    model = problem.model
    L, H, C = problem.sizes
    B, T = problem.B, problem.T
    width = H * problem.directions
    h = np.zeros((B, T, width), problem.dtype)
    probs = np.zeros((B, T, C), problem.dtype)
    if B and T:
        with forward_pass(problem) as fw:
            top = fw.top()
            h = np.array(top.reshape(T, B, width).transpose(1, 0, 2) if fw.plan.narrow else
                         top.reshape(width, T, B).transpose(2, 1, 0), order="C")
            # (a copy: the states are reused by the next call)
        with np.errstate(invalid="ignore"):   # OpenBLAS's spurious flag: _blas_flags
            logits = h @ model.V.T + (0 if model.c is None else model.c)
        logits -= logits.max(axis=-1, keepdims=True)
        np.exp(logits, out=logits)
        probs = logits / logits.sum(axis=-1, keepdims=True)
        probs[~problem.padding_mask()] = 0
    if problem.single:
        h, probs = h[0], probs[0]
    return ForwardResult(h, probs)


def loss(x, y, params, *, activation="tanh", loss="softmax_ce", h0=None, lengths=None,
         check_finite=True, cell=None, c0=None):
    """The summed loss as a Python float (no gradients); arguments as for `bptt`."""
    problem = _validate(x, y, params, activation=activation, loss=loss, h0=h0,
                        lengths=lengths, check_finite=check_finite, cell=cell, c0=c0)
    if not (problem.B and problem.T):
        return 0.0
    with forward_pass(problem) as fw:
        return _errors(problem, fw)[0]
