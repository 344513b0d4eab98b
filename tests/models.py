"""One registry of cells, model shapes, truncations and implementations for the model tests.

As numbagg's ``COMPARISONS``: every grid of `test_models_fd`, `test_models_torch` and
`test_models_kernels` is drawn from `cases`, and every implementation of ``bptt`` and
``layer.vjp`` is an entry of `IMPLS`. A new cell is a line in `CELLS`; a new
implementation is a line in `IMPLS` (with the cases it can compute).

The flags of a case (ragged lengths, h0/c0 given, ids or dense inputs, biases, the loss
and target kind, the activation) rotate over the shapes and truncations so that each
value meets each shape without the full product.
"""
import itertools
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from fastbptt._inputs import prepare
from fastbptt.layer import _caller_states

# cell -> the activations it takes (the gated cells have their own gates)
CELLS = {"elman": ("tanh", "relu", "sigmoid", "identity"), "gru": ("tanh",), "lstm": ("tanh",)}
# (layers, directions, reverse): reverse runs one layer from each sequence's end (layer API)
SHAPES = [(1, 1, False), (1, 1, True), (1, 2, False), (2, 1, False), (2, 2, False),
          (3, 1, False), (3, 2, False)]
# family -> (truncate, stride), for T = 4 or 5 steps (each cuts something there)
TRUNCATIONS = {"full": (None, 1), "windows": (3, 1), "chunks": (2, 2), "strides": (3, 2)}
# ragged, h0 (and c0) given, ids, biases, targets as class ids, mse
FLAGS = list(itertools.product([True, False], repeat=6))


def allowed(layers, directions, reverse, truncation):
    """SPEC.md §8: windows (stride < truncate) need one layer; no truncation with a
    reverse direction."""
    if truncation == "full":
        return True
    if directions == 2 or reverse:
        return False
    return truncation == "chunks" or layers == 1


@dataclass(frozen=True)
class Case:
    cell: str
    layers: int
    directions: int
    reverse: bool
    truncation: str
    activation: str
    ragged: bool
    state: object       # True: h0 (and c0) given; "h0" or "c0": that one alone (LSTM)
    ids: bool
    bias: bool
    y_ids: bool
    mse: bool

    @property
    def id(self):
        flags = [name for name in ("ragged", "state", "ids", "bias") if getattr(self, name)]
        if self.state in ("h0", "c0"):
            flags[flags.index("state")] = self.state + "only"
        shape = f"{self.layers}x{self.directions}{'rev' if self.reverse else ''}"
        return "-".join([self.cell, self.activation, shape, self.truncation] + flags +
                        ["yids" if self.y_ids else "ydense", "mse" if self.mse else "ce"])

    def stacked(self, head):
        """Whether the params are a `Model` (else a `Params` with a head, or a `Layer`):
        states are then (S, B, H). A gated cell's head needs a Model."""
        return self.layers > 1 or self.directions > 1 or (head and self.cell != "elman")

    def options(self, head):
        truncate, stride = TRUNCATIONS[self.truncation]
        options = dict(truncate=truncate, stride=stride, activation=self.activation)
        if head:
            options["loss"] = "mse" if self.mse else "softmax_ce"
        elif self.reverse:
            options["reverse"] = True
        return options

    def data(self, rng, *, head, B=3, T=5, L=3, H=2, C=3, empty=True):
        """(x, y, params, options): params a `Params` or `Layer` for one unidirectional
        Elman layer, else a `Model` (without V, c for the layer API). ``empty``: a ragged
        batch has a sequence of length 0 (PyTorch's packing refuses those)."""
        model = fastbptt.init_params(L, H, C, cell=self.cell, num_layers=self.layers,
                                     bidirectional=self.directions == 2, bias=self.bias,
                                     dtype=np.float64, seed=rng)
        if head:
            params = model
        elif self.stacked(head):
            params = fastbptt.Model(model.layers)
        else:
            params = model.layers[0][0] if isinstance(model, fastbptt.Model) else \
                fastbptt.Layer(model.U, model.W, model.b)
        x = rng.integers(0, L, (B, T)) if self.ids else rng.normal(size=(B, T, L))
        y = rng.integers(-1, C, (B, T)) if self.y_ids else rng.uniform(0, 1, (B, T, C))
        options = self.options(head)
        if self.ragged:
            options["lengths"] = rng.integers(1, T, B)      # short of T ...
            options["lengths"][0] = T                      # ... but one
            if empty and B > 2:
                options["lengths"][-1] = 0
        if self.state:
            S = self.layers * self.directions
            shape = (S, B, H) if self.stacked(head) else (B, H)
            if self.state != "c0":
                options["h0"] = rng.normal(size=shape)
            if self.cell == "lstm" and self.state != "h0":
                options["c0"] = rng.normal(size=shape)
        return x, y, params, options


def cases(head, per_shape=1, truncations=TRUNCATIONS, shapes=SHAPES, cells=CELLS,
          only=None):
    """The grid: every cell x shape x allowed truncation, ``per_shape`` flag rotations
    each (the reverse shape is the layer API's alone); ``only``: an implementation name,
    to keep what it computes (activations and truncations)."""
    out = []
    for cell, activations in cells.items():
        if only:
            activations = [a for a in activations if IMPLS[only].activation(a)]
        for layers, directions, reverse in shapes:
            if reverse and head:
                continue
            for truncation in truncations:
                if not allowed(layers, directions, reverse, truncation):
                    continue
                if only and not IMPLS[only].truncation(truncation):
                    continue
                for _ in range(per_shape):
                    i = len(out)
                    out.append(Case(cell, layers, directions, reverse, truncation,
                                    activations[(i + i // 4) % len(activations)],
                                    *FLAGS[(23 * i + 7) % len(FLAGS)]))
    return out


def params(case_list):
    return pytest.mark.parametrize("case", case_list, ids=lambda c: c.id)


def _torch(name):
    def get(case):
        pytest.importorskip("torch")
        import torch_autograd
        return getattr(torch_autograd, name)
    return get


def _any(value):
    return True


class Impl(NamedTuple):
    bptt: Callable                   # case -> a `fastbptt.bptt`-like function
    vjp: Callable                    # case -> a `fastbptt.layer.vjp`-like function
    activation: Callable = _any      # name -> whether it has that activation
    truncation: Callable = _any      # family -> whether it truncates that way


def _reference_bptt(case):
    return reference_bptt


IMPLS = {
    "reference": Impl(_reference_bptt, lambda case: reference.layer_vjp),
    "kernels": Impl(lambda case: fastbptt.bptt, lambda case: fastbptt.layer.vjp),
    "torch": Impl(_torch("bptt"), _torch("vjp"), lambda name: name in ("tanh", "relu"),
                  lambda family: family == "full"),
}


def reference_bptt(x, y, params, **options):
    """`reference.bptt`, with c_final and dc0 (from `reference.head.solve`) where the
    result has no fields for them."""
    result = reference.bptt(x, y, params, **options)
    if "c_final" in result._fields:
        return result
    problem = prepare(x, y, params, **options)
    *_, c_final, dc0 = reference.head.solve(problem)
    lstm = [None if v is None else _caller_states(problem, v) for v in (c_final, dc0)]
    return Full(*result, *lstm)


class Full(NamedTuple):
    loss: float
    grads: object
    h_final: np.ndarray
    dh0: np.ndarray
    c_final: object = None
    dc0: object = None


def relative_error(actual, expected):
    """max |actual - expected| / max |expected| (the max |actual| where expected is 0);
    inf when either side holds a NaN or an infinity, so that a non-finite result (or
    reference) fails every ``error <= tolerance`` (a NaN would be dropped by ``max``)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if not (np.isfinite(actual).all() and np.isfinite(expected).all()):
        return float("inf")
    scale = np.abs(expected).max(initial=0.0)
    diff = np.abs(actual - expected).max(initial=0.0)
    return float(diff / scale) if scale else float(diff)


def loss_error(got, want):
    """|got - want| / max(1, |want|); inf when either loss is not finite."""
    if not (np.isfinite(got) and np.isfinite(want)):
        return float("inf")
    return abs(got - want) / max(1.0, abs(want))


def disagreement(got, want, fields):
    """{name: relative error} over the named fields of two results and every leaf of
    their ``grads`` (None must meet None; a field one result type lacks is left out)."""
    out = {}
    for name in fields:
        if not (hasattr(got, name) and hasattr(want, name)):
            continue
        g, w = getattr(got, name), getattr(want, name)
        if name == "loss":
            out[name] = loss_error(g, w)
        elif name == "grads":
            gl, wl = fastbptt.params.leaves(g), fastbptt.params.leaves(w)
            assert gl.keys() == wl.keys(), (sorted(gl), sorted(wl))
            out.update({k: relative_error(gl[k], wl[k]) for k in wl})
        elif w is None or g is None:
            assert g is None and w is None, name
        else:
            out[name] = relative_error(g, w)
    return out


def upstream(rng, out, cell):
    """Random (dh, dh_final, dc_final) for a layer's ``back``."""
    return (rng.normal(size=out.h.shape), rng.normal(size=out.h_final.shape),
            rng.normal(size=out.h_final.shape) if cell == "lstm" else None)


BPTT_FIELDS = ("loss", "grads", "h_final", "dh0", "c_final", "dc0")
OUT_FIELDS = ("h", "h_final", "c_final")
BACK_FIELDS = ("grads", "dx", "dh0", "dc0")


def compare(case, rng, impl, against, empty=True, B=3, T=5, **sizes):
    """{name: relative error} of ``impl``'s bptt and layer VJP against ``against``'s on
    the same data (``impl``, ``against``: entries of `IMPLS`; ``empty``, B, T and the
    ``sizes`` L, H, C as `Case.data`)."""
    x, y, p, options = case.data(rng, head=True, empty=empty, B=B, T=T, **sizes)
    errors = disagreement(impl.bptt(case)(x, y, p, **options),
                          against.bptt(case)(x, y, p, **options), BPTT_FIELDS)
    x, _, p, options = case.data(rng, head=False, empty=empty, B=B, T=T, **sizes)
    out, back = impl.vjp(case)(x, p, **options)
    out_ref, back_ref = against.vjp(case)(x, p, **options)
    errors.update(disagreement(out, out_ref, OUT_FIELDS))
    grads = upstream(rng, out_ref, case.cell)
    for name, error in disagreement(back(*grads), back_ref(*grads), BACK_FIELDS).items():
        errors["back " + name] = error
    return errors


def softmax_outputs(h, model, lengths):
    """softmax(V h + c) at each real step of states h (B, T, H D), zeros at padding."""
    logits = h @ model.V.T + (0 if model.c is None else model.c)
    p = np.exp(logits - logits.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    p[np.arange(h.shape[1])[None, :] >= np.asarray(lengths)[:, None]] = 0
    return p


def compare_forward(case, rng, B=3, T=5):
    """{name: relative error} of the kernels' forward-only entry points on ``case``'s
    data: `fastbptt.loss` against the loss of `fastbptt.bptt` (and the reference's) with
    the same options (truncation cuts gradients, not the loss); `fastbptt.forward`'s h
    against the reference's top states and its p against their softmax outputs;
    `fastbptt.layer.forward` against ``fastbptt.layer.vjp(...)[0]`` and the reference's
    ``layer_forward``."""
    x, y, p, options = case.data(rng, head=True, B=B, T=T)
    untruncated = {k: v for k, v in options.items() if k not in ("truncate", "stride")}
    errors = {"loss vs bptt": loss_error(fastbptt.loss(x, y, p, **untruncated),
                                         fastbptt.bptt(x, y, p, **options).loss),
              "loss vs reference": loss_error(fastbptt.loss(x, y, p, **untruncated),
                                              reference.bptt(x, y, p, **options).loss)}
    states = {k: v for k, v in untruncated.items() if k != "loss"}
    layers = fastbptt.Layer(p.U, p.W, p.b) if isinstance(p, fastbptt.Params) else \
        fastbptt.Model(p.layers)
    want = reference.layer_forward(x, layers, **states).h
    got = fastbptt.forward(x, p, **states)
    errors["forward h"] = relative_error(got.h, want)
    errors["forward p"] = relative_error(
        got.p, softmax_outputs(want, p, options.get("lengths", np.full(B, T))))
    x, _, p, options = case.data(rng, head=False, B=B, T=T)
    untruncated = {k: v for k, v in options.items() if k not in ("truncate", "stride")}
    got = fastbptt.layer.forward(x, p, **untruncated)
    for name, want in (("vjp", fastbptt.layer.vjp(x, p, **options)[0]),
                       ("reference", reference.layer_forward(x, p, **untruncated))):
        for field, error in disagreement(got, want, OUT_FIELDS).items():
            errors[f"layer.forward {field} vs {name}"] = error
    return errors
