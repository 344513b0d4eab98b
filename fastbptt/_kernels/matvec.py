"""The sequential matrix-vector step of narrow batches, register-blocked.

One step of a single sequence is out += M x with M H x H: for H = 128 in float32 that is
16,384 multiply-adds reading 64 KB, more than the 48 KB L1 cache of the cores here. A
loop of row dot products spends much of its time reducing each row's vector sum, and a
BLAS call costs more than the product. This kernel instead keeps a block of outputs, up
to 16 vector registers (`simd.VECTOR_BYTES` each: 256 float32 or 128 float64 with
AVX-512, half as many with AVX2), in registers and adds x[j] times row j of R = M^T to
them, j = 0 ... K-1: each row is one contiguous load per register and nothing needs a
horizontal sum. Blocks of up to 8 registers keep a second set of
sums for odd j, so that enough multiply-adds are in flight.

`rows_axpy` can take the rows in reverse order. A time loop that alternates direction
starts each step on the rows the previous step touched last, still in L1, so only part
of R streams in from L2 each step (measured here, H = 128 float32: 0.34 us a step
against 0.50 us always forward). Summation order changes with the direction; every sum
is still exact to the dtype's rounding, as with any BLAS.

Several sequences share each load of R: groups of 2, 3 or 4 sequences keep as many sets
of sums in registers (blocks of 8, 4 and 4 registers each). At H = 128 float32, 100
steps of 2 sequences took 35 us against 72 us one sequence after the other, 8 sequences
104 us against 285 us. A batch goes in groups of 4 and one group of what is left, so
3 sequences make one pass over R, not two (a group of 2 and one of 1): an LSTM layer at
H = 1024, 3 sequences, 50 steps, forward and backward, took 106 ms against 202 (B = 2:
98 ms), and Elman at H = 1024, 7 sequences, 40 ms against 53.

The register blocks are LLVM vector code (`simd`).
"""
import numpy as np

from ._jit import jit
from .alloc import matrix_view
from .blas import transpose_into
from .copies import copy_row
from .simd import ACCUMULATORS, PANEL_GROUP, VECTOR_BYTES, axpy_block, lanes, panel_block

BLOCK = ACCUMULATORS        # most registers of sums per block (`simd.axpy_block`)
# Panels (`panel_columns`, `panels_axpy`): column panels of 4 registers, 256-byte rows,
# walked KC rows (256 KB) at a time, which stay in L2 while every group of sequences reads
# them. Chunks of 96 rows (24 KB, to stay in L1) made the out blocks load and store
# again every 96 rows and ran slower: 32 sequences, K x N products, GF/s for 96 against
# 1024 rows, one process in turns: 1024 x 4096 115 / 130, 4096 x 1024 140 / 165,
# 1024 x 1024 192 / 216, 1024 x 256 194 / 214, 256 x 1024 194 / 199, 256 x 256 199 / 202.
# Whole panels of 4096 rows (1 MB, the size of L2) took 114.
PANEL_BYTES = 4 * VECTOR_BYTES
KC = 1024
# Panels larger than L2 come in from L3 as the first group of each chunk reads them. From
# PREFETCH_GROUPS groups of 4 sequences on, and panels of more than PREFETCH_BYTES, the
# groups walking one chunk of KC rows prefetch the next chunk into L2, each group its
# share, a line every few rows. LSTM at H = 1024, 32 sequences (8 groups), 50 steps,
# GF/s without / with, in turns: K x N 1024 x 4096 168-183 / 200-209, 4096 x 1024
# 172-201 / 188-215; G4 3 to 13% faster. With 4 groups (a line a row), or all lines
# before each group's call, it was slower than none; with W in L2 (Elman at H = 128) it
# cost up to 4%. Beyond 1 MB (the size of L2 here) W5 (4 MB) ran as fast with it as
# without (paired ratios 0.99 on one thread, 1.01 on two), and G4 on two threads, whose
# forward pass reads 2 MB of panels per gate and thread, 5 to 6% faster than beyond 4 MB.
# (Counted in sequences, PREFETCH_GROUPS groups of 4, whatever `simd.PANEL_GROUP` is.)
PREFETCH_GROUPS = 7
PREFETCH_BYTES = 1 << 20


def padded(n, dtype):
    """n rounded up to whole vector registers of ``dtype``: the width of padded rows."""
    w = VECTOR_BYTES // (dtype.itemsize if isinstance(dtype, np.dtype) else
                         np.dtype(dtype).itemsize)
    return -(-n // w) * w


@jit(inline="always")
def passes(nseq):
    """How many passes over R `rows_axpy` makes for ``nseq`` sequences (groups of 4, then
    one of the 1 to 3 left)."""
    return nseq // 4 + (nseq % 4 > 0)


@jit(inline="always")
def _piece(k, full, rest, most):
    """(first register, registers) of block k of a pass: ``full`` blocks of ``most``
    registers, then one of each power of two set in ``rest``, largest first."""
    if k < full:
        return k * most, most
    first, k = full * most, k - full
    take = most // 2
    while take >= 1:
        if rest & take:
            if k == 0:
                return first, take
            k -= 1
            first += take
        take //= 2
    return first, 0             # (k past the last block: not reached)


@jit(inline="always")
def _one_pass(R, x, xstep, out, ostep, nseq, reverse):
    """out_s += R^T x_s for ``nseq`` (1 to 4) sequences whose x and out start at the
    addresses x and out, xstep and ostep elements apart: blocks of up to 16 / nseq
    registers (4 for 3 sequences; with AVX2 8 / nseq, 2 for 3: `simd.ACCUMULATORS`),
    walking R's rows from the last one up when ``reverse``. (One call site for every
    block: each inlines a tree of register-block loops, and compile time grows with their
    count.)"""
    K, N = R.shape
    size, w = R.itemsize, lanes(R)
    most = BLOCK // nseq if nseq != 3 else BLOCK // 4
    full, rest = divmod(N // w, most)     # blocks of `most` registers, then halves of it
    blocks = full + (rest & 8 > 0) + (rest & 4 > 0) + (rest & 2 > 0) + (rest & 1 > 0)
    step = -N if reverse else N
    first_row = R.ctypes.data + ((K - 1) * N * size if reverse else 0)
    x0 = x + ((K - 1) * size if reverse else 0)
    for k in range(blocks):
        first, vectors = _piece(blocks - 1 - k if reverse else k, full, rest, most)
        i0 = first * w * size
        axpy_block(vectors, nseq, R, first_row + i0, step, x0, xstep, -1 if reverse else 1,
                   out + i0, ostep, K)


@jit
def rows_axpy(R, x, out, reverse):
    """out[s] += R^T x[s] = sum_j x[s, j] R[j, :] for every sequence s, j over all K rows
    of R.

    R (K, N) C-contiguous with N a whole number of vector registers (`padded`); x (S, K)
    and out (S, N) of R's dtype, each row contiguous (rows any distance apart).
    Sequences go in groups of 4, and the 1 to 3 left in one more group, each group one
    pass over R that loads each of its rows once for the whole group (`passes` counts
    them); the passes alternate direction, the first one walking R's rows from the last
    up when ``reverse``.
    Columns of R beyond the real outputs are zero padding: they leave out's padding
    entries at whatever they held.
    """
    K, N = R.shape
    S = x.shape[0]
    size, w = R.itemsize, lanes(R)
    if N % w != 0 or x.shape[1] != K or out.shape[0] != S or out.shape[1] != N:
        raise ValueError("rows_axpy: R must be (K, N) with N padded to whole vectors, "
                         "x (S, K) and out (S, N)")
    if K == 0 or N == 0 or S == 0:
        return
    if R.strides[1] != size or R.strides[0] != N * size or x.strides[1] != size \
            or out.strides[1] != size:
        raise ValueError("rows_axpy: R must be C-contiguous, and the rows of x and out "
                         "contiguous")
    xstep, ostep = x.strides[0] // size, out.strides[0] // size
    s0 = 0
    while s0 < S:
        group = min(S - s0, 4)
        _one_pass(R, x.ctypes.data + s0 * xstep * size, xstep,
                  out.ctypes.data + s0 * ostep * size, ostep, group, reverse)
        s0 += group
        reverse = not reverse


def paneled(n, dtype):
    """n rounded up to whole panels of ``dtype`` (`PANEL_BYTES`): the columns of R that
    `panel_columns` stores, so that `panel_columns` needs K paneled(N) entries."""
    pw = PANEL_BYTES // np.dtype(dtype).itemsize
    return -(-n // pw) * pw


@jit(inline="always")
def panel_columns(R, Rc, N):
    """Rc (K P,) <- R (K, n <= N) zero-padded to P = `paneled`(N) columns, as column panels
    of PANEL_BYTES-byte rows, each a contiguous (K, width) block, one after the other."""
    K, n = R.shape
    pw = PANEL_BYTES // R.itemsize
    for c0 in range(0, N, pw):
        real = max(0, min(pw, n - c0))
        panel = matrix_view(Rc[c0 * K:(c0 + pw) * K], K, pw)
        for j in range(K):
            copy_row(panel[j, :real], R[j, c0:c0 + real])
            panel[j, real:] = 0


@jit(inline="always")
def panel_transpose(W, Rc, N):
    """`panel_columns` of W^T (W (n <= N, K)), without W^T itself: each panel is the
    transpose of a block of W's rows."""
    n, K = W.shape
    pw = PANEL_BYTES // W.itemsize
    for c0 in range(0, N, pw):
        real = max(0, min(pw, n - c0))
        panel = matrix_view(Rc[c0 * K:(c0 + pw) * K], K, pw)
        transpose_into(W[c0:c0 + real, 0:K], panel[:, 0:real])   # (A, A): as elsewhere
        for j in range(K):
            panel[j, real:] = 0


@jit
def pack_panels(W, WTc, NG, Wc, N, p0, p1):
    """What the narrow steps of a batch in panels read, parts p0 ... p1-1 of two: 0, WTc <-
    `panel_transpose` of W (W^T's panels, NG columns); 1, Wc <- `panel_columns` of W (N
    columns). (Two threads make one each at once.)"""
    for part in range(p0, p1):
        if part == 0:
            panel_transpose(W, WTc, NG)
        else:
            panel_columns(W, Wc, N)


@jit
def panels_axpy(Rc, K, x, out):
    """out[s] += R^T x[s] for every sequence s, R (K, N) given as `panel_columns` Rc and
    N = out.shape[1] (a whole number of vector registers).

    A small matrix product: per panel, KC rows at a time (in L2), every group of 4
    sequences (2 with AVX2: `simd.PANEL_GROUP`) adds those rows' terms to its 4 x 4
    registers (2 x 4), so each row comes from memory or L3 once a step rather than once a
    group (LSTM at H = 256, 32 sequences, 100 steps: 6.9 ms forward and 6.8 ms backward,
    against 10.4 and 10.7 ms for `rows_axpy` on the whole rows). The last 2 or 1 sequences go in
    smaller groups, and a last panel narrower than the others in narrower blocks
    (`simd.panel_block`); every output adds the rows in one order, j = 0 ... K-1, so a
    sequence's outputs are the same bits whatever group or slice of the batch it falls
    in. Panels larger than PREFETCH_BYTES, read by 4 PREFETCH_GROUPS sequences or more,
    are prefetched a chunk ahead, within Rc.
    """
    S, N = out.shape
    size = Rc.itemsize
    pw = PANEL_BYTES // size
    P = -(-N // pw) * pw
    if x.shape[0] != S or x.shape[1] != K or Rc.shape[0] != K * P or N % lanes(Rc) != 0 \
            or x.strides[1] != size or out.strides[1] != size:
        raise ValueError("panels_axpy: Rc must hold K paneled(N) entries, x (S, K), out "
                         "(S, N), the rows of x and out contiguous")
    if K == 0 or N == 0 or S == 0:
        return
    xstep, ostep = x.strides[0] // size, out.strides[0] // size
    start = Rc.ctypes.data
    end = start + K * P * size
    groups = S // PANEL_GROUP
    for c0 in range(0, N, pw):
        vectors = min(pw, N - c0) // lanes(Rc)
        panel = start + c0 * K * size
        for j0 in range(0, K, KC):
            rows = min(KC, K - j0)
            chunk = panel + j0 * pw * size
            # the rows read next: this chunk's successor, or after the last, the first
            ahead = chunk + rows * pw * size
            if ahead >= end:
                ahead = start
            share, step = 0, 0          # lines each group prefetches, bytes a row
            if S >= 4 * PREFETCH_GROUPS and end - start > PREFETCH_BYTES:
                share = min(rows * pw * size, end - ahead) // 64 // groups
                step = share * 64 // rows
            s0 = 0
            while s0 < S:
                nseq = PANEL_GROUP if S - s0 >= PANEL_GROUP else (2 if S - s0 >= 2 else 1)
                panel_block(vectors, nseq, Rc, chunk, pw,
                            x.ctypes.data + (s0 * xstep + j0) * size, xstep,
                            out.ctypes.data + (s0 * ostep + c0) * size, ostep, rows,
                            ahead + s0 // PANEL_GROUP * share * 64, step)
                s0 += nseq


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
    """For W (G H, H): WTp (H, NG) <- W^T zero-padded beyond G H columns and, unless
    `rows_of_W` picks W itself, Wp (G H, N) <- W zero-padded beyond H columns. Wp must
    start on a 64-byte boundary."""
    GH, H = W.shape
    N = Wp.shape[1]
    transpose_into(W[:, 0:H], WTp[:, :GH])
    for i in range(H):
        WTp[i, GH:] = 0
    if _usable_as_is(W, N):
        return
    for i in range(GH):
        row, out = W[i], Wp[i]
        for j in range(H):
            out[j] = row[j]
        for j in range(H, N):
            out[j] = 0
