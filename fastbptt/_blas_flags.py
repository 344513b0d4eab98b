"""NumPy products whose floating-point flags come from OpenBLAS.

An OpenBLAS kernel can leave the FE_INVALID flag raised after a product of finite arrays,
from work on memory outside the result (numpy#24067, OpenBLAS#1924). NumPy then warns
"invalid value encountered in matmul" about a result that is finite and exact, and
whether it happens depends on memory left by earlier calls: it comes and goes within one
process. Code that multiplies with ``@`` runs under `ignore_invalid_flag`, which ignores
that flag alone: a real invalid operation still shows in the values, as NaN, and the
package refuses non-finite inputs before any of it runs (``check_finite``).
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["ignore_invalid_flag"]


def ignore_invalid_flag(function):
    """``function`` run under ``np.errstate(invalid="ignore")`` (module docstring)."""
    @functools.wraps(function)
    def ignoring(*args, **kwargs):
        with np.errstate(invalid="ignore"):
            return function(*args, **kwargs)
    return ignoring
