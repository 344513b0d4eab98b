"""The backward time loop and the weight gradients (SPEC.md §2, §3, §5).

Truncation follows lo(t) = max(0, (t // s + 1) * s - k): the error of output t flows
back through steps t ... lo(t). Two exact schemes:

- sweep (full BPTT, and chunks s = k): one pass from T-1 down to 0,
  delta_t = g_t + (delta_{t+1} W) * f'(a_t), with the carried delta zeroed at chunk starts;
- lag-major (every s < k): R_0 = g; R_j[r] = (R_{j-1}[r+1] W) * f'(a_r), where row r of
  R_j carries output t = r + j alone, so it is dropped once r < lo(t); Delta = sum_j R_j.
  That is k products of (T B) x H x H instead of T k vector products.

Here g_t = (V^T e_t) * f'(a_t) and rows are batch rows: delta W is (W^T delta^T)^T.
"""
import numpy as np

from ._jit import jit
from .activations import scale_by_derivative


@jit
def _sweep(g, h, W, act, chunk, delta, step):
    """delta_t = g_t + (delta_{t+1} W) f'(a_t); no carry into a step t with (t+1) % chunk == 0."""
    T, B, H = g.shape
    delta[T - 1] = g[T - 1]
    for t in range(T - 2, -1, -1):
        if (t + 1) % chunk == 0:
            delta[t] = g[t]
            continue
        np.dot(delta[t + 1], W, step)
        for b in range(B):
            scale_by_derivative(step[b], h[t, b], act)
            for i in range(H):
                delta[t, b, i] = g[t, b, i] + step[b, i]


@jit
def _lag_major(g, h, W, act, k, s, delta, prev, nxt):
    """Delta[r] = sum over lags j < k of R_j[r], dropping output t = r + j once j > t % s + k - s."""
    T, B, H = g.shape
    delta[:] = g
    prev[:] = g
    for j in range(1, min(k, T)):
        n = T - j
        np.dot(prev[1:n + 1].reshape(n * B, H), W, nxt[:n].reshape(n * B, H))
        for r in range(n):
            if (r + j) % s < j - (k - s):       # r < lo(r + j): this output stops here
                nxt[r] = 0.0
                continue
            for b in range(B):
                scale_by_derivative(nxt[r, b], h[r, b], act)
                for i in range(H):
                    delta[r, b, i] += nxt[r, b, i]
        prev, nxt = nxt, prev


@jit
def backward(hs, err, x_ids, x_dense, ids, W, V, act, truncate, stride, lengths,
             delta, work, dU, dW, dV, db, dc, dh0):
    """All gradients from the forward states and the output errors.

    hs (T+1, B, H) from `forward`; err (T, B, C) from `output_errors`. truncate = 0 means
    full BPTT. delta (T, B, H) receives dL/da_t; work (2, T, B, H) is scratch.
    dU (H, L) for dense x, or (L, H) = dU.T for ids (a scatter-add over rows), dW (H, H),
    dV (C, H), db (H,), dc (C,), dh0 (B, H): all overwritten.
    """
    T = err.shape[0]
    B, H = hs.shape[1], hs.shape[2]
    C = err.shape[2]
    h = hs[1:]
    g = work[0]
    np.dot(err.reshape(T * B, C), V, g.reshape(T * B, H))
    for t in range(T):
        for b in range(B):
            scale_by_derivative(g[t, b], h[t, b], act)
    if truncate == 0 or (truncate >= T and stride == 1):
        _sweep(g, h, W, act, T + 1, delta, work[1, 0])
    elif stride == truncate:
        _sweep(g, h, W, act, truncate, delta, work[1, 0])
    else:                                        # g (work[0]) is free once copied
        _lag_major(g, h, W, act, truncate, stride, delta, work[1], work[0])
    np.dot(delta[0], W, dh0)
    # hs[t] is h_{t-1}, the input of step t
    rows = delta.reshape(T * B, H)
    np.dot(rows.T, hs[:T].reshape(T * B, H), dW)
    np.dot(err.reshape(T * B, C).T, h.reshape(T * B, H), dV)
    if ids:
        dU[:] = 0.0
        for t in range(T):
            for b in range(B):
                if t < lengths[b]:
                    dU[x_ids[t, b]] += delta[t, b]
    else:
        np.dot(rows.T, x_dense.reshape(T * B, x_dense.shape[2]), dU)
    db[:] = 0.0
    for r in range(T * B):
        db += rows[r]
    dc[:] = 0.0
    flat_err = err.reshape(T * B, C)
    for r in range(T * B):
        dc += flat_err[r]
