"""Narrow batches: time-major states, register-blocked steps (SPEC.md §5).

For batches of fewer than NARROW sequences, an H x B block is too small for a BLAS call
per step to pay; for more, with a small W on one BLAS thread, groups of sequences
sharing each load of W still beat it (`fastbptt.api._narrow` decides). The steps run
on `rows_axpy`, all sequences in lockstep, which wants each sequence's state as one
contiguous row. States are therefore kept time-major throughout, seqs (T+1, B, N):
row (t, b) is h_t of sequence b (h0 at t = 0), zero-padded from H to N columns
(`matvec.padded`). Seen as a (T+1) B x N matrix, its rows are the steps in the order
t B + b that the output layer's columns use, so the products over all steps are single
matrix products with transposed operands, and nothing is transposed in memory.

Only the sweeps (full BPTT and chunks) run here; per-output windows take the
lag-major path of `backward` on a feature-major copy.
"""
from ._jit import jit
from .activations import activate_vector, derivative
from .blas import gemm, row_sums, scratch, transpose_into
from .matvec import passes, rows_axpy, rows_of_W

NARROW = 4      # fewer sequences than this always run here


@jit
def forward_narrow(x_ids, x_dense, ids, U, WTp, bias, act, lengths, h0, seqs, h_final):
    """Fill seqs (T+1, B, N) with h0 and the states; rows past lengths[b] are zero.

    x_ids (T B,) int64 ids in [0, L) (index t B + b) or x_dense (L, T B), ``ids``
    says which; U (H, L); WTp (H, N), W^T zero-padded; bias (H,); h0 (B, H).
    h_final (B, H) receives each sequence's state after its last real step.
    """
    T, B, N = seqs.shape[0] - 1, seqs.shape[1], seqs.shape[2]
    H = U.shape[0]
    rows = seqs.reshape((T + 1) * B, N)
    rows[:, H:] = 0
    if ids:
        for tb in range(T * B):
            row, col = rows[B + tb], x_ids[tb]
            for i in range(H):
                row[i] = U[i, col] + bias[i]
    else:
        gemm(x_dense, U, rows[B:, :H], 1.0, 0.0, True, True, scratch(seqs))
        for tb in range(T * B):
            row = rows[B + tb]
            for i in range(H):
                row[i] += bias[i]
    for b in range(B):
        seqs[0, b, :H] = h0[b]
    groups = passes(B)
    for t in range(lengths.max()):
        rows_axpy(WTp, seqs[t, :, :H], seqs[t + 1], t * groups % 2 == 1)
        for b in range(B):
            if t < lengths[b]:
                activate_vector(seqs[t + 1, b, :H], act)
            else:                   # past its end: kept at zero, so nothing grows there
                seqs[t + 1, b] = 0
    for b in range(B):
        h_final[b] = seqs[lengths[b], b, :H]
        seqs[lengths[b] + 1:, b] = 0


@jit
def to_feature_major(seqs, hs):
    """hs (H, T+1, B) <- the states of seqs (T+1, B, N), for the lag-major backward."""
    H, T1, B = hs.shape
    transpose_into(seqs.reshape(T1 * B, seqs.shape[2])[:, :H], hs.reshape(H, T1 * B))


@jit
def backward_narrow(seqs, err, x_ids, x_dense, ids, Wp, W, V, act, chunk, dseq, dUT,
                    dU, dW, dV, db, dc, dh0):
    """All gradients by one backward sweep per sequence, cut at chunk starts.

    seqs from `forward_narrow`; err (C, T B) from `output_errors`. The carry into step
    t is dropped when (t + 1) % chunk == 0 (chunk = T + 1 for full BPTT, k for chunks).
    Wp (H, N) is `pad_weights`'s copy of W (unused when `rows_of_W` picks W itself);
    dseq (T B, N) receives delta_t = dL/da_t, row t B + b; dUT (L, N) is scratch for
    token ids. Writes dU (H, L), dW (H, H), dV (C, H),
    db (H,), dc (C,) and dh0 (B, H), row b = W^T delta_0 of sequence b (pass (0, H) when
    not needed). Padding steps have zero error, so their delta is zero and they add
    nothing.
    """
    T, B, N = seqs.shape[0] - 1, seqs.shape[1], seqs.shape[2]
    H = W.shape[0]
    rows = seqs.reshape((T + 1) * B, N)
    states, before = rows[B:, :H], rows[:T * B, :H]
    delta = dseq[:, :H]
    R = rows_of_W(W, Wp)
    blas = scratch(dseq)
    gemm(err, V, delta, 1.0, 0.0, True, False, blas)          # u_t = V^T e_t, row by row
    dseq[:, H:] = 0
    groups, done = passes(B), 0
    for t in range(T - 1, -1, -1):
        if t + 1 < T and (t + 1) % chunk != 0:
            rows_axpy(R, dseq[(t + 1) * B:(t + 2) * B, :H], dseq[t * B:(t + 1) * B],
                      done % 2 == 1)
            done += groups
        for b in range(B):
            acc, h = dseq[t * B + b], seqs[t + 1, b]
            for i in range(H):
                acc[i] *= derivative(h[i], act)
    gemm(delta, before, dW, 1.0, 0.0, True, False, blas)      # sum_t delta_t h_{t-1}^T
    gemm(err, states, dV, 1.0, 0.0, False, False, blas)       # sum_t e_t h_t^T
    gemm(delta[:dh0.shape[0]], W, dh0, 1.0, 0.0, False, False, blas)
    if ids:
        dUT[:] = 0
        for tb in range(T * B):
            row, out = dseq[tb], dUT[x_ids[tb]]
            for i in range(N):
                out[i] += row[i]
        transpose_into(dUT[:, :H], dU)
    else:
        gemm(delta, x_dense, dU, 1.0, 0.0, True, True, blas)
    db[:] = 0
    for tb in range(T * B):
        row = dseq[tb]
        for i in range(H):
            db[i] += row[i]
    row_sums(err, dc)
