"""Central finite differences against the analytic gradient, for any model and options.

A truncated gradient is not the gradient of L. It is the gradient of the surrogate loss
in which output t sees the states before lo(t) as constants (SPEC.md §3, §7): every
layer's state at step lo(t) - 1 is frozen at its value under the unperturbed parameters
and inputs, and the stack runs from there to t. With truncate=None the surrogate is L
itself. Differences are taken in extended precision (np.longdouble, 80-bit on x86),
whatever the params' dtype, so that rounding in the loss does not swamp them; the loss is
computed by the reference's loops (`fastbptt.reference`).

`check_grad` differences the loss of the output layer (SPEC.md §1); `check_layer_grad`
the loss a layer's caller injects, L = sum_t <dh_t, h_t> + <dh_final, h_final>
(+ <dc_final, c_final>), for `fastbptt.layer.vjp`.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ._inputs import HEAD_OPTIONS, LAYER_OPTIONS, known_options, prepare, prepare_layer
from ._ranges import finite, shown
from .api import bptt
from .layer import vjp
from .params import Layer, Model, leaves
from .reference import output, output_error, windows
from .reference.stack import initial_states, input_column, run_stack, top

__all__ = ["check_grad", "check_layer_grad"]

WIDE = np.longdouble
DEFAULT_EPS = float(np.cbrt(np.finfo(WIDE).eps))    # balances truncation and rounding


def _widen(problem):
    """The problem with every float array (params, dense x and y, h0, c0) a WIDE copy."""
    def wide(a):
        return None if a is None else np.array(a, WIDE)

    model = problem.model
    layers = tuple(tuple(Layer(*map(wide, layer)) for layer in row) for row in model.layers)
    return dataclasses.replace(
        problem, model=Model(layers, wide(model.V), wide(model.c)), h0=wide(problem.h0),
        c0=wide(problem.c0), x=problem.x if problem.ids else wide(problem.x),
        y=problem.y if problem.y is None or problem.y_ids else wide(problem.y),
        dtype=np.dtype(WIDE))


def _frozen(problem):
    """frozen[b][t]: every direction's state after step t of sequence b, unperturbed
    (truncation runs forward directions only, SPEC.md §8)."""
    if problem.truncate is None:
        return None
    out = []
    for b in range(problem.B):
        inputs = [input_column(problem, b, t) for t in range(int(problem.lengths[b]))]
        runs = [r for row in run_stack(problem, inputs, initial_states(problem, b))
                for r in row]
        out.append([[r.states[t] for r in runs] for t in range(len(inputs))])
    return out


def _surrogate(problem, frozen, at_output, at_final):
    """sum over outputs t of at_output(b, t, h_t), h_t from the states frozen before
    lo(t), plus at_final(b, final states) where the last step's group ends."""
    total = WIDE(0)
    for b in range(problem.B):
        n = int(problem.lengths[b])
        start = initial_states(problem, b)
        if n == 0:
            total += at_final(b, start)
            continue
        inputs = [input_column(problem, b, t) for t in range(n)]
        for lo, outputs in windows(n, problem.truncate, problem.stride).items():
            hi = outputs[-1]
            runs = run_stack(problem, inputs[lo:hi + 1], start if lo == 0 else frozen[b][lo - 1])
            h = top(runs)
            for t in outputs:
                total += at_output(b, t, h[t - lo])
            if hi == n - 1:
                total += at_final(b, [r.final for row in runs for r in row])
    return total


def _relative_error(analytic, numeric):
    """max_i |a_i - n_i| / max(|a_i|, |n_i|), with entries far below the largest
    (under 1e-3 of it) measured against that floor instead, where differencing noise
    would dominate a per-entry ratio."""
    analytic = np.asarray(analytic, WIDE)
    scale = max(np.abs(analytic).max(initial=0.0), np.abs(numeric).max(initial=0.0))
    if scale == 0.0:
        return 0.0
    denom = np.maximum(np.maximum(np.abs(analytic), np.abs(numeric)), 1e-3 * scale)
    return float((np.abs(analytic - numeric) / denom).max())


def _targets(problem, wide, grads, states):
    """{name: (WIDE array the loss reads, analytic gradient)}: every leaf of the params
    (named as `fastbptt.params.leaves` names them), then ``states`` ({name: (array,
    analytic)}) whose analytic gradient is not None."""
    values = leaves(problem.rebuild(wide.model))      # the caller's names, WIDE arrays
    analytic = leaves(grads)
    missing = [name for name in values if name not in analytic]
    if missing:
        raise ValueError(f"the gradients checked have no {', '.join(missing)}")
    out = {name: (value, analytic[name]) for name, value in values.items()}
    for name, (value, exact) in states.items():
        if exact is not None:
            out[name] = (value, np.reshape(exact, value.shape))
    return out


def _step(eps):
    """eps as a float; TypeError or ValueError unless it is a finite number above 0."""
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer,
                                                                   np.floating)):
        raise TypeError(f"eps must be a number (the finite-difference step); got {eps!r}")
    if not (finite(eps) and eps > 0):
        raise ValueError(f"eps must be a finite number above 0 (the finite-difference "
                         f"step, default {DEFAULT_EPS:.3g}); got {shown(eps)}")
    return eps


def _errors(targets, loss, eps):
    """{name: relative error} of each analytic gradient against central differences of
    loss() as each entry of its array moves by +-eps."""
    eps = DEFAULT_EPS if eps is None else eps
    errors = {}
    for name, (value, exact) in targets.items():
        numeric = np.zeros(value.shape, WIDE)
        for index in np.ndindex(value.shape):
            saved = value[index]
            value[index] = saved + eps
            plus = loss()
            value[index] = saved - eps
            minus = loss()
            value[index] = saved
            numeric[index] = (plus - minus) / (2 * eps)
        errors[name] = _relative_error(exact, numeric)
    return errors


def _no_final(b, states):
    return 0


def _callable(impl, default, name):
    """``impl``, or ``default`` (called ``name``) for None; TypeError for what cannot be
    called."""
    if impl is None:
        return default
    if not callable(impl):
        raise TypeError(f"impl must be a function like {name} (or None for it); got "
                        f"{type(impl).__name__}")
    return impl


def _returned(result, what):
    """``result`` of an impl, which must carry gradients as ``what`` returns them."""
    if not hasattr(result, "grads"):
        raise TypeError(f"impl must return what {what} returns (gradients in .grads); got "
                        f"{type(result).__name__}")
    return result


def check_grad(x, y, params, *, eps=None, impl=None, **options):
    """Worst relative error of the analytic gradient against central differences.

    Parameters
    ----------
    x, y, params
        As for `fastbptt.grad`: one layer with its head, or a stack of any cell.
    eps : float, optional
        Step of the central difference (f(p + eps) - f(p - eps)) / (2 eps); default the cube
        root of the extended-precision machine epsilon (about 5e-7 on x86).
    impl : callable, optional
        A ``bptt``-like function to check (default `fastbptt.bptt`; e.g.
        `fastbptt.reference.bptt`).
    **options
        truncate, stride, activation, loss, h0, lengths, cell, c0, as for `fastbptt.grad`.

    Returns
    -------
    dict
        Parameter name to the worst relative error over its entries:
        |a - n| / max(|a|, |n|, 1e-3 * largest entry). Names as `fastbptt.params.leaves`
        gives them ('U', 'W', 'V', 'b', 'c' for one layer with its head;
        'layers.<l>.<d>.U', ..., 'V', 'c' for a stack), then 'h0' where h0 was given and
        'c0' where c0 was given and the result has a dc0.

    Differences resolve a gradient entry only down to about ``finfo(longdouble).eps *
    |loss| / eps`` (about 1e-12 for a loss of 5 at the default step); a parameter whose
    whole gradient lies far below that (tiny output weights, say) reads as an error near 1.
    """
    known_options("check_grad", options, HEAD_OPTIONS)
    eps = None if eps is None else _step(eps)
    problem = prepare(x, y, params, **options)
    made = _callable(impl, bptt, "fastbptt.bptt")(x, y, params, **options)
    result = _returned(made, "fastbptt.bptt")
    wide = _widen(problem)
    V, c = wide.model.V, wide.model.c

    def at_output(b, t, h):
        return output_error(output(h, V, c), wide.y[b, t], wide.y_ids, wide.loss)[0]

    states = {"h0": (wide.h0, result.dh0 if problem.h0_given else None),
              "c0": (wide.c0, getattr(result, "dc0", None) if problem.c0_given else None)}
    frozen = _frozen(wide)
    return _errors(_targets(problem, wide, result.grads, states),
                   lambda: _surrogate(wide, frozen, at_output, _no_final), eps)


def check_layer_grad(x, params, dh, dh_final=None, dc_final=None, *, eps=None, impl=None,
                     **options):
    """`check_grad` for a layer's VJP: the loss L = sum_t <dh_t, h_t> + <dh_final, h_final>
    (+ <dc_final, c_final>), each term truncated as SPEC.md §7 says.

    Parameters
    ----------
    x, params
        As for `fastbptt.layer.vjp`: one layer or a stack, of any cell.
    dh, dh_final, dc_final
        The upstream gradients passed to ``back``, shaped like ``out.h``, ``out.h_final``
        and ``out.c_final``.
    eps : float, optional
        As for `check_grad`.
    impl : callable, optional
        A ``vjp``-like function to check (default `fastbptt.layer.vjp`; e.g.
        `fastbptt.reference.layer_vjp`).
    **options
        cell, activation, h0, c0, lengths, reverse, truncate, stride, time_major, as for
        `fastbptt.layer.vjp`.

    Returns
    -------
    dict
        As `check_grad`: the leaves of the layer params ('U', 'W', 'b', 'bh' for one layer,
        'layers.<l>.<d>.U', ... for a stack), then 'x' for dense inputs, 'h0' and 'c0'
        where given.
    """
    known_options("check_layer_grad", options, LAYER_OPTIONS)
    eps = None if eps is None else _step(eps)
    problem = prepare_layer(x, params, **options)
    made = _callable(impl, vjp, "fastbptt.layer.vjp")(x, params, **options)
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[1])):
        raise TypeError(f"impl must return (out, back) as fastbptt.layer.vjp does; got "
                        f"{type(made).__name__}")
    result = _returned(made[1](dh, dh_final, dc_final), "back of fastbptt.layer.vjp")
    wide = _widen(problem)
    S, B, H = wide.h0.shape
    width = H * problem.directions
    time_major = problem.time_major
    G = np.asarray(dh, WIDE).reshape(B, problem.T, width) if not time_major else \
        np.asarray(dh, WIDE).reshape(problem.T, B, width).swapaxes(0, 1)
    dx = result.dx
    if time_major and dx is not None:
        dx = dx.swapaxes(0, 1)                  # in the layout of the problem's x
    finals = [None if v is None else np.asarray(v, WIDE).reshape(S, B, H)
              for v in (dh_final, dc_final)]

    def at_output(b, t, h):
        return G[b, t] @ h

    def at_final(b, states):
        total = WIDE(0)
        for s, state in enumerate(states):
            if finals[0] is not None:
                total += finals[0][s, b] @ state.h
            if finals[1] is not None:
                total += finals[1][s, b] @ state.c
        return total

    states = {"x": (wide.x, None if problem.ids else dx),
              "h0": (wide.h0, result.dh0 if problem.h0_given else None),
              "c0": (wide.c0, result.dc0 if problem.c0_given else None)}
    frozen = _frozen(wide)
    return _errors(_targets(problem, wide, result.grads, states),
                   lambda: _surrogate(wide, frozen, at_output, at_final), eps)
