"""A layer's backward time loop and the gradients of W and b (SPEC.md §2, §3, §5, §7),
feature-major.

Truncation follows lo(t) = max(0, (t // s + 1) * s - k): the gradient injected at step t
flows back through steps t ... lo(t). With u_t = G_t = dL/dh_t injected at each step (by
the output layer, u_t = V^T e_t, or by whatever sits above the layer) and
delta_t = dL/da_t:

- sweep (full BPTT, and chunks s = k): one pass from T-1 down to 0,
  delta_t = (u_t + W^T delta_{t+1}) * f'(a_t), the carry dropped at chunk starts;
- lag-major (every s < k): R_0 = u * f'; R_j[r] = (W^T R_{j-1}[r+1]) * f'(a_r), where
  column block r of R_j carries output t = r + j alone, so it is dropped once r < lo(t);
  Delta = sum_j R_j. That is k products of H x H by H x (T B) instead of T k vector ones.

Steps are column blocks of B columns in (H, T B) matrices; f'(a) is computed once for
all steps, and the gradients of the weights are single matrix products over all steps
(those of the inputs are in `inputs`).
"""
from ._jit import jit
from .activations import derivative_into
from .blas import gemm, row_sums, scratch


@jit
def _sweep(d, fp, WT, chunk, B, blas):
    """delta_t = (u_t + W^T delta_{t+1}) f'(a_t) in place on d (H, T B), holding u on entry."""
    H, T = d.shape[0], d.shape[1] // B
    for t in range(T - 1, -1, -1):
        lo, hi = t * B, (t + 1) * B
        if t + 1 < T and (t + 1) % chunk != 0:
            gemm(WT, d[:, hi:hi + B], d[:, lo:hi], 1.0, 1.0, False, False, blas)
        for i in range(H):
            row, f = d[i, lo:hi], fp[i, lo:hi]
            for j in range(B):
                row[j] *= f[j]


@jit
def _lag_major(d, fp, WT, k, s, B, blas, prev, nxt):
    """Delta = sum over lags j < k of R_j, in place on d (H, T B) holding u on entry."""
    H, T = d.shape[0], d.shape[1] // B
    for i in range(H):
        row, f, p = d[i], fp[i], prev[i]
        for c in range(T * B):
            row[c] *= f[c]
            p[c] = row[c]
    for j in range(1, min(k, T)):
        n = T - j
        gemm(WT, prev[:, B:(n + 1) * B], nxt[:, :n * B], 1.0, 0.0, False, False, blas)
        for r in range(n):
            if (r + j) % s < j - (k - s):       # r < lo(r + j): this output stops here
                for i in range(H):
                    nxt[i, r * B:(r + 1) * B] = 0
        for i in range(H):
            a, f, out = nxt[i, :n * B], fp[i, :n * B], d[i, :n * B]
            for c in range(n * B):
                v = a[c] * f[c]
                a[c] = v
                out[c] += v
        prev, nxt = nxt, prev


@jit
def backward(hs, WTp, act, chunk, truncate, stride, delta, fp, work, dW, db, dh0):
    """delta <- dL/da for every step, and the gradients of W, b and h0.

    hs (H, T+1, B) from `forward`. delta (H, T B) holds G_t = dL/dh_t on entry (what
    the layer above or the loss injects at each step, SPEC.md §7). chunk > 0 sweeps,
    cutting the carry into each step t with (t + 1) % chunk == 0 (T + 1 for full BPTT,
    k for chunks); chunk = 0 runs lag-major with truncate = k, stride = s.
    fp (H, T B) receives f'(a); work (2, H, T B) is scratch for lag-major (any shape
    otherwise). WTp (H, N) is W^T, zero-padded to N >= H columns (`matvec.padded`);
    only its first H are read. Batches that `fastbptt.api._narrow` picks sweep in
    `narrow.backward_narrow` instead.
    Writes dW (H, H), db (H,) and dh0 (H, B) = W^T delta_0 (pass (H, 0) when not needed).
    Padding steps have zero G, so their delta is zero and they add nothing.
    """
    H, T, B = hs.shape[0], hs.shape[1] - 1, hs.shape[2]
    m = hs.reshape(H, (T + 1) * B)
    before = m[:, :T * B]
    WT = WTp[:, :H]
    blas = scratch(delta)
    for i in range(H):
        derivative_into(fp[i], m[i, B:], act)
    if chunk > 0:
        _sweep(delta, fp, WT, chunk, B, blas)
    else:
        _lag_major(delta, fp, WT, truncate, stride, B, blas, work[0], work[1])
    gemm(WT, delta[:, :B], dh0, 1.0, 0.0, False, False, blas)
    gemm(delta, before, dW, 1.0, 0.0, False, True, blas)
    row_sums(delta, db)
