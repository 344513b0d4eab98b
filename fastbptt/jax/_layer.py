"""`rnn`, `gru`, `lstm`: one layer through ``jax.custom_vjp`` and ``jax.pure_callback``.

Shapes, dtypes and options are checked while tracing (a pure callback must not raise);
fastbptt checks values on the host. The params' pytree (a `fastbptt.Layer`, a dict with
keys U, W, b, bh, or a tuple (U, W[, b[, bh]])) is rebuilt on the host with NumPy leaves,
and the gradients come back in the same pytree.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from .. import layer as _layer
from .._bridge_options import check_truncation
from ..params import CELLS
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
    treedef: Any                     # the params' pytree structure
    ids: bool                        # x holds token ids
    outputs: tuple                   # ShapeDtypeStructs of h, h_final (, c_final)


# ---- on the host ------------------------------------------------------------------------

def _host(value):
    return None if value is None else np.asarray(value)


def _layer_options(opts, h0, c0, lengths):
    return dict(cell=opts.cell, activation=opts.activation, h0=_host(h0), c0=_host(c0),
                lengths=_host(lengths), reverse=opts.reverse, check_finite=False)


def _host_params(opts, leaves):
    return opts.treedef.unflatten([np.asarray(v) for v in leaves])


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
    return _outputs(opts, out) + (_kept.keep(back),)


def _backward_host(opts, key, leaves, x, h0, c0, lengths, cotangents):
    """``back`` of the forward rule's call, or of the forward pass run again."""
    back = _kept.take(key)
    if back is None:
        _, back = _vjp(opts, leaves, x, h0, c0, lengths)
    r = back(*(np.asarray(c) for c in cotangents))
    grads = jax.tree_util.tree_map(lambda p, g: np.zeros_like(p) if g is None else g,
                                   _host_params(opts, leaves), r.grads)
    out = (tuple(jax.tree_util.tree_leaves(grads)),)
    out += () if opts.ids else (r.dx,)
    out += () if h0 is None else (r.dh0,)
    return out + (() if c0 is None else (r.dc0,))


# ---- in JAX -----------------------------------------------------------------------------

def _like(value):
    return jax.ShapeDtypeStruct(value.shape, value.dtype)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _run(opts, leaves, x, h0, c0, lengths):
    return jax.pure_callback(functools.partial(_forward_host, opts), opts.outputs, leaves, x,
                             h0, c0, lengths, vmap_method="sequential")


def _run_fwd(opts, leaves, x, h0, c0, lengths):
    *outputs, key = jax.pure_callback(
        functools.partial(_forward_rule_host, opts), opts.outputs + (KEY,), leaves, x, h0, c0,
        lengths, vmap_method="sequential")
    return tuple(outputs), (key, leaves, x, h0, c0, lengths)


def _run_bwd(opts, saved, cotangents):
    key, leaves, x, h0, c0, lengths = saved
    shapes = (tuple(map(_like, leaves)),) + tuple(
        _like(v) for v in ((None if opts.ids else x), h0, c0) if v is not None)
    result = list(jax.pure_callback(
        lambda *a: _backward_host(opts, *a[:6], a[6:]), shapes, key, leaves, x, h0, c0,
        lengths, *cotangents, vmap_method="sequential"))
    grads = result.pop(0)
    dx = None if opts.ids else result.pop(0)
    dh0 = None if h0 is None else result.pop(0)
    dc0 = None if c0 is None else result.pop(0)
    return grads, dx, dh0, dc0, None


_run.defvjp(_run_fwd, _run_bwd)


# ---- checks while tracing ---------------------------------------------------------------

def _weights(params):
    """U and W of one layer's params."""
    if isinstance(params, dict):
        if "U" not in params or "W" not in params:
            raise ValueError(f"params must have keys 'U', 'W' (and optionally 'b', 'bh'); got "
                             f"keys {sorted(map(str, params))}")
        return params["U"], params["W"]
    if isinstance(params, (tuple, list)) and 2 <= len(params) <= 4 and not any(
            isinstance(v, (tuple, list, dict)) for v in params):
        return params[0], params[1]
    raise TypeError("params must be one layer: a fastbptt.Layer, a dict with keys 'U', 'W' "
                    "(and optionally 'b', 'bh') or a tuple (U, W[, b[, bh]]); got "
                    f"{type(params).__name__}")


def _state_check(name, value, want, dtype):
    if value is None:
        return None
    value = jnp.asarray(value)
    if value.shape != want or value.dtype != dtype:
        raise ValueError(f"{name} must have shape {want} and dtype {dtype}, those of h_final; "
                         f"got {value.shape} {value.dtype}")
    return value


def _check(cell, params, x, h0, c0, lengths, *, activation, reverse, truncate, stride):
    """(Options, leaves, x, h0, c0, lengths) of a call, validated from shapes and dtypes."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; valid values are "
                         f"{', '.join(map(repr, ACTIVATIONS))}")
    if cell != "elman" and activation != "tanh":
        raise ValueError(f"activation applies to the Elman cell only; got {activation!r} for "
                         f"the {cell.upper()} cell")
    if not isinstance(reverse, bool):
        raise TypeError(f"reverse must be True or False; got {reverse!r}")
    check_truncation(truncate, stride, reverse=reverse)
    U, W = _weights(params)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    leaves = tuple(jnp.asarray(v) for v in leaves)
    dtype = jnp.asarray(W).dtype
    if dtype not in FLOATS or any(v.dtype != dtype for v in leaves):
        raise TypeError(f"params must all be float32 or all float64 (float64 needs "
                        f"jax.config.update('jax_enable_x64', True)); got "
                        f"{sorted({str(v.dtype) for v in leaves})}")
    G, H = CELLS[cell], np.shape(W)[-1]
    if np.ndim(W) != 2 or np.shape(W)[0] != G * H or np.ndim(U) != 2 or np.shape(U)[0] != G * H:
        raise ValueError(f"the {cell.upper()} cell needs U ({G} H, L) and W ({G} H, H); got "
                         f"U {np.shape(U)} and W {np.shape(W)}")
    x = jnp.asarray(x)
    ids = bool(jnp.issubdtype(x.dtype, jnp.integer))
    if ids and x.ndim not in (1, 2):
        raise ValueError(f"x as token ids must be (T,) or (B, T); got shape {x.shape}")
    if not ids and (x.ndim not in (2, 3) or x.shape[-1] != np.shape(U)[1] or x.dtype != dtype):
        raise ValueError(f"x as dense floats must be (T, L) or (B, T, L) with L={np.shape(U)[1]} "
                         f"from U and dtype {dtype}; got {x.shape} {x.dtype}")
    lead = x.shape if ids else x.shape[:-1]
    h = jax.ShapeDtypeStruct(lead + (H,), dtype)
    final = jax.ShapeDtypeStruct(lead[:-1] + (H,), dtype)
    h0 = _state_check("h0", h0, final.shape, dtype)
    c0 = _state_check("c0", c0, final.shape, dtype)
    if lengths is not None:
        lengths = jnp.asarray(lengths)
        if lengths.shape != lead[:-1] or not jnp.issubdtype(lengths.dtype, jnp.integer):
            raise ValueError(f"lengths must hold integers, shape {lead[:-1]} (one per sequence "
                             f"of x); got {lengths.shape} {lengths.dtype}")
    outputs = (h, final) + ((final,) if cell == "lstm" else ())
    opts = Options(cell, activation, reverse, truncate, stride, treedef, ids, outputs)
    return opts, leaves, x, h0, c0, lengths


# ---- the public functions ---------------------------------------------------------------

def rnn(params, x, h0=None, *, lengths=None, reverse=False, truncate=None, stride=1,
        activation="tanh"):
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

    Returns
    -------
    h : (B, T, H) or (T, H)
    h_final : (B, H) or (H,)
    """
    return _run(*_check("elman", params, x, h0, None, lengths, activation=activation,
                        reverse=reverse, truncate=truncate, stride=stride))


def gru(params, x, h0=None, *, lengths=None, reverse=False, truncate=None, stride=1):
    """A GRU layer (PyTorch's equations, gates r, z, n; SPEC.md §6): ``(h, h_final)``.

    params: U (3H, L), W (3H, H), optionally b = bias_ih (3H,) and bh = bias_hh (3H,).
    The other arguments are `rnn`'s.
    """
    return _run(*_check("gru", params, x, h0, None, lengths, activation="tanh",
                        reverse=reverse, truncate=truncate, stride=stride))


def lstm(params, x, h0=None, c0=None, *, lengths=None, reverse=False, truncate=None, stride=1):
    """An LSTM layer (PyTorch's equations, gates i, f, g, o; SPEC.md §6):
    ``(h, h_final, c_final)``.

    params: U (4H, L), W (4H, H), optionally b = bias_ih + bias_hh (4H,). c0 is like h0.
    The other arguments are `rnn`'s.
    """
    return _run(*_check("lstm", params, x, h0, c0, lengths, activation="tanh",
                        reverse=reverse, truncate=truncate, stride=stride))
