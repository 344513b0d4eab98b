"""The forward recurrence h_t = f(U x_t + W h_{t-1} + b), batched, feature-major."""
from ._jit import jit
from .activations import activate_columns, activate_vector
from .blas import gemm, scratch, transpose_into
from .matvec import rows_axpy

NARROW = 4      # below this many sequences, each runs alone on register-blocked vector code


@jit
def _narrow_sequence(WTp, m, b, B, steps, act, seq):
    """The recurrence of sequence b alone, time-major in seq (T+1, N): row t is h_t.

    Column t B + b of m (H, (T+1) B) holds h0 for t = 0 and the input projection of
    step t - 1 after; on exit it holds the states. In seq each step's state is one
    contiguous row, zero-padded to N (`matvec.padded`), and each step's product runs
    over the rows of WTp = W^T (padded), the direction alternating (`rows_axpy`).
    Rows past ``steps`` are zero.
    """
    H = m.shape[0]
    seq[:, H:] = 0
    transpose_into(m[:, b:(steps + 1) * B:B], seq[:steps + 1, :H])
    seq[steps + 1:] = 0
    for t in range(steps):
        rows_axpy(WTp, seq[t, :H], seq[t + 1], t % 2 == 1)
        activate_vector(seq[t + 1, :H], act)
    transpose_into(seq[1:steps + 1, :H], m[:, B + b:(steps + 1) * B:B])


@jit
def forward(x_ids, x_dense, ids, U, W, WTp, bias, act, lengths, hs, buf, seqs):
    """Fill hs (H, T+1, B): hs[:, 0] = h0 (set by the caller), hs[:, t + 1] = h_t.

    x_ids (T B,) int64 ids in [0, L), time-major (index t B + b), or x_dense (L, T B);
    ``ids`` says which is used. U (H, L), W (H, H), bias (H,) (zeros for no bias).
    States at t >= lengths[b] are set to zero. buf (H B,) is scratch.
    Batches of fewer than NARROW sequences also need WTp (H, N), W^T zero-padded to N
    columns (`matvec.padded`), and seqs (B, T+1, N), which receives each sequence's
    states time-major (`_narrow_sequence`); wider ones ignore both.
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
    if B < NARROW:
        for b in range(B):
            _narrow_sequence(WTp, m, b, B, lengths[b], act, seqs[b])
    else:
        for t in range(T):
            now = (t + 1) * B
            gemm(W, m[:, t * B:now], m[:, now:now + B], 1.0, 1.0, False, False, blas)
            activate_columns(m, now, B, act, buf)
    for b in range(B):
        for t in range(lengths[b], T):
            for i in range(H):
                hs[i, t + 1, b] = 0
