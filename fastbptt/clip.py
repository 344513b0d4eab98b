"""Gradient clipping, in place: by global norm, element by element, or both."""
from __future__ import annotations

import math

import numpy as np

from .params import leaves

__all__ = ["clip_grads", "global_norm"]


def _arrays(grads):
    return list(leaves(grads).values())


def global_norm(grads):
    """sqrt of the sum of squares of every entry of every gradient (a Python float)."""
    total = 0.0
    for a in _arrays(grads):
        flat = a.reshape(-1)
        total += float(np.dot(flat, flat))
    return math.sqrt(total)


def clip_grads(grads, *, max_norm=None, max_value=None):
    """Clip ``grads`` (any params structure) in place; return their global norm before.

    max_norm : float, optional
        When the global norm exceeds it, every gradient is scaled by max_norm / norm.
    max_value : float, optional
        Each entry is then clipped to [-max_value, max_value] (min-char-rnn uses 5).

    Both may be given: the norm scaling comes first, then the element-wise clip. The
    returned norm is always that of the gradients as passed.
    """
    arrays = _arrays(grads)
    for a in arrays:
        if not a.flags.writeable:
            raise ValueError("clip_grads clips in place; got a read-only gradient array")
    norm = global_norm(grads)
    if max_norm is not None:
        if not max_norm > 0:
            raise ValueError(f"max_norm must be positive; got {max_norm}")
        if norm > max_norm:
            for a in arrays:
                a *= a.dtype.type(max_norm / norm)
    if max_value is not None:
        if not max_value > 0:
            raise ValueError(f"max_value must be positive; got {max_value}")
        for a in arrays:
            np.clip(a, -max_value, max_value, out=a)
    return norm
