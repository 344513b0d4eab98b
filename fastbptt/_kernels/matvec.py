"""The sequential matrix-vector step of narrow batches, register-blocked.

One step of a single sequence is out += M x with M H x H: for H = 128 in float32 that is
16,384 multiply-adds reading 64 KB, more than the 48 KB L1 cache of the cores here. A
loop of row dot products spends much of its time reducing each row's vector sum, and a
BLAS call costs more than the product. This kernel instead keeps a block of outputs, up
to 16 vector registers (256 float32 or 128 float64), in registers and adds x[j] times
row j of R = M^T to them, j = 0 ... K-1: each row is one contiguous load per register
and nothing needs a horizontal sum. Blocks of up to 8 registers keep a second set of
sums for odd j, so that enough multiply-adds are in flight.

`rows_axpy` can take the rows in reverse order. A time loop that alternates direction
starts each step on the rows the previous step touched last, still in L1, so only part
of R streams in from L2 each step (measured here, H = 128 float32: 0.34 us a step
against 0.50 us always forward). Summation order changes with the direction; every sum
is still exact to the dtype's rounding, as with any BLAS.

The register blocks are LLVM vector code (`simd`).
"""
import numpy as np

from ._jit import jit
from .blas import transpose_into
from .simd import VECTOR_BYTES, axpy_block, lanes

BLOCK = 16          # most registers per block (`simd.axpy_block`)


def padded(n, dtype):
    """n rounded up to whole vector registers of ``dtype``: the width of padded rows."""
    w = VECTOR_BYTES // np.dtype(dtype).itemsize
    return -(-n // w) * w


@jit
def rows_axpy(R, x, out, reverse):
    """out += R^T x = sum_j x[j] R[j, :], j over all K rows of R, in reverse if asked.

    R (K, N) C-contiguous with N a whole number of vector registers (`padded`); x (K,)
    and out (N,) contiguous, of R's dtype. Columns of R beyond the real outputs are
    zero padding: they leave out's padding entries at whatever they held.
    """
    K, N = R.shape
    size, w = R.itemsize, lanes(R)
    if N % w != 0 or x.shape[0] != K or out.shape[0] != N:
        raise ValueError("rows_axpy: R must be (K, N) with N padded to whole vectors, "
                         "x (K,) and out (N,)")
    if K == 0 or N == 0:
        return
    if R.strides[1] != size or R.strides[0] != N * size or x.strides[0] != size \
            or out.strides[0] != size:
        raise ValueError("rows_axpy: R, x and out must be C-contiguous")
    full, rest = divmod(N // w, BLOCK)      # blocks of BLOCK registers, then 8, 4, 2, 1
    base, xs, os = R.ctypes.data, x.ctypes.data, out.ctypes.data
    if not reverse:
        i0 = 0
        for _ in range(full):
            axpy_block(BLOCK, R, base + i0 * size, N, xs, 1, os + i0 * size, K)
            i0 += BLOCK * w
        take = BLOCK // 2
        while take >= 1:
            if rest & take:
                axpy_block(take, R, base + i0 * size, N, xs, 1, os + i0 * size, K)
                i0 += take * w
            take //= 2
        return
    last, end = base + (K - 1) * N * size, N       # walk up from the last row
    take = 1
    while take < BLOCK:
        if rest & take:
            end -= take * w
            axpy_block(take, R, last + end * size, -N, xs + (K - 1) * size, -1,
                       os + end * size, K)
        take *= 2
    for _ in range(full):
        end -= BLOCK * w
        axpy_block(BLOCK, R, last + end * size, -N, xs + (K - 1) * size, -1,
                   os + end * size, K)


@jit(inline="always")
def _usable_as_is(W, N):
    """Whether the vector step can read W's own rows: no padding needed, and the array
    starts on a 64-byte boundary, so that no vector load straddles two cache lines
    (measured: a narrow backward sweep at H = 128 took 37 us unaligned, 30 us aligned)."""
    return W.shape[1] == N and W.ctypes.data % VECTOR_BYTES == 0


@jit(inline="always")
def rows_of_W(W, Wp):
    """W, or its padded copy Wp (`pad_weights`) when W cannot be read as it is."""
    return W if _usable_as_is(W, Wp.shape[1]) else Wp


@jit
def pad_weights(W, WTp, Wp):
    """WTp (H, N) <- W^T and, unless `rows_of_W` picks W itself, Wp (H, N) <- W, both
    zero-padded beyond H columns. Wp must start on a 64-byte boundary."""
    H, N = WTp.shape
    transpose_into(W, WTp[:, :H])
    for i in range(H):
        WTp[i, H:] = 0
    if _usable_as_is(W, N):
        return
    for i in range(H):
        row, out = W[i], Wp[i]
        for j in range(H):
            out[j] = row[j]
        for j in range(H, N):
            out[j] = 0
