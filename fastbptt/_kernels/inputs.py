"""What a layer does with its inputs, for all steps at once: the projection U x_t + b before
the time loop, and dU and dL/dx after it (SPEC.md §5, §7).

A layer's states are kept in one of two layouts (`fastbptt.api` picks one per call):
feature-major hs (G H, T+1, B), steps as column blocks, or time-major seqs (T+1, B, N),
steps as rows zero-padded to N columns. Its inputs come as the same kind of 3-D array
``src``, whose first step block (t = 0, where a state array holds h0) is not read:
the caller's dense x (L, T+1, B), feature-major, or the states of the layer below in
either layout. ``width`` is how many features of src are inputs (the layer below's H
when its rows are padded). Token ids are a gather of U's columns instead.
"""
import numpy as np

from ._jit import jit
from .alloc import matrix_view, vector
from .blas import EXACT_SUMS, gemm, scratch, transpose_into
from .copies import add_row, copy_rows


@jit(inline="always")
def _steps(a, time_major):
    """The T B steps of a 3-D state-like array as a 2-D view, step t of sequence b at
    t B + b: (K, T B) feature-major, (T B, K) time-major (first step block left out)."""
    if time_major:
        T1, B = a.shape[0], a.shape[1]
        return matrix_view(a, T1 * B, a.shape[2])[B:]
    K, T1, B = a.shape
    return matrix_view(a, K, T1 * B)[:, B:]


@jit(inline="always")
def _gather_feature_major(x_ids, U, bias, out, c0, c1):
    """Rows c0 ... c1-1 of a feature-major state array's steps <- U's rows gathered along
    the ids, + b."""
    m = _steps(out, False)
    for i in range(c0, c1):
        u, row, bi = U[i], m[i], bias[i]
        for tb in range(x_ids.shape[0]):
            row[tb] = u[x_ids[tb]] + bi


# A layout is chosen by which of two arguments is None (out_tm or out_fm here, delta_tm or
# delta_fm below): Numba drops the branch of a None argument, so a call compiles only its
# own layout's loops.

# level 3: at LLVM's level 2 the strided gather of one sequence took twice as long (W2's
# 100 steps: 8 against 4 us of a 0.18 ms call)
@jit(opt=3)
def gather_inputs(x_ids, U, UT, bias, out_tm, out_fm):
    """A state array's steps <- U[:, x_t] + b for token ids x_ids (T B,): those of out_tm
    when time-major, else of out_fm (the other None).

    Time-major, each step's row is U's column x_t: read strided from U, or, when UT is
    not empty, a contiguous row of UT (L, G H) <- U^T, made first (gathering U's strided
    columns took 2.2 ms of a 40 ms LSTM call at G H = 1024 and T B = 3200, the rows of UT
    0.45 ms; at T B = 100 the transpose costs more than it saves, unless U's rows are long:
    at L = 1024 each strided read is on a page of its own). Feature-major, each of U's
    rows is gathered along."""
    H = U.shape[0]
    if out_tm is not None:
        if UT.size:
            transpose_into(U[:, 0:U.shape[1]], UT[:, 0:UT.shape[1]])
        for t in range(out_tm.shape[0] - 1):
            gather_step(x_ids, U, UT, bias, out_tm[t + 1], t, 0, out_tm.shape[1])
    if out_fm is not None:
        _gather_feature_major(x_ids, U, bias, out_fm, 0, H)


@jit(inline="always")
def gather_step(x_ids, U, UT, bias, rows, t, b0, b1):
    """Rows b0 ... b1-1 of step t's time-major gates, rows (B, >= G H) <- U[:, x_t] + b:
    from UT's rows (U^T, already made) when UT is not empty, else from U's columns. x_ids
    (T B,), step t of sequence b at t B + b. A narrow time loop on one thread that reads
    UT gathers each step so, just before its product (`narrow.forward_narrow`); from U's
    strided columns that made G3's call 3 to 5% slower than a pass over all steps first."""
    B = rows.shape[0]
    GH = bias.shape[0]
    if UT.size:
        gather_columns(x_ids, UT, bias, rows, t, b0, b1, 0, GH)
    else:
        for b in range(b0, b1):
            row, col = rows[b], x_ids[t * B + b]
            for i in range(GH):
                row[i] = U[i, col] + bias[i]


@jit(inline="always")
def gather_columns(x_ids, UT, bias, rows, t, b0, b1, c0, c1):
    """Columns c0 ... c1-1 of rows b0 ... b1-1 of step t's time-major gates <- those of
    U[:, x_t] + b, from UT's rows (`gather_step`; a thread's own units in
    `narrow_units.forward_units`)."""
    B = rows.shape[0]
    bc = bias[c0:c1]
    for b in range(b0, b1):
        row, u = rows[b, c0:c1], UT[x_ids[t * B + b], c0:c1]
        for i in range(c1 - c0):
            row[i] = u[i] + bc[i]


@jit
def gather_inputs_part(x_ids, U, UT, bias, out_tm, out_fm, c0, c1):
    """`gather_inputs` in features c0 ... c1-1 of the G H, for a batch that runs on
    several threads (calls for disjoint features run at once)."""
    b = bias[c0:c1]
    if out_tm is not None:
        rows = _steps(out_tm, True)
        if UT.size:
            transpose_into(U[c0:c1, 0:U.shape[1]], UT[:, c0:c1])
            for tb in range(x_ids.shape[0]):
                row = rows[tb, c0:c1]
                col = UT[x_ids[tb], c0:c1]
                for i in range(c1 - c0):
                    row[i] = col[i] + b[i]
        else:
            for tb in range(x_ids.shape[0]):
                row, col = rows[tb, c0:c1], x_ids[tb]
                for i in range(c1 - c0):
                    row[i] = U[c0 + i, col] + b[i]
    if out_fm is not None:
        _gather_feature_major(x_ids, U, bias, out_fm, c0, c1)


@jit
def project_inputs(src, width, src_time_major, U, bias, out, time_major, r0, r1):
    """Steps r0 ... r1-1 (of T B, in the order t B + b) of ``out`` <- U x_t + b, x_t the
    first ``width`` features of src's steps, as one matrix product over those steps (so
    that calls for disjoint steps can run at once). A time-major src (the layer below's
    states) goes with a time-major out only."""
    H = U.shape[0]
    blas = scratch(out)
    x = _steps(src, src_time_major)
    o = _steps(out, time_major)
    if time_major:
        rows = o[r0:r1, :H]
        if src_time_major:
            gemm(x[r0:r1, :width], U, rows, 1.0, 0.0, False, True, blas)
        else:
            gemm(x[:width, r0:r1], U, rows, 1.0, 0.0, True, True, blas)
        for tb in range(rows.shape[0]):
            row = rows[tb]
            for i in range(H):
                row[i] += bias[i]
    else:
        cols = o[:, r0:r1]
        gemm(U, x[:width, r0:r1], cols, 1.0, 0.0, False, False, blas)
        for i in range(H):
            row, bi = cols[i], bias[i]
            for tb in range(row.shape[0]):
                row[tb] += bi


@jit(inline="always")
def _add_rows_at(acc, delta, x_ids):
    """acc <- 0, then acc[x_t] += delta_t for every step t (rows of both)."""
    acc[:] = 0
    for tb in range(x_ids.shape[0]):
        add_row(acc[x_ids[tb]], delta[tb])


@jit(inline="always")
def _scatter_feature_major(delta, x_ids, dU, c0, c1):
    """Rows c0 ... c1-1 of dU from a feature-major delta (H, T B), each row's sums in
    the dtype, or in float64 beyond EXACT_SUMS steps."""
    L = dU.shape[1]
    n = x_ids.shape[0]
    if n <= EXACT_SUMS:
        for i in range(c0, c1):
            row = delta[i]
            out = dU[i]
            for l in range(L):
                out[l] = 0
            for tb in range(n):
                out[x_ids[tb]] += row[tb]
    else:
        acc = vector(L, np.float64)
        for i in range(c0, c1):
            row = delta[i]
            acc[:] = 0
            for tb in range(n):
                acc[x_ids[tb]] += row[tb]
            for l in range(L):
                dU[i, l] = acc[l]


@jit(wide=True)
def scatter_ids(delta_tm, delta_fm, x_ids, dU, dUT, dUT64):
    """dU (H, L) <- sum over steps of delta_t at column x_t: the gradient of a gather.

    delta_tm (T B, N) time-major (its first H columns used) or delta_fm (H, T B)
    feature-major, the other None; dUT (L, N) of dU's dtype and dUT64 (L, N) float64 are
    scratch for time-major sums of at most and of more than EXACT_SUMS steps."""
    H, L = dU.shape
    n = x_ids.shape[0]
    if delta_tm is not None:
        if n <= EXACT_SUMS:
            _add_rows_at(dUT, delta_tm, x_ids)
        else:
            _add_rows_at(dUT64, delta_tm, x_ids)
            copy_rows(dUT[:, :H], dUT64)
        transpose_into(dUT[:, :H], dU[:, 0:L])
    if delta_fm is not None:
        _scatter_feature_major(delta_fm, x_ids, dU, 0, H)


@jit(wide=True)
def scatter_ids_part(delta_tm, delta_fm, x_ids, dU, dUT, dUT64, c0, c1):
    """`scatter_ids` into rows c0 ... c1-1 of dU, for a batch that runs on several
    threads (calls for disjoint rows run at once)."""
    L = dU.shape[1]
    n = x_ids.shape[0]
    if delta_tm is not None:
        if n <= EXACT_SUMS:
            _add_rows_at(dUT[:, c0:c1], delta_tm[:, c0:c1], x_ids)
        else:
            _add_rows_at(dUT64[:, c0:c1], delta_tm[:, c0:c1], x_ids)
            copy_rows(dUT[:, c0:c1], dUT64[:, c0:c1])
        transpose_into(dUT[:, c0:c1], dU[c0:c1, 0:L])
    if delta_fm is not None:
        _scatter_feature_major(delta_fm, x_ids, dU, c0, c1)


@jit
def input_weight_grads(delta, time_major, src, width, src_time_major, dU, r0, r1):
    """Rows r0 ... r1-1 of dU = sum_t delta_t x_t^T over all steps (so that calls for
    disjoint rows can run at once).

    delta is (G H, T B) feature-major or (T B, >= G H) time-major; a time-major src
    goes with a time-major delta only."""
    blas = scratch(dU)
    x = _steps(src, src_time_major)
    if time_major:
        d = delta[:, r0:r1]
        if src_time_major:
            gemm(d, x[:, :width], dU[r0:r1], 1.0, 0.0, True, False, blas)
        else:
            gemm(d, x[:width], dU[r0:r1], 1.0, 0.0, True, True, blas)
    else:
        gemm(delta[r0:r1], x[:width], dU[r0:r1], 1.0, 0.0, False, True, blas)


@jit
def input_grads(delta, time_major, src_time_major, width, U, dX, beta, r0, r1):
    """Steps r0 ... r1-1 of dX <- U^T delta_t (+ beta dX): dX's first ``width`` rows
    (T B columns) when src is feature-major, its first ``width`` columns (T B rows)
    when time-major, as src's steps are. delta as `input_weight_grads`'s."""
    H = U.shape[0]
    blas = scratch(dX)
    if time_major:
        d = delta[r0:r1, :H]
        if src_time_major:
            gemm(d, U, dX[r0:r1, :width], 1.0, beta, False, False, blas)
        else:
            gemm(U, d, dX[:width, r0:r1], 1.0, beta, True, True, blas)
    else:
        gemm(U, delta[:, r0:r1], dX[:width, r0:r1], 1.0, beta, True, False, blas)
