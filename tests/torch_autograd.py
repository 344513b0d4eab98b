"""PyTorch autograd as an implementation of `bptt` and `layer.vjp`, for the parity tests.

The params go into real ``nn.RNN``/``nn.LSTM``/``nn.GRU`` and ``nn.Linear`` modules through
`fastbptt.to_torch` and ``load_state_dict``; ragged batches run as packed sequences; the
loss is the summed cross-entropy (or 1/2 squared error) over real steps, written with
``log_softmax``. Full BPTT only, and the activations ``nn.RNN`` has (tanh, relu). A
reverse layer (``reverse=True``) runs forward over each sequence's real steps flipped.
``nn.LSTM`` takes h0 and c0 together: the one not given goes in as zeros.
"""
from types import SimpleNamespace

import numpy as np

import fastbptt
from fastbptt._results import LayerGrads, LayerOutput
from fastbptt.params import Layer, Model, read_layer, read_model

torch = None


def _torch():
    global torch
    if torch is None:
        import torch as module
        torch = module
    return torch


def _module(model, activation):
    """The nn.RNN/LSTM/GRU (and nn.Linear, or None) holding ``model``'s weights."""
    nn = _torch().nn
    rnn_sd, head_sd = fastbptt.to_torch(model)
    L = rnn_sd["weight_ih_l0"].shape[1]
    G, H = rnn_sd["weight_hh_l0"].shape
    kind = {1: nn.RNN, 3: nn.GRU, 4: nn.LSTM}[G // H]
    extra = {"nonlinearity": activation} if kind is nn.RNN else {}
    rnn = kind(L, H, num_layers=len(model.layers), bias="bias_ih_l0" in rnn_sd,
               batch_first=True, bidirectional=len(model.layers[0]) == 2, **extra).double()
    rnn.load_state_dict({k: torch.from_numpy(v) for k, v in rnn_sd.items()})
    head = None
    if head_sd is not None:
        head = nn.Linear(*head_sd["weight"].shape[::-1], bias="bias" in head_sd).double()
        head.load_state_dict({k: torch.from_numpy(v) for k, v in head_sd.items()})
    return rnn, head


def _grads(model, rnn, head):
    """The module's gradients as a Model shaped like ``model`` (one bias b's gradient is
    bias_ih's: b = bias_ih + bias_hh)."""
    g = {k: p.grad.numpy() for k, p in rnn.named_parameters()}
    layers = []
    for l, row in enumerate(model.layers):
        out = []
        for d, layer in enumerate(row):
            key = f"_l{l}{'_reverse' if d else ''}"
            gru = layer.bh is not None
            out.append(Layer(g["weight_ih" + key], g["weight_hh" + key],
                             None if layer.b is None else g["bias_ih" + key],
                             g["bias_hh" + key] if gru else None))
        layers.append(tuple(out))
    if head is None:
        return Model(tuple(layers))
    return Model(tuple(layers), head.weight.grad.numpy(),
                 None if head.bias is None else head.bias.grad.numpy())


class _Run:
    """The modules holding ``params`` (read by ``read``: `read_model` or `read_layer`) and
    their forward pass over a batch: out (B, T, H D), hn, cn (tensors)."""

    def __init__(self, params, read, activation, x, h0, c0, lengths, reverse=False):
        t = _torch()
        self.model, self.rebuild, self.stacked = read(params)
        self.rnn, self.head = _module(self.model, activation)
        rnn = self.rnn
        L = self.model.layers[0][0].U.shape[1]
        x = np.asarray(x)
        self.single = x.ndim == (1 if x.dtype.kind in "iu" else 2)
        if self.single:
            x = x[None]
            h0 = None if h0 is None else np.asarray(h0)[..., None, :]
            c0 = None if c0 is None else np.asarray(c0)[..., None, :]
        B, T = x.shape[:2]
        self.h0_given, self.c0_given = h0 is not None, c0 is not None
        self.lengths = np.full(B, T) if lengths is None else np.asarray(lengths).reshape(B)
        self.ids = x.dtype.kind in "iu"
        dense = np.eye(L)[x] if self.ids else np.array(x, np.float64)
        self.x = t.tensor(dense, requires_grad=not self.ids)
        S = rnn.num_layers * (2 if rnn.bidirectional else 1)
        self.h0 = t.tensor(np.zeros((S, B, rnn.hidden_size)) if h0 is None else
                           np.asarray(h0, np.float64).reshape(S, B, -1), requires_grad=True)
        state = self.h0
        if isinstance(rnn, t.nn.LSTM):
            self.c0 = t.tensor(np.zeros((S, B, rnn.hidden_size)) if c0 is None else
                               np.asarray(c0, np.float64).reshape(S, B, -1), requires_grad=True)
            state = (self.h0, self.c0)
        flip = self._flip(B, T) if reverse else None
        inputs = self.x if flip is None else self.x[flip]
        packed = t.nn.utils.rnn.pack_padded_sequence(inputs, t.tensor(self.lengths),
                                                     batch_first=True, enforce_sorted=False)
        out, hn = rnn(packed, state)
        out = t.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=T)[0]
        self.out = out if flip is None else out[flip]
        self.hn, self.cn = hn if isinstance(hn, tuple) else (hn, None)

    def _flip(self, B, T):
        """Index (B, T) that reverses each sequence's real steps (padding stays put)."""
        rows, cols = np.arange(B)[:, None], np.arange(T)[None, :]
        n = self.lengths[:, None]
        return rows, np.where(cols < n, n - 1 - cols, cols)

    def numpy(self, tensor, given=True):
        """A state tensor (S, B, H) in the caller's layout (zeros unless ``given``)."""
        a = tensor.detach().numpy() * (1 if given else 0)
        if not self.stacked:
            a = a[0]
            return a[0] if self.single else a
        return a[:, 0] if self.single else a

    def finals(self):
        """(h_final, c_final) in the caller's layout."""
        return self.numpy(self.hn), None if self.cn is None else self.numpy(self.cn)

    def gradients(self, head=None):
        """(grads in the caller's structure, dh0, dc0) after a backward pass: dh0 zeros
        unless h0 was given, dc0 zeros unless c0 was (`fastbptt.BPTTResult`)."""
        dc0 = None if self.cn is None else self.numpy(self.c0.grad, self.c0_given)
        return (self.rebuild(_grads(self.model, self.rnn, head)),
                self.numpy(self.h0.grad, self.h0_given), dc0)


def bptt(x, y, params, *, activation="tanh", loss="softmax_ce", h0=None, c0=None,
         lengths=None, truncate=None, stride=1, cell=None):
    """`fastbptt.bptt` by autograd (full BPTT only); the result also has c_final, dc0."""
    assert truncate is None, "PyTorch has no truncated BPTT"
    t = _torch()
    r = _Run(params, read_model, activation, x, h0, c0, lengths)
    logits = r.head(r.out)
    B, T, C = logits.shape
    real = t.tensor(np.arange(T)[None, :] < r.lengths[:, None])
    y = np.asarray(y).reshape(B, T, -1)
    if y.shape[-1] == 1 and y.dtype.kind in "iu":
        y = y[..., 0]
        real = real & t.tensor(y >= 0)
        y = np.eye(C)[np.maximum(y, 0)]
    Y = t.tensor(y, dtype=t.float64)
    if loss == "mse":
        per_step = 0.5 * ((logits - Y) ** 2).sum(-1)
    else:
        per_step = -(Y * t.log_softmax(logits, -1)).sum(-1)
    total = (per_step * real).sum()
    total.backward()
    grads, dh0, dc0 = r.gradients(r.head)
    h_final, c_final = r.finals()
    return SimpleNamespace(loss=float(total.detach()), grads=grads, h_final=h_final, dh0=dh0,
                           c_final=c_final, dc0=dc0)


def vjp(x, params, *, activation="tanh", h0=None, c0=None, lengths=None, reverse=False,
        truncate=None, stride=1, cell=None):
    """`fastbptt.layer.vjp` by autograd (full BPTT only)."""
    assert truncate is None, "PyTorch has no truncated BPTT"
    t = _torch()
    r = _Run(params, read_layer, activation, x, h0, c0, lengths, reverse)
    out = LayerOutput(r.out.detach().numpy()[0] if r.single else r.out.detach().numpy(),
                      *r.finals())

    def back(dh, dh_final=None, dc_final=None):
        r.rnn.zero_grad()
        for leaf in (r.x, r.h0, getattr(r, "c0", None)):
            if leaf is not None and leaf.grad is not None:
                leaf.grad = None
        total = (r.out * t.tensor(np.reshape(dh, r.out.shape))).sum()
        for grad, state in ((dh_final, r.hn), (dc_final, r.cn)):
            if grad is not None:
                total = total + (state * t.tensor(np.reshape(grad, state.shape))).sum()
        total.backward(retain_graph=True)
        dx = None
        if not r.ids:
            dx = r.x.grad.numpy()
            dx = dx[0] if r.single else dx
        grads, dh0, dc0 = r.gradients()
        return LayerGrads(grads, dx, dh0, dc0)

    return out, back
