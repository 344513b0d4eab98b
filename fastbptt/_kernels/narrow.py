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
from .blas import gemm, scratch, transpose_into
from .matvec import passes, rows_axpy, rows_of_W

NARROW = 4      # fewer sequences than this always run here


@jit
def forward_narrow(WTp, act, lengths, h0, seqs, h_final):
    """seqs (T+1, B, N) holds a_t (the inputs' part, `inputs`) in row t + 1; make it h_t,
    with h0 in row 0 and zeros in every row past lengths[b] and in the padding columns.

    WTp (H, N), W^T zero-padded; h0 (B, H). h_final (B, H) receives each sequence's
    state after its last real step.
    """
    T, B, N = seqs.shape[0] - 1, seqs.shape[1], seqs.shape[2]
    H = h0.shape[1]
    rows = seqs.reshape((T + 1) * B, N)
    rows[:, H:] = 0
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
def backward_narrow(seqs, Wp, W, act, chunk, dseq, dW, db, dh0):
    """delta_t = dL/da_t by one backward sweep per sequence, cut at chunk starts, and the
    gradients of W, b and h0.

    seqs from `forward_narrow`. dseq (T B, N) holds G_t = dL/dh_t of sequence b in the
    first H columns of row t B + b on entry, and delta_t on return. The carry into step
    t is dropped when (t + 1) % chunk == 0 (chunk = T + 1 for full BPTT, k for chunks).
    Wp (H, N) is `pad_weights`'s copy of W (unused when `rows_of_W` picks W itself).
    Writes dW (H, H), db (H,) and dh0 (B, H), row b = W^T delta_0 of sequence b (pass
    (0, H) when not needed). Padding steps have zero G, so their delta is zero and they
    add nothing.
    """
    T, B, N = seqs.shape[0] - 1, seqs.shape[1], seqs.shape[2]
    H = W.shape[0]
    rows = seqs.reshape((T + 1) * B, N)
    before = rows[:T * B, :H]
    delta = dseq[:, :H]
    R = rows_of_W(W, Wp)
    blas = scratch(dseq)
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
    gemm(delta[:dh0.shape[0]], W, dh0, 1.0, 0.0, False, False, blas)
    db[:] = 0
    for tb in range(T * B):
        row = dseq[tb]
        for i in range(H):
            db[i] += row[i]
