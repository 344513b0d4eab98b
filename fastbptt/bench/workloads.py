"""The fixed workloads: every suite and table names them this way.

- W1 ... W5: one Elman layer, token ids in, softmax cross-entropy out (the source
  documents' model).
- S1 ... S3: stacked and bidirectional Elman layers (issue 9); S3 is one layer's forward
  and vector-Jacobian product alone, with a random upstream gradient and dense inputs.
- G1 ... G5: LSTM and GRU cells, PyTorch's equations and gate order (issue 10).

All are bias-free, as W1 ... W5 always were: biases add only elementwise work, and without
them the weights mean the same to every implementation (no b_ih + b_hh split, no separate
GRU b_hn). One call is the forward pass, the summed loss and every gradient (for S3: the
layer's outputs, its weight gradients and dx).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from .stacks import GATES, draw_stack, layer_input_width

__all__ = ["Workload", "WORKLOADS", "GROUPS", "DEFAULT", "select", "make_data", "relu_margin"]


class Workload(NamedTuple):
    """One benchmark problem: B sequences of T steps, L input symbols (ids) or features
    (dense), H hidden, C classes; ``kind`` "model" adds the softmax head and summed
    cross-entropy over token-id targets, "layer" is one layer's forward and backward
    with an upstream gradient dh and dense inputs (dx needed)."""

    name: str
    B: int
    T: int
    L: int
    H: int
    C: int
    activation: str                 # Elman's; the gated cells have their own
    truncate: Optional[int]         # None = full BPTT; else per-output windows (stride 1)
    dtype: str
    seed: int = 0                   # make_data's default seed
    cell: str = "elman"             # "elman", "lstm" or "gru"
    num_layers: int = 1
    bidirectional: bool = False
    kind: str = "model"             # "model" or "layer"
    inputs: str = "ids"             # "ids" (token ids) or "dense" (B, T, L) floats

    @property
    def group(self):
        return self.name[0]

    @property
    def documents_model(self):
        """One forward Elman layer on token ids with the softmax head (W1 ... W5)."""
        return (self.cell == "elman" and self.num_layers == 1 and not self.bidirectional
                and self.kind == "model" and self.inputs == "ids")

    def options(self):
        """Keyword arguments of `fastbptt.bptt` (and of `fastbptt.reference.bptt`)."""
        return dict(truncate=self.truncate, stride=1, activation=self.activation,
                    loss="softmax_ce")

    @property
    def flops(self):
        """Floating-point operations of one call, counting a multiply-add as 2.

        Per step and sequence, for each layer and direction with G gates (1 Elman, 3 GRU,
        4 LSTM): the recurrence W h_{t-1} forward, Wᵀδ and dW backward, 3·G·H²; a dense
        input of width n (dense x, or the layer below's H·directions outputs): U x, dU and,
        where the input needs its gradient (a layer below it, or S3's dx), Uᵀδ, so 2 or
        3·G·H·n; the head V h_t, Vᵀe_t and dV, 3·H·directions·C.
        truncate=k (W1, W4; Elman): (k+1)·H² in place of 3·H² (the forward W h_{t-1}, k−1
        products by W carrying the errors back through the k-step windows (lag-major,
        SPEC.md §5) and one dW = Δᵀ H_prev).
        Not counted: the input projection of token ids (a gather; its dU a scatter-add),
        gate and activation functions, the softmax.
        """
        H, G = self.H, GATES[self.cell]
        directions = 2 if self.bidirectional else 1
        recurrent = 3 if self.truncate is None else self.truncate + 1
        per_step = 3 * H * directions * self.C if self.kind == "model" else 0
        for layer in range(self.num_layers):
            inputs = 0
            if layer > 0 or self.inputs == "dense":
                needs_dx = layer > 0 or self.kind == "layer"
                inputs = (3 if needs_dx else 2) * G * H * layer_input_width(self, layer)
            per_step += directions * (recurrent * G * H * H + inputs)
        return 2 * self.B * self.T * per_step

    def describe(self):
        window = "full" if self.truncate is None else f"truncate={self.truncate}"
        cell = f"elman {self.activation}" if self.cell == "elman" else self.cell
        shape = f"{self.num_layers} layers " if self.num_layers > 1 else ""
        shape += "bidirectional " if self.bidirectional else ""
        sizes = f"B={self.B} T={self.T} {self.inputs} L={self.L} H={self.H}"
        if self.kind == "layer":
            return (f"{sizes} {shape}{cell} {window} {self.dtype}; one layer's forward and "
                    "back(dh) with dx")
        return f"{sizes} C={self.C} {shape}{cell} {window} {self.dtype}"


WORKLOADS = {w.name: w for w in [
    Workload("W1", 1, 100, 65, 128, 65, "sigmoid", 10, "float64"),
    Workload("W2", 1, 100, 65, 128, 65, "tanh", None, "float32"),
    Workload("W3", 32, 100, 65, 128, 65, "tanh", None, "float32"),
    Workload("W4", 32, 100, 65, 128, 65, "tanh", 10, "float32"),
    # seed 203: no ReLU pre-activation within 1.2e-7 of 0 (6x float32's rounding of them),
    # so every float32 implementation takes the same side of every kink; see relu_margin.
    Workload("W5", 32, 50, 1024, 1024, 16, "relu", None, "float32", seed=203),
    Workload("S1", 32, 100, 65, 256, 65, "tanh", None, "float32", num_layers=2),
    Workload("S2", 32, 100, 65, 256, 65, "tanh", None, "float32", bidirectional=True),
    Workload("S3", 32, 100, 128, 256, 0, "tanh", None, "float32", kind="layer",
             inputs="dense"),
    Workload("G1", 32, 100, 65, 256, 65, "tanh", None, "float32", cell="lstm"),
    Workload("G2", 32, 100, 65, 256, 65, "tanh", None, "float32", cell="gru"),
    Workload("G3", 1, 100, 65, 128, 65, "tanh", None, "float32", cell="lstm"),
    Workload("G4", 32, 50, 1024, 1024, 16, "tanh", None, "float32", cell="lstm"),
    Workload("G5", 32, 100, 65, 256, 65, "tanh", None, "float32", cell="lstm", num_layers=2,
             bidirectional=True),
]}

GROUPS = {group: tuple(n for n in WORKLOADS if n[0] == group) for group in "WSG"}
# what `fastbptt bench` runs without --workloads: all of them, about a minute on one core
# of the README's machine with PyTorch and JAX (G4 and G5 take seconds a call)
DEFAULT = tuple(WORKLOADS)


def select(text):
    """Workload names from ``"S1,G3"``-style text; a group letter (W, S, G) means all of
    its workloads. Raises ValueError naming what is unknown."""
    names = []
    for item in (n.strip().upper() for n in text.split(",")):
        if not item:
            continue
        if item not in GROUPS and item not in WORKLOADS:
            raise ValueError(f"unknown workload {item!r}; choose from {', '.join(WORKLOADS)} "
                             f"or a group {', '.join(GROUPS)}, comma-separated")
        names += [n for n in GROUPS.get(item, (item,)) if n not in names]
    if not names:
        raise ValueError(f"no workload in {text!r}")
    return tuple(names)


def make_data(workload, seed=None):
    """Seeded ``(x, y, params)`` for a workload (``seed`` defaults to ``workload.seed``).

    Sequences are (T, ...) when B = 1 (one sequence) and (B, T, ...) otherwise. x holds
    int64 token ids, or standard normal features (..., L) for dense inputs; y holds int64
    class ids, or, for a layer workload, the upstream gradient dh (..., H·directions),
    standard normal. params, without biases, is a `fastbptt.Params` for W1 ... W5
    (drawn by `fastbptt.init_params`, as always) and a `fastbptt.Model` of
    `fastbptt.Layer` for the others (drawn by `stacks.draw_stack`; V is None for the layer
    workload).
    """
    if seed is None:
        seed = workload.seed

    rng = np.random.default_rng(seed)
    w = workload
    shape = (w.T,) if w.B == 1 else (w.B, w.T)
    if w.inputs == "dense":
        x = rng.standard_normal(shape + (w.L,)).astype(w.dtype)
    else:
        x = rng.integers(0, w.L, size=shape)
    if w.kind == "layer":
        y = rng.standard_normal(shape + (w.H * (1 + w.bidirectional),)).astype(w.dtype)
    else:
        y = rng.integers(0, w.C, size=shape)
    if w.documents_model:
        from ..params import init_params
        return x, y, init_params(w.L, w.H, w.C, bias=False, dtype=np.dtype(w.dtype), seed=rng)
    return x, y, draw_stack(w, rng)


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
