"""A layer's backward time loop and the gradients of W and b (SPEC.md §2, §3, §5, §7),
feature-major, for any cell.

Truncation follows lo(t) = max(0, (t // s + 1) * s - k): the gradient injected at step t
flows back through steps t ... lo(t). G_t = dL/dh_t is injected at each step (by the
output layer, G_t = V^T e_t, or by whatever sits above the layer). Each step turns
dh_t = G_t + W^T dZh_{t+1} (and the cell's own carry) into the gates' gradients dZ_t
(input side) and dZh_t (hidden side) by the cell's step math (`cells`); for Elman all
three are one array, delta_t = dh_t f'(a_t), in place.

- sweep (full BPTT, and chunks s = k): one pass from T-1 down to 0, the carries dropped
  at chunk starts;
- lag-major (per-output windows, s = 1 < k): lag 0 is the cell's backward step on G at
  every step at once; lag j takes W^T dZh of lag j - 1 one step later, column block r
  carrying output t = r + j alone, so it is dropped once r < lo(t); dZ and dZh are the
  sums over lags. That is k products of H x G H by G H x (T B) instead of T k vector ones.
- groups (1 < s < k): the s outputs cs ... cs + s - 1 share lo = (c + 1) s - k, so one
  short sweep per group, from its last output down to lo, carries all of them; steps
  that several groups reach add their gradients. That is about T k / s steps' products
  in place of lag-major's k products over all T steps: for k = 20, s = 10, T = 100,
  200 steps' worth against 2,000.

Steps are column blocks of B columns in (rows, T B) matrices; the gradients of the
weights are single matrix products over all steps (those of the inputs are in `inputs`).
"""
from ._jit import jit
from .blas import gemm, row_sums, scratch
from .cells import backward_fm, prepare_fm, sums, to_h0
from .copies import add_rows, copy_rows


@jit(inline="always")
def _inject(X, lengths, t, dcf):
    """The LSTM's dL/dc_final (B, H) joins the carry of each sequence at its last step."""
    if dcf.shape[0]:
        for b in range(lengths.shape[0]):
            if lengths[b] == t + 1:
                for i in range(X.shape[0]):
                    X[i, b] += dcf[b, i]


@jit(inline="always")
def _sweep(cell, Zm, Sm, Em, Cm, WT, chunk, B, blas, dH, dZ, dZh, X, fp, act, lengths,
           dcf):
    """One pass from the last step to the first; X (H, B) carries the cell's own carry."""
    T = dH.shape[1] // B
    for t in range(T - 1, -1, -1):
        lo, hi = t * B, (t + 1) * B
        if t + 1 < T and (t + 1) % chunk != 0:
            gemm(WT, dZh[:, hi:hi + B], dH[:, lo:hi], 1.0, 1.0, False, False, blas)
        else:
            X[:] = 0
        _inject(X, lengths, t, dcf)
        backward_fm(cell, dH, dZ, dZh, lo, Zm, Sm, Em, Cm, hi, B, X, 0, fp, B, act, fp[:0],
                    False)


@jit
def _lag_major(cell, Zm, Sm, Em, Cm, WT, k, s, B, blas, dH, dZ, dZh, fp, act, lags, X0,
               lengths, dcf):
    """dZ and dZh summed over lags j < k (see the module's docstring); X0 (H, B) <- the
    sum of the cell's carries into h0. lags = (prev, h, z, zh, xp, xn): prev and zh
    (G H, T B), h and xp, xn (H, T B), z (G H, T B); for Elman h, z and zh are one array,
    for the LSTM z and zh."""
    prev, h, z, zh, xp, xn = lags
    T = dH.shape[1] // B
    h_is_zh = h.ctypes.data == zh.ctypes.data
    z_is_zh = z.ctypes.data == zh.ctypes.data
    apart = dZh.ctypes.data != dZ.ctypes.data
    n = T * B
    carries = xp.shape[0] > 0                   # the cell has a carry of its own (X)
    fused = sums(cell)
    if carries:
        xp[:] = 0
        if dcf.shape[0]:
            for b in range(B):
                if lengths[b]:
                    for i in range(xp.shape[0]):
                        xp[i, (lengths[b] - 1) * B + b] = dcf[b, i]
    backward_fm(cell, dH, dZ, dZh, 0, Zm, Sm, Em, Cm, B, B, xp, 0, fp, n, act,
                prev if fused else prev[:0], False)
    if not fused:
        copy_rows(prev, dZh)
    copy_rows(X0, xp[:, :B])
    for j in range(1, min(k, T)):
        n = (T - j) * B
        gemm(WT, prev[:, B:n + B], h[:, :n], 1.0, 0.0, False, False, blas)
        if carries:
            copy_rows(xn[:, :n], xp[:, B:n + B])    # the carries, one step later
        for r in range(T - j):
            if (r + j) % s < j - (k - s):       # r < lo(r + j): this output stops here
                for i in range(h.shape[0]):
                    h[i, r * B:(r + 1) * B] = 0
                for i in range(xn.shape[0]):
                    xn[i, r * B:(r + 1) * B] = 0
        backward_fm(cell, h, z, zh, 0, Zm, Sm, Em, Cm, B, B, xn, 0, fp, n, act,
                    dZ if fused else dZ[:0], True)
        if not fused:
            add_rows(dZ[:, :n], z[:dZ.shape[0], :n])
        if apart:
            add_rows(dZh[:, :n], zh[:dZh.shape[0], :n])
        if carries:
            add_rows(X0, xn[:, :B])
        prev, zh = zh, prev
        if h_is_zh:
            h = zh
        if z_is_zh:
            z = zh
        xp, xn = xn, xp


@jit(inline="always")
def _groups(cell, Zm, Sm, Em, Cm, WT, k, s, B, blas, dH, dZ, dZh, fp, act, lags, X0,
            lengths, dcf):
    """dZ and dZh of BPTT(k; s), 1 < s < k, by one sweep per group of s outputs (see the
    module's docstring); X0 (H, B) <- the sum of the cell's carries into h0. ``lags`` is
    the lag-major pass's scratch, here (_, h, z, zh, xp, _): a group's dL/dh, dZ and dZh
    at the same columns as dH's (one array for Elman, z is zh for the LSTM) and its
    carry in xp's first B columns. For Elman dZ is dH, which holds G on entry: the groups
    run in increasing order, each taking its outputs' G out of dH before it adds its
    gradients, so that every G is read before any sum reaches its columns."""
    _, h, z, zh, xp, _ = lags
    T = dH.shape[1] // B
    X = xp[:, :B]
    own = dZ.ctypes.data == dH.ctypes.data          # Elman: the sums go into dH itself
    apart = dZh.ctypes.data != dZ.ctypes.data
    if not own:
        dZ[:] = 0
    if apart:
        dZh[:] = 0
    X0[:] = 0
    for first in range(0, T, s):
        stop = min(T, first + s)
        lo = max(0, first + s - k)
        h[:, lo * B:first * B] = 0
        copy_rows(h[:, first * B:stop * B], dH[:, first * B:stop * B])
        if own:
            dH[:, first * B:stop * B] = 0
        X[:] = 0
        for t in range(stop - 1, lo - 1, -1):
            a = t * B
            if t + 1 < stop:
                gemm(WT, zh[:, a + B:a + 2 * B], h[:, a:a + B], 1.0, 1.0, False, False, blas)
            if t >= first:
                _inject(X, lengths, t, dcf)
            backward_fm(cell, h, z, zh, a, Zm, Sm, Em, Cm, a + B, B, X, 0, fp, B, act,
                        fp[:0], False)
        add_rows(dZ[:, lo * B:stop * B], z[:dZ.shape[0], lo * B:stop * B])
        if apart:
            add_rows(dZh[:, lo * B:stop * B], zh[:, lo * B:stop * B])
        if lo == 0:
            add_rows(X0, X)


@jit(inline="always")
def _begin(cell, Sm, Zm, WTp, act, lengths, dH, fp):
    """What every backward driver starts from: B, T, W^T (G H columns of WTp), BLAS
    scratch; and the cell's preparation (Elman's f')."""
    B = lengths.shape[0]
    prepare_fm(cell, Sm, fp, B, act)
    return B, dH.shape[1] // B, WTp[:, :Zm.shape[0]], scratch(dH)


@jit(inline="always")
def _finish(cell, Sm, WT, T, B, blas, dZ, dZh, X, dW, db, dbh, dh0, dc0):
    """The gradients of W, b (bh), h0 (c0) from the gates' gradients of every step
    (db and dbh empty for a layer without them: not computed)."""
    gemm(WT, dZh[:, :B], dh0, 1.0, 0.0, False, False, blas)
    to_h0(cell, X, dh0, dc0)
    gemm(dZh, Sm[:, :T * B], dW, 1.0, 0.0, False, True, blas)
    if db.size:
        row_sums(dZ, db)
    if dbh.size:
        row_sums(dZh, dbh)


@jit
def backward_sweep(cell, Sm, Zm, Em, Cm, WTp, act, chunk, lengths, dcf, dH, dZ, dZh, X, fp,
                   dW, db, dbh, dh0, dc0):
    """The gates' gradients for every step by one sweep (full BPTT, or chunks of
    ``chunk`` steps: the carries into each step t with (t + 1) % chunk == 0 are cut;
    chunk = T + 1 cuts nothing), and the gradients of W, b (bh) and h0 (c0).

    Sm (H, (T+1) B): the states of `forward`, step t's block at columns (t + 1) B, h0 at
    0; Zm (G H, (T+1) B) its gates (Zm is Sm for Elman); Cm and Em the LSTM's and GRU's
    arrays like Sm (else (0, (T+1) B)). dH (H, T B) holds G_t = dL/dh_t on entry (what the
    layer above or the loss injects at each step, SPEC.md §7); dZ and dZh (G H, T B)
    receive the gates' gradients, input side and hidden side (for Elman both are dH, for
    the LSTM dZh is dZ). dcf (B, H): the LSTM's dL/dc_final, added at each sequence's
    last real step (lengths (B,)), or (0, H). X (H, B) is scratch ((0, B) for Elman); fp
    (H, T B) receives Elman's f'(a). WTp (H, N) is W^T zero-padded to N >= G H columns
    (`matvec.padded`). Writes dW (G H, H), db (G H,), dbh (G H,) (the GRU's hidden-side
    bias; else empty), dh0 (H, B) and dc0 (H, B) (pass (H, 0) when not needed).
    Padding steps have zero G, so their gradients are zero and they add nothing.
    """
    B, T, WT, blas = _begin(cell, Sm, Zm, WTp, act, lengths, dH, fp)
    _sweep(cell, Zm, Sm, Em, Cm, WT, chunk, B, blas, dH, dZ, dZh, X, fp, act, lengths, dcf)
    _finish(cell, Sm, WT, T, B, blas, dZ, dZh, X, dW, db, dbh, dh0, dc0)


@jit
def backward_lag_major(cell, Sm, Zm, Em, Cm, WTp, act, truncate, stride, lengths, dcf, dH,
                       dZ, dZh, X, fp, lags, dW, db, dbh, dh0, dc0):
    """`backward_sweep` for per-output windows BPTT(k; 1), truncate = k: lag-major (see
    `_lag_major`, whose scratch ``lags`` is)."""
    B, T, WT, blas = _begin(cell, Sm, Zm, WTp, act, lengths, dH, fp)
    _lag_major(cell, Zm, Sm, Em, Cm, WT, truncate, stride, B, blas, dH, dZ, dZh, fp, act, lags,
               X, lengths, dcf)
    _finish(cell, Sm, WT, T, B, blas, dZ, dZh, X, dW, db, dbh, dh0, dc0)


@jit
def backward_groups(cell, Sm, Zm, Em, Cm, WTp, act, truncate, stride, lengths, dcf, dH,
                    dZ, dZh, X, fp, lags, dW, db, dbh, dh0, dc0):
    """`backward_lag_major` for 1 < s < k: one sweep per group of s outputs (`_groups`;
    ``lags`` as there)."""
    B, T, WT, blas = _begin(cell, Sm, Zm, WTp, act, lengths, dH, fp)
    _groups(cell, Zm, Sm, Em, Cm, WT, truncate, stride, B, blas, dH, dZ, dZh, fp, act, lags,
            X, lengths, dcf)
    _finish(cell, Sm, WT, T, B, blas, dZ, dZh, X, dW, db, dbh, dh0, dc0)
