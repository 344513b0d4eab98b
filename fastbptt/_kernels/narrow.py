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
import numpy as np

from ._jit import jit
from .alloc import matrix_view, vector
from .blas import gemm, scratch, transpose_into
from .cells import backward_tm, forward_tm, to_h0
from .copies import add_row, copy_row, copy_rows, longest, zero_steps_after
from .inputs import gather_step
from .matvec import panels_axpy, passes, rows_axpy, rows_of_W

NARROW = 4      # fewer sequences than this always run here
# This many sequences or more walk W^T and W in panels (`matvec.panels_axpy`), as do a
# gated cell's from NARROW on (its W^T's long rows read a new page each, which the
# prefetcher does not follow). Elman layers of 4 to 7 sequences walk whole rows where W
# is small (`fastbptt._stack.walks_panels`): in panels they took 6% (B = 6) and 11%
# (B = 4) longer at H = 128.
PANELS = 8


@jit
def forward_narrow(cell, WTp, WTc, act, lengths, h0, c0, Z, S, E, C, Hid, bh, h_final,
                   c_final, ids, U, UT, bias, b0, b1):
    """Fill S (T+1, B, N) with h0 and the states of sequences b0 ... b1-1 (the others are
    left alone, so that calls for disjoint ranges can run at once); rows past lengths[b]
    are zero, and so are the padding columns.

    cell: a `cells.TAGS` tag. WTp (H, NG): W^T zero-padded to NG >= G H columns, which
    each step's product walks whole (`rows_axpy`), or None. Z
    (T+1, B, NG): gates, holding the inputs' part in row t + 1 on entry (`inputs`) and
    the cell's activations on return (Z is S for Elman). C (T+1, B, N) receives c0 and
    c_t (LSTM; else (T+1, B, 0)); E (T+1, B, N) what the GRU keeps of each step (else
    (T+1, B, 0)); Hid (B, NG) is scratch for the GRU's W h + bh, bh (G H,) its bias
    (Hid (B, 0) and bh empty for other cells). h0, c0 (B, H); h_final and c_final (B, H)
    receive each sequence's state after its last real step (c_final (B, 0) when not
    needed). WTc: the same W^T cut into column panels (`matvec.panel_columns`), which
    each step's product walks by `panels_axpy`, or None. Exactly one of WTp and WTc is
    None: Numba drops a branch on ``is not None`` only for an argument that is None, so
    a call compiles only the product it takes.

    ids, U, UT, bias: token ids (T B,) whose gates' input part U[:, x_t] + b each step
    gathers into Z[t + 1] just before its product, while those rows are in cache
    (`inputs.gather_step`; gathering every step first wrote G1's 13 MB of gates out to
    memory and read them back: 0.5 to 0.7 ms of a 10 ms forward pass). UT (L, G H),
    when not empty, receives U^T first, whose rows are then read. ids None: Z holds the
    input part on entry. A call with ids covers the whole batch (b0 = 0, b1 = B), as
    it fills UT.
    """
    H = h0.shape[1]
    if ids is not None and UT.size:
        transpose_into(U[:, 0:U.shape[1]], UT[:, 0:UT.shape[1]])
    start_narrow(h0, c0, S, C, b0, b1)
    apart = Hid.shape[1] > 0
    GH = bh.shape[0]
    groups = passes(b1 - b0)
    NG = Z.shape[2]
    for t in range(longest(lengths[b0:b1])):
        if apart:
            for b in range(b0, b1):
                copy_row(Hid[b, :GH], bh)
                Hid[b, GH:] = 0
        if ids is not None:
            gather_step(ids, U, UT, bias, Z[t + 1], t, b0, b1)
        target = Hid if apart else Z[t + 1]
        if WTc is not None:         # in panels (WTp is None)
            panels_axpy(WTc, H, S[t, b0:b1, :H], target[b0:b1, 0:NG])
        if WTp is not None:         # whole rows (WTc is None)
            rows_axpy(WTp, S[t, b0:b1, :H], target[b0:b1, 0:NG], t * groups % 2 == 1)
        for b in range(b0, b1):
            if t < lengths[b]:
                forward_tm(cell, Z, S, E, C, Hid, t, b, H, act, 0, H)
            else:                   # past its end: kept at zero, so nothing grows there
                S[t + 1, b] = 0
                C[t + 1, b] = 0
    finish_narrow(lengths, Z, S, E, C, h_final, c_final, b0, b1)


@jit(inline="always")
def start_narrow(h0, c0, S, C, b0, b1):
    """Sequences b0 ... b1-1 of `forward_narrow`'s S and C: zero padding columns, and
    h0 and c0 (LSTM) in step 0."""
    T, N = S.shape[0] - 1, S.shape[2]
    H = h0.shape[1]
    lstm = C.shape[2] > 0
    if N > H:                       # the padding columns
        for t in range(T + 1):
            S[t, b0:b1, H:] = 0
            if lstm:
                C[t, b0:b1, H:] = 0
    for b in range(b0, b1):
        copy_row(S[0, b, :H], h0[b])
        if lstm:
            copy_row(C[0, b, :H], c0[b])


@jit(inline="always")
def finish_narrow(lengths, Z, S, E, C, h_final, c_final, b0, b1):
    """Sequences b0 ... b1-1 after `forward_narrow`'s steps: their final states, and
    zeros in every step past their ends, which the backward pass reads."""
    H = h_final.shape[1]
    for b in range(b0, b1):
        copy_row(h_final[b], S[lengths[b], b, :H])
        zero_steps_after(S, b, lengths[b] + 1)
        zero_steps_after(Z, b, lengths[b] + 1)
        zero_steps_after(E, b, lengths[b] + 1)
        zero_steps_after(C, b, lengths[b] + 1)
        if c_final.shape[1]:
            copy_row(c_final[b], C[lengths[b], b, :H])


@jit
def to_feature_major(seqs, hs):
    """hs (H, T+1, B) <- the states of seqs (T+1, B, N), for the lag-major backward."""
    H, T1, B = hs.shape
    transpose_into(matrix_view(seqs, T1 * B, seqs.shape[2])[:, :H],
                   matrix_view(hs, H, T1 * B)[:, 0:T1 * B])


@jit(inline="always")
def _backward_steps(cell, S, Z, E, C, Wp, Wc, W, act, chunk, lengths, dcf, dH, dZ, dZh, X,
                    b0, b1):
    """The gates' gradients of sequences b0 ... b1-1 by one backward sweep per sequence,
    cut at chunk starts (the other sequences' rows are left alone, so that calls for
    disjoint ranges can run at once); `narrow_weight_grads` then sums them.

    S, Z, E, C from `forward_narrow`. dH (T B, N) holds G_t = dL/dh_t of sequence b in
    the first H columns of row t B + b on entry; dZ and dZh (T B, NG) receive the gates'
    gradients, input side and hidden side (for Elman both are dH, for the LSTM dZh is
    dZ). The carries into step t are dropped when (t + 1) % chunk == 0 (chunk = T + 1 for
    full BPTT, k for chunks). dcf (B, H): the LSTM's dL/dc_final, added at each
    sequence's last real step (lengths (B,)), or (0, H). Wp (G H, N) is `pad_weights`'s
    copy of W (unused when `rows_of_W` picks W itself), or None; Wc, W padded to N
    columns in panels (`matvec.panel_columns`), which the carries then walk, or None
    (exactly one of the two, as for `forward_narrow`'s WTp and WTc). X (B, N)
    receives the carries into h0 (rows b0 ... b1-1). Padding steps have zero G, so their
    gradients are zero and they add nothing.
    """
    T, B, N = S.shape[0] - 1, S.shape[1], S.shape[2]
    GH, H = W.shape
    R = W
    if Wp is not None:
        R = rows_of_W(W, Wp)
    if N > H:                       # the padding columns
        for t in range(T):
            dH[t * B + b0:t * B + b1, H:] = 0
    groups, done = passes(b1 - b0), 0
    for t in range(T - 1, -1, -1):
        if t + 1 < T and (t + 1) % chunk != 0:
            x = dZh[(t + 1) * B + b0:(t + 1) * B + b1, :GH]
            out = dH[t * B + b0:t * B + b1, 0:N]
            if Wc is not None:      # in panels (Wp is None)
                panels_axpy(Wc, GH, x, out)
            if Wp is not None:      # whole rows (Wc is None)
                rows_axpy(R, x, out, done % 2 == 1)
            done += groups
        else:
            X[b0:b1] = 0
        for b in range(b0, b1):
            if dcf.shape[0] and lengths[b] == t + 1:
                add_row(X[b, :H], dcf[b])
            backward_tm(cell, dH, dZ, dZh, Z, S, E, C, X, t, b, B, H, act, 0, H)


@jit(inline="always")
def _weight_grads(S, dZ, dZh, dW, db, dbh, r0, r1):
    """After `backward_narrow` for every sequence: rows r0 ... r1-1 of dW (G H, H), db
    (G H,) and dbh (G H,) (the GRU's hidden-side bias), so that calls for disjoint rows
    can run at once. db and dbh are empty for a layer without them (not computed)."""
    T, B, N = S.shape[0] - 1, S.shape[1], S.shape[2]
    H = dW.shape[1]
    before = matrix_view(S, (T + 1) * B, N)[:T * B, :H]
    blas = scratch(dW)
    gemm(dZh[:, r0:r1], before, dW[r0:r1], 1.0, 0.0, True, False, blas)  # sum dZh_t h_{t-1}^T
    if db.size:
        _column_sums(dZ, db, r0, r1)
    if dbh.size:
        _column_sums(dZh, dbh, r0, r1)


@jit(inline="always")
def _h0_grads(cell, W, dZh, X, dh0, dc0):
    """dh0 and dc0 (B, H), row b that of sequence b (pass (0, H) for both when not
    needed), from the gates' gradients of step 0 and the carries X into h0."""
    GH, H = W.shape
    blas = scratch(dh0)
    gemm(dZh[:dh0.shape[0], :GH], W, dh0, 1.0, 0.0, False, False, blas)
    to_h0(cell, X[:dh0.shape[0], :H], dh0, dc0)


@jit
def backward_narrow(cell, S, Z, E, C, Wp, Wc, W, act, chunk, lengths, dcf, dH, dZ, dZh, X,
                    b0, b1):
    """`_backward_steps`: the slice b0 ... b1-1 of a batch that runs on several threads."""
    _backward_steps(cell, S, Z, E, C, Wp, Wc, W, act, chunk, lengths, dcf, dH, dZ, dZh, X,
                    b0, b1)


@jit
def narrow_weight_grads(S, dZ, dZh, dW, db, dbh, r0, r1):
    """`_weight_grads`: rows r0 ... r1-1, for a batch that runs on several threads."""
    _weight_grads(S, dZ, dZh, dW, db, dbh, r0, r1)


@jit
def narrow_h0_grads(cell, W, dZh, X, dh0, dc0):
    """`_h0_grads`, for a batch that runs on several threads."""
    _h0_grads(cell, W, dZh, X, dh0, dc0)


@jit
def backward_narrow_whole(cell, S, Z, E, C, Wp, Wc, W, act, chunk, lengths, dcf, dH, dZ,
                          dZh, X, dW, db, dbh, dh0, dc0):
    """The backward pass of a narrow batch on one thread: `_backward_steps` for every
    sequence, then `_weight_grads` and `_h0_grads`, in one function (one call from
    Python, and one function to compile)."""
    _backward_steps(cell, S, Z, E, C, Wp, Wc, W, act, chunk, lengths, dcf, dH, dZ, dZh, X,
                    0, S.shape[1])
    _weight_grads(S, dZ, dZh, dW, db, dbh, 0, W.shape[0])
    _h0_grads(cell, W, dZh, X, dh0, dc0)


@jit
def _column_sums(d, out, r0, r1):
    """out[r0:r1] <- the sum over rows of d's columns r0 ... r1-1, in float64. (Each
    column's sum runs down the rows in order, so that it vectorizes across columns; in
    float32 a GRU's db, its steps' terms cancelling, lost 2e-4 relative over 4096 steps,
    30 times PyTorch's float32 error. Slices, not indices from r0: loops over slices
    vectorize, and took a tenth of the time.)"""
    o = out[r0:r1]
    acc = vector(r1 - r0, np.float64)
    acc[:] = 0
    for tb in range(d.shape[0]):
        row = d[tb, r0:r1]
        for i in range(r1 - r0):
            acc[i] += row[i]
    for i in range(r1 - r0):
        o[i] = acc[i]
