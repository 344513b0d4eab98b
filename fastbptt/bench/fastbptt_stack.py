"""fastbptt's own call on S1 ... S3 and G1 ... G5, through the public API alone:

- a model workload: ``fastbptt.bptt(x, y, model)`` with the workload's `fastbptt.Model`;
- the layer workload (S3): ``out, back = fastbptt.layer.vjp(x, layer)`` with the model's
  one `fastbptt.Layer`, then ``back(dh)``, returning ``out.h`` with the gradients of U and
  W and ``r.dx``.
"""
from __future__ import annotations

from .peers import Call
from .stacks import flatten

__all__ = ["make"]


def make(workload, x, y, model):
    import fastbptt

    if workload.kind == "layer":
        (layer,), = model.layers

        def run():
            out, back = fastbptt.layer.vjp(x, layer)
            r = back(y)
            return out.h, (r.grads.U, r.grads.W, r.dx)

        return Call(run, "fastbptt.layer.vjp, then back(dh)")

    def run():
        result = fastbptt.bptt(x, y, model)
        return result.loss, flatten(result.grads.layers, result.grads.V)

    return Call(run)
