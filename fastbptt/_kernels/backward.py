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
- lag-major (every s < k): lag 0 is the cell's backward step on G at every step at
  once; lag j takes W^T dZh of lag j - 1 one step later, column block r carrying output
  t = r + j alone, so it is dropped once r < lo(t); dZ and dZh are the sums over lags.
  That is k products of H x G H by G H x (T B) instead of T k vector ones.

Steps are column blocks of B columns in (rows, T B) matrices; the gradients of the
weights are single matrix products over all steps (those of the inputs are in `inputs`).
"""
from ._jit import jit
from .blas import gemm, row_sums, scratch
from .cells import backward_fm, prepare_fm, sums, to_h0


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
        backward_fm(cell, dH, dZ, dZh, lo, Zm, Sm, Em, Cm, hi, B, X, 0, X, 0, fp, B, act,
                    fp[:0])


@jit(inline="always")
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
    xp[:] = 0
    if dcf.shape[0]:
        for b in range(B):
            if lengths[b]:
                for i in range(xp.shape[0]):
                    xp[i, (lengths[b] - 1) * B + b] = dcf[b, i]
    backward_fm(cell, dH, dZ, dZh, 0, Zm, Sm, Em, Cm, B, B, xp, 0, xp, 0, fp, n, act,
                prev[:0])
    for i in range(dZh.shape[0]):
        prev[i, :] = dZh[i]
    X0[:] = xp[:, :B]
    for j in range(1, min(k, T)):
        n = (T - j) * B
        gemm(WT, prev[:, B:n + B], h[:, :n], 1.0, 0.0, False, False, blas)
        for r in range(T - j):
            if (r + j) % s < j - (k - s):       # r < lo(r + j): this output stops here
                h[:, r * B:(r + 1) * B] = 0
                xp[:, (r + 1) * B:(r + 2) * B] = 0
        fused = sums(cell)
        backward_fm(cell, h, z, zh, 0, Zm, Sm, Em, Cm, B, B, xp, B, xn, 0, fp, n, act,
                    dZ if fused else dZ[:0])
        if not fused:
            for i in range(dZ.shape[0]):
                a = z[i, :n]
                out = dZ[i, :n]
                for c in range(n):
                    out[c] += a[c]
        if apart:
            for i in range(dZh.shape[0]):
                a = zh[i, :n]
                out = dZh[i, :n]
                for c in range(n):
                    out[c] += a[c]
        X0 += xn[:, :B]
        prev, zh = zh, prev
        if h_is_zh:
            h = zh
        if z_is_zh:
            z = zh
        xp, xn = xn, xp


@jit
def backward(cell, S, Z, E, C, WTp, act, chunk, truncate, stride, lengths, dcf, dH, dZ, dZh,
             X, fp, lags, dW, db, dbh, dh0, dc0):
    """The gates' gradients for every step, and the gradients of W, b (bh) and h0 (c0).

    S (H, T+1, B) from `forward`, Z (G H, T+1, B) its gates (Z is S for Elman), C and E
    the LSTM's and GRU's arrays (else (0, T+1, B)). dH (H, T B) holds G_t = dL/dh_t on
    entry (what the layer above or the loss injects at each step, SPEC.md §7); dZ and
    dZh (G H, T B) receive the gates' gradients, input side and hidden side (for Elman
    both are dH, for the LSTM dZh is dZ). chunk > 0 sweeps, cutting the carries into
    each step t with (t + 1) % chunk == 0 (T + 1 for full BPTT, k for chunks); chunk = 0
    runs lag-major with truncate = k, stride = s, and its scratch ``lags`` (see
    `_lag_major`; unused otherwise). dcf (B, H): the LSTM's dL/dc_final, added at each
    sequence's last real step (lengths (B,)), or (0, H). X (H, B) is scratch ((0, B) for
    Elman); fp (H, T B) receives Elman's f'(a). WTp (H, N) is W^T zero-padded to N >= G H columns (`matvec.padded`).
    Writes dW (G H, H), db (G H,), dbh (G H,) (the GRU's hidden-side bias; else empty),
    dh0 (H, B) and dc0 (H, B) (pass (H, 0) when not needed).
    Padding steps have zero G, so their gradients are zero and they add nothing.
    """
    H, T, B = S.shape[0], S.shape[1] - 1, S.shape[2]
    GH = Z.shape[0]
    Sm = S.reshape(H, (T + 1) * B)
    Zm = Z.reshape(GH, (T + 1) * B)
    Em = E.reshape(E.shape[0], (T + 1) * B)
    Cm = C.reshape(C.shape[0], (T + 1) * B)
    WT = WTp[:, :GH]
    blas = scratch(dH)
    prepare_fm(cell, Sm, fp, B, act)
    if chunk > 0:
        _sweep(cell, Zm, Sm, Em, Cm, WT, chunk, B, blas, dH, dZ, dZh, X, fp, act, lengths,
               dcf)
    else:
        _lag_major(cell, Zm, Sm, Em, Cm, WT, truncate, stride, B, blas, dH, dZ, dZh, fp,
                   act, lags, X, lengths, dcf)
    gemm(WT, dZh[:, :B], dh0, 1.0, 0.0, False, False, blas)
    to_h0(cell, X, dh0, dc0)
    gemm(dZh, Sm[:, :T * B], dW, 1.0, 0.0, False, True, blas)
    row_sums(dZ, db)
    if dbh.size:
        row_sums(dZh, dbh)
