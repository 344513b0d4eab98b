"""Text from a trained character model: prime it, then draw characters one at a time."""
from __future__ import annotations

import numpy as np

from ._inputs import ACTIVATIONS
from .api import forward
from .params import read_structure
from .reference import activate

__all__ = ["sample", "sample_ids"]


def _probabilities(h, V, c, temperature):
    """softmax((V h + c) / temperature) in float64.

    The largest logit is subtracted before the division, so every scaled logit is at
    most 0: a temperature so small that a difference overflows (1e-320) gives -inf,
    probability 0, and the draw is greedy, instead of inf - inf = NaN.
    """
    logits = V.astype(np.float64) @ h.astype(np.float64)
    if c is not None:
        logits += c
    logits -= logits.max()
    with np.errstate(over="ignore"):
        logits /= temperature
    p = np.exp(logits)
    return p / p.sum()


def sample_ids(params, prime_ids, n, *, temperature=1.0, rng=None, activation="tanh",
               h0=None):
    """``n`` ids drawn after the ids ``prime_ids`` (may be empty), and the final state.

    The prime runs through `fastbptt.forward`; each next id is drawn from
    softmax(o / temperature) by inverting the cumulative distribution at ``rng.random()``,
    so the same generator state gives the same ids.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be positive; got {temperature}")
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"the number of ids to draw must be an int of at least 0; got {n!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose from "
                         f"{', '.join(ACTIVATIONS)}")
    rng = np.random.default_rng(rng)
    p, _ = read_structure(params)
    if not all(np.isfinite(a).all() for a in p if a is not None):
        raise ValueError("params hold a non-finite value (NaN or inf): a model that "
                         "diverged cannot be sampled")
    code = ACTIVATIONS[activation]
    L, H, C = p.sizes
    h = np.zeros(H, p.U.dtype) if h0 is None else np.asarray(h0, p.U.dtype)
    prime_ids = np.asarray(prime_ids, np.int64).reshape(-1)
    if prime_ids.size:
        h = forward(prime_ids, p, activation=activation, h0=h).h[-1]
    out = np.empty(n, np.int64)
    b = 0 if p.b is None else p.b
    for i in range(n):
        probs = _probabilities(h, p.V, p.c, temperature)
        k = int(np.searchsorted(np.cumsum(probs), rng.random() * probs.sum(), side="right"))
        out[i] = k = min(k, C - 1)
        h = activate(p.U[:, k] + p.W @ h + b, code).astype(p.U.dtype)
    return out, h


def sample(params, codec, *, prime="", chars=200, temperature=1.0, rng=None,
           activation="tanh"):
    """``chars`` characters continuing ``prime`` (the prime itself is not included)."""
    ids, _ = sample_ids(params, codec.encode(prime), chars, temperature=temperature,
                        rng=rng, activation=activation)
    return codec.decode(ids)
