"""Before a peer is timed, its loss and gradients are checked against fastbptt's.

Each difference is relative to the largest entry: max |peer − fastbptt| / max |fastbptt|
per gradient (and for S3's layer output h), |Δloss| / |loss| for the loss. A peer that
disagrees is reported and not timed: a fast wrong answer is no benchmark.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .peers import as_numpy
from .stacks import grad_names

__all__ = ["Agreement", "compare", "TOLERANCE"]

# float32 sums over B·T steps in different orders drift by ~1e-5 relative; 1e-3 leaves room
TOLERANCE = {"float32": 1e-3, "float64": 1e-8}


@dataclass
class Agreement:
    peer: str
    workload: str
    tolerance: float
    errors: dict = field(default_factory=dict)      # "loss" (or "h"), "dU", ... -> relative
    against: str = "fastbptt"

    @property
    def worst(self):
        return max((v if np.isfinite(v) else np.inf for v in self.errors.values()),
                   default=np.inf)

    @property
    def ok(self):
        return bool(np.isfinite(self.worst) and self.worst <= self.tolerance)

    @property
    def worst_gradient(self):
        """``(name, relative error)`` of the gradient farthest from the reference."""
        grads = {k: v for k, v in self.errors.items() if k not in ("loss", "h")}
        name = max(grads, key=lambda k: grads[k] if np.isfinite(grads[k]) else np.inf)
        return name, grads[name]

    def describe(self):
        parts = ", ".join(f"{k} {v:.1e}" for k, v in self.errors.items())
        verdict = "agrees" if self.ok else "DISAGREES: not timed"
        return (f"check {self.workload} {self.peer} vs {self.against}: {parts} "
                f"(tolerance {self.tolerance:.0e}): {verdict}")


def relative_error(actual, expected):
    """max |actual - expected| over max |expected| (inf when the shapes differ)."""
    if actual.shape != expected.shape:
        return np.inf
    scale = np.abs(expected).max(initial=0.0) or 1.0
    return float(np.abs(actual - expected).max(initial=0.0) / scale)


def compare(peer, workload, outcome, expected, against="fastbptt"):
    """`Agreement` of a peer's ``(loss, grads)`` with the reference's on a workload."""
    loss, grads = as_numpy(outcome)
    loss0, grads0 = as_numpy(expected)
    errors = {"h": relative_error(loss, loss0)} if workload.kind == "layer" else {
        "loss": float(abs(loss - loss0) / (abs(loss0) or 1.0))}
    names = grad_names(workload)
    if len(grads) != len(names) or len(grads0) != len(names):
        raise ValueError(f"{workload.name} has {len(names)} gradients; {peer} returned "
                         f"{len(grads)} and {against} {len(grads0)}")
    for name, g, g0 in zip(names, grads, grads0):
        errors[name] = relative_error(g, g0)
    return Agreement(peer, workload.name, TOLERANCE[workload.dtype], errors, against)
