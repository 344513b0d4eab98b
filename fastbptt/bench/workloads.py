"""The fixed workloads W1 ... W5: every suite and table names them this way.

All take integer token ids in and softmax cross-entropy out (``loss="softmax_ce"``), with
no biases; one call is the forward pass, the summed loss and every gradient.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

__all__ = ["Workload", "WORKLOADS", "make_data", "relu_margin"]


class Workload(NamedTuple):
    """One benchmark problem: B sequences of T token ids from L symbols, H hidden, C classes."""

    name: str
    B: int
    T: int
    L: int
    H: int
    C: int
    activation: str
    truncate: Optional[int]         # None = full BPTT; else per-output windows (stride 1)
    dtype: str
    seed: int = 0                   # make_data's default seed

    def options(self):
        """Keyword arguments of `fastbptt.bptt` (and of `fastbptt.reference.bptt`)."""
        return dict(truncate=self.truncate, stride=1, activation=self.activation,
                    loss="softmax_ce")

    @property
    def flops(self):
        """Floating-point operations of one call, counting a multiply-add as 2.

        Full BPTT: 2·B·T·(3·H² + 3·H·C) — the recurrence W h_{t-1} forward, and Wᵀδ and
        dW backward, are 3·H² multiply-adds per step; V h_t, Vᵀe_t and dV are 3·H·C.
        truncate=k: 2·B·T·((k+1)·H² + 3·H·C) — the forward W h_{t-1}, k−1 products by W
        carrying the errors back through the k-step windows (lag-major, SPEC.md §5) and
        one dW = Δᵀ H_prev: (k+1)·H² per step.
        The input projection (a gather for token ids) and the softmax are not counted.
        """
        H, C = self.H, self.C
        per_step = (3 if self.truncate is None else self.truncate + 1) * H * H + 3 * H * C
        return 2 * self.B * self.T * per_step

    def describe(self):
        window = "full" if self.truncate is None else f"truncate={self.truncate}"
        return (f"B={self.B} T={self.T} ids L={self.L} H={self.H} C={self.C} "
                f"{self.activation} {window} {self.dtype}")


WORKLOADS = {w.name: w for w in [
    Workload("W1", 1, 100, 65, 128, 65, "sigmoid", 10, "float64"),
    Workload("W2", 1, 100, 65, 128, 65, "tanh", None, "float32"),
    Workload("W3", 32, 100, 65, 128, 65, "tanh", None, "float32"),
    Workload("W4", 32, 100, 65, 128, 65, "tanh", 10, "float32"),
    # seed 203: no ReLU pre-activation within 1.2e-7 of 0 (6x float32's rounding of them),
    # so every float32 implementation takes the same side of every kink; see relu_margin.
    Workload("W5", 32, 50, 1024, 1024, 16, "relu", None, "float32", seed=203),
]}


def make_data(workload, seed=None):
    """Seeded ``(x, y, params)`` for a workload (``seed`` defaults to ``workload.seed``).

    x and y are int64 token ids, (T,) when B = 1 (one sequence) and (B, T) otherwise;
    params is a `fastbptt.Params` without biases, of the workload's dtype.
    """
    from ..params import init_params

    if seed is None:
        seed = workload.seed

    rng = np.random.default_rng(seed)
    w = workload
    shape = (w.T,) if w.B == 1 else (w.B, w.T)
    x = rng.integers(0, w.L, size=shape)
    y = rng.integers(0, w.C, size=shape)
    params = init_params(w.L, w.H, w.C, bias=False, dtype=np.dtype(w.dtype), seed=rng)
    return x, y, params


def relu_margin(x, params):
    """min |a_t| over all pre-activations, computed in float64 (ReLU workloads).

    ReLU's derivative jumps at a = 0: where float32 rounding (~2e-8 for W5) puts a
    pre-activation on the other side of 0 than another implementation does, their
    gradients differ by O(1) in the entries reached through it. W5's seed keeps every
    |a_t| well above that rounding, so the peers' agreement check is meaningful.
    """
    U, W = (np.asarray(p, np.float64) for p in params[:2])
    ids = np.atleast_2d(x)
    h = np.zeros((ids.shape[0], W.shape[0]))
    margin = np.inf
    for t in range(ids.shape[1]):
        a = U[:, ids[:, t]].T + h @ W.T
        margin = min(margin, float(np.abs(a).min()))
        h = np.maximum(a, 0)
    return margin
