"""Validation of params: every structure `fastbptt.params` reads, for the head and layer APIs.

`check_model` turns any params into a `Checked`: a `Model` of contiguous arrays of the
compute dtype (the params' own arrays where they qualify; treat them as read-only), the
function that rebuilds gradients into the caller's structure, the cell and the sizes.
Messages name the entry (``params W``, ``params layers[1][0] U``), what its shape must be
and why, and what was given.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from . import _inputs as inputs
from .params import CELLS, LAYER_NAMES, Layer, Model, Params, read_layer, read_model

CELL_CODES = {name: code for code, name in enumerate(CELLS)}      # elman 0, gru 1, lstm 2


class Checked(NamedTuple):
    model: Model           # contiguous arrays of `dtype`; V, c are None for layer calls
    rebuild: Callable      # Model of gradients -> the caller's structure
    stacked: bool          # a Model (or dict with layers): states are (layers x directions, B, H)
    cell: str
    sizes: tuple           # (L, H, C); C = 0 without a head
    dtype: np.dtype


def _float_array(name, value):
    arr = inputs._array(name, value, "floats (float32 or float64)")
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must be float32 or float64; got {arr.dtype} "
                        f"(cast with .astype(np.float32))")
    return arr


def _one_dtype(arrays):
    """The dtype every array of ``arrays`` ({name: array}) shares, float32 or float64."""
    dtypes = {a.dtype for a in arrays.values()}
    if len(dtypes) > 1:
        listing = ", ".join(f"{k.replace('params ', '')} {a.dtype}" for k, a in arrays.items())
        raise TypeError(f"params must share one dtype, float32 or float64; got {listing}")
    dtype = dtypes.pop()
    if dtype not in inputs.FLOAT_DTYPES:
        raise TypeError(f"params must be float32 or float64; got {dtype} "
                        f"(cast with .astype(np.float32))")
    return dtype


def _finish(arrays, check_finite):
    """Finite check (in the order given), then contiguous writable arrays for the kernels."""
    for name, arr in arrays.items():
        inputs._check_finite(name, arr, check_finite)
    return {name: inputs._for_kernels(arr) for name, arr in arrays.items()}


def _cell_name(cell, found, where):
    """The cell: ``found`` (read off W's shape), which ``cell``, if given, must equal."""
    if cell is None:
        return found
    if not isinstance(cell, str):
        raise TypeError(f"cell must be a string, one of {', '.join(map(repr, CELLS))}, or "
                        f"None; got {cell!r}")
    if cell not in CELLS:
        raise ValueError(f"unknown cell {cell!r}; valid cells are {', '.join(map(repr, CELLS))}")
    if cell != found:
        raise ValueError(f"cell={cell!r} but {where} is that of {'an' if found[0] in 'ae' else 'a'} "
                         f"{found.upper() if found != 'elman' else 'Elman'} cell; pass "
                         f"cell={found!r} or None, or params of the {cell} cell")
    return cell


def _single(params, cell, check_finite):
    """One Elman layer with its head (`Params`, dict or tuple): the messages of old."""
    model, rebuild, _ = read_model(params)
    layer = model.layers[0][0]
    raw = {"U": layer.U, "W": layer.W, "V": model.V, "b": layer.b, "c": model.c}
    arrays = {}
    for name, value in raw.items():
        if value is None:
            if name in ("U", "W", "V"):
                raise ValueError(f"params {name} is None; U, W and V are required")
            continue
        arrays[f"params {name}"] = _float_array(f"params {name}", value)
    dtype = _one_dtype(arrays)
    U, W, V = (arrays[f"params {k}"] for k in "UWV")
    if U.ndim != 2:
        raise ValueError(f"params U must be 2-D (hidden_size, input_size); got shape {U.shape}")
    H, L = U.shape
    if W.shape != (H, H):
        if W.ndim == 2 and W.shape[1] and W.shape[0] in (3 * W.shape[1], 4 * W.shape[1]):
            raise ValueError(f"params W {W.shape} is a gated cell's, but a Params holds one "
                             "Elman layer; pass a fastbptt.Model (see init_params(cell=...))")
        raise ValueError(f"params W must be ({H}, {H}) to match U {U.shape}; got {W.shape}")
    _cell_name(cell, "elman", f"params W {W.shape}")
    if V.ndim != 2 or V.shape[1] != H:
        raise ValueError(f"params V must be (output_size, {H}) to match U {U.shape}; "
                         f"got {V.shape}")
    C = V.shape[0]
    if H == 0 or L == 0 or C == 0:
        raise ValueError(f"params sizes must be positive; got U {U.shape}, V {V.shape}")
    for name, size in (("b", H), ("c", C)):
        arr = arrays.get(f"params {name}")
        if arr is not None and arr.shape != (size,):
            raise ValueError(f"params {name} must have shape ({size},) to match U {U.shape} "
                             f"and V {V.shape}; got {arr.shape}")
    a = _finish(arrays, check_finite)
    get = lambda k: a.get(f"params {k}")        # noqa: E731
    clean = Model(((Layer(get("U"), get("W"), get("b")),),), get("V"), get("c"))
    return Checked(clean, rebuild, False, "elman", (L, H, C), dtype)


def _layer_arrays(layer, prefix):
    """{'<prefix>U': array, ...} of one direction's present entries."""
    out = {}
    for name, value in zip(LAYER_NAMES, layer):
        if value is None:
            if name in ("U", "W"):
                raise ValueError(f"{prefix}{name} is None; a layer needs U and W")
            continue
        out[prefix + name] = _float_array(prefix + name, value)
    return out


def _stack(model, rebuild, stacked, cell, check_finite, head, prefix_of):
    """Validate a Model of raw values (layers and, with ``head``, V and c)."""
    arrays = {}
    for l, directions in enumerate(model.layers):
        for d, layer in enumerate(directions):
            arrays.update(_layer_arrays(layer, prefix_of(l, d)))
    if head:
        if model.V is None:
            raise ValueError("params V is None; the output layer V is required here "
                             "(fastbptt.layer takes layers without one)")
        arrays["params V"] = _float_array("params V", model.V)
        if model.c is not None:
            arrays["params c"] = _float_array("params c", model.c)
    dtype = _one_dtype(arrays)
    first = prefix_of(0, 0)
    W0 = arrays[first + "W"]
    if W0.ndim != 2 or not W0.shape[1]:
        raise ValueError(f"{first}W must be 2-D (gates x hidden_size, hidden_size) with "
                         f"hidden_size >= 1; got shape {W0.shape}")
    H = W0.shape[1]
    found = next((name for name, g in CELLS.items() if W0.shape[0] == g * H), None)
    if found is None:
        raise ValueError(f"{first}W must have 1, 3 or 4 times as many rows as columns (Elman, "
                         f"GRU, LSTM: rows in PyTorch's gate order); got {W0.shape}")
    cell = _cell_name(cell, found, f"{first}W {W0.shape}")
    G, D = CELLS[cell], len(model.layers[0])
    L = None
    for l, directions in enumerate(model.layers):
        for d in range(D):
            p = prefix_of(l, d)
            U, W = arrays[p + "U"], arrays[p + "W"]
            if W.shape != W0.shape:
                raise ValueError(f"{p}W must be {W0.shape} like {first}W (every layer of a "
                                 f"stack has the same cell and hidden size); got {W.shape}")
            if U.ndim != 2 or U.shape[0] != G * H:
                raise ValueError(f"{p}U must be ({G * H}, input_size) to match {p}W {W.shape}; "
                                 f"got {U.shape}")
            if l == 0:
                if not U.shape[1]:
                    raise ValueError(f"{p}U must have input_size >= 1 columns, one per "
                                     f"input feature or token id; got {U.shape}")
                L = L or U.shape[1]
                if U.shape[1] != L:
                    raise ValueError(f"{p}U must have {L} columns like {first}U (both read "
                                     f"the inputs); got {U.shape}")
            elif U.shape[1] != H * D:
                what = "both directions" if D == 2 else "the outputs"
                raise ValueError(f"{p}U must be ({G * H}, {H * D}) to read {what} of layer "
                                 f"{l - 1} (H={H}{' x 2 directions' if D == 2 else ''}); got "
                                 f"{U.shape}")
            for name in ("b", "bh"):
                bias = arrays.get(p + name)
                if bias is not None and bias.shape != (G * H,):
                    raise ValueError(f"{p}{name} must have shape ({G * H},) to match {p}W "
                                     f"{W.shape}; got {bias.shape}")
            if cell == "gru":
                if p + "b" in arrays and p + "bh" not in arrays:
                    raise ValueError(f"{p}bh is missing: a GRU with biases needs the hidden-side "
                                     f"bias bh ({G * H},) as well as b, since b_hn acts inside "
                                     f"r * (W_n h + b_hn); pass bh (PyTorch's bias_hh)")
            elif p + "bh" in arrays:
                raise ValueError(f"{p}bh is for a GRU only; for the {cell} cell pass one bias "
                                 f"b = bias_ih + bias_hh")
    C = 0
    if head:
        V = arrays["params V"]
        if V.ndim != 2 or V.shape[1] != H * D or not V.shape[0]:
            raise ValueError(f"params V must be (output_size, {H * D}) with output_size >= 1 "
                             f"to read the top layer's outputs (H={H}"
                             f"{' x 2 directions' if D == 2 else ''}); got {V.shape}")
        C = V.shape[0]
        c = arrays.get("params c")
        if c is not None and c.shape != (C,):
            raise ValueError(f"params c must have shape ({C},) to match V {V.shape}; "
                             f"got {c.shape}")
    a = _finish(arrays, check_finite)
    layers = tuple(tuple(Layer(*(a.get(prefix_of(l, d) + k) for k in LAYER_NAMES))
                         for d in range(D)) for l in range(len(model.layers)))
    clean = Model(layers, a.get("params V"), a.get("params c"))
    return Checked(clean, rebuild, stacked, cell, (L, H, C), dtype)


def _stack_prefix(l, d):
    return f"params layers[{l}][{d}] "


def _layer_prefix(l, d):
    return "params "


def check_model(params, *, cell=None, check_finite=True):
    """`Checked` params of a model with its head (`grad` and the other head functions)."""
    model, rebuild, stacked = read_model(params)
    if not stacked:
        return _single(params, cell, check_finite)
    return _stack(model, rebuild, True, cell, check_finite, True, _stack_prefix)


def check_layers(params, *, cell=None, check_finite=True):
    """`Checked` params of one layer or a stack without a head (`fastbptt.layer`)."""
    model, rebuild, stacked = read_layer(params)
    prefix = _stack_prefix if stacked else _layer_prefix
    return _stack(model, rebuild, stacked, cell, check_finite, False, prefix)


def as_params(checked):
    """The `Params` view of one Elman layer with its head (for code written for it)."""
    layer = checked.model.layers[0][0]
    return Params(layer.U, layer.W, checked.model.V, layer.b, checked.model.c)
