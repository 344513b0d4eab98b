"""The forward recurrence h_t = f(U x_t + W h_{t-1} + b), batched, time-major."""
import numpy as np

from ._jit import jit
from .activations import activate_row


@jit
def forward(x_ids, x_dense, ids, UT, WT, bias, act, lengths, hs, step):
    """Fill hs (T+1, B, H) with h0 = hs[0] (set by the caller) and h_t = hs[t + 1].

    x_ids (T, B) int64 ids in [0, L) or x_dense (T, B, L); ``ids`` says which is used.
    UT (L, H) = U.T and WT (H, H) = W.T, contiguous; bias (H,) (zeros for no bias).
    lengths (B,): states at t >= lengths[b] are set to zero. step (B, H) is scratch.
    Only the H x H product is sequential: the input projection is one gather or one
    matrix product over all steps, written into hs[1:] before the time loop.
    """
    T = hs.shape[0] - 1
    B, H = hs.shape[1], hs.shape[2]
    proj = hs[1:].reshape(T * B, H)
    if ids:
        for t in range(T):
            for b in range(B):
                proj[t * B + b] = UT[x_ids[t, b]]
    else:
        np.dot(x_dense.reshape(T * B, x_dense.shape[2]), UT, proj)
    for t in range(T):
        np.dot(hs[t], WT, step)
        for b in range(B):
            row = hs[t + 1, b]
            if t < lengths[b]:
                for i in range(H):
                    row[i] += step[b, i] + bias[i]
                activate_row(row, act)
            else:
                row[:] = 0.0
