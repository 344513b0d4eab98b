"""The forward time loop of a layer, batched, feature-major, for any cell.

States are (H, T+1, B): step t is a column block of B columns, h0 in block 0. The gates
Z (G H, T+1, B) hold the inputs' part U x_t + b of every step (`inputs.gather_inputs` or
`inputs.project_inputs`); for the Elman cell Z is the state array itself. Only the
product with W is sequential: each step adds W h_{t-1} to its gates in one BLAS call
(the GRU takes W h_{t-1} + bh apart, in Hid), and the cell's step math (`cells`) makes
h_t. Batches that `fastbptt._stack._narrow` picks run `narrow.forward_narrow` instead.
"""
from ._jit import jit
from .alloc import matrix_view
from .blas import gemm, scratch
from .cells import forward_fm


@jit
def forward(cell, W, act, lengths, Z, S, E, C, Hid, bh, buf):
    """Fill S (H, T+1, B), which holds h0 at t = 0, with h_t at t + 1.

    cell: a `cells.TAGS` tag. W (G H, H). Z (G H, T+1, B): gates, holding the inputs'
    part on entry and the cell's activations on return (Z is S for Elman). C (H, T+1, B)
    holds c0 at t = 0 and receives c_t (LSTM; else (0, T+1, B)); E (H, T+1, B) receives
    what the GRU keeps of each step (else (0, T+1, B)). Hid (G H, B) is scratch for the
    GRU's hidden part, bh its bias (both empty for other cells). buf (H B,) is scratch.
    States (and c) at t >= lengths[b] are set to zero.
    """
    H, T, B = S.shape[0], S.shape[1] - 1, S.shape[2]
    Zm = matrix_view(Z, Z.shape[0], (T + 1) * B)
    Sm = matrix_view(S, H, (T + 1) * B)
    Em = matrix_view(E, E.shape[0], (T + 1) * B)
    Cm = matrix_view(C, C.shape[0], (T + 1) * B)
    blas = scratch(S)
    apart = Hid.shape[0] > 0
    for t in range(T):
        before, now = t * B, (t + 1) * B
        if apart:
            for i in range(Hid.shape[0]):
                Hid[i, :] = bh[i]
            gemm(W, Sm[:, before:now], Hid, 1.0, 1.0, False, False, blas)
        else:
            gemm(W, Sm[:, before:now], Zm[:, now:now + B], 1.0, 1.0, False, False, blas)
        forward_fm(cell, Zm, Sm, Em, Cm, now, B, Hid, act, buf)
    for b in range(B):
        for t in range(lengths[b], T):
            for i in range(H):
                S[i, t + 1, b] = 0
            for i in range(C.shape[0]):
                C[i, t + 1, b] = 0
