"""Central finite differences against the analytic gradient, for any model and options.

A truncated gradient is not the gradient of L. It is the gradient of the surrogate loss
in which output t sees the state h_{lo(t)-1} as a constant (SPEC.md §3). So the finite
differences here are taken of that surrogate: for each output, the state where its window
starts is frozen at its value under the unperturbed parameters. With truncate=None the
surrogate is L itself. Differences are taken in extended precision (np.longdouble, 80-bit
on x86), whatever the params' dtype, so that rounding in the loss does not swamp them.
"""
from __future__ import annotations

import numpy as np

from . import reference as ref
from ._inputs import prepare
from .api import bptt
from .params import Params, read_structure

__all__ = ["check_grad"]


def _base_states(problem, params64, h0):
    """For each sequence, [h_{-1} = h0, h_0, ..., h_{n-1}] under the unperturbed params."""
    return [[h0[b]] + ref.run_states(problem, b, 0, int(problem.lengths[b]), h0[b], params64)
            for b in range(problem.B)]


def _surrogate_loss(problem, params64, h0, frozen):
    """Sum over outputs t of L_t, each computed from the frozen state h_{lo(t)-1}."""
    total = WIDE(0)
    for b in range(problem.B):
        n = int(problem.lengths[b])
        starts = {}
        for t in range(n):
            starts.setdefault(ref.window_start(t, problem.truncate, problem.stride), []).append(t)
        for lo, outputs in starts.items():
            h_before = h0[b] if lo == 0 else frozen[b][lo]
            states = ref.run_states(problem, b, lo, outputs[-1] + 1, h_before, params64)
            for t in outputs:
                total += ref.output_error(ref.output(states[t - lo], params64), problem.y[b, t],
                                          problem.y_ids, problem.loss)[0]
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


WIDE = np.longdouble
DEFAULT_EPS = float(np.cbrt(np.finfo(WIDE).eps))    # balances truncation and rounding


def check_grad(x, y, params, *, eps=None, impl=None, **options):
    """Worst relative error of the analytic gradient against central differences.

    Parameters
    ----------
    x, y, params
        As for `fastbptt.grad`.
    eps : float, optional
        Step of the central difference (f(p + eps) - f(p - eps)) / (2 eps); default the cube
        root of the extended-precision machine epsilon (about 5e-7 on x86).
    impl : callable, optional
        A ``bptt``-like function to check (default `fastbptt.bptt`; e.g.
        `fastbptt.reference.bptt`).
    **options
        truncate, stride, activation, loss, h0, lengths, as for `fastbptt.grad`.

    Returns
    -------
    dict
        Parameter name ('U', 'W', 'V', and 'b', 'c', 'h0' where present) to the worst
        relative error over its entries: |a - n| / max(|a|, |n|, 1e-3 * largest entry).
    """
    problem = prepare(x, y, params, **options)
    result = (impl or bptt)(x, y, params, **options)
    analytic, _ = read_structure(result.grads)
    eps = DEFAULT_EPS if eps is None else eps
    wide = Params(*(None if v is None else v.astype(WIDE) for v in problem.params))
    h0 = problem.h0[0].astype(WIDE)
    frozen = _base_states(problem, wide, h0)

    def loss_at(p, h):
        return _surrogate_loss(problem, p, h, frozen)

    targets = {name: (getattr(wide, name), getattr(analytic, name))
               for name in Params._fields if getattr(wide, name) is not None}
    if options.get("h0") is not None:
        targets["h0"] = (h0, np.reshape(result.dh0, h0.shape))
    errors = {}
    for name, (value, exact) in targets.items():
        numeric = np.zeros(value.shape, WIDE)
        for index in np.ndindex(value.shape):
            saved = value[index]
            value[index] = saved + eps
            plus = loss_at(wide, h0)
            value[index] = saved - eps
            minus = loss_at(wide, h0)
            value[index] = saved
            numeric[index] = (plus - minus) / (2 * eps)
        errors[name] = _relative_error(exact, numeric)
    return errors
