"""Weights to and from PyTorch's ``nn.RNN``, ``nn.LSTM``, ``nn.GRU`` and ``nn.Linear``.

fastbptt's layers use PyTorch's orientation and gate order (SPEC.md §6), so a state dict
converts without reordering::

    model = fastbptt.from_torch(rnn.state_dict(), linear.state_dict())
    fastbptt.bptt(x, y, model, activation="relu")     # if rnn is nn.RNN(nonlinearity="relu")
    rnn_sd, head_sd = fastbptt.to_torch(model)
    rnn.load_state_dict({k: torch.from_numpy(v) for k, v in rnn_sd.items()})

A state dict does not say an ``nn.RNN``'s nonlinearity: pass ``activation="relu"`` to the
calls for ``nonlinearity="relu"`` (tanh is the default of both). Elman and LSTM layers act
through the sum of their two biases, so `from_torch` stores b = bias_ih + bias_hh and
`to_torch` returns bias_ih = b, bias_hh = 0: the same function. A GRU keeps both (b_hn acts
inside r * (...)), so its round trip returns the same tensors. Nothing here imports torch:
tensors are read through ``.detach().cpu().numpy()``.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from ._inputs import FLOAT_DTYPES
from ._masks import refuse_masked
from ._params_check import check_layers, check_model
from .params import CELLS, LAYER_NAMES, NAMES, Layer, Model, Params, _is_layer_sequence, _record

__all__ = ["from_torch", "to_torch"]

_KEY = re.compile(r"(weight_ih|weight_hh|bias_ih|bias_hh)_l(0|[1-9][0-9]*)(_reverse)?")
_SUFFIXES = ("", "_reverse")


def _numpy(value, name, converting):
    """A tensor (duck-typed) or array as a NumPy array; bfloat16, which NumPy lacks, as
    float32 (exactly) when ``converting`` to a dtype given."""
    if hasattr(value, "detach"):
        if getattr(value, "is_meta", False):
            raise TypeError(f"{name} is a tensor on the 'meta' device, which holds no "
                            f"values; load or initialise the module's weights first")
        value = value.detach().cpu()
        if str(value.dtype) == "torch.bfloat16":
            if not converting:
                raise TypeError("the state dicts hold bfloat16; pass dtype=np.float32 or "
                                "np.float64 to convert them")
            value = value.float()
        value = value.clone().numpy()   # (Tensor.numpy() marks the tensor's own storage
        # as never to be resized again: FSDP, which frees parameters so, could not train it)
    refuse_masked(name, value)
    arr = np.asarray(value)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must hold floats; got dtype {arr.dtype}")
    if not arr.dtype.isnative:                     # '>f8' is float64 all the same
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def _state_dict(value, what, converting):
    """{key: array} of a state dict (or of a module's ``state_dict()``)."""
    if callable(getattr(value, "state_dict", None)):
        value = value.state_dict()
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a state dict (a mapping of names to tensors or "
                        f"arrays) or a module; got {type(value).__name__}")
    return {str(k): _numpy(v, f"{what}[{k!r}]", converting) for k, v in value.items()}


def _dtype(named, dtype):
    """The dtype of the result: ``dtype``, or the one the arrays of ``named`` (name ->
    array) share."""
    if dtype is None:
        found = {}
        for name, a in named.items():
            found.setdefault(str(a.dtype), []).append(name)
        if len(found) != 1 or np.dtype(next(iter(found))) not in FLOAT_DTYPES:
            held = "; ".join(f"{kind} ({', '.join(names[:3])}"
                             f"{f' and {len(names) - 3} more' if len(names) > 3 else ''})"
                             for kind, names in sorted(found.items()))
            raise TypeError(f"the state dicts hold {held}; pass dtype=np.float32 or "
                            f"np.float64 to convert them")
        return named[next(iter(named))].dtype
    if str(dtype).startswith("torch."):            # torch.float32 names NumPy's float32
        dtype = str(dtype)[len("torch."):]
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"dtype must be float32 or float64; got {dtype!r}") from None
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be float32 or float64; got {dtype}")
    return dtype


def _keys(state):
    """(num_layers, directions, bias) read off the keys, which must be exactly these."""
    if any(k.rpartition(".")[2].startswith("weight_hr_l") for k in state):
        raise ValueError("the state dict has weight_hr_l* keys: an LSTM with proj_size > 0, "
                         "which fastbptt does not support")
    unknown = sorted(k for k in state if not _KEY.fullmatch(k))
    prefixes = _rnn_prefixes(state)
    if unknown and prefixes:
        prefix = prefixes[0]
        alone = all(k.startswith(prefix) for k in state)
        where = (f"every key of the RNN state dict starts with {prefix!r}" if alone else
                 f"the RNN's keys carry the prefix {' or '.join(map(repr, prefixes))}")
        raise ValueError(f"{where} (a module inside another, or nn.DataParallel's): pass the "
                         f"RNN's own state dict, e.g. {{k[{len(prefix)}:]: v for k, v in "
                         f"sd.items() if k.startswith({prefix!r})}}"
                         f"{'' if alone else _HEAD_TOO}")
    if unknown:
        raise ValueError(f"unknown key(s) {', '.join(unknown)} in the RNN state dict; expected "
                         "weight_ih_l<k>, weight_hh_l<k>, bias_ih_l<k>, bias_hh_l<k> (and "
                         "their _reverse twins) of nn.RNN, nn.LSTM or nn.GRU")
    matches = [_KEY.fullmatch(k) for k in state]
    if not matches:
        raise ValueError("the RNN state dict is empty")
    num_layers = max(int(m.group(2)) for m in matches) + 1
    D = 2 if any(m.group(3) for m in matches) else 1
    bias = any(m.group(1).startswith("bias") for m in matches)
    names = ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if bias else ())
    total = num_layers * D * len(names) - len(state)    # every key of state is one of them
    if total:
        missing = []        # the first few, layer by layer: a mistyped layer number in a key
        for l in range(num_layers):         # makes num_layers as large as it says
            missing += sorted(k for k in (f"{n}_l{l}{s}" for s in _SUFFIXES[:D] for n in names)
                              if k not in state)
            if len(missing) >= _SHOWN:
                break
        more = f" and {total - _SHOWN} more" if total > _SHOWN else ""
        raise ValueError(f"the RNN state dict is missing {', '.join(missing[:_SHOWN])}{more} "
                         f"(it has {num_layers} layer(s), {D} direction(s), "
                         f"{'with' if bias else 'without'} biases)")
    return num_layers, D, bias


_SHOWN = 8          # missing keys named in the message


_HEAD_TOO = ", and a head Linear's as head_state_dict"


def _rnn_prefixes(state):
    """The dotted prefixes ("rnn.", "module.") before which keys name an RNN's weights,
    most keys first."""
    counts = {}
    for key in state:
        head, dot, tail = key.rpartition(".")
        if dot and _KEY.fullmatch(tail):
            counts[head + "."] = counts.get(head + ".", 0) + 1
    return sorted(counts, key=lambda p: (-counts[p], p))


def _shape(state, key, shape, what=""):
    if state[key].shape != shape:
        raise ValueError(f"{what}{key} must have shape {shape}; got {state[key].shape}")
    return state[key]


def from_torch(rnn_state_dict, head_state_dict=None, *, dtype=None):
    """A `Model` from an ``nn.RNN``/``nn.LSTM``/``nn.GRU`` state dict and, optionally, an
    ``nn.Linear`` head's (``weight``, ``bias``).

    Parameters
    ----------
    rnn_state_dict : mapping or module
        Tensors or arrays under PyTorch's keys (``weight_ih_l0``, ``weight_hh_l0``,
        ``bias_ih_l0``, ``bias_hh_l0``, ``..._reverse``): any number of layers, one or two
        directions, with or without biases. The cell is read off weight_hh's shape (1, 3 or
        4 times as many rows as columns: RNN, GRU, LSTM); an RNN's nonlinearity is not in
        the state dict (pass ``activation="relu"`` to the calls where it is relu). LSTMs with
        ``proj_size`` are refused.
    head_state_dict : mapping or module, optional
        An ``nn.Linear`` over the top layer's outputs: ``weight`` (C, H D), ``bias`` (C,)
        if it has one. It becomes V and c.
    dtype : float32 or float64 (NumPy's or torch's), optional
        The dtype of the result; by default the tensors' own (which must then agree, and
        be float32 or float64: float16 and bfloat16 tensors need it).

    Returns
    -------
    Model
        ``layers[l][d]`` a `Layer` (b = bias_ih + bias_hh for RNN and LSTM; b = bias_ih,
        bh = bias_hh for GRU; None without biases), V and c from the head (None without
        one). The arrays are copies.
    """
    converting = dtype is not None
    state = _state_dict(rnn_state_dict, "rnn_state_dict", converting)
    head = None if head_state_dict is None else _state_dict(head_state_dict, "head_state_dict",
                                                            converting)
    num_layers, D, bias = _keys(state)
    dtype = _dtype({**state, **{f"head {k}": v for k, v in (head or {}).items()}}, dtype)
    W0 = state["weight_hh_l0"]
    rows, H = W0.shape if W0.ndim == 2 else (0, 0)
    cell = next((name for name, g in CELLS.items() if H and rows == g * H), None)
    if cell is None:
        raise ValueError(f"weight_hh_l0 must be (G H, H) with G = 1, 3 or 4 (RNN, GRU, LSTM); "
                         f"got {W0.shape}")
    U0 = state["weight_ih_l0"]
    if U0.ndim != 2 or not U0.shape[1]:
        raise ValueError(f"weight_ih_l0 must be ({rows}, input_size) with input_size >= 1; "
                         f"got shape {tuple(U0.shape)}")
    L = U0.shape[1]
    layers = []
    for l in range(num_layers):
        row = []
        for s in _SUFFIXES[:D]:
            key = f"_l{l}{s}"
            U = _shape(state, "weight_ih" + key, (rows, L if l == 0 else H * D))
            W = _shape(state, "weight_hh" + key, (rows, H))
            b = bh = None
            if bias:
                bi, bhh = (_shape(state, n + key, (rows,)) for n in ("bias_ih", "bias_hh"))
                if cell == "gru":
                    b, bh = bi, bhh
                else:
                    b = np.add(bi, bhh, dtype=np.result_type(bi, bhh, dtype))
            row.append(Layer(*(None if v is None else np.array(v, dtype) for v in (U, W, b, bh))))
        layers.append(tuple(row))
    V = c = None
    if head is not None:
        extra = sorted(set(head) - {"weight", "bias"})
        if extra or "weight" not in head:
            found = sorted({k[:-len("weight")] for k in head if k.endswith(".weight")})
            hint = (f": pass the Linear's own, e.g. {{k[{len(found[0])}:]: v for k, v in "
                    f"sd.items() if k.startswith({found[0]!r})}}" if len(found) == 1 else "")
            raise ValueError(f"head_state_dict must be an nn.Linear's: 'weight' and optionally "
                             f"'bias'; got keys {sorted(head)}{hint}")
        weight = head["weight"]
        if weight.ndim != 2 or not weight.shape[0]:
            raise ValueError(f"head_state_dict weight must be (output_size, {H * D}) with "
                             f"output_size >= 1, an nn.Linear's over the top layer's outputs; "
                             f"got shape {tuple(weight.shape)}")
        top = f"head_state_dict (an nn.Linear over the top layer's {H * D} outputs) "
        V = np.array(_shape(head, "weight", (weight.shape[0], H * D), top), dtype)
        if "bias" in head:
            c = np.array(_shape(head, "bias", (V.shape[0],), top), dtype)
    return Model(tuple(layers), V, c)


def _has_head(params):
    """Whether ``params`` has an output layer (V), or TypeError for what is no params;
    ValueError for a head's c without its V, which would be dropped."""
    named = _record(params, NAMES + LAYER_NAMES)
    value = params if named is None else named
    if isinstance(value, Params):
        return True
    if isinstance(value, (Model, Mapping)):
        V, c = (value.get("V"), value.get("c")) if isinstance(value, Mapping) else \
            (value.V, value.c)
        if V is None and c is not None:
            raise ValueError("params have a head bias c but no V: give V (output_size, H D) "
                             "as well, or leave c out")
        return V is not None
    if isinstance(value, Layer) or _is_layer_sequence(value):
        return False
    if isinstance(value, (tuple, list)):
        return True                                        # (U, W, V[, b, c])
    raise TypeError(f"to_torch takes params as fastbptt.grad or fastbptt.layer.vjp does (a "
                    f"Params, Layer or Model, or a dict or tuple of one); got "
                    f"{type(params).__name__}")


def to_torch(params):
    """``(rnn_state_dict, head_state_dict or None)`` of NumPy arrays under PyTorch's keys.

    ``params`` is anything `fastbptt.grad` or `fastbptt.layer.vjp` takes: a `Params` (one
    Elman layer and its head), a `Layer`, a `Model` (with or without a head), or the dicts,
    tuples and NamedTuples of your own that stand for them. Load the result with
    ``module.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()})`` into an
    ``nn.RNN``/``nn.LSTM``/``nn.GRU`` of the same sizes (``bias=False`` when the params
    have no biases) and an ``nn.Linear``. A single bias b comes back as bias_ih = b,
    bias_hh = 0; a GRU's b and bh as bias_ih and bias_hh. Where some layers have biases and
    others not, the missing ones are zeros. The arrays are copies.
    """
    head = _has_head(params)
    checked = (check_model if head else check_layers)(params, check_finite=False)
    model = checked.model
    any_bias = any(layer.b is not None or layer.bh is not None
                   for row in model.layers for layer in row)
    rnn = {}
    for l, row in enumerate(model.layers):
        for s, layer in zip(_SUFFIXES, row):
            key = f"_l{l}{s}"
            rnn["weight_ih" + key] = np.array(layer.U)
            rnn["weight_hh" + key] = np.array(layer.W)
            if any_bias:
                zeros = np.zeros(layer.W.shape[0], layer.W.dtype)
                rnn["bias_ih" + key] = zeros.copy() if layer.b is None else np.array(layer.b)
                rnn["bias_hh" + key] = zeros if layer.bh is None else np.array(layer.bh)
    if not head:
        return rnn, None
    linear = {"weight": np.array(model.V)}
    if model.c is not None:
        linear["bias"] = np.array(model.c)
    return rnn, linear
