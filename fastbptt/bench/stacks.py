"""The weights of the stacked, bidirectional and gated workloads.

The bench draws these weights itself, so that every implementation (PyTorch, JAX and
fastbptt) gets the same numbers, and the data of a workload never changes with the
library's version. They come as a `fastbptt.Model`: ``layers[l][d]`` is a `fastbptt.Layer`
for layer l and direction d (0 forward, 1 reverse), in PyTorch's orientation and gate
order (SPEC.md §6), U = weight_ih (G·H, in) and W = weight_hh (G·H, H) with G = 1
(Elman), 3 (GRU) or 4 (LSTM), and the head V (C, H·directions), or None for a workload of
one layer alone. No biases (as W1 ... W5).

Gradients of every implementation are compared in one flat order: per layer l, per
direction d: U, W; then V (or, for a layer alone, dx).
"""
from __future__ import annotations

import numpy as np

from ..params import Layer, Model

__all__ = ["GATES", "draw_stack", "flatten", "grad_names", "layer_input_width"]

GATES = {"elman": 1, "gru": 3, "lstm": 4}


def layer_input_width(workload, layer):
    """Columns of layer `layer`'s U: L for the first layer, H·directions above it."""
    directions = 2 if workload.bidirectional else 1
    return workload.L if layer == 0 else workload.H * directions


def draw_stack(workload, rng):
    """A `fastbptt.Model` without biases, its weights uniform in [-1/√H, 1/√H] (as
    `fastbptt.init_params` and PyTorch's RNNs), drawn layer by layer, forward before
    reverse, U before W, then V."""
    w = workload
    scale = 1.0 / np.sqrt(w.H)
    gh = GATES[w.cell] * w.H

    def draw(*shape):
        return rng.uniform(-scale, scale, size=shape).astype(w.dtype)

    directions = 2 if w.bidirectional else 1
    layers = tuple(tuple(Layer(draw(gh, layer_input_width(w, layer)), draw(gh, w.H))
                         for _ in range(directions))
                   for layer in range(w.num_layers))
    V = draw(w.C, w.H * directions) if w.kind == "model" else None
    return Model(layers, V)


def flatten(layers, last):
    """``(U, W, U, W, ..., last)``: per layer, per direction, then V (or dx). Each
    ``layers[l][d]`` is a `fastbptt.Layer` without biases or a pair ``(U, W)``."""
    return tuple(a for layer in layers for pair in layer for a in pair[:2]) + (last,)


def grad_names(workload):
    """Names of `flatten`'s entries, as the agreement check reports them: ``dU``, ``dW``,
    ``dV`` for one forward layer; ``dU[1r]`` is layer 1's reverse direction."""
    directions = ("", "r") if workload.bidirectional else ("",)
    several = workload.num_layers > 1 or workload.bidirectional
    names = []
    for layer in range(workload.num_layers):
        for d in directions:
            where = f"[{layer}{d}]" if several else ""
            names += [f"dU{where}", f"dW{where}"]
    return tuple(names) + ("dV" if workload.kind == "model" else "dx",)
