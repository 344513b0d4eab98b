"""Gradient clipping, in place: by global norm, element by element, or both."""
from __future__ import annotations

import math

import numpy as np

from ._masks import refuse_masked
from .params import leaves

__all__ = ["clip_grads", "global_norm"]


def _arrays(grads):
    """The gradient arrays by name, each a float NumPy array (clipped in place)."""
    arrays = leaves(grads, "grads")
    for name, a in arrays.items():
        refuse_masked(f"grads {name}", a)
        if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
            kind = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
            raise TypeError(f"grads {name} must be a float NumPy array (as fastbptt.grad "
                            f"returns them); got {kind}")
    return arrays


def global_norm(grads):
    """sqrt of the sum of squares of every entry of every gradient (a Python float).

    Each array's sum runs in its dtype; one whose squares overflow it (float32 entries
    beyond about 1e19, float64 beyond about 1e154) is summed again in float64, scaled by
    its largest entry, so that only entries that are themselves inf or NaN give an inf or
    NaN norm, and a norm beyond float64's range (about 1.8e308) an inf one; likewise one
    whose squares fall below the dtype's normal numbers (float32 entries below about
    1e-19), which would give a norm of 0 or one that lost its digits."""
    top, total = _norm_parts(_arrays(grads).values())
    return top * math.sqrt(total)


# a sum of squares above this is summed again scaled: several of them still add up
_DIRECT = 2.0 ** 960


def _norm_parts(arrays):
    """(top, total), the global norm being top * sqrt(total) without overflow in either:
    top is 1 unless an array's sum of squares overflowed, and then its largest entry."""
    parts = []
    for a in arrays:
        flat = a.reshape(-1)
        with np.errstate(over="ignore", invalid="ignore",    # an overflow: summed again
                         under="ignore"):                    # tiny squares: 0, rightly
            part = float(np.dot(flat, flat))
        # summed again scaled where the squares overflow, or may have lost their digits
        # below the dtype's normal numbers (float32 entries of 1e-30: a norm of 0)
        small = float(np.finfo(a.dtype).tiny / np.finfo(a.dtype).eps)
        if not (math.isfinite(part) and small <= part <= _DIRECT):
            top = float(np.max(np.abs(flat))) if flat.size else 0.0
            if math.isfinite(top) and top > 0:                # else inf or NaN entries
                scaled = flat.astype(np.float64) / top
                parts.append((top, float(np.dot(scaled, scaled))))
                continue
        if part != 0.0:                 # all zeros: no part, whose top of 1 would scale
            parts.append((1.0, part))   # the scaled parts of tiny entries down to 0
    top = max((t for t, _ in parts), default=1.0)
    total = 0.0
    for t, part in parts:               # inf or NaN parts as they are (0 * inf is NaN)
        total += (t / top) ** 2 * part if t != top and math.isfinite(part) else part
    return top, total


def _bound(name, value):
    """None, or a number above 0 as float (TypeError or ValueError naming it)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or \
            not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number or None; got {type(value).__name__}")
    if not value > 0:
        raise ValueError(f"{name} must be positive (None: no clipping); got {value}")
    try:
        return float(value)
    except OverflowError:                       # an int beyond any float: no limit at all
        return math.inf


def clip_grads(grads, *, max_norm=None, max_value=None):
    """Clip ``grads`` (any params structure) in place; return their global norm before.

    max_norm : float, optional
        When the global norm exceeds it, every gradient is scaled by max_norm / norm.
    max_value : float, optional
        Each entry is then clipped to [-max_value, max_value] (min-char-rnn uses 5).

    Both may be given: the norm scaling comes first, then the element-wise clip. The
    returned norm is always that of the gradients as passed.
    """
    max_norm, max_value = _bound("max_norm", max_norm), _bound("max_value", max_value)
    named = _arrays(grads)
    arrays = list(named.values())
    for name, a in named.items():
        if not a.flags.writeable and (max_norm is not None or max_value is not None):
            raise ValueError(f"grads {name} is read-only, and clip_grads clips in place; "
                             f"give it writeable arrays (np.array(...) copies)")
    top, total = _norm_parts(arrays)
    norm = top * math.sqrt(total)
    if max_norm is not None and norm > max_norm:
        factor = max_norm / top / math.sqrt(total)
        with np.errstate(under="ignore"):
            for a in arrays:
                if factor >= np.finfo(a.dtype).tiny:
                    a *= a.dtype.type(factor)
                else:       # beyond the dtype's normal numbers: in two steps, in float64
                    a[...] = a / np.float64(top) * np.float64(max_norm / math.sqrt(total))
    if max_value is not None:
        for a in arrays:
            with np.errstate(over="ignore"):    # a bound beyond the dtype's range: inf
                np.clip(a, -max_value, max_value, out=a)
    return norm
