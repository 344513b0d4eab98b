"""The parameter containers: `Params` (one Elman layer and its head), `Layer` (one
direction of one recurrent layer) and `Model` (a stack of layers, optionally with a head).

`grad` returns gradients in the structure it was given, so this module knows how to read
each structure and how to build the same structure back:

- one Elman layer with its head: a `Params(U, W, V, b, c)`, a dict with keys U, W, V (and
  optionally b, c), or a tuple/list (U, W, V) or (U, W, V, b, c) (`read_structure`);
- a stack: a `Model(layers, V, c)` or a dict with keys ``layers``, ``V``, ``c``, where
  ``layers[l][d]`` is direction d (0 forward, 1 reverse) of layer l, each a `Layer`, a dict
  with keys U, W (b, bh) or a tuple (U, W[, b[, bh]]) (`read_model`);
- one layer for `fastbptt.layer`: a `Layer`, such a dict or such a tuple (`read_layer`).

`leaves` names every array of any of them, for optimizers, clipping and checkpoints, and
`from_leaves` builds a `Params` or a `Model` back from those names.
"""
from __future__ import annotations

import math
import re
from typing import NamedTuple, Optional

import numpy as np

__all__ = ["Params", "Layer", "Model", "init_params", "CELLS", "leaves", "from_leaves",
           "leaf_shapes", "LeafError"]

REQUIRED = ("U", "W", "V")
OPTIONAL = ("b", "c")
NAMES = REQUIRED + OPTIONAL
LAYER_NAMES = ("U", "W", "b", "bh")
# cell name -> rows of W per hidden unit (W is (G H, H)): gates in PyTorch's order (SPEC.md §6)
CELLS = {"elman": 1, "gru": 3, "lstm": 4}


class Params(NamedTuple):
    """Weights of an Elman RNN (SPEC.md §1).

    U is (H, L) input to hidden, W is (H, H) hidden to hidden, V is (C, H) hidden to
    output; the biases b (H,) and c (C,) are optional (None means no bias).
    """

    U: np.ndarray
    W: np.ndarray
    V: np.ndarray
    b: Optional[np.ndarray] = None
    c: Optional[np.ndarray] = None

    @property
    def sizes(self) -> tuple[int, int, int]:
        """(input_size, hidden_size, output_size) = (L, H, C)."""
        H, L = np.shape(self.U)
        return L, H, np.shape(self.V)[0]


class Layer(NamedTuple):
    """One direction of one recurrent layer, in PyTorch's orientation (SPEC.md §6).

    U (G H, in) is ``weight_ih``, W (G H, H) is ``weight_hh``, with G = 1 (Elman), 3 (GRU,
    rows r, z, n) or 4 (LSTM, rows i, f, g, o). b (G H,) is the input-side bias; for Elman
    and LSTM it is ``bias_ih + bias_hh`` (they act only through their sum). bh (3 H,) is
    the GRU's hidden-side bias ``bias_hh``, kept apart because b_hn sits inside r * (...);
    other cells have none. None means no bias.
    """

    U: np.ndarray
    W: np.ndarray
    b: Optional[np.ndarray] = None
    bh: Optional[np.ndarray] = None

    @property
    def cell(self) -> str:
        """'elman', 'gru' or 'lstm', read off W's shape."""
        return cell_of(np.shape(self.W))


class Model(NamedTuple):
    """A stack of recurrent layers and, optionally, its output layer.

    ``layers[l][d]`` is a `Layer`: direction d (0 forward, 1 reverse) of layer l; every
    layer has the same number of directions. Layer 0 reads the inputs (L features or ids);
    layer l > 0 reads the outputs of layer l - 1, H times the directions wide. V (C, H D)
    and c (C,) are the output layer over the top layer's outputs (None in a model used
    with `fastbptt.layer` alone).
    """

    layers: tuple
    V: Optional[np.ndarray] = None
    c: Optional[np.ndarray] = None

    @property
    def num_layers(self) -> int:
        """The number of layers, len(layers)."""
        return len(self.layers)

    @property
    def directions(self) -> int:
        """1, or 2 for a bidirectional stack: the entries of each layer (ValueError for a
        model without layers)."""
        if not len(self.layers):
            raise ValueError("the model has no layers")
        return len(self.layers[0])

    @property
    def cell(self) -> str:
        """'elman', 'gru' or 'lstm', read off the first layer's W (any of a layer's
        forms: a `Layer`, a dict or a tuple)."""
        if not len(self.layers) or not len(self.layers[0]):
            raise ValueError("the model has no layers")
        layer, _ = _layer_entry(self.layers[0][0], "layers[0][0]")
        return layer.cell


def cell_of(W_shape):
    """The cell a recurrent weight of this shape belongs to ('elman', 'gru', 'lstm')."""
    rows, H = W_shape
    for name, gates in CELLS.items():
        if rows == gates * H:
            return name
    raise ValueError(f"params W must have 1, 3 or 4 times as many rows as columns (Elman, "
                     f"GRU, LSTM); got {tuple(W_shape)}")


def generator(seed, name="seed"):
    """``np.random.default_rng(seed)``, with the TypeError or ValueError naming the argument
    ``name`` (and refusing a bool, which NumPy reads as 0 or 1)."""
    what = f"{name} must be None, a non-negative int seed or a numpy Generator; got {seed!r}"
    if isinstance(seed, (bool, np.bool_)):
        raise TypeError(what)
    try:
        return np.random.default_rng(seed)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{what} ({error})") from None


def init_params(input_size, hidden_size, output_size, *, cell="elman", num_layers=1,
                bidirectional=False, bias=True, dtype=np.float32, seed=None):
    """New parameters, every entry uniform in [-1/sqrt(H), 1/sqrt(H)] with H = hidden_size.

    That is how PyTorch's ``nn.RNN``/``nn.GRU``/``nn.LSTM`` draw each of their weights and
    biases, so the recurrence starts neither saturated nor vanishing. It is not PyTorch's
    draw in two places: one bias b stands for PyTorch's bias_ih + bias_hh (a sum of two
    such draws there), and the head V, c is drawn on the same scale, where an
    ``nn.Linear`` over the top layer's H D outputs draws from ±1/sqrt(H D). For PyTorch's
    exact initial weights, build the modules and convert them with `from_torch`.

    Parameters
    ----------
    input_size, hidden_size, output_size : int
        L (vocabulary or feature count), H, and C (classes or output features).
    cell : {"elman", "gru", "lstm"}
    num_layers : int
        Layers in the stack; layer l > 0 reads the outputs of layer l - 1.
    bidirectional : bool
        Give every layer a reverse direction as well (SPEC.md §8).
    bias : bool
        Include the biases (b, bh for GRU, and c) or set them to None.
    dtype : float32 or float64
        The compute dtype of every call that uses these parameters.
    seed : int, numpy.random.Generator or None
        Seed for reproducible weights.

    Returns
    -------
    Params or Model
        A `Params` (U, W, V, b, c) for one unidirectional Elman layer, drawn as before
        stacks existed; otherwise a `Model` whose ``layers[l][d]`` are `Layer` objects,
        drawn layer by layer, forward before reverse, U, W, b, bh each, then V and c.
    """
    _check_model_args(input_size, hidden_size, output_size, cell, num_layers, bidirectional,
                      bias)
    try:
        floats = dtype is not None and np.dtype(dtype) in (np.float32, np.float64)
    except TypeError:                       # not a dtype at all: "foo", object()
        floats = False
    if not floats:
        raise TypeError(f"dtype must be float32 or float64 (np.float32, 'float64', ...); "
                        f"got {dtype!r}")
    dtype = np.dtype(dtype)
    rng = generator(seed, "seed")
    scale = 1.0 / math.sqrt(hidden_size)

    def draw(*shape):
        return rng.uniform(-scale, scale, size=shape).astype(dtype)

    shapes = leaf_shapes(input_size, hidden_size, output_size, cell=cell,
                         num_layers=num_layers, bidirectional=bidirectional, bias=bias)
    count = sum(math.prod(shape) for shape in shapes.values())
    if count > np.iinfo(np.intp).max // dtype.itemsize:
        raise ValueError(f"these sizes make {count:,} parameters, more than memory can hold")
    return from_leaves({name: draw(*shape) for name, shape in shapes.items()})


def _check_model_args(input_size, hidden_size, output_size, cell, num_layers, bidirectional,
                      bias):
    """TypeError or ValueError naming the first argument of a model's sizes that is not
    one (`init_params`, `leaf_shapes`)."""
    sizes = {"input_size": input_size, "hidden_size": hidden_size, "output_size": output_size,
             "num_layers": num_layers}
    for name, value in sizes.items():
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int; got {type(value).__name__}")
        if value < 1:
            raise ValueError(f"{name} must be at least 1; got {value}")
    if not isinstance(cell, str) or cell not in CELLS:
        raise ValueError(f"unknown cell {cell!r}; valid cells are "
                         f"{', '.join(map(repr, CELLS))}")
    for name, flag in (("bidirectional", bidirectional), ("bias", bias)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{name} must be True or False; got {flag!r}")


def leaf_shapes(input_size, hidden_size, output_size, *, cell="elman", num_layers=1,
                bidirectional=False, bias=True):
    """{name: shape} of the arrays `init_params` makes with these arguments, under the
    names of `leaves` and in its order (which is the order they are drawn in)."""
    _check_model_args(input_size, hidden_size, output_size, cell, num_layers, bidirectional,
                      bias)
    # Python ints: NumPy's fixed-width ones would wrap around in G H and in the caller's
    # count of the parameters
    L, H, C, num_layers = map(int, (input_size, hidden_size, output_size, num_layers))
    if cell == "elman" and num_layers == 1 and not bidirectional:
        shapes = {"U": (H, L), "W": (H, H), "V": (C, H)}
        if bias:
            shapes.update(b=(H,), c=(C,))
        return shapes
    G, D = CELLS[cell], 2 if bidirectional else 1
    shapes = {}
    for l in range(num_layers):
        for d in range(D):
            shapes[f"layers.{l}.{d}.U"] = (G * H, L if l == 0 else H * D)
            shapes[f"layers.{l}.{d}.W"] = (G * H, H)
            if bias:
                shapes[f"layers.{l}.{d}.b"] = (G * H,)
            if bias and cell == "gru":
                shapes[f"layers.{l}.{d}.bh"] = (G * H,)
    shapes["V"] = (C, H * D)
    if bias:
        shapes["c"] = (C,)
    return shapes


def _record(value, names):
    """A NamedTuple of the caller's (not fastbptt's own) with a field named as one of
    ``names``: read by its field names, as a dict, not by position (W declared before U
    must not be taken for U). None for anything else."""
    fields = getattr(type(value), "_fields", None)
    if (isinstance(value, tuple) and not isinstance(value, (Params, Layer, Model))
            and isinstance(fields, tuple) and set(fields) & set(names)):
        return value._asdict()
    return None


def read_structure(params, name="params"):
    """Split ``params`` into a `Params` of raw values and a function that rebuilds the structure.

    Accepts a `Params`, a dict with keys U, W, V and optionally b, c (rebuilt in the
    caller's key order), a NamedTuple with those fields (read by name, rebuilt as its own
    type), or a tuple or list (U, W, V) or (U, W, V, b, c) (rebuilt as the same type;
    other tuple subclasses come back as plain tuples). Errors call it ``name``.
    """
    if isinstance(params, Params):
        return params, lambda g: g
    named = _record(params, NAMES)
    if named is not None:
        value, rebuild = read_structure(named, name)
        return value, lambda g: type(params)(**rebuild(g))
    if isinstance(params, dict):
        missing = [k for k in REQUIRED if k not in params]
        if missing:
            raise ValueError(
                f"{name} is missing key(s) {', '.join(map(repr, missing))}; a params dict "
                f"needs 'U', 'W', 'V' and may have 'b', 'c' (got keys {sorted(map(str, params))})"
            )
        extra = [k for k in params if k not in NAMES]
        if extra:
            raise ValueError(
                f"{name} has unknown key(s) {', '.join(map(repr, extra))}; valid keys are "
                "'U', 'W', 'V', 'b', 'c'"
            )
        keys = list(params)                       # the caller's order
        value = Params(*(params.get(k) for k in NAMES))
        return value, lambda g: {k: getattr(g, k) for k in keys}
    if isinstance(params, Layer):
        raise ValueError(
            f"{name} is a fastbptt.Layer, one recurrent layer without an output layer (V, "
            f"c): pass fastbptt.Model(((layer,),), V, c), or use fastbptt.layer.vjp for a "
            f"loss of your own")
    if isinstance(params, (tuple, list)):
        kind = type(params) if type(params) in (tuple, list) else tuple
        if len(params) in (3, 5):
            return Params(*params), lambda g: kind(g[:len(params)])
        raise ValueError(
            f"{name} as a sequence must be (U, W, V) or (U, W, V, b, c); got {len(params)} items"
        )
    raise TypeError(
        f"{name} must be a fastbptt.Params, a dict with keys 'U', 'W', 'V' (and optionally "
        f"'b', 'c') or a tuple (U, W, V[, b, c]); got {type(params).__name__}"
    )


def _layer_entry(value, where):
    """(Layer of raw values, rebuild) for one direction of one layer: a `Layer`, a dict
    with keys U, W (b, bh), a NamedTuple with those fields (read by name, rebuilt as
    its own type) or a tuple/list (U, W[, b[, bh]])."""
    if isinstance(value, Layer):
        return value, lambda g: g
    named = _record(value, LAYER_NAMES)
    if named is not None:
        layer, rebuild = _layer_entry(named, where)
        return layer, lambda g: type(value)(**rebuild(g))
    if isinstance(value, dict):
        missing = [k for k in ("U", "W") if k not in value]
        extra = [k for k in value if k not in LAYER_NAMES]
        if missing or extra:
            problem = (f"is missing key(s) {', '.join(map(repr, missing))}" if missing
                       else f"has unknown key(s) {', '.join(map(repr, extra))}")
            raise ValueError(f"{where} {problem}; a layer dict needs 'U', 'W' and may have "
                             f"'b', 'bh' (got keys {sorted(map(str, value))})")
        keys = list(value)
        return (Layer(*(value.get(k) for k in LAYER_NAMES)),
                lambda g: {k: getattr(g, k) for k in keys})
    if isinstance(value, (tuple, list)) and not isinstance(value, (Params, Model)):
        kind = type(value) if type(value) in (tuple, list) else tuple
        if 2 <= len(value) <= 4:
            return Layer(*value), lambda g: kind(g[:len(value)])
        raise ValueError(f"{where} as a sequence must be (U, W), (U, W, b) or (U, W, b, bh); "
                         f"got {len(value)} items")
    raise TypeError(f"{where} must be a fastbptt.Layer, a dict with keys 'U', 'W' (and "
                    f"optionally 'b', 'bh') or a tuple (U, W[, b[, bh]]); got "
                    f"{type(value).__name__}")


def _is_stack(params):
    return isinstance(params, Model) or (isinstance(params, dict) and "layers" in params)


def _read_stack(params, name="params"):
    """(Model of raw values, rebuild) for a `Model` or a dict with keys layers, V, c;
    errors call it ``name``."""
    if isinstance(params, dict):
        extra = [k for k in params if k not in ("layers", "V", "c")]
        if extra:
            raise ValueError(f"{name} has unknown key(s) {', '.join(map(repr, extra))}; a "
                             "stack's dict has 'layers' and may have 'V', 'c'")
        layers, V, c = params["layers"], params.get("V"), params.get("c")
        keys = list(params)
        outer = lambda g: {k: getattr(g, k) for k in keys}        # noqa: E731
    else:
        layers, V, c = params
        outer = lambda g: g                                      # noqa: E731
    if not isinstance(layers, (tuple, list)) or not layers:
        raise ValueError(f"{name} layers must be a non-empty sequence of layers, each a "
                         "sequence of one Layer per direction (forward, then reverse)")
    read, kinds = [], []
    for l, directions in enumerate(layers):
        if isinstance(directions, (Layer, dict)) or not isinstance(directions, (tuple, list)):
            raise TypeError(f"{name} layers[{l}] must be a sequence of one layer per direction "
                            f"(forward, then reverse), e.g. (Layer(U, W),); got "
                            f"{type(directions).__name__}")
        if len(directions) not in (1, 2) or len(directions) != len(layers[0]):
            raise ValueError(f"{name} layers[{l}] has {len(directions)} directions; every layer "
                             f"needs the same number, 1 or 2 (layers[0] has {len(layers[0])})")
        entries = [_layer_entry(d, f"{name} layers[{l}][{i}]") for i, d in enumerate(directions)]
        read.append(tuple(e[0] for e in entries))
        kinds.append((type(directions) if type(directions) in (tuple, list) else tuple,
                      [e[1] for e in entries]))
    outer_layers = type(layers) if type(layers) in (tuple, list) else tuple

    def rebuild(g):
        rebuilt = outer_layers(kind(f(d) for f, d in zip(fs, gl))
                               for (kind, fs), gl in zip(kinds, g.layers))
        return outer(Model(rebuilt, g.V, g.c))

    return Model(tuple(read), V, c), rebuild


def read_model(params):
    """(Model of raw values, rebuild, stacked) for any params that `grad` accepts.

    One Elman layer with its head (`read_structure`'s kinds) reads as a one-layer Model
    whose gradients rebuild into the caller's structure; ``stacked`` is False for those,
    True for a `Model` or a dict with ``layers``.
    """
    if _is_stack(params):
        model, rebuild = _read_stack(params)
        return model, rebuild, True
    p, rebuild_params = read_structure(params)
    model = Model(((Layer(p.U, p.W, p.b),),), p.V, p.c)

    def rebuild(g):
        layer = g.layers[0][0]
        return rebuild_params(Params(layer.U, layer.W, g.V, layer.b, g.c))

    return model, rebuild, False


def read_layer(params):
    """(Model of raw values without a head, rebuild, stacked) for the layer API: one
    layer (`Layer`, dict or tuple) or a stack (`Model` or a dict with ``layers``; its
    head, if any, is not used and its gradients are None)."""
    if _is_stack(params):
        model, rebuild = _read_stack(params)
        return Model(model.layers), rebuild, True
    if isinstance(params, Params) or (isinstance(params, dict) and "V" in params):
        raise TypeError("a layer's params are U, W and optionally b (and bh for a GRU), with "
                        "no output layer: pass fastbptt.Layer(p.U, p.W, p.b), or use "
                        "fastbptt.bptt for the model with its head")
    layer, rebuild_layer = _layer_entry(params, "params")
    return Model(((layer,),)), lambda g: rebuild_layer(g.layers[0][0]), False


def leaves(params, what="params"):
    """{name: array} of every array in any params structure, in a fixed order:
    U, W, V, b, c for one layer with its head; U, W, b, bh for a `Layer`;
    ``layers.<l>.<d>.<name>`` then V, c for a stack. Absent biases are left out. Errors
    call the structure ``what`` ("grads" for gradients)."""
    if _is_stack(params):
        model, _ = _read_stack(params, what)
        out = {}
        for l, directions in enumerate(model.layers):
            for d, layer in enumerate(directions):
                for name, value in zip(LAYER_NAMES, layer):
                    if value is not None:
                        out[f"layers.{l}.{d}.{name}"] = value
        for name in ("V", "c"):
            value = getattr(model, name)
            if value is not None:
                out[name] = value
        return out
    named = _record(params, NAMES + LAYER_NAMES)
    if named is not None:
        params = named
    if _is_layer_sequence(params):
        params = Layer(*params)
    if isinstance(params, Layer) or (isinstance(params, dict) and "V" not in params
                                     and "U" in params):
        layer, _ = _layer_entry(params, what)
        return {k: v for k, v in zip(LAYER_NAMES, layer) if v is not None}
    p, _ = read_structure(params, what)
    return {k: v for k, v in zip(NAMES, p) if v is not None}


def _is_layer_sequence(params):
    """A plain tuple or list that is one layer, (U, W[, b[, bh]]): 2 or 4 entries, or 3
    whose last is a vector (a bias b; a head's V is a matrix)."""
    return type(params) in (tuple, list) and (
        len(params) in (2, 4) or (len(params) == 3 and np.ndim(params[2]) == 1))


_STACK_LEAF = re.compile(r"layers\.(0|[1-9][0-9]*)\.([01])\.(U|W|b|bh)\Z")


def is_leaf_name(name):
    """Whether ``name`` is one that `leaves` gives to some array."""
    return name in NAMES or name in LAYER_NAMES or bool(_STACK_LEAF.match(name))


class LeafError(ValueError):
    """A name `from_leaves` cannot place: ``missing`` (a required array is absent) or not."""

    def __init__(self, name, missing):
        super().__init__(f"{'no array' if missing else 'unknown name'} {name!r}")
        self.name, self.missing = name, missing


def from_leaves(named):
    """`leaves` undone: a `Params` from the names U, W, V (b, c), or a `Model` from
    ``layers.<l>.<d>.<name>`` with V (and c). The arrays themselves go into the structure,
    not copies. `LeafError` names an unknown name or a missing required array: U, W, V for
    a `Params`; U and W of every layer and direction, and V, for a `Model`."""
    if not hasattr(named, "items"):
        raise TypeError(f"named must be a dict of arrays by name (as leaves returns); got "
                        f"{type(named).__name__}")
    odd = next((name for name in named if not isinstance(name, str)), None)
    if odd is not None:
        raise LeafError(odd, False)
    if not any(name.startswith("layers.") for name in named):
        for name in named:
            if name not in NAMES:
                raise LeafError(name, False)
        for name in REQUIRED:
            if name not in named:
                raise LeafError(name, True)
        return Params(*(named.get(name) for name in NAMES))
    found = {}
    for name, value in named.items():
        match = _STACK_LEAF.match(name)
        if match:
            found.setdefault((int(match[1]), int(match[2])), {})[match[3]] = value
        elif name not in ("V", "c"):
            raise LeafError(name, False)
    depth = 1 + max(l for l, _ in found)
    directions = 1 + max(d for _, d in found)
    for l in range(depth):
        for d in range(directions):
            for name in ("U", "W"):
                if name not in found.get((l, d), {}):
                    raise LeafError(f"layers.{l}.{d}.{name}", True)
    if "V" not in named:
        raise LeafError("V", True)
    layers = tuple(tuple(Layer(*(found[l, d].get(k) for k in LAYER_NAMES))
                         for d in range(directions)) for l in range(depth))
    return Model(layers, named["V"], named.get("c"))
