"""One call of `fastbptt.layer` on a run of a module's layers, as a ``torch.autograd.Function``.

`run` takes input x, batch-first (B, T, F) or, with ``cfg.time_major``, (T, B, F), the
initial states of those layers (S, B, H) or None, and their parameters in the module's
order (``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh`` per layer and direction,
forward before reverse); it returns (output in x's layout, (B, T, H D) or (T, B, H D),
h_n, c_n or None). With gradients needed, the forward pass keeps
`fastbptt.layer.vjp`'s ``back`` and the backward pass calls it; without, it calls
`fastbptt.layer.forward`, which keeps nothing.

Tensors reach NumPy as views of their memory (`host`), which fastbptt reads in place where
they are contiguous float arrays of its dtype, and copies otherwise (it always copies x
into its own layout and h0 into its states). A weight's memory may move between the two
passes, its numbers the same (``share_memory_``; FSDP's parameters, freed after the
forward pass and gathered again before the backward pass): the backward pass then reads
the weights through new views of them. It takes and gives x, the output and its
gradient time-major where the module is (``batch_first=False``), so that none of them is
transposed on this side. Its results are new arrays, wrapped with
``torch.from_numpy`` without a copy. Elman and LSTM act through b = bias_ih + bias_hh
(a new array of G H numbers) and both biases receive its gradient (the second a copy, so
that no two parameters share a ``.grad``); a GRU keeps them apart (SPEC.md §6).

NaN and inf are not checked (``check_finite=False``): they propagate, as in PyTorch's own
modules.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np
import torch
from torch.autograd import forward_ad

from .. import layer as _layer
from ..params import Layer, Model


class Config(NamedTuple):
    """What one call needs besides tensors."""

    cell: str                        # "elman", "gru" or "lstm"
    activation: str                  # Elman's "tanh" or "relu"
    num_layers: int                  # layers in this call
    directions: int
    bias: bool
    lengths: Optional[np.ndarray]    # (B,) int64, or None: every step is real
    truncate: Optional[int]
    stride: int
    time_major: bool                 # x and the output (T, B, ...), not (B, T, ...)


# NumPy's type strings of the dtypes that `host` hands on as views; the rest go through
# Tensor.numpy(), which refuses what NumPy cannot hold in its own words
_TYPESTR = {torch.float32: "<f4", torch.float64: "<f8", torch.float16: "<f2",
            torch.int64: "<i8", torch.int32: "<i4", torch.int16: "<i2", torch.int8: "|i1",
            torch.uint8: "|u1"}


_PLAIN = (torch.Tensor, torch.nn.Parameter)


class _Memory:
    """A tensor's memory in NumPy's array interface, the tensor kept alive with it."""

    __slots__ = ("tensor", "__array_interface__")

    def __init__(self, tensor, typestr):
        self.tensor = tensor
        strides = None                      # C order
        if not tensor.is_contiguous():
            size = tensor.element_size()
            strides = tuple([s * size for s in tensor.stride()])
        self.__array_interface__ = {"data": (tensor.data_ptr(), False), "shape": tensor.shape,
                                    "strides": strides, "typestr": typestr, "version": 3}


def host(tensor):
    """A NumPy view of a CPU tensor's memory. ``Tensor.numpy()`` would mark the tensor's
    storage as never to be resized again, for good: ``resize_`` then failed on every
    tensor the module had read, and FSDP, which frees its parameters' memory so, could
    not train it. Other kinds of tensor (sparse, quantized, subclasses) go through
    ``Tensor.numpy()``, which refuses them."""
    typestr = _TYPESTR.get(tensor.dtype)
    if (typestr is None or type(tensor) not in _PLAIN or not tensor.is_cpu or
            tensor.layout is not torch.strided or tensor.is_neg() or tensor.is_conj() or
            tensor._is_zerotensor()):
        return tensor.detach().numpy()
    return np.asarray(_Memory(tensor, typestr))


def _numpy(tensor):
    return None if tensor is None else host(tensor)


def _tensor(array):
    return None if array is None else torch.from_numpy(array)


def _directions(cfg, items):
    """A list in the module's order of parameters as ``[l][d]``: the items of each layer
    and direction (weight_ih, weight_hh[, bias_ih, bias_hh])."""
    per = 4 if cfg.bias else 2
    return [[items[(l * cfg.directions + d) * per:][:per] for d in range(cfg.directions)]
            for l in range(cfg.num_layers)]


def _model(cfg, weights, copy=False):
    """The `Model` of a run of layers from their parameters (module order): views of
    them, or with ``copy`` copies."""
    arrays = [host(w) for w in weights]
    if copy:
        arrays = [a.copy() for a in arrays]
    layers = []
    for row in _directions(cfg, arrays):
        layers.append(tuple(Layer(U, W) if not biases else
                            Layer(U, W, biases[0], biases[1]) if cfg.cell == "gru" else
                            Layer(U, W, biases[0] + biases[1])
                            for U, W, *biases in row))
    return Model(tuple(layers))


def _pairs(cfg, items):
    """The (weight_ih, weight_hh) items of each layer and direction, ``[l][d]``, of a
    list in the module's order of parameters."""
    return [[tuple(group[:2]) for group in row] for row in _directions(cfg, items)]


def _weight_grads(cfg, grads):
    """The gradients of `_model`'s parameters, in the module's order, as tensors."""
    out = []
    for row in grads.layers:
        for g in row:
            out += [g.U, g.W]
            if cfg.bias:
                out += [g.b, g.bh] if cfg.cell == "gru" else [g.b, g.b.copy()]
    return [torch.from_numpy(a) for a in out]


def _options(cfg, h0, c0):
    return dict(cell=cfg.cell, activation=cfg.activation, h0=_numpy(h0), c0=_numpy(c0),
                lengths=cfg.lengths, check_finite=False, time_major=cfg.time_major)


def _outputs(cfg, out):
    return (torch.from_numpy(out.h), torch.from_numpy(out.h_final), _tensor(out.c_final))


def _read_back(cfg, weights, dx):
    """The weights whose values the backward pass reads: every weight_hh, and weight_ih
    but the first layer's when dx is not needed (dU needs x alone); no bias (b, and the
    GRU's W_n h + b_hn, are kept from the forward pass). Saved, a change in place before
    the backward pass (an optimizer step, say) raises there, as in PyTorch's modules,
    rather than give the gradients of neither the old values nor the new."""
    per = 4 if cfg.bias else 2
    first = per * cfg.directions
    return [w for i, w in enumerate(weights)
            if i % per == 1 or i % per == 0 and (dx or i >= first)]


# The saved-tensors hooks that hand the holder back as it was saved: the checkpoint's,
# which recompute the forward pass (and with it a holder carrying ``back``, from the
# weights as they are then, as PyTorch's modules do). ``save_on_cpu``'s are not among
# them: with ``pin_memory=True`` they pack a copy.
_HOLDER_KEEPING_HOOKS = ("torch.utils.checkpoint",)


def _hooks_may_copy():
    """Whether other saved-tensors hooks are active, which may pack a copy of the holder
    (compressed, or pickled to disk) without ``back``, and of the weights, whose version
    autograd then does not check. False where this PyTorch cannot say (the function that
    tells is private)."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    try:
        hooks = None if top is None else top(False)
    except (TypeError, RuntimeError):
        return False
    return hooks is not None and getattr(hooks[0], "__module__", None) not in \
        _HOLDER_KEEPING_HOOKS


class _Layers(torch.autograd.Function):
    """Forward: `fastbptt.layer.vjp`; backward: its ``back``."""

    @staticmethod
    def forward(ctx, cfg, x, h0, c0, *weights):
        # Under hooks that may copy, autograd checks no saved tensor's version, and the
        # backward pass would read weights changed in place since (an optimizer step,
        # say): it gets copies, and the gradients of the weights the forward pass read,
        # as PyTorch's modules give from their saved copies.
        hooked = _hooks_may_copy()
        out, back = _layer.vjp(host(x), _model(cfg, weights, copy=hooked),
                               **_options(cfg, h0, c0), truncate=cfg.truncate,
                               stride=cfg.stride)
        ctx.cfg, ctx.like = cfg, (out.h.shape, out.h.dtype)
        # ``back`` (the forward pass's states) rides on an empty tensor saved with the
        # weights: autograd frees saved tensors after the backward pass unless told to
        # retain the graph, and ``back`` goes with it, as a native module's states do
        # (kept on ctx, it lived as long as the graph: the loss tensor, say). Under the
        # caller's saved-tensors hooks (torch.autograd.graph.saved_tensors_hooks) the
        # holder may be packed into a copy, or pickled to disk, without it: ``back`` is
        # kept on ctx as well then.
        holder = torch.empty(0)
        holder.fastbptt_back = back
        ctx.fastbptt_back = back if hooked else None
        # the weights themselves (not copies) and where their memory is, for new views of
        # them in the backward pass if it has moved
        ctx.fastbptt_weights = None if hooked else weights
        ctx.fastbptt_where = None if hooked else [w.data_ptr() for w in weights]
        # the weights are saved for autograd's check of their versions, which it makes
        # only where no hooks are (under hooks, `back` has copies of them)
        ctx.save_for_backward(holder, *(() if hooked else
                                        _read_back(cfg, weights, ctx.needs_input_grad[1])))
        ctx.set_materialize_grads(False)
        return _outputs(cfg, out)

    @staticmethod
    def backward(ctx, dh, dh_n, dc_n):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "fastbptt.torch computes first derivatives only: double backward "
                "(create_graph=True, e.g. a gradient penalty) is not supported; use "
                "torch.nn.RNN/GRU/LSTM for that")
        holder = ctx.saved_tensors[0]       # raises if a weight changed since forward
        back = getattr(holder, "fastbptt_back", None)
        if back is not None:
            ctx.fastbptt_back = None        # the hooks handed the holder back: it goes with it
        back = back or ctx.fastbptt_back
        if back is None:
            raise RuntimeError(
                "fastbptt.torch lost the layer's forward state: a saved-tensors hook packed "
                "a copy of what autograd saved, and this PyTorch does not let fastbptt see "
                "such hooks; run the layer outside them")
        cfg = ctx.cfg
        refuse_batched(_NAMES[cfg.cell], (dh, dh_n, dc_n))
        # PyTorch's efficient zero tensors, which hold no memory, are zeros as None is
        dh = np.zeros(*ctx.like) if dh is None or dh._is_zerotensor() else host(dh)
        dh_n = None if dh_n is None or dh_n._is_zerotensor() else dh_n
        dc_n = None if dc_n is None or dc_n._is_zerotensor() else dc_n
        weights = ctx.fastbptt_weights
        where = None if weights is None else [w.data_ptr() for w in weights]
        if where != ctx.fastbptt_where:             # moved (module docstring)
            back._read_weights_from(_pairs(cfg, [host(w) for w in weights]),
                                    _pairs(cfg, ctx.fastbptt_where))
            ctx.fastbptt_where = where              # for a backward pass again (retain_graph)
        r = back(dh, _numpy(dh_n), _numpy(dc_n))
        dh0 = _tensor(r.dh0) if ctx.needs_input_grad[2] else None
        dc0 = _tensor(r.dc0) if ctx.needs_input_grad[3] else None
        return (None, _tensor(r.dx), dh0, dc0, *_weight_grads(cfg, r.grads))


_NAMES = {"elman": "RNN", "gru": "GRU", "lstm": "LSTM"}


def refuse_transforms(name, tensors):
    """TypeError where a ``torch.func`` transform (``vmap``, ``grad``, ``jvp``, ...) wraps
    a tensor: fastbptt reads tensors' memory through NumPy, which such a tensor has not;
    and where a tensor carries a tangent of forward-mode AD, which NumPy would drop."""
    wrapped = torch._C._functorch.is_functorch_wrapped_tensor
    if any(t is not None and wrapped(t) for t in tensors):
        raise TypeError(f"fastbptt.torch.{name} cannot run under the torch.func transforms "
                        f"(vmap, grad, jvp, ...): its kernels read the tensors' memory through "
                        f"NumPy. Call the module as it is (a batch for vmap, backward for "
                        f"grad), or use torch.nn.{name}")
    if _dual(tensors):
        raise TypeError(f"fastbptt.torch.{name} has no forward-mode derivative "
                        f"(torch.autograd.forward_ad): its kernels compute reverse-mode "
                        f"gradients only. Use backward, or torch.nn.{name} for forward mode")


def _dual(tensors):
    """Whether a tensor carries a forward-mode tangent at the level open (False, at the
    cost of one lookup, where none is)."""
    level = getattr(forward_ad, "_current_level", None)
    if level is not None and level < 0:
        return False
    try:
        return any(t is not None and forward_ad.unpack_dual(t).tangent is not None
                   for t in tensors)
    except RuntimeError:                # no level open, in a PyTorch without the global
        return False


def refuse_batched(name, grads):
    """TypeError for the batched gradients of ``torch.autograd.grad(...,
    is_grads_batched=True)`` (and of the Jacobians that use it), which reach the backward
    pass as batched tensors of PyTorch's legacy vmap."""
    functorch = torch._C._functorch
    batched = getattr(functorch, "is_legacy_batchedtensor", None)
    if any(g is not None and (functorch.is_functorch_wrapped_tensor(g) or
                              batched is not None and batched(g)) for g in grads):
        raise TypeError(f"fastbptt.torch.{name} cannot take batched gradients "
                        f"(torch.autograd.grad with is_grads_batched=True, "
                        f"torch.autograd.functional.jacobian with vectorize=True): its "
                        f"kernels read them through NumPy. Run the backward pass once per "
                        f"gradient (vectorize=False), or use torch.nn.{name}")


def run(cfg, x, h0, c0, weights):
    """(output, h_n, c_n) of one call; see the module's docstring."""
    tensors = (x, h0, c0, *weights)
    refuse_transforms(_NAMES[cfg.cell], tensors)
    if (torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
            and any(t is not None and t.requires_grad for t in tensors)):
        return _Layers.apply(cfg, x, h0, c0, *weights)
    out = _layer.forward(host(x), _model(cfg, weights), **_options(cfg, h0, c0))
    return _outputs(cfg, out)
