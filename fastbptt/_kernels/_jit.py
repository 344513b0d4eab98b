"""The one place that sets Numba options for every kernel.

- ``cache``: compiled code is stored on disk (in ``__pycache__`` beside this package, or
  under ``NUMBA_CACHE_DIR``); set ``FASTBPTT_CACHE=0`` to turn it off.
- ``nogil``: callers' threads run kernels in parallel.
- ``fastmath``: only flags that keep NaN and inf meaningful (no ``nnan``/``ninf``), so an
  exploding gradient stays visible instead of being optimised away.
- ``error_model="numpy"``: division follows IEEE rules instead of raising, as in NumPy.
"""
import os

from numba import njit

CACHE = os.environ.get("FASTBPTT_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")
FASTMATH = frozenset({"contract", "nsz"})


def jit(func=None, **overrides):
    """``numba.njit`` with the package's options; usable bare or with overrides."""
    options = dict(cache=CACHE, nogil=True, error_model="numpy", fastmath=set(FASTMATH))
    options.update(overrides)
    if func is None:
        return lambda f: njit(**options)(f)
    return njit(**options)(func)
