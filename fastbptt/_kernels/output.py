"""The output layer and loss for all steps at once: logits, softmax or squared error,
dL/do, and the output layer's vector-Jacobian product (SPEC.md §2, §7).

Feature-major: the logits are one (C, T B) matrix, and each pass below runs along its
rows, over all steps and sequences, so the loops vectorize.
"""
import numpy as np

from ._jit import jit
from .blas import gemm, row_sums, scratch, transpose_into
from .directions import permute_steps
from .mathfuncs import exp_shifted

SOFTMAX_CE, MSE = 0, 1


@jit(inline="always")
def _exp_shifted_sum(row, shift, sums):
    """row <- exp(row - shift) (entries do not exceed their shift); sums += row (float64),
    the entries as stored in row's dtype."""
    for j in range(row.shape[0]):
        row[j] = exp_shifted(row[j], shift[j])
        sums[j] += row[j]


@jit(inline="always")
def _logits(states, time_major, V, c, y_ids, lengths, err, valid):
    """err <- V h_t + c for every step; valid <- 1 where a step has a loss (before its
    sequence's end, and an id other than -1), else 0."""
    C, n = err.shape
    B = lengths.shape[0]
    if states is not None:          # else err holds V h_t already (`direction_logits`)
        gemm(V, states, err, 1.0, 0.0, False, time_major, scratch(err))
    for t in range(n // B):
        for b in range(B):
            valid[t * B + b] = 1.0 if t < lengths[b] else 0.0
    if y_ids is not None:
        for j in range(n):
            if y_ids[j] < 0:
                valid[j] = 0.0
    for i in range(C):
        row, ci = err[i], c[i]
        for j in range(n):
            row[j] += ci


# The two losses are two kernels, and the targets' two kinds come as y_ids or y_dense,
# the other None: Numba drops the branches of a None argument, so that a first call
# compiles only its own loss and kind of target (the output kernels took 1.9 s of a
# first call with every branch compiled, 1.3 s without).

@jit(wide=True)
def mse_errors(states, time_major, V, c, y_ids, y_dense, lengths, err, cols):
    """`softmax_ce_errors` for the squared error."""
    C, n = err.shape
    valid = cols[0]
    _logits(states, time_major, V, c, y_ids, lengths, err, valid)
    total = 0.0
    for i in range(C):
        row = err[i]
        if y_ids is not None:
            for j in range(n):
                e = (row[j] - (1.0 if y_ids[j] == i else 0.0)) * valid[j]
                row[j] = e
                total += 0.5 * e * e
        if y_dense is not None:
            y = y_dense[i]
            for j in range(n):
                e = (row[j] - y[j]) * valid[j]
                row[j] = e
                total += 0.5 * e * e
    return total


@jit(wide=True)
def softmax_ce_errors(states, time_major, V, c, y_ids, y_dense, lengths, err, cols):
    """Return the summed loss (float64) and write e = dL/do into err (C, T B).

    states holds h_1 ... h_T of every sequence, step t of sequence b at index t B + b:
    feature-major (H, T B), or (T B, H) when ``time_major`` (narrow batches); or it is
    None and err holds V h_t on entry (the directions' sum, `direction_logits`).
    V (C, H); c (C,) (zeros for no bias). Targets are y_ids (T B,) with -1 = no loss, or
    y_dense (C, T B); the other is None. Columns at padding steps (t >= lengths[b]) and
    with id -1 get zero error and no loss. cols (6, T B) float64 is scratch for
    per-column values. The log-sum-exp of each column is shifted by its largest logit.
    """
    C, n = err.shape
    valid, top, total_w, picked, s, log_z = cols[0], cols[1], cols[2], cols[3], cols[4], cols[5]
    _logits(states, time_major, V, c, y_ids, lengths, err, valid)
    row = err[0]
    for j in range(n):
        top[j] = row[j]
        picked[j] = 0.0      # ids: the target's logit; dense: sum_i y_i o_i
        total_w[j] = 0.0     # dense: sum_i y_i
        s[j] = 0.0
    for i in range(1, C):
        row = err[i]
        for j in range(n):
            if row[j] > top[j]:
                top[j] = row[j]
    # the loss from logits shifted by their largest, o - top <= 0: L = w log s - sum y (o -
    # top), never below 0, where w log z - sum y o cancels two terms the logits' size
    if y_ids is not None:
        for j in range(n):
            if valid[j] > 0:
                picked[j] = err[y_ids[j], j] - top[j]
    if y_dense is not None:
        for i in range(C):
            row, y = err[i], y_dense[i]
            for j in range(n):
                picked[j] += 1.0 * y[j] * (row[j] - top[j])   # in float64, as the loss
                total_w[j] += y[j]
    for i in range(C):
        _exp_shifted_sum(err[i], top, s)
    for j in range(n):
        log_z[j] = np.log(s[j])              # log-sum-exp - top
    total = 0.0
    if y_ids is not None:
        for j in range(n):
            total += valid[j] * (log_z[j] - picked[j])
            s[j] = valid[j] / s[j]
        for i in range(C):
            row = err[i]
            for j in range(n):
                row[j] *= s[j]
        for j in range(n):
            if valid[j] > 0:
                err[y_ids[j], j] -= 1.0
    if y_dense is not None:
        for j in range(n):
            total += valid[j] * (total_w[j] * log_z[j] - picked[j])
            s[j] = valid[j] * total_w[j] / s[j]
        for i in range(C):
            row, y = err[i], y_dense[i]
            for j in range(n):
                row[j] = row[j] * s[j] - valid[j] * y[j]
    return total


ERRORS = {SOFTMAX_CE: softmax_ce_errors, MSE: mse_errors}


@jit
def output_backward_tm(err, states, V, G, dV, dc):
    """From e = dL/do (C, T B): G_t = V^T e_t for every step into G, dV = sum_t e_t h_t^T
    and dc = sum_t e_t; states and G time-major, (T B, H) (the layout of a narrow
    backward pass, which receives G)."""
    blas = scratch(err)
    gemm(err, V, G, 1.0, 0.0, True, False, blas)
    gemm(err, states, dV, 1.0, 0.0, False, False, blas)
    row_sums(err, dc)


@jit
def output_backward_fm(err, states, V, G, dV, dc):
    """`output_backward_tm` with states and G feature-major, (H, T B)."""
    blas = scratch(err)
    gemm(V, err, G, 1.0, 0.0, True, False, blas)
    gemm(err, states, dV, 1.0, 0.0, False, True, blas)
    row_sums(err, dc)


# A stack's top layer with two directions, or a reverse one, feeds the head one direction
# at a time: V's columns d H ... (d + 1) H meet direction d's states in the order that
# direction ran (a reverse direction's, `directions.reversal_index`), and only the
# C-row products are reordered, not the states or their gradients (H rows each).

@jit
def direction_logits(V, states, time_major, idx, err, tmp, first, rows):
    """err (C, T B) <- V h_t of one direction (added when not ``first``), its states in
    its own step order; idx the reversal (`directions.reversal_index`) for a reverse
    direction, whose product goes through tmp (C, T B) and is reordered, else None. A
    forward direction comes first (it is direction 0). The top layer's states alone, one
    forward direction, come the same way (idx None, first).

    rows, (T B, C) scratch or None: for time-major states, the product is then taken as
    (V h_t)^T = h_t^T V^T into rows and transposed. The same sums, in the same order;
    OpenBLAS ran that shape faster for a few classes (C <= 128; for G1's sizes 0.65
    against 0.77 ms, for W5's 0.41 against 0.94 ms) and slower for many.
    """
    blas = scratch(err)
    out = err if idx is None else tmp
    if rows is not None:
        gemm(states, V, rows, 1.0, 0.0, False, True, blas)
        transpose_into(rows[:, 0:rows.shape[1]], out[:, 0:out.shape[1]])   # (A, A), as
        # everywhere else: one compiled transpose
    else:
        gemm(V, states, out, 1.0, 0.0, False, time_major, blas)
    if idx is not None:
        permute_steps(tmp, err, idx, False, not first)


@jit
def direction_backward(err, idx, err_d, states, V, G, dV, time_major):
    """One direction's share of the head's backward pass: G_t = V^T e_t into G and dV =
    sum_t e_t h_t^T, in that direction's step order (err reordered into err_d first for a
    reverse direction, idx given; else idx None and err_d unused). states and G are
    time-major (T B, H) when ``time_major``, else feature-major (H, T B)."""
    e = err
    if idx is not None:
        permute_steps(err, err_d, idx, False, False)
        e = err_d
    blas = scratch(err)
    if time_major:
        gemm(e, V, G, 1.0, 0.0, True, False, blas)
        gemm(e, states, dV, 1.0, 0.0, False, False, blas)
    else:
        gemm(V, e, G, 1.0, 0.0, True, False, blas)
        gemm(e, states, dV, 1.0, 0.0, False, True, blas)
