"""The forward recurrence h_t = f(a_t + W h_{t-1}), batched, feature-major.

The inputs' part a_t = U x_t + b of every step is already in the state columns
(`inputs.gather_inputs` or `inputs.project_inputs`): only the H x H product is
sequential. Batches that `fastbptt.api._narrow` picks (a few sequences, or a small W)
run `narrow.forward_narrow` instead.
"""
from ._jit import jit
from .activations import activate_columns
from .blas import gemm, scratch


@jit
def forward(W, act, lengths, hs, buf):
    """hs (H, T+1, B) holds h0 at t = 0 and a_t at t + 1; make hs[:, t + 1] = h_t.

    W (H, H). States at t >= lengths[b] are set to zero. buf (H B,) is scratch.
    """
    H, T, B = hs.shape[0], hs.shape[1] - 1, hs.shape[2]
    m = hs.reshape(H, (T + 1) * B)
    blas = scratch(hs)
    for t in range(T):
        now = (t + 1) * B
        gemm(W, m[:, t * B:now], m[:, now:now + B], 1.0, 1.0, False, False, blas)
        activate_columns(m, now, B, act, buf)
    for b in range(B):
        for t in range(lengths[b], T):
            for i in range(H):
                hs[i, t + 1, b] = 0
