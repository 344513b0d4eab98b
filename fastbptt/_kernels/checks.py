"""One-pass scans for input validation, for the common case of contiguous native arrays.

NumPy's checks (``np.isfinite(a).all()``, ``a.min()`` and ``a.max()``) take a few
microseconds each, which adds up on small problems. These take one pass; when one
reports a problem, `fastbptt._inputs` runs the NumPy check again to say where.
"""
from ._jit import FASTMATH, jit


@jit(fastmath=set(FASTMATH) | {"reassoc"})
def all_finite(a):
    """Whether every entry of the 1-D float array a is finite.

    x * 0 is 0 for finite x and NaN for inf or NaN, and a sum with a NaN stays NaN;
    reassociation lets the sum run as a vector loop (no nnan/ninf flags, so the NaN
    is kept).
    """
    s = a.dtype.type(0)
    for i in range(a.shape[0]):
        s += a[i] * 0
    return s == 0


@jit
def id_range(a):
    """(min, max) of a non-empty 1-D integer array."""
    lo = hi = a[0]
    for i in range(1, a.shape[0]):
        v = a[i]
        lo = min(lo, v)
        hi = max(hi, v)
    return lo, hi
