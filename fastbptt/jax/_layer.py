"""`rnn`, `gru`, `lstm`: one layer through ``jax.custom_vjp`` and ``jax.pure_callback``.

Shapes, dtypes and options are checked while tracing (a pure callback must not raise);
fastbptt checks values on the host. The params are checked by the NumPy API's own rules
(`fastbptt.params.read_layer` for their structure, `check_layers` for each entry's shape
and the biases a cell takes, run on empty host arrays of the same shapes), so both APIs
refuse the same params with the same messages. Where the values are known (outside
`jit`), fastbptt's own checks of them (token ids, lengths) run before the call too, so
they raise a plain ValueError there. The params' pytree (a `fastbptt.Layer`, a dict with
keys U, W, b, bh, a tuple (U, W[, b[, bh]]), or any pytree of the kind: a NamedTuple, an
OrderedDict) goes to the host as a `fastbptt.Layer` of its leaves, each leaf known by the
entry it is, and the gradients come back in the caller's pytree.

Inside ``jax.shard_map`` (with its default ``check_vma=True``), each device's call works
on its shard: the outputs vary over the mesh axes that any input varies over, and the
gradient of an input that does not vary over some of those axes (parameters replicated
on every device) is the sum over them, as the derivative of the whole computation is.
"""
from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from .. import layer as _layer
from .._bridge_options import check_truncation
from .._inputs import _lengths as _check_lengths, prepare_layer
from .._masks import refuse_masked as _refuse_masked
from .._params_check import check_layers
from ..params import CELLS, LAYER_NAMES, Layer, read_layer
from . import _kept

ACTIVATIONS = ("tanh", "sigmoid", "relu", "identity")
FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
KEY = jax.ShapeDtypeStruct((4,), np.uint32)            # a kept ``back`` (`_kept`)


class Options(NamedTuple):
    """Everything static about one call (hashable: JAX keys its traces on it)."""

    cell: str
    activation: str
    reverse: bool
    truncate: Optional[int]
    stride: int
    names: tuple                     # the params' leaves: which of U, W, b, bh each is
    ids: bool                        # x holds token ids
    time_major: bool                 # a batch is (T, B, ...), not (B, T, ...)
    outputs: tuple                   # ShapeDtypeStructs of h, h_final (, c_final)


# ---- on the host ------------------------------------------------------------------------

def _host(value):
    return None if value is None else np.asarray(value)


def _concrete(value):
    """``value`` as a host array where its values are known (not a tracer), else None."""
    return None if isinstance(value, jax.core.Tracer) else _host(value)


def _given(value):
    """The caller's integer host array (NumPy, or a list of ints), or None for anything
    else: a JAX array, a tracer, floats, None."""
    if value is None or isinstance(value, (jax.Array, jax.core.Tracer)):
        return None
    try:
        host = np.asarray(value)
    except (TypeError, ValueError):         # ragged lists, say: JAX's reading names them
        return None
    return host if np.issubdtype(host.dtype, np.integer) else None


def _layer_options(opts, h0, c0, lengths):
    return dict(cell=opts.cell, activation=opts.activation, h0=_host(h0), c0=_host(c0),
                lengths=_host(lengths), reverse=opts.reverse, check_finite=False,
                time_major=opts.time_major)


def _host_params(opts, leaves):
    return Layer(**{name: np.asarray(v) for name, v in zip(opts.names, leaves)})


def _outputs(opts, out):
    return (out.h, out.h_final) + ((out.c_final,) if opts.cell == "lstm" else ())


def _forward_host(opts, leaves, x, h0, c0, lengths):
    """The primal call: `fastbptt.layer.forward`, which keeps nothing."""
    out = _layer.forward(np.asarray(x), _host_params(opts, leaves),
                         **_layer_options(opts, h0, c0, lengths))
    return _outputs(opts, out)


def _vjp(opts, leaves, x, h0, c0, lengths):
    return _layer.vjp(np.asarray(x), _host_params(opts, leaves), truncate=opts.truncate,
                      stride=opts.stride, **_layer_options(opts, h0, c0, lengths))


def _forward_rule_host(opts, leaves, x, h0, c0, lengths):
    """The forward rule's call: `fastbptt.layer.vjp`, its ``back`` kept (`_kept`)."""
    out, back = _vjp(opts, leaves, x, h0, c0, lengths)
    held = back.nbytes + sum(np.asarray(v).nbytes for v in leaves)   # its params' copies
    return _outputs(opts, out) + (_kept.keep(back, held),)


def _backward_host(opts, key, leaves, x, h0, c0, lengths, cotangents):
    """``back`` of the forward rule's call, or of the forward pass run again."""
    back = _kept.take(key)
    if back is None:
        _, back = _vjp(opts, leaves, x, h0, c0, lengths)
    r = back(*(np.asarray(c) for c in cotangents))
    out = (tuple(np.zeros_like(v) if getattr(r.grads, n) is None else getattr(r.grads, n)
                 for n, v in zip(opts.names, leaves)),)
    out += () if opts.ids else (r.dx,)
    out += () if h0 is None else (r.dh0,)
    return out + (() if c0 is None else (r.dc0,))


# ---- in JAX -----------------------------------------------------------------------------

def _like(value):
    return jax.ShapeDtypeStruct(value.shape, value.dtype)


def _varying(*values):
    """The mesh axes (inside ``jax.shard_map``) over which any of ``values`` varies."""
    axes = set()
    for v in jax.tree_util.tree_leaves(values):
        kind = getattr(jax.typeof(v), "manual_axis_type", None)
        axes |= set(getattr(kind, "varying", None) or getattr(jax.typeof(v), "vma", ()))
    return tuple(sorted(axes))


def _per_device(values, axes):
    """A callback's results, which differ from device to device, typed so: varying over
    ``axes`` (a callback's results are typed alike on every device)."""
    if not axes:
        return values
    return jax.tree_util.tree_map(lambda v: jax.lax.pcast(v, axes, to="varying"), values)


def _as_input(grad, value, axes):
    """The gradient of ``value`` from each device's: summed over the axes among ``axes``
    over which ``value`` does not vary (`_per_device` first)."""
    if not axes:
        return grad
    grad = jax.lax.pcast(grad, axes, to="varying")
    rest = tuple(a for a in axes if a not in _varying(value))
    return jax.lax.psum(grad, rest) if rest else grad


class _Bound:
    """``fn`` with its options bound, equal to every other binding of the same (fn, opts):
    JAX keys the executables it caches for a callback on the callback, by equality, so a
    callback that compared by identity (a new one per call outside ``jit``, or one a
    bounded cache of them made again) compiled and kept another executable each time."""

    __slots__ = ("fn", "opts")

    def __init__(self, fn, opts):
        self.fn, self.opts = fn, opts

    def __call__(self, *args):
        return self.fn(self.opts, *args)

    def __eq__(self, other):
        return isinstance(other, _Bound) and (self.fn, self.opts) == (other.fn, other.opts)

    def __hash__(self):
        return hash((self.fn, self.opts))



@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _run(opts, leaves, x, h0, c0, lengths):
    return _callback(_Bound(_forward_host, opts), opts.outputs,
                     _varying(leaves, x, h0, c0, lengths), leaves, x, h0, c0, lengths)


def _run_fwd(opts, leaves, x, h0, c0, lengths):
    *outputs, key = _callback(_Bound(_forward_rule_host, opts), opts.outputs + (KEY,),
                              _varying(leaves, x, h0, c0, lengths), leaves, x, h0, c0,
                              lengths)
    return tuple(outputs), (key, leaves, x, h0, c0, lengths)


def _run_bwd(opts, saved, cotangents):
    key, leaves, x, h0, c0, lengths = saved
    shapes = (tuple(map(_like, leaves)),) + tuple(
        _like(v) for v in ((None if opts.ids else x), h0, c0) if v is not None)
    result = list(_callback(_Bound(_backward_host_rows, opts), shapes, (), key, leaves,
                            x, h0, c0, lengths, *cotangents))
    axes = _varying(leaves, x, h0, c0, lengths, cotangents)
    grads = tuple(_as_input(g, v, axes) for g, v in zip(result.pop(0), leaves))
    dx = None if opts.ids else _as_input(result.pop(0), x, axes)
    dh0 = None if h0 is None else _as_input(result.pop(0), h0, axes)
    dc0 = None if c0 is None else _as_input(result.pop(0), c0, axes)
    return grads, dx, dh0, dc0, None


def _backward_host_rows(opts, *args):
    """`_backward_host` of every row of a batch of them (``vmap_method="expand_dims"``:
    each argument has the batch's leading axes, of size 1 where it does not vary), the
    rows of one key one after another, so that each key's ``back`` is taken once (a
    ``vmap`` of ``jax.jacrev`` gives the rows of its calls' keys in turn: row by row,
    each call's forward pass ran again for almost every row)."""
    axes = np.ndim(args[0]) - 1                              # the key's shape is (4,)
    if axes == 0:
        return _backward_host(opts, *args[:6], args[6:])
    flat, tree = jax.tree_util.tree_flatten(args)
    flat = [np.asarray(a) for a in flat]
    batch = np.broadcast_shapes(*(a.shape[:axes] for a in flat))
    n = int(np.prod(batch))
    where = np.unravel_index(np.arange(n), batch)
    # each argument's rows as they are (no copy of one that does not vary per row), and
    # which of them each row of the batch reads
    rows = [a.reshape((-1,) + a.shape[axes:]) for a in flat]
    picks = [np.ravel_multi_index(tuple(w if k > 1 else 0 * w
                                        for w, k in zip(where, a.shape[:axes])),
                                  a.shape[:axes]) for a in flat]
    results = [None] * n
    for i in sorted(range(n), key=lambda i: tuple(rows[0][picks[0][i]])):
        row = jax.tree_util.tree_unflatten(tree, [r[p[i]] for r, p in zip(rows, picks)])
        results[i] = _backward_host(opts, *row[:6], row[6:])
    return jax.tree_util.tree_map(
        lambda *values: np.stack(values).reshape(batch + values[0].shape), *results)


def _inexact(value):
    return jnp.issubdtype(value.dtype, jnp.inexact)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1, 2))
def _callback(fn, shapes, axes, *args):
    """Every host callback (the forward pass and the derivative rules'), its float
    results typed as varying over ``axes`` (`_per_device`), with a derivative rule of its
    own that says what a pure callback's refusal would not (a gradient's derivative
    differentiates the rules' callbacks)."""
    rows = "expand_dims" if fn.fn is _backward_host_rows else "sequential"
    out, tree = jax.tree_util.tree_flatten(
        jax.pure_callback(fn, shapes, *args, vmap_method=rows))
    return jax.tree_util.tree_unflatten(tree, [_per_device(v, axes) if _inexact(v) else v
                                               for v in out])


SECOND = ("fastbptt.jax computes first derivatives only: the derivative of a gradient "
          "(jax.hessian, jax.grad of jax.grad, a gradient penalty) is not supported; use a "
          "lax.scan layer for that")
FORWARD_MODE = ("fastbptt.jax computes first derivatives only, in reverse mode (jax.grad, "
                "jax.vjp, jax.jacrev): forward mode (jax.jvp, jax.jacfwd, jax.linearize, "
                "jax.hessian) is not supported; use a lax.scan layer for that")


@_callback.defjvp
def _tangents(fn, shapes, axes, primals, tangents):
    """The callback's outputs and their tangents. The forward rule's outputs are the
    layer's, whose derivative is a first one: their tangents are `_linear`'s, which the
    backward rule transposes (the value of a ``jax.vjp`` or ``jax.value_and_grad``
    inside a function differentiated). The others' (a gradient's) are `_second`'s, which
    refuses to be computed or transposed: a program whose result needs them (a second
    derivative) fails with `SECOND` while it is traced, and one that does not (an inner
    gradient behind ``stop_gradient``, an adversarial input's, say) drops them unused."""
    out = _callback(fn, shapes, axes, *primals)
    flat, tree = jax.tree_util.tree_flatten(out)
    avals = tuple(jax.typeof(v) for v in flat if _inexact(v))
    given = [t for t in jax.tree_util.tree_leaves(tuple(tangents))
             if t.dtype != jax.dtypes.float0]
    if fn.fn is _forward_rule_host:
        operands, inputs = jax.tree_util.tree_flatten(tuple(primals))
        made = iter(_linear.bind(flat[-1], *operands, *given, avals=avals, opts=fn.opts,
                                 inputs=inputs))
    else:
        made = iter(_second.bind(*given, avals=avals))
    return out, jax.tree_util.tree_unflatten(tree, [        # the key's: none
        next(made) if _inexact(v) else np.zeros(v.shape, jax.dtypes.float0) for v in flat])


def _refuse_second(*args, **params):
    raise NotImplementedError(SECOND)


def _refuse_forward(*args, **params):
    raise NotImplementedError(FORWARD_MODE)


def _row_by_row(primitive):
    """A primitive's rule under ``vmap`` (a vmap inside the function differentiated): one
    call per row, as the callbacks run (``vmap_method="sequential"``), the rows stacked;
    the transpose sums the cotangents of operands that do not vary. (Unrolled: JAX
    0.8 and 0.9 could not transpose it in a ``lax.map``.)"""
    def batched(args, dims, **params):
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
        if size == 0:
            return [jnp.zeros((0,) + a.shape, a.dtype) for a in params["avals"]], \
                [0] * len(params["avals"])
        rows = [primitive.bind(*(a if d is None else jax.lax.index_in_dim(a, i, d, False)
                                 for a, d in zip(args, dims)), **params)
                for i in range(size)]
        out = [jnp.stack(column) for column in zip(*rows)]
        return out, [0] * len(out)
    return batched


def _linear_transpose(cotangents, key, *args, avals, opts, inputs):
    """The backward rule applied to the cotangents of `_linear`'s outputs: the cotangents
    of its tangent operands (those of the forward rule's float inputs)."""
    primals = args[:inputs.num_leaves]
    leaves, x, h0, c0, lengths = jax.tree_util.tree_unflatten(inputs, primals)
    cotangents = [jnp.zeros(a.shape, a.dtype) if type(c) is ad.Zero else c
                  for c, a in zip(cotangents, avals)]
    grads, dx, dh0, dc0, _ = _run_bwd(opts, (key, leaves, x, h0, c0, lengths), cotangents)
    wanted = [g for g, v in zip((*grads, dx, dh0, dc0), (*leaves, x, h0, c0))
              if v is not None and _inexact(v)]
    return [None] * (1 + len(primals)) + wanted


def _primitive(name, refuse, transpose):
    """A primitive of the tangents a callback's rule gives: outputs of the types
    ``avals`` (the callback's float outputs'), never computed."""
    primitive = Primitive(name)
    primitive.multiple_results = True
    primitive.def_abstract_eval(lambda *args, avals, **params: list(avals))
    primitive.def_impl(refuse)
    mlir.register_lowering(primitive, refuse)
    ad.primitive_jvps[primitive] = refuse
    ad.primitive_transposes[primitive] = transpose
    batching.primitive_batchers[primitive] = _row_by_row(primitive)
    return primitive


_second = _primitive("fastbptt_second_derivative", _refuse_second, _refuse_second)
_linear = _primitive("fastbptt_forward_tangents", _refuse_forward, _linear_transpose)


_run.defvjp(_run_fwd, _run_bwd)


# ---- checks while tracing ---------------------------------------------------------------

NAMES = {"elman": "Elman", "gru": "GRU", "lstm": "LSTM"}
LAYER_FN = {"elman": "rnn", "gru": "gru", "lstm": "lstm"}
ONE_LAYER = ("one layer: a fastbptt.Layer, a dict with keys 'U', 'W' (and optionally 'b', "
             "'bh') or a tuple (U, W[, b[, bh]])")


def _array(value):
    """``value`` as a JAX array (a tracer while tracing), converted only if it is not one."""
    return value if isinstance(value, jax.Array) else jnp.asarray(value)


def _entry(name, value):
    """One entry of the params as a JAX array (None stays None), refusing containers."""
    if value is None or isinstance(value, jax.Array):
        return value
    _refuse_masked(f"params {name}", value)
    if not jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(value)):
        raise TypeError(f"params {name} must be an array, not a {type(value).__name__}: params "
                        f"are {ONE_LAYER}, with one array at each entry and nothing nested")
    try:
        return _array(value)
    except (TypeError, ValueError):
        raise TypeError(f"params {name} must be an array; got {type(value).__name__}") from None


def _check_params(cell, params):
    """(leaves, names, dtype, (L, H), empty) of one layer's params, from shapes and dtypes
    alone; empty is the `Layer` of empty host arrays it checked.

    The structure, each entry's shape and the biases the cell takes are checked by the
    NumPy API's own `check_layers`, run on empty host arrays of the same shapes and dtype,
    so the messages are fastbptt.layer's: the params' values are not read.
    """
    model, _, stacked = read_layer(params)             # unknown keys, tuple lengths, kinds
    if stacked:
        raise TypeError(f"fastbptt.jax takes {ONE_LAYER}; got a stack of layers: call it once "
                        f"per layer and direction, feeding each layer's h to the next")
    entries = {k: _entry(k, v) for k, v in zip(LAYER_NAMES, model.layers[0][0])}
    given = {k: v for k, v in entries.items() if v is not None}
    dtypes = {v.dtype for v in given.values()}
    if len(dtypes) > 1 or not dtypes <= set(FLOATS):
        raise TypeError(f"params must all be float32 or all float64 (float64 needs "
                        f"jax.config.update('jax_enable_x64', True)); got "
                        f"{', '.join(f'{k} {v.dtype}' for k, v in given.items())}")
    U, W, G = entries["U"], entries["W"], CELLS[cell]
    if W is not None and W.ndim == 2 and W.shape[1] and W.shape[0] != G * W.shape[1]:
        found = next((c for c, g in CELLS.items() if W.shape[0] == g * W.shape[1]), None)
        raise ValueError(f"the {NAMES[cell]} cell needs U ({G} H, L) and W ({G} H, H); got U "
                         f"{None if U is None else U.shape} and W {W.shape}" + (
                             f", the params of {'a' if found == 'gru' else 'an'} "
                             f"{NAMES[found]} cell (fastbptt.jax.{LAYER_FN[found]})"
                             if found else ""))
    # U, W present; ranks; U, b, bh shapes against W; bh for the GRU only, and with b
    empty = Layer(*(None if v is None else np.empty(v.shape, v.dtype) for v in entries.values()))
    checked = check_layers(empty, cell=cell, check_finite=False)
    leaves = jax.tree_util.tree_leaves(params)
    return tuple(map(_array, leaves)), _names(model.layers[0][0], leaves), checked.dtype, \
        checked.sizes[:2], empty


def _names(entries, leaves):
    """Which entry (U, W, b, bh) each leaf of the params' pytree is, by identity."""
    free = dict(zip(LAYER_NAMES, entries))
    names = []
    for leaf in leaves:
        name = next((k for k, v in free.items() if v is leaf), None)
        if name is None:
            raise TypeError(f"params hold {type(leaf).__name__} leaves beside U, W, b, bh: "
                            f"params are {ONE_LAYER}")
        names.append(name)
        del free[name]
    return tuple(names)


def _jnp(name, value, what):
    """``jnp.asarray(value)``; where JAX cannot read it as an array (strings, objects, a
    None among numbers), a TypeError naming the argument."""
    if not isinstance(value, (str, bytes)):  # which JAX may read as a dtype's name
        try:
            return jnp.asarray(value)
        except (TypeError, ValueError):
            pass
    got = f"dtype {value.dtype}" if isinstance(value, np.ndarray) else type(value).__name__
    raise TypeError(f"{name} must be {what}; got {got}")


def _state_check(name, value, want, dtype):
    if value is None:
        return None
    value = _jnp(name, value, "an array of floats")
    if value.shape != want or value.dtype != dtype:
        raise ValueError(f"{name} must have shape {want} and dtype {dtype}, those of h_final; "
                         f"got {value.shape} {value.dtype}")
    return value


def _check(cell, params, x, h0, c0, lengths, *, activation, reverse, truncate, stride,
           time_major):
    """(Options, leaves, x, h0, c0, lengths) of a call, validated from shapes and dtypes."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; valid values are "
                         f"{', '.join(map(repr, ACTIVATIONS))}")
    if cell != "elman" and activation != "tanh":
        raise ValueError(f"activation applies to the Elman cell only; got {activation!r} for "
                         f"the {cell.upper()} cell")
    for name, value in (("reverse", reverse), ("time_major", time_major),
                        ("truncate", truncate), ("stride", stride)):
        if isinstance(value, jax.core.Tracer):
            raise TypeError(f"{name} is a traced value (jax.jit, say, made the argument an "
                            f"array), and it sets the shape of the computation: pass it as a "
                            f"static argument, jax.jit(f, static_argnames=({name!r},)), or "
                            f"close over it; got {value!r}")
    if not isinstance(reverse, (bool, np.bool_)):
        raise TypeError(f"reverse must be True or False; got {reverse!r}")
    if not isinstance(time_major, (bool, np.bool_)):
        raise TypeError(f"time_major must be True or False; got {time_major!r}")
    reverse, time_major = bool(reverse), bool(time_major)
    leaves, names, dtype, (L, H), empty = _check_params(cell, params)
    if x is None:
        raise TypeError("x must be token ids or dense floats; got None")
    for name, value in (("x", x), ("h0", h0), ("c0", c0), ("lengths", lengths)):
        _refuse_masked(name, value)        # np.asarray and jnp.asarray drop the mask
    given_x, given_lengths = _given(x), _given(lengths)
    x = _jnp("x", x if given_x is None else given_x, "token ids or dense floats")
    ids = bool(jnp.issubdtype(x.dtype, jnp.integer))
    batch = "(T, B" if time_major else "(B, T"
    if ids and x.ndim not in (1, 2):
        raise ValueError(f"x as token ids must be (T,) or {batch}); got shape {x.shape}")
    if not ids and (x.ndim not in (2, 3) or x.shape[-1] != L or x.dtype != dtype):
        raise ValueError(f"x as dense floats must be (T, L) or {batch}, L) with L={L} from U "
                         f"and dtype {dtype}; got {x.shape} {x.dtype}")
    lead = x.shape if ids else x.shape[:-1]
    truncate, stride = check_truncation(                   # Python ints: options are hashed
        truncate, stride, reverse=reverse,
        steps=lead[0] if time_major or len(lead) == 1 else lead[1])
    h = jax.ShapeDtypeStruct(lead + (H,), dtype)
    seqs = lead[1:] if time_major else lead[:-1]           # (B,), or () for one sequence
    final = jax.ShapeDtypeStruct(seqs + (H,), dtype)
    h0 = _state_check("h0", h0, final.shape, dtype)
    c0 = _state_check("c0", c0, final.shape, dtype)
    if lengths is not None:
        lengths = _jnp("lengths", lengths if given_lengths is None else given_lengths,
                       "an array of integers")
        if lengths.size == 0:               # [] for no sequences: no values, any dtype
            lengths = lengths.astype(jnp.int32)
        if seqs == () and lengths.shape == (1,):      # [T] for one sequence, as fastbptt.layer
            lengths = lengths.reshape(())
        if lengths.shape != seqs or not jnp.issubdtype(lengths.dtype, jnp.integer):
            raise ValueError(f"lengths must hold integers, shape {seqs} (one per sequence "
                             f"of x); got {lengths.shape} {lengths.dtype}")
    outputs = (h, final) + ((final,) if cell == "lstm" else ())
    opts = Options(cell, activation, reverse, truncate, stride, names, ids, time_major,
                   outputs)
    # the values of ids and lengths, wherever they are known: host arrays as the caller
    # gave them (also under jit, where jnp.asarray makes them tracers, and before JAX
    # wraps int64 values into int32 without x64: 2**32 + 1 to 1, which would pass), and
    # concrete JAX arrays (also under jax.grad or vmap of the params outside jit); the
    # params' values are not read.
    host_x = given_x if given_x is not None else _concrete(x)
    host_lengths = given_lengths if given_lengths is not None else _concrete(lengths)
    if lengths is not None and host_lengths is None:    # traced: the ids' steps unknown,
        if host_x is not None and ids:                  # but no id may become another one
            _refuse_narrowed(host_x, x.dtype, L)
    elif host_x is not None:
        prepare_layer(host_x, empty, cell=cell, activation=activation, lengths=host_lengths,
                      reverse=reverse, check_finite=False, time_major=time_major)
    elif lengths is not None:               # x traced: its shape is enough for lengths
        single = len(seqs) == 0
        _check_lengths(host_lengths, 1 if single else seqs[0],
                       lead[0] if time_major or single else lead[1], single, x.shape)
    return opts, leaves, x, h0, c0, lengths


def _refuse_narrowed(ids, dtype, L):
    """ValueError for a host token id that JAX's array of ``dtype`` holds as another value
    (int64 ids wrapped into int32 without x64), which no step's check could then see."""
    changed = ids.astype(dtype) != ids
    if changed.any():
        raise ValueError(f"x token ids must lie in [0, {L}) (L from params U); got "
                         f"{ids[changed].flat[0]}, which JAX holds as another "
                         f"id in {np.dtype(dtype)} (without x64)")


# ---- the public functions ---------------------------------------------------------------

def rnn(params, x, h0=None, *, lengths=None, reverse=False, truncate=None, stride=1,
        activation="tanh", time_major=False):
    """An Elman layer h_t = f(U x_t + W h_{t-1} + b): returns ``(h, h_final)``.

    Parameters
    ----------
    params : fastbptt.Layer, dict or tuple of JAX (or NumPy) arrays
        U (H, L), W (H, H), optionally b (H,): a pytree; gradients come back in it.
    x : array
        Token ids, (T,) or (B, T), or dense floats, (T, L) or (B, T, L) of the params'
        dtype. Token ids get no gradient.
    h0 : array, optional
        (H,) or (B, H); zeros when omitted.
    lengths : int array, optional
        (B,): steps t >= lengths[b] are padding (h is 0 there; h_final is each sequence's
        last real state).
    reverse : bool
        Read each sequence from its last real step back to its first.
    truncate, stride : int
        BPTT(k; s) (SPEC.md §3) on the gradient flowing back from every step.
    activation : {"tanh", "sigmoid", "relu", "identity"}
    time_major : bool
        A batch is time-major, as ``lax.scan`` over steps takes it: x (T, B) or (T, B, L),
        and h (T, B, H); one sequence is the same either way.

    Returns
    -------
    h : (B, T, H), (T, B, H) with ``time_major``, or (T, H)
    h_final : (B, H) or (H,)
    """
    return _run(*_check("elman", params, x, h0, None, lengths, activation=activation,
                        reverse=reverse, truncate=truncate, stride=stride,
                        time_major=time_major))


def gru(params, x, h0=None, *, lengths=None, reverse=False, truncate=None, stride=1,
        time_major=False):
    """A GRU layer (PyTorch's equations, gates r, z, n; SPEC.md §6): ``(h, h_final)``.

    params: U (3H, L), W (3H, H), optionally b = bias_ih (3H,) and bh = bias_hh (3H,).
    The other arguments are `rnn`'s (but activation: the gates have their own).
    """
    return _run(*_check("gru", params, x, h0, None, lengths, activation="tanh",
                        reverse=reverse, truncate=truncate, stride=stride,
                        time_major=time_major))


def lstm(params, x, h0=None, c0=None, *, lengths=None, reverse=False, truncate=None, stride=1,
         time_major=False):
    """An LSTM layer (PyTorch's equations, gates i, f, g, o; SPEC.md §6):
    ``(h, h_final, c_final)``.

    params: U (4H, L), W (4H, H), optionally b = bias_ih + bias_hh (4H,). c0 is like h0.
    The other arguments are `rnn`'s (but activation: the gates have their own).
    """
    return _run(*_check("lstm", params, x, h0, c0, lengths, activation="tanh",
                        reverse=reverse, truncate=truncate, stride=stride,
                        time_major=time_major))
