"""The one place that sets Numba options for every kernel.

- ``cache``: compiled code is stored on disk (in ``__pycache__`` beside this package, or
  under ``NUMBA_CACHE_DIR``); set ``FASTBPTT_CACHE=0`` to turn it off. Where Numba finds
  no writable place for it (a read-only install and no usable ``NUMBA_CACHE_DIR``), the
  kernels compile in memory instead, with one warning per process.
- ``nogil``: callers' threads run kernels in parallel.
- ``fastmath``: only flags that keep NaN and inf meaningful (no ``nnan``/``ninf``), so an
  exploding gradient stays visible instead of being optimised away.
- ``error_model="numpy"``: division follows IEEE rules instead of raising, as in NumPy.
"""
import os
import warnings

from numba import njit

CACHE = os.environ.get("FASTBPTT_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")
FASTMATH = frozenset({"contract", "nsz"})
_warned = []


class CacheUnavailableWarning(RuntimeWarning):
    """Numba can write its cache nowhere: kernels compile on every new process."""


def _without_cache(func, options, error):
    if not _warned:
        _warned.append(True)
        warnings.warn(
            f"fastbptt: Numba cannot cache compiled kernels ({error}); they will be compiled "
            "in every new process. Set NUMBA_CACHE_DIR to a writable folder to keep them.",
            CacheUnavailableWarning, stacklevel=4)
    return njit(**dict(options, cache=False))(func)


def jit(func=None, **overrides):
    """``numba.njit`` with the package's options; usable bare or with overrides."""
    options = dict(cache=CACHE, nogil=True, error_model="numpy", fastmath=set(FASTMATH))
    options.update(overrides)

    def build(f):
        try:
            return njit(**options)(f)
        except RuntimeError as error:
            if options["cache"] and "cannot cache" in str(error):
                return _without_cache(f, options, error)
            raise

    return build if func is None else build(func)
