"""T1-T3: a PyTorch training step with the native module and with fastbptt.torch's.

The model is the recurrent module (``batch_first=True``, one layer, biases as PyTorch's
default) and ``nn.Linear(H, C)``; a step is ``zero_grad``, forward, summed cross-entropy,
``backward`` and ``torch.optim.Adam``'s ``step``. Both models start from the same weights
(one state dict). The inputs are the workload's token ids, given

- "ids": to the native module as one-hot float vectors (built once, outside the step),
  to fastbptt's as the integer ids themselves, which it reads as those one-hot vectors;
- "embedding": to ``nn.Embedding(L, L)`` in front of either module, so that both take the
  same dense input and the embedding gets its gradient.

For the bridge's own cost (`bridge_steps.own_cost`), ``make`` also returns the fastbptt
module's forward and backward alone, with a fixed upstream gradient, and the bridge module
that calls `fastbptt.layer`.
"""
from __future__ import annotations

import numpy as np

from .workloads import WORKLOADS, make_data

MODULES = {"elman": "RNN", "lstm": "LSTM", "gru": "GRU"}


def _model(torch, module, w, embedding):
    nn = torch.nn
    parts = {"embed": nn.Embedding(w.L, w.L)} if embedding else {}
    return nn.ModuleDict(dict(parts, rnn=module(w.L, w.H, batch_first=True),
                              head=nn.Linear(w.H, w.C)))


def _trainer(torch, model, inputs, targets, C):
    import torch.nn.functional as F

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    embed = model["embed"] if "embed" in model else (lambda x: x)

    def step():
        optimizer.zero_grad(set_to_none=True)
        out, _ = model["rnn"](embed(inputs))
        loss = F.cross_entropy(model["head"](out).reshape(-1, C), targets, reduction="sum")
        loss.backward()
        optimizer.step()
        return loss.item()

    step.gradients = lambda: {name: p.grad.numpy() for name, p in model.named_parameters()}
    return step


def make(step, threads=1):
    """``(calls, note, layer, owner)``: calls {"native": step, "fastbptt": step}, each a
    function of no arguments returning its loss, whose ``gradients()`` are those of its
    last call by parameter name; ``layer()`` runs the bridge's layer
    forward and backward; ``owner`` is the bridge module whose ``_layer`` is
    `fastbptt.layer`."""
    import torch
    import torch.nn.functional as F

    import fastbptt.torch as ft
    from ..torch import _function

    torch.set_num_threads(threads)
    w = WORKLOADS[step.workload]
    embedding = step.inputs == "embedding"
    x, y, _ = make_data(w)
    ids = torch.from_numpy(np.asarray(x, np.int64))
    targets = torch.from_numpy(np.asarray(y, np.int64).reshape(-1))
    torch.manual_seed(0)
    native = _model(torch, getattr(torch.nn, MODULES[w.cell]), w, embedding)
    bridged = _model(torch, getattr(ft, MODULES[w.cell]), w, embedding)
    bridged.load_state_dict(native.state_dict())
    one_hot = ids if embedding else F.one_hot(ids, w.L).float()
    calls = {"native": _trainer(torch, native, one_hot, targets, w.C),
             "fastbptt": _trainer(torch, bridged, ids, targets, w.C)}

    inputs = ids
    if embedding:
        with torch.no_grad():
            inputs = bridged["embed"](ids)
        inputs.requires_grad_()
    dh = torch.from_numpy(np.random.default_rng(1).standard_normal((w.B, w.T, w.H))
                          .astype(np.float32))
    rnn = bridged["rnn"]

    def layer():
        inputs.grad = None
        rnn.zero_grad(set_to_none=True)
        out, _ = rnn(inputs)
        out.backward(dh)

    given = (f"Embedding({w.L}, {w.L}) + " if embedding else
             f"ids (one-hot {w.L} floats to the native module) -> ")
    note = (f"{given}{MODULES[w.cell]}({w.L}, {w.H}, batch_first=True) + Linear({w.H}, "
            f"{w.C}), summed cross-entropy, Adam; B={w.B} T={w.T} float32")
    return calls, note, layer, _function
