"""The parameter containers: the package's own `Params`, plain dicts and tuples.

`grad` returns gradients in the structure it was given, so this module knows how to
read each structure into a `Params` and how to build the same structure back.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

__all__ = ["Params", "init_params"]

REQUIRED = ("U", "W", "V")
OPTIONAL = ("b", "c")
NAMES = REQUIRED + OPTIONAL


class Params(NamedTuple):
    """Weights of an Elman RNN (SPEC.md §1).

    U is (H, L) input to hidden, W is (H, H) hidden to hidden, V is (C, H) hidden to
    output; the biases b (H,) and c (C,) are optional (None means no bias).
    """

    U: np.ndarray
    W: np.ndarray
    V: np.ndarray
    b: Optional[np.ndarray] = None
    c: Optional[np.ndarray] = None

    @property
    def sizes(self) -> tuple[int, int, int]:
        """(input_size, hidden_size, output_size) = (L, H, C)."""
        H, L = np.shape(self.U)
        return L, H, np.shape(self.V)[0]


def init_params(input_size, hidden_size, output_size, *, bias=True, dtype=np.float32, seed=None):
    """New parameters drawn like PyTorch's ``nn.RNN`` and ``nn.Linear``.

    Every entry is uniform in [-1/sqrt(H), 1/sqrt(H)] with H = hidden_size, so the
    recurrence starts neither saturated nor vanishing.

    Parameters
    ----------
    input_size, hidden_size, output_size : int
        L (vocabulary or feature count), H, and C (classes or output features).
    bias : bool
        Include the biases b and c (default) or set them to None.
    dtype : float32 or float64
        The compute dtype of every call that uses these parameters.
    seed : int, numpy.random.Generator or None
        Seed for reproducible weights.
    """
    sizes = {"input_size": input_size, "hidden_size": hidden_size, "output_size": output_size}
    for name, value in sizes.items():
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int; got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be at least 1; got {value}")
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64; got {dtype}")
    rng = np.random.default_rng(seed)
    scale = 1.0 / np.sqrt(hidden_size)

    def draw(*shape):
        return rng.uniform(-scale, scale, size=shape).astype(dtype)

    L, H, C = input_size, hidden_size, output_size
    U, W, V = draw(H, L), draw(H, H), draw(C, H)
    if not bias:
        return Params(U, W, V)
    return Params(U, W, V, draw(H), draw(C))


def read_structure(params):
    """Split ``params`` into a `Params` of raw values and a function that rebuilds the structure.

    Accepts a `Params`, a dict with keys U, W, V and optionally b, c (rebuilt in the
    caller's key order), or a tuple or list (U, W, V) or (U, W, V, b, c) (rebuilt as the
    same type; other tuple subclasses come back as plain tuples).
    """
    if isinstance(params, Params):
        return params, lambda g: g
    if isinstance(params, dict):
        missing = [k for k in REQUIRED if k not in params]
        if missing:
            raise ValueError(
                f"params is missing key(s) {', '.join(map(repr, missing))}; a params dict "
                f"needs 'U', 'W', 'V' and may have 'b', 'c' (got keys {sorted(map(str, params))})"
            )
        extra = [k for k in params if k not in NAMES]
        if extra:
            raise ValueError(
                f"params has unknown key(s) {', '.join(map(repr, extra))}; valid keys are "
                "'U', 'W', 'V', 'b', 'c'"
            )
        keys = list(params)                       # the caller's order
        value = Params(*(params.get(k) for k in NAMES))
        return value, lambda g: {k: getattr(g, k) for k in keys}
    if isinstance(params, (tuple, list)):
        kind = type(params) if type(params) in (tuple, list) else tuple
        if len(params) in (3, 5):
            return Params(*params), lambda g: kind(g[:len(params)])
        raise ValueError(
            f"params as a sequence must be (U, W, V) or (U, W, V, b, c); got {len(params)} items"
        )
    raise TypeError(
        "params must be a fastbptt.Params, a dict with keys 'U', 'W', 'V' (and optionally "
        f"'b', 'c') or a tuple (U, W, V[, b, c]); got {type(params).__name__}"
    )
