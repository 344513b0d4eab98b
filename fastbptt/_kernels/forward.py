"""The forward recurrence h_t = f(U x_t + W h_{t-1} + b), batched, feature-major.

Batches that `fastbptt.api._narrow` picks (a few sequences, or a small W) run
`narrow.forward_narrow` instead.
"""
from ._jit import jit
from .activations import activate_columns
from .blas import gemm, scratch


@jit
def forward(x_ids, x_dense, ids, U, W, bias, act, lengths, hs, buf):
    """Fill hs (H, T+1, B): hs[:, 0] = h0 (set by the caller), hs[:, t + 1] = h_t.

    x_ids (T B,) int64 ids in [0, L), time-major (index t B + b), or x_dense (L, T B);
    ``ids`` says which is used. U (H, L), W (H, H), bias (H,) (zeros for no bias).
    States at t >= lengths[b] are set to zero. buf (H B,) is scratch.
    Only the H x H product is sequential: the input projection is one gather or one
    matrix product over all steps, written into the state columns before the time loop,
    and each step adds W h_{t-1} to them in place.
    """
    H, T, B = hs.shape[0], hs.shape[1] - 1, hs.shape[2]
    m = hs.reshape(H, (T + 1) * B)
    blas = scratch(hs)
    if ids:
        for i in range(H):
            u, row, bi = U[i], m[i, B:], bias[i]
            for tb in range(T * B):
                row[tb] = u[x_ids[tb]] + bi
    else:
        gemm(U, x_dense, m[:, B:], 1.0, 0.0, False, False, blas)
        for i in range(H):
            row, bi = m[i, B:], bias[i]
            for tb in range(T * B):
                row[tb] += bi
    for t in range(T):
        now = (t + 1) * B
        gemm(W, m[:, t * B:now], m[:, now:now + B], 1.0, 1.0, False, False, blas)
        activate_columns(m, now, B, act, buf)
    for b in range(B):
        for t in range(lengths[b], T):
            for i in range(H):
                hs[i, t + 1, b] = 0
