"""NumPy products whose floating-point flags come from OpenBLAS.

An OpenBLAS kernel can leave the FE_INVALID flag raised after a product of finite arrays,
from work on memory outside the result (numpy#24067, OpenBLAS#1924). NumPy then warns
"invalid value encountered in matmul" about a result that is finite and exact, and
whether it happens depends on memory left by earlier calls: it comes and goes within one
process. Code that multiplies with ``@`` runs under `ignore_harmless_flags`, which
ignores that flag: a real invalid operation still shows in the values, as NaN, and the
package refuses non-finite inputs before any of it runs (``check_finite``).

It also ignores underflow: e^-800 rounds to 0, and a product of tiny numbers to a
subnormal, which are the right results here, and a caller's ``np.seterr(all="raise")``
must not turn them into errors.
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["ignore_harmless_flags"]


def ignore_harmless_flags(function):
    """``function`` run under ``np.errstate(invalid="ignore", under="ignore")`` (module
    docstring)."""
    @functools.wraps(function)
    def ignoring(*args, **kwargs):
        with np.errstate(invalid="ignore", under="ignore"):
            return function(*args, **kwargs)
    return ignoring
