"""PyTorch (CPU) on S1 ... S3 and G1 ... G5 (stacked, bidirectional, gated, a layer
alone), two ways; the faster one is timed, as in `torch_peer`.

- "nn.RNN" / "nn.LSTM" / "nn.GRU": the module (``num_layers``, ``bidirectional``,
  ``bias=False``, ``batch_first``), built once with the workload's weights, on one-hot
  float inputs (token ids) or the dense inputs. On a CPU PyTorch runs a float32
  ``nn.LSTM`` through oneDNN's fused RNN primitive (``torch.backends.mkldnn``);
  ``nn.RNN`` and ``nn.GRU`` run its own loop of per-step matrix products.
- "autograd loop": each layer's input projection as one embedding gather of Uᵀ's rows
  (token ids) or one matrix product (dense inputs, upper layers), then a Python loop over
  the steps with the cell's equations (SPEC.md §6), the reverse direction from the last
  step down.

A model workload ends in logits = h Vᵀ and ``F.cross_entropy(reduction="sum")``, then
``loss.backward()``; the layer workload (S3) calls ``h.backward(dh)`` and returns h with
the gradients of U, W and x. Gradients come back in `stacks.flatten`'s order.
"""
from __future__ import annotations

import numpy as np

from .stacks import flatten
from .torch_peer import fastest

__all__ = ["make", "variants"]

MODULES = {"elman": "RNN", "lstm": "LSTM", "gru": "GRU"}


def make(workload, x, y, model, threads=1):
    return fastest(variants(workload, x, y, model, threads))


def variants(workload, x, y, model, threads=1):
    """{variant name: function of no arguments returning ``(loss, grads)``}."""
    import torch

    torch.set_num_threads(threads)
    w = workload
    x = np.asarray(x)
    batched = x if x.ndim == (3 if w.inputs == "dense" else 2) else x[None]
    if w.inputs == "dense":
        features = torch.from_numpy(np.array(batched, w.dtype))
        features.requires_grad_(w.kind == "layer")
        ids = None
    else:
        ids = torch.from_numpy(batched.astype(np.int64))
        features = torch.nn.functional.one_hot(ids, w.L).to(getattr(torch, w.dtype))
    finish = _finish(torch, w, y, model.V, np.shape(y), features)
    return {f"nn.{MODULES[w.cell]}": _module(torch, w, model, features, finish),
            "autograd loop": _loop(torch, w, model, ids, features, finish)}


def _finish(torch, w, y, V, shape, features):
    """``finish(h) -> (value, last gradient)`` on the top layer's states h (B, T, H·D):
    the summed cross-entropy and dV, or (layer) h itself and dx."""
    import torch.nn.functional as F

    if w.kind == "layer":
        dh = torch.from_numpy(np.array(y, w.dtype)).reshape(features.shape[:2] + (-1,))

        def finish(h):
            features.grad = None
            h.backward(dh)
            return h.detach().reshape(shape), features.grad.reshape(np.shape(features))

        return finish
    targets = torch.from_numpy(np.asarray(y).astype(np.int64).reshape(-1))
    V = torch.nn.Parameter(torch.from_numpy(V.copy()))

    def finish(h):
        V.grad = None
        loss = F.cross_entropy((h @ V.T).reshape(-1, w.C), targets, reduction="sum")
        loss.backward()
        return loss.item(), V.grad

    return finish


def _module(torch, w, model, features, finish):
    options = {"nonlinearity": w.activation} if w.cell == "elman" else {}
    module = getattr(torch.nn, MODULES[w.cell])(
        features.shape[-1], w.H, num_layers=w.num_layers, bidirectional=w.bidirectional,
        bias=False, batch_first=True, **options).to(getattr(torch, w.dtype))
    weights = []
    with torch.no_grad():
        for l, row in enumerate(model.layers):
            for d, layer in enumerate(row):
                suffix = f"_l{l}" + ("_reverse" if d else "")
                for name, value in (("weight_ih", layer.U), ("weight_hh", layer.W)):
                    weight = getattr(module, name + suffix)
                    weight.copy_(torch.from_numpy(value))
                    weights.append(weight)

    def run():
        for weight in weights:
            weight.grad = None
        h, _ = module(features)
        value, last = finish(h)
        return value, tuple(weight.grad for weight in weights) + (last,)

    return run


def _loop(torch, w, model, ids, features, finish):
    import torch.nn.functional as F

    step = _steps(torch)[w.cell]
    f = {"tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid}[w.activation]
    layers = [[tuple(torch.from_numpy(a.copy()).requires_grad_() for a in (layer.U, layer.W))
               for layer in row] for row in model.layers]
    B, T = features.shape[:2]

    def run():
        inputs = features
        for row in layers:
            outputs = []
            for d, (U, W) in enumerate(row):
                U.grad = W.grad = None
                if inputs is features and ids is not None:
                    projected = F.embedding(ids, U.T)                  # (B, T, G·H)
                else:
                    projected = inputs @ U.T
                h = c = torch.zeros(B, w.H, dtype=W.dtype)
                states = [None] * T
                for t in (range(T - 1, -1, -1) if d else range(T)):
                    h, c = step(projected[:, t], h, c, W.T, f)
                    states[t] = h
                outputs.append(torch.stack(states, 1))
            inputs = torch.cat(outputs, 2) if len(outputs) > 1 else outputs[0]
        value, last = finish(inputs)
        return value, flatten([[(U.grad, W.grad) for U, W in row] for row in layers], last)

    return run


def _steps(torch):
    """One step of each cell: ``(a_t = U x_t, h, c, Wᵀ, f) -> (h, c)`` (c: LSTM only)."""
    def elman(a, h, c, Wt, f):
        return f(torch.addmm(a, h, Wt)), c

    def lstm(a, h, c, Wt, f):
        i, g_f, g, o = torch.addmm(a, h, Wt).chunk(4, 1)
        c = torch.sigmoid(g_f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c

    def gru(a, h, c, Wt, f):
        a_r, a_z, a_n = a.chunk(3, 1)
        h_r, h_z, h_n = (h @ Wt).chunk(3, 1)
        r, z = torch.sigmoid(a_r + h_r), torch.sigmoid(a_z + h_z)
        n = torch.tanh(a_n + r * h_n)
        return n + z * (h - n), c

    return {"elman": elman, "lstm": lstm, "gru": gru}
