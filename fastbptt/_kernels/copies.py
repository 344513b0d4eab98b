"""Copies and sums between arrays, as plain loops.

Numba compiles an array-to-array slice assignment (``a[:] = b``, ``a += b``) with a
shape check whose error message formats both shapes, and that formatting machinery took
about 2 s of compile time (once per signature) against 0.06 s for the loops below. The
kernels use these instead; their shapes are right by construction.
"""
from ._jit import jit


@jit(inline="always")
def copy_row(dst, src):
    """dst[j] = src[j] for every j of dst (1-D)."""
    for j in range(dst.shape[0]):
        dst[j] = src[j]


@jit(inline="always")
def add_row(dst, src):
    """dst[j] += src[j] for every j of dst (1-D)."""
    for j in range(dst.shape[0]):
        dst[j] += src[j]


@jit(inline="always")
def copy_rows(dst, src):
    """dst[i, j] = src[i, j] for every entry of dst (2-D)."""
    for i in range(dst.shape[0]):
        copy_row(dst[i], src[i])


@jit(inline="always")
def add_rows(dst, src):
    """dst[i, j] += src[i, j] for every entry of dst (2-D)."""
    for i in range(dst.shape[0]):
        add_row(dst[i], src[i])


@jit(inline="always")
def zero_steps_after(A, b, start):
    """A[t, b, :] = 0 for t >= start (A (T+1, B, N))."""
    for t in range(start, A.shape[0]):
        row = A[t, b]
        for j in range(row.shape[0]):
            row[j] = 0


@jit(inline="always")
def longest(lengths):
    """max(lengths), 0 for none: a loop, which compiles in a fraction of np.max's time."""
    m = 0
    for b in range(lengths.shape[0]):
        m = max(m, lengths[b])
    return m
