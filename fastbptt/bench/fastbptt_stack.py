"""fastbptt's own call on S1 ... S3 and G1 ... G5, through the public API alone:

- a model workload: ``fastbptt.bptt(x, y, model)`` with ``model`` a `fastbptt.Model`
  whose ``layers[l][d]`` are `fastbptt.Layer` (U, W) and whose head is V, laid out as
  ``fastbptt.init_params(..., cell=, num_layers=, bidirectional=, bias=False)`` lays it;
- the layer workload (S3): ``out, back = fastbptt.layer.vjp(x, fastbptt.Layer(U, W))``,
  then ``back(dh)``, returning ``out.h`` with the gradients of U and W and ``r.dx``.

Where the installed fastbptt lacks what a workload needs (no `fastbptt.layer`, no
`fastbptt.Model`, or ``init_params`` refusing the cell or the stack), `unavailable` says
so and the workload is timed without fastbptt.
"""
from __future__ import annotations

import importlib

import numpy as np

from .peers import Call
from .stacks import flatten

__all__ = ["unavailable", "make"]


def _template(fastbptt, workload):
    w = workload
    return fastbptt.init_params(w.L, w.H, max(w.C, 1), cell=w.cell, num_layers=w.num_layers,
                                bidirectional=w.bidirectional, bias=False,
                                dtype=np.dtype(w.dtype), seed=0)


def _lacks(workload):
    """What fastbptt would need for this workload, for the reason it is skipped."""
    w = workload
    if w.kind == "layer":
        return "layer VJP (fastbptt.layer.vjp)"
    parts = {"lstm": ["LSTM"], "gru": ["GRU"]}.get(w.cell, [])
    parts += ["stacked layers"] * (w.num_layers > 1) + ["bidirectional layers"] * w.bidirectional
    return " or ".join(parts) or "Model"


def unavailable(workload):
    import fastbptt

    reason = f"fastbptt has no {_lacks(workload)} yet"
    if not hasattr(fastbptt, "Layer"):
        return reason
    if workload.kind == "layer":
        try:
            layer = importlib.import_module("fastbptt.layer")
        except ImportError:
            return reason
        return None if hasattr(layer, "vjp") else reason
    if not hasattr(fastbptt, "Model"):
        return reason
    try:
        _template(fastbptt, workload._replace(L=2, H=2, C=2))
    except (TypeError, ValueError) as error:
        return f"{reason} (init_params: {error})"
    return None


def make(workload, x, y, stack):
    import fastbptt

    if workload.kind == "layer":
        vjp = importlib.import_module("fastbptt.layer").vjp
        (U, W), = stack.layers[0]
        layer = fastbptt.Layer(U, W)

        def run():
            out, back = vjp(x, layer)
            r = back(y)
            return out.h, (r.grads.U, r.grads.W, r.dx)

        return Call(run, "fastbptt.layer.vjp, then back(dh)")

    template = _template(fastbptt, workload)
    layers = type(template.layers)(
        type(row)(fastbptt.Layer(U, W) for U, W in pairs)
        for row, pairs in zip(template.layers, stack.layers))
    model = fastbptt.Model(layers, stack.V, None)

    def run():
        result = fastbptt.bptt(x, y, model)
        grads = result.grads
        return result.loss, flatten([[(g.U, g.W) for g in row] for row in grads.layers],
                                    grads.V)

    return Call(run)
