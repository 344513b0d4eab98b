"""The output layer and loss for all steps at once: logits, softmax or squared error,
dL/do, and the output layer's vector-Jacobian product (SPEC.md §2, §7).

Feature-major: the logits are one (C, T B) matrix, and each pass below runs along its
rows, over all steps and sequences, so the loops vectorize.
"""
import numpy as np

from ._jit import jit
from .blas import gemm, row_sums, scratch
from .mathfuncs import exp_neg32

SOFTMAX_CE, MSE = 0, 1


@jit(inline="always")
def _exp_shifted_sum(row, shift, sums):
    """row <- exp(row - shift) (entries do not exceed their shift); sums += row (float64),
    the entries as stored in row's dtype."""
    if row.itemsize == 4:
        for j in range(row.shape[0]):
            row[j] = exp_neg32(row[j] - shift[j])
            sums[j] += row[j]
    else:
        for j in range(row.shape[0]):
            row[j] = np.exp(row[j] - shift[j])
            sums[j] += row[j]


@jit
def output_errors(states, time_major, V, c, loss_kind, y_ids, y_dense, ids, lengths, err,
                  cols):
    """Return the summed loss (float64) and write e = dL/do into err (C, T B).

    states holds h_1 ... h_T of every sequence, step t of sequence b at index t B + b:
    feature-major (H, T B), or (T B, H) when ``time_major`` (narrow batches).
    V (C, H); c (C,) (zeros for no bias). Targets are
    y_ids (T B,) with -1 = no loss, or y_dense (C, T B); ``ids`` says which. Columns at
    padding steps (t >= lengths[b]) and with id -1 get zero error and no loss.
    cols (6, T B) float64 is scratch for per-column values.
    """
    C, n = err.shape
    B = lengths.shape[0]
    T = n // B
    gemm(V, states, err, 1.0, 0.0, False, time_major, scratch(err))
    valid, top, total_w, picked, s, log_z = cols[0], cols[1], cols[2], cols[3], cols[4], cols[5]
    for t in range(T):
        for b in range(B):
            ok = t < lengths[b] and (not ids or y_ids[t * B + b] >= 0)
            valid[t * B + b] = 1.0 if ok else 0.0
    total = 0.0
    if loss_kind == MSE:
        for i in range(C):
            row, ci = err[i], c[i]
            for j in range(n):
                row[j] += ci
                target = (1.0 if y_ids[j] == i else 0.0) if ids else y_dense[i, j]
                e = (row[j] - target) * valid[j]
                row[j] = e
                total += 0.5 * e * e
        return total
    # softmax_ce with a stable log-sum-exp per column; the bias is added on the way
    row, ci = err[0], c[0]
    for j in range(n):
        row[j] += ci
        top[j] = row[j]
        picked[j] = 0.0      # ids: the target's logit; dense: sum_i y_i o_i
        total_w[j] = 0.0     # dense: sum_i y_i
        s[j] = 0.0
    for i in range(1, C):
        row, ci = err[i], c[i]
        for j in range(n):
            row[j] += ci
            if row[j] > top[j]:
                top[j] = row[j]
    if ids:
        for j in range(n):
            if valid[j] > 0:
                picked[j] = err[y_ids[j], j]
    else:
        for i in range(C):
            row, y = err[i], y_dense[i]
            for j in range(n):
                picked[j] += 1.0 * y[j] * row[j]       # in float64, as the loss
                total_w[j] += y[j]
    for i in range(C):
        _exp_shifted_sum(err[i], top, s)
    for j in range(n):
        log_z[j] = top[j] + np.log(s[j])
    if ids:
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
    else:
        for j in range(n):
            total += valid[j] * (total_w[j] * log_z[j] - picked[j])
            s[j] = valid[j] * total_w[j] / s[j]
        for i in range(C):
            row, y = err[i], y_dense[i]
            for j in range(n):
                row[j] = row[j] * s[j] - valid[j] * y[j]
    return total


@jit
def output_backward(err, states, time_major, V, G, dV, dc):
    """From e = dL/do (C, T B): G_t = V^T e_t for every step into G, dV = sum_t e_t h_t^T
    and dc = sum_t e_t.

    states and G are (H, T B) feature-major, or (T B, H) when ``time_major`` (the layout
    of the layer's backward pass, which receives G).
    """
    blas = scratch(err)
    if time_major:
        gemm(err, V, G, 1.0, 0.0, True, False, blas)
        gemm(err, states, dV, 1.0, 0.0, False, False, blas)
    else:
        gemm(V, err, G, 1.0, 0.0, True, False, blas)
        gemm(err, states, dV, 1.0, 0.0, False, True, blas)
    row_sums(err, dc)
