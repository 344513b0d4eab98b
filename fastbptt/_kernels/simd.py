"""LLVM vector code for the kernels, emitted by Numba intrinsics.

Numba's loops vectorize only where LLVM proves it can; these two pieces are written
as vector code directly, in vectors of `VECTOR_BYTES`, and cache like the other kernels.

- `axpy_block`: out_s[:w] += sum_j x_s[j] R[j, :w] for one to four sequences s,
  with the outputs held in registers and each row of R loaded once: the step of
  `matvec.rows_axpy`; `panel_block`, the blocks of `matvec.panels_axpy`, which add
  every output's rows in order.
- `transpose_tile`: one square tile of a transpose through registers, for
  `blas.transpose_into`.
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils, config
from numba.core.codegen import get_host_cpu_features
from numba.extending import intrinsic

from ._jit import jit


def vector_bytes(features=None):
    """The width of the kernels' vectors in bytes: 64, one AVX-512 register, where the
    code is compiled for AVX-512 (``features``: LLVM's feature string, by default the
    one Numba compiles for: NUMBA_CPU_FEATURES where set, else the host's), else 32,
    one AVX2 register (LLVM splits it on narrower machines).

    The blocks keep up to 16 vectors of sums in registers, which AVX-512's 32 registers
    hold; on AVX2's 16 registers of 32 bytes, 64-byte vectors are pairs of them and
    those blocks spilled to the stack. Measured on a Zen 3 core (AVX2), in turns,
    `rows_axpy` with 32-byte vectors took 0.67 to 0.85 the time of 64-byte ones for
    groups of 2 to 4 sequences, and 0.87 to 1.04 for one (R of 128 x 128 to 256 x 1024,
    float32 and float64, 64-byte aligned).
    """
    if features is None:
        features = (config.CPU_FEATURES if config.CPU_FEATURES is not None
                    else get_host_cpu_features())
    return 64 if "+avx512f" in features.split(",") else 32


VECTOR_BYTES = vector_bytes()
# The most vectors of sums a block keeps in registers: half of the register file (32
# registers with AVX-512, 16 with AVX2), so that the rows' loads and the broadcast x fit
# beside them. Blocks of 16 on AVX2 spilled sums to the stack in every pass. On a Zen 3
# core (float32, one run each, `matvec.rows_axpy`'s blocks on R of 128 x 128 to
# 512 x 2048), blocks of at most 8 against those of 16 ran 1.1 to 2.1 times as fast for
# groups of 4 sequences and 0.96 to 2.6 for groups of 2; for 3 sequences (2 registers
# against 4) 1.2 to 1.7 from 128 rows, 0.83 to 0.97 from L2; for one, 1.27 from 128 rows,
# 0.84 to 1.5 from L2 (`benchmarks/HISTORY.md`).
ACCUMULATORS = 16 if VECTOR_BYTES == 64 else 8
# Sequences per group of `matvec.panels_axpy`, each group one block of a panel's 4
# vectors for each sequence: 4 x 4 sums with AVX-512, 2 x 4 with AVX2. On a Zen 3 core
# (float32, 24 to 64 sequences, K x N 128 x 512 to 1024 x 4096, GF/s) groups of 4 ran at
# 37 to 44, groups of 2 at 72 to 94, and OpenBLAS's sgemm of the same product at 62 to 83.
PANEL_GROUP = ACCUMULATORS // 4


def _axpy_block(vectors, nseq, halves=None, prefetch=False):
    """An intrinsic: for each of ``nseq`` sequences s,
    out_s[:w] += sum_j x_s[j * incx] * R[j * ldr, :w], w = ``vectors`` registers.

    The sum is taken from zero and added to out_s once, as a matrix product's result is
    added: summed onto out_s (a step's input part U x_t + b, say, where the product is
    W h_{t-1}), every multiply-add rounded at out_s's size, and a gate saturated by a
    large input part (a bias of -80) lost about sqrt(K) ulps of it: 20 times the error
    of PyTorch's float32 LSTM in its h and gradients.

    Each row segment of R is loaded once and used for every sequence. ``like`` is any
    array of the dtype (float32 or float64); the other arguments are addresses or
    element counts (intp): r (address of R[0, i0]), ldr (row step in elements, negative
    to walk up), x (x_0's address), xstep (elements from x_s to x_{s+1}), incx, out,
    ostep (likewise), K (rows). One sequence with at most 8 registers keeps a second set
    of sums for odd j (at most 4 with AVX2: `ACCUMULATORS`), so that enough multiply-adds
    are in flight, unless ``halves`` is 1 (then every output adds the rows in order,
    j = 0 ... K-1, as with several sequences).

    With ``prefetch``, two more arguments, pf and pfstep (intp): each row j also asks
    for the cache line at address pf + j pfstep to be brought into L2 (`matvec.panels_axpy`:
    the rows of R that the next call reads). A prefetch never faults, and touches nothing.
    """
    if halves is None:
        halves = 2 if nseq == 1 and vectors <= ACCUMULATORS // 2 else 1

    def typer(like):
        sig = types.void(like, *([types.intp] * (8 + 2 * prefetch)))
        double = like.dtype == types.float64
        scalar = ir.DoubleType() if double else ir.FloatType()
        size = 8 if double else 4
        lanes = VECTOR_BYTES // size
        vec = ir.VectorType(scalar, lanes)
        suffix = f"v{lanes}{'f64' if double else 'f32'}"

        def codegen(context, builder, signature, args):
            _, r, ldr, x, xstep, incx, out, ostep, K = args[:9]
            word = r.type
            one, two = ir.Constant(word, 1), ir.Constant(word, 2)
            fmuladd = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(vec, [vec, vec, vec]), f"llvm.fmuladd.{suffix}")
            scalar_ptr, vec_ptr = scalar.as_pointer(), vec.as_pointer()

            def vector_at(base, v):
                return builder.bitcast(builder.gep(base, [ir.Constant(word, v * lanes)]), vec_ptr)

            def sequence(base, step, s):
                return builder.gep(builder.inttoptr(base, scalar_ptr),
                                   [builder.mul(step, ir.Constant(word, s))])

            outs = [sequence(out, ostep, s) for s in range(nseq)]
            xs = [sequence(x, xstep, s) for s in range(nseq)]
            r_ptr = builder.inttoptr(r, scalar_ptr)
            acc = [[[cgutils.alloca_once(builder, vec) for _ in range(vectors)]
                    for _ in range(halves)] for _ in range(nseq)]
            zero = ir.Constant(vec, [0.0] * lanes)
            for s in range(nseq):
                for v in range(vectors):
                    for half in range(halves):
                        builder.store(zero, acc[s][half][v])
            undef = ir.Constant(vec, ir.Undefined)
            splat = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)

            if prefetch:
                pf, pfstep = args[9:]
                byte_ptr, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
                llvm_prefetch = cgutils.get_or_insert_function(
                    builder.module, ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32]),
                    "llvm.prefetch.p0")
                # read, locality 1 (prefetcht2: into L2 here), data
                hints = [ir.Constant(i32, 0), ir.Constant(i32, 1), ir.Constant(i32, 1)]

            def add_row(j, half):
                row = builder.gep(r_ptr, [builder.mul(j, ldr)])
                w = [builder.load(vector_at(row, v), align=size) for v in range(vectors)]
                if prefetch:
                    line = builder.add(pf, builder.mul(j, pfstep))
                    builder.call(llvm_prefetch, [builder.inttoptr(line, byte_ptr)] + hints)
                for s in range(nseq):
                    xj = builder.load(builder.gep(xs[s], [builder.mul(j, incx)]))
                    xv = builder.shuffle_vector(
                        builder.insert_element(undef, xj, ir.Constant(ir.IntType(32), 0)),
                        undef, splat)
                    for v in range(vectors):
                        a = acc[s][half][v]
                        builder.store(builder.call(fmuladd, [w[v], xv, builder.load(a)]), a)

            with cgutils.for_range(builder, builder.sdiv(K, two)) as loop:
                j = builder.mul(loop.index, two)
                add_row(j, 0)
                add_row(builder.add(j, one), halves - 1)
            with builder.if_then(builder.icmp_signed("!=", builder.srem(K, two),
                                                     ir.Constant(word, 0))):
                add_row(builder.sub(K, one), 0)
            for s in range(nseq):
                for v in range(vectors):
                    total = builder.load(acc[s][0][v])
                    if halves == 2:
                        total = builder.fadd(total, builder.load(acc[s][1][v]))
                    total = builder.fadd(total, builder.load(vector_at(outs[s], v), align=size))
                    builder.store(total, vector_at(outs[s], v), align=size)
            return context.get_dummy_value()

        return sig, codegen

    if prefetch:
        @intrinsic
        def axpy_block(typingctx, like, r, ldr, x, xstep, incx, out, ostep, K, pf, pfstep):
            return typer(like)
    else:
        @intrinsic
        def axpy_block(typingctx, like, r, ldr, x, xstep, incx, out, ostep, K):
            return typer(like)
    return axpy_block


# (registers, sequences): every block of at most 16 accumulator registers
_a16_1, _a8_1, _a4_1, _a2_1, _a1_1 = (_axpy_block(v, 1) for v in (16, 8, 4, 2, 1))
_a8_2, _a4_2, _a2_2, _a1_2 = (_axpy_block(v, 2) for v in (8, 4, 2, 1))
_a4_3, _a2_3, _a1_3 = (_axpy_block(v, 3) for v in (4, 2, 1))
_a4_4, _a2_4, _a1_4 = (_axpy_block(v, 4) for v in (4, 2, 1))
# one sequence, rows added in order (`panel_block`)
_o4_1, _o2_1, _o1_1 = (_axpy_block(v, 1, halves=1) for v in (4, 2, 1))
# a group of sequences in a whole panel, prefetching (`panel_block`)
_p4_group = _axpy_block(4, PANEL_GROUP, prefetch=True)


@jit(inline="always")
def axpy_block(vectors, nseq, like, r, ldr, x, xstep, incx, out, ostep, K):
    """`_axpy_block` for ``nseq`` in (1, 2, 3, 4) sequences and ``vectors`` in
    (16 / nseq, ..., 2, 1) registers of like's dtype (4, 2, 1 for 3 sequences)."""
    if nseq == 4:
        if vectors == 4:
            _a4_4(like, r, ldr, x, xstep, incx, out, ostep, K)
        elif vectors == 2:
            _a2_4(like, r, ldr, x, xstep, incx, out, ostep, K)
        else:
            _a1_4(like, r, ldr, x, xstep, incx, out, ostep, K)
    elif nseq == 3:
        if vectors == 4:
            _a4_3(like, r, ldr, x, xstep, incx, out, ostep, K)
        elif vectors == 2:
            _a2_3(like, r, ldr, x, xstep, incx, out, ostep, K)
        else:
            _a1_3(like, r, ldr, x, xstep, incx, out, ostep, K)
    elif nseq == 2:
        if vectors == 8:
            _a8_2(like, r, ldr, x, xstep, incx, out, ostep, K)
        elif vectors == 4:
            _a4_2(like, r, ldr, x, xstep, incx, out, ostep, K)
        elif vectors == 2:
            _a2_2(like, r, ldr, x, xstep, incx, out, ostep, K)
        else:
            _a1_2(like, r, ldr, x, xstep, incx, out, ostep, K)
    elif vectors == 16:
        _a16_1(like, r, ldr, x, xstep, incx, out, ostep, K)
    elif vectors == 8:
        _a8_1(like, r, ldr, x, xstep, incx, out, ostep, K)
    elif vectors == 4:
        _a4_1(like, r, ldr, x, xstep, incx, out, ostep, K)
    elif vectors == 2:
        _a2_1(like, r, ldr, x, xstep, incx, out, ostep, K)
    else:
        _a1_1(like, r, ldr, x, xstep, incx, out, ostep, K)


@jit(inline="always")
def panel_block(vectors, nseq, like, r, ldr, x, xstep, out, ostep, K, pf, pfstep):
    """`_axpy_block` for ``nseq`` in (1, 2, 4) sequences and ``vectors`` in (1, 2, 3, 4)
    registers (3 as 2 + 1), x's entries contiguous, every output adding the rows in order
    (`matvec.panels_axpy`). PANEL_GROUP sequences in 4 registers prefetch the line at
    pf + j pfstep with each row j unless pfstep is 0; the other blocks ignore pf and
    pfstep."""
    if vectors == 4:
        if nseq == PANEL_GROUP and pfstep:
            _p4_group(like, r, ldr, x, xstep, 1, out, ostep, K, pf, pfstep)
        elif nseq == 4:
            _a4_4(like, r, ldr, x, xstep, 1, out, ostep, K)
        elif nseq == 2:
            _a4_2(like, r, ldr, x, xstep, 1, out, ostep, K)
        else:
            _o4_1(like, r, ldr, x, xstep, 1, out, ostep, K)
        return
    if vectors & 2:
        if nseq == 4:
            _a2_4(like, r, ldr, x, xstep, 1, out, ostep, K)
        elif nseq == 2:
            _a2_2(like, r, ldr, x, xstep, 1, out, ostep, K)
        else:
            _o2_1(like, r, ldr, x, xstep, 1, out, ostep, K)
    if vectors & 1:
        skip = (vectors & 2) * VECTOR_BYTES
        if nseq == 4:
            _a1_4(like, r + skip, ldr, x, xstep, 1, out + skip, ostep, K)
        elif nseq == 2:
            _a1_2(like, r + skip, ldr, x, xstep, 1, out + skip, ostep, K)
        else:
            _o1_1(like, r + skip, ldr, x, xstep, 1, out + skip, ostep, K)


@jit(inline="always")
def lanes(a):
    """Entries of a's dtype per vector register."""
    return VECTOR_BYTES // a.itemsize


@intrinsic
def _transpose_tile(typingctx, like, src, lds, dst, ldd):
    """dst[j, i] = src[i, j] for a w x w tile, w the register width in like's dtype.

    src and dst are addresses of the tiles' first entries, lds and ldd their row
    strides in elements. The w rows are loaded into registers and interleaved pairwise
    log2(w) times (row i with row i + w/2), which leaves the columns in the registers.
    """
    sig = types.void(like, types.intp, types.intp, types.intp, types.intp)
    double = like.dtype == types.float64
    scalar = ir.DoubleType() if double else ir.FloatType()
    size = 8 if double else 4
    w = VECTOR_BYTES // size
    vec = ir.VectorType(scalar, w)
    low = ir.Constant(ir.VectorType(ir.IntType(32), w),
                      [k // 2 + (w if k % 2 else 0) for k in range(w)])
    high = ir.Constant(ir.VectorType(ir.IntType(32), w),
                       [w // 2 + k // 2 + (w if k % 2 else 0) for k in range(w)])

    def codegen(context, builder, signature, args):
        _, src, lds, dst, ldd = args
        word = src.type

        def row(base, stride, i):
            address = builder.add(base, builder.mul(stride, ir.Constant(word, i * size)))
            return builder.inttoptr(address, vec.as_pointer())

        rows = [builder.load(row(src, lds, i), align=size) for i in range(w)]
        for _ in range(w.bit_length() - 1):
            half = w // 2
            mixed = []
            for i in range(half):
                mixed.append(builder.shuffle_vector(rows[i], rows[i + half], low))
                mixed.append(builder.shuffle_vector(rows[i], rows[i + half], high))
            rows = mixed
        for i in range(w):
            builder.store(rows[i], row(dst, ldd, i), align=size)
        return context.get_dummy_value()

    return sig, codegen


@jit(inline="always")
def transpose_tile(like, src, lds, dst, ldd):
    """One register-width square tile of a transpose (`_transpose_tile`)."""
    _transpose_tile(like, src, lds, dst, ldd)
