"""Matrix products on row-major views through SciPy's BLAS, callable from kernels.

``np.dot`` in Numba takes only contiguous arrays. The kernels keep their arrays
feature-major, (H, T, B), so that one step is an H x B block and all steps together an
H x (T B) matrix, or for narrow batches time-major, (T, B, N) with N >= H padding; all
are views whose rows are strided. `gemm` takes such views (unit stride within a row, any
stride between rows, either one transposed) and calls sgemm/dgemm directly.
"""
import ctypes
import importlib.machinery
import importlib.util
import os
import sys

import llvmlite.binding as llvm
import numpy as np
from numba import types

from ._jit import FASTMATH, jit
from .alloc import vector
from .simd import lanes, transpose_tile

_MODULE = "scipy.linalg.cython_blas"
_loaded = []


def cython_blas():
    """SciPy's ``scipy.linalg.cython_blas`` module, without importing ``scipy.linalg``.

    That package's ``__init__`` costs 0.1 to 0.2 s (it imports numpy.ma, numpy.f2py and
    more); the extension module alone takes milliseconds. It is loaded from its file and
    left out of ``sys.modules``, so that a later ``import scipy.linalg`` imports it the
    usual way and binds it as that package's attribute (Cython hands out the same module
    object).
    """
    module = sys.modules.get(_MODULE)
    if module is not None:
        return module
    if _loaded:
        return _loaded[0]
    scipy = importlib.util.find_spec("scipy")
    folders = (scipy.submodule_search_locations or ()) if scipy is not None else ()
    found = [path for folder in folders for suffix in importlib.machinery.EXTENSION_SUFFIXES
             for path in [os.path.join(folder, "linalg", "cython_blas" + suffix)]
             if os.path.isfile(path)]
    if found:
        spec = importlib.util.spec_from_file_location(_MODULE, found[0])
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        finally:
            sys.modules.pop(_MODULE, None)
    else:
        import scipy.linalg.cython_blas as module
    _loaded.append(module)
    return module


def before_compiles():
    """Import Numba's array module as `cython_blas` left it out: with that module in
    ``sys.modules`` while it runs.

    Numba's array module imports ``scipy.linalg.cython_blas`` to check for BLAS, and
    Numba imports it before its first compile in a process (`_jit._Compiler` calls this
    first). A process whose kernels all come from the disk cache never imports it (0.03 s
    of ``import fastbptt`` when the import brought it in); a compile finds SciPy's module
    here instead of importing ``scipy.linalg``.
    """
    if "numba.np.arraymath" in sys.modules:
        return
    module = cython_blas()
    placed = _MODULE not in sys.modules
    if placed:
        sys.modules[_MODULE] = module
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        if placed and sys.modules.get(_MODULE) is module:
            del sys.modules[_MODULE]


# PyCapsule_GetName and PyCapsule_GetPointer with their own prototypes (ctypes.pythonapi's
# shared function objects are left as they are).
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(
    ("PyCapsule_GetName", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def _address(name):
    """The address of BLAS routine ``name`` exported by SciPy's cython_blas."""
    capsule = cython_blas().__pyx_capi__[name]
    return _capsule_pointer(capsule, _capsule_name(capsule))


# Compiled kernels refer to BLAS by symbol name, bound here in every process, so they
# can be cached on disk (a ctypes function pointer would pin them to one process).
# Every argument of the Fortran interface is a pointer; they are declared as
# addresses (intp), so one declaration serves arrays of any layout.
for _name in ("sgemm", "dgemm"):
    llvm.add_symbol(f"fastbptt_{_name}", _address(_name))
_SIGNATURE = types.void(*([types.intp] * 13))
_sgemm = types.ExternalFunction("fastbptt_sgemm", _SIGNATURE)
_dgemm = types.ExternalFunction("fastbptt_dgemm", _SIGNATURE)

_N, _T = 78, 84    # ord("N"), ord("T")


@jit
def scratch(dtype_like):
    """The small buffers `gemm` passes by reference: 8 ints, 2 scalars, 2 flags."""
    return vector(8, np.int32), vector(2, dtype_like.dtype), vector(2, np.uint8)


@jit(inline="always")
def _leading(a):
    """Leading dimension of a row-major view: its row stride, at least its width. A view
    of one row is C-contiguous to NumPy whatever its row stride (``V[::10**10]``), which
    addresses nothing and may be beyond the BLAS's integers: its width is taken."""
    if a.shape[0] <= 1:
        return max(a.shape[1], 1)
    ld = a.strides[0] // a.itemsize
    return max(ld, a.shape[1], 1)


@jit
def _call_gemm(a, b, c, buffers):
    """The BLAS call of `gemm`, its sizes, leading dimensions, scalars and flags already
    in ``buffers``, the matrices given by address: one function for every layout of the
    views, compiled once per dtype."""
    ints, scalars, flags = buffers
    i, f, s = ints.ctypes.data, flags.ctypes.data, scalars.ctypes.data
    args = (f, f + 1, i, i + 4, i + 8, s, b, i + 12, a, i + 16, s + scalars.itemsize, c,
            i + 20)
    if scalars.itemsize == 4:
        _sgemm(*args)
    else:
        _dgemm(*args)


@jit(inline="always")
def gemm(a, b, c, alpha, beta, trans_a, trans_b, buffers):
    """c = alpha * op(a) @ op(b) + beta * c for row-major 2-D views.

    op(a) is a.T when trans_a. Rows of every view must be contiguous, or for a its
    columns (a the transpose of a row-major view, as W.T is: passed to the BLAS with
    the other flag). buffers comes from `scratch(c)`. Row-major C is column-major C^T,
    so this calls gemm(op_b, op_a, n, m, k, alpha, b, ldb, a, lda, beta, c, ldc). For
    k = 0 the BLAS sets c = beta c (zero for beta = 0), as the reference BLAS defines it.

    The BLAS call itself is `_call_gemm`, not inlined: its one compiled body per dtype
    serves every call site and layout (inlined, each site's copy cost compile time).
    """
    m, n = c.shape
    k = a.shape[0] if trans_a else a.shape[1]
    if m == 0 or n == 0:
        return
    ints, scalars, flags = buffers
    ints[0] = n
    ints[1] = m
    ints[2] = k
    ints[3] = _leading(b)
    ints[5] = _leading(c)
    scalars[0] = alpha
    scalars[1] = beta
    flags[0] = _T if trans_b else _N
    if a.shape[1] > 1 and a.strides[1] != a.itemsize:
        ints[4] = max(a.strides[1] // a.itemsize, a.shape[0])     # a.T is row-major
        flags[1] = _N if trans_a else _T
    else:
        ints[4] = _leading(a)
        flags[1] = _T if trans_a else _N
    _call_gemm(a.ctypes.data, b.ctypes.data, c.ctypes.data, buffers)


# Rows of a per sweep of `transpose_into`'s tiles: one tile's rows (16 float32) wrote each
# row of out 64 bytes a visit, and a visit to a new page each. Milliseconds, float32, one
# tile's rows against 128: 1024 x 4096 3.47 / 2.48, 4096 x 1024 3.42 / 2.14, 1024 x 1024
# 0.74 / 0.38, 3200 x 256 0.13 / 0.13; float64 1024 x 4096 6.01 / 4.43.
TRANSPOSE_ROWS = 128
# From this size on (bytes, float32 and float64) the sweeps go TRANSPOSE_COLUMNS columns
# at a time, a block of a of at most 32 KB each. Against whole rows, in turns in one
# process: float32 3072 x 1024 0.82, 1024 x 4096 0.74, 4096 x 1024 0.42 to 0.74 of the
# time, 3232 x 256 (3.3 MB) 1.25; float64 3072 x 1024 0.54 to 0.70, 1024 x 4096 0.57,
# 512 x 512 0.59, 768 x 256 (1.5 MB) 0.58, 1024 x 64 (0.5 MB) 1.34, 256 x 256 1.38.
TRANSPOSE_BLOCKED = (4 << 20, 1 << 20)
TRANSPOSE_COLUMNS = 32


@jit
def transpose_into(a, out):
    """out <- a.T for 2-D float arrays, square tiles at a time through vector registers.

    Tiles are one register wide (16 float32, 8 float64; `simd.transpose_tile`) when
    both arrays' rows are contiguous, and are copied entry by entry otherwise; the
    edges left over are copied entry by entry. The tiles go TRANSPOSE_ROWS rows of a at
    a time, so that each visit to a row of out writes that many entries, not one tile's,
    and for a large a (TRANSPOSE_BLOCKED) TRANSPOSE_COLUMNS columns at a time, row by row
    of tiles.
    """
    rows, cols = a.shape
    if out.shape[0] != cols or out.shape[1] != rows:
        raise ValueError("transpose_into: out must have a's shape reversed")
    size = a.itemsize
    tile = lanes(a)
    full_r, full_c = rows - rows % tile, cols - cols % tile
    simd = a.strides[1] == size and out.strides[1] == size
    lda, ldo = a.strides[0] // size, out.strides[0] // size
    blocked = simd and rows * cols * size >= TRANSPOSE_BLOCKED[size // 8]
    for r0 in range(0, full_r, TRANSPOSE_ROWS):
        r1 = min(r0 + TRANSPOSE_ROWS, full_r)
        if blocked:
            for c0 in range(0, full_c, TRANSPOSE_COLUMNS):
                c1 = min(c0 + TRANSPOSE_COLUMNS, full_c)
                for i0 in range(r0, r1, tile):
                    for j0 in range(c0, c1, tile):
                        transpose_tile(a, a.ctypes.data + (i0 * lda + j0) * size, lda,
                                       out.ctypes.data + (j0 * ldo + i0) * size, ldo)
            continue
        for j0 in range(0, full_c, tile):
            for i0 in range(r0, r1, tile):
                if simd:
                    transpose_tile(a, a.ctypes.data + (i0 * lda + j0) * size, lda,
                                   out.ctypes.data + (j0 * ldo + i0) * size, ldo)
                else:
                    for j in range(j0, j0 + tile):
                        for i in range(i0, i0 + tile):
                            out[j, i] = a[i, j]
    for i in range(full_r, rows):
        for j in range(cols):
            out[j, i] = a[i, j]
    for j in range(full_c, cols):
        for i in range(full_r):
            out[j, i] = a[i, j]


# Sums over more steps than this run in float64 and are rounded once; fewer, in the
# dtype (where a float32 sum's error, at most a few thousand roundings, stays near the
# matrix products': at B T = 1.28 M steps a float32 dU lost 1.2e-5 relative against
# dW's 1.9e-6, and 5e-8 summed in float64; below it, the float64 sum only cost time).
EXACT_SUMS = 4096


@jit(fastmath=set(FASTMATH) | {"reassoc"})
def row_sums(m, out):
    """out[i] = sum of row i of a 2-D array, each sum vectorized (reassociated), in
    float64 for rows of more than EXACT_SUMS entries (steps: dc and, feature-major, db;
    a float32 dc near a fitted head, where the steps' errors cancel, lost 10 times
    PyTorch's accuracy over 2.5 M steps)."""
    for i in range(m.shape[0]):
        row = m[i]
        if row.shape[0] <= EXACT_SUMS:
            s = np.float32(0)
            for j in range(row.shape[0]):
                s += row[j]
            out[i] = s
        else:
            exact = 0.0
            for j in range(row.shape[0]):
                exact += np.float64(row[j])
            out[i] = exact
