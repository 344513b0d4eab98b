"""Stacks and directions (SPEC.md §8) and the layer VJP of SPEC.md §7, one sequence at a time.

Layer l > 0 reads [h_fwd_t, h_rev_t] of layer l - 1. A direction's states are indexed
s = l D + d (PyTorch's h_n order). Backward, each group of injected gradients (`windows`)
sweeps the top layer; what reaches each step's input, U^T dL/dgi, is injected into the
layer below at that step and swept over the same steps, down to the inputs.
"""
from __future__ import annotations

import numpy as np

from .._inputs import LAYER_FORWARD_OPTIONS, LAYER_OPTIONS, known_options, prepare_layer
from .._results import LayerGrads, LayerOutput
from ..layer import _caller_states, _upstream
from ..params import Layer, Model
from .cells import CELLS, State, add
from .layer import run, sweep, windows

__all__ = ["layer_vjp", "layer_forward", "input_column", "initial_states", "run_stack", "top",
           "Forward"]


def input_column(problem, b, t):
    """x_t of sequence b as a dense vector (a one-hot column for token ids)."""
    if not problem.ids:
        return problem.x[b, t]
    col = np.zeros(problem.sizes[0], dtype=problem.dtype)
    col[problem.x[b, t]] = 1
    return col


def initial_states(problem, b):
    """The state before the first step of every direction s of sequence b: h0 (and c0)."""
    return [State(problem.h0[s, b], None if problem.c0 is None else problem.c0[s, b])
            for s in range(problem.h0.shape[0])]


def run_stack(problem, inputs, starts):
    """runs[l][d]: every layer and direction over one sequence's inputs (in step order),
    direction s = l D + d starting from starts[s]."""
    cell, D = CELLS[problem.cell], problem.directions
    runs = []
    for l, directions in enumerate(problem.model.layers):
        row = [run(layer, cell, problem.activation, inputs, starts[l * D + d],
                   reverse=d == 1 or problem.reverse) for d, layer in enumerate(directions)]
        runs.append(row)
        inputs = np.concatenate([r.h() for r in row], axis=1)    # (n, H D)
    return runs


def top(runs):
    """The top layer's outputs in step order, (n, H D)."""
    return np.concatenate([r.h() for r in runs[-1]], axis=1)


def _backward_sequence(problem, runs, dh, finals, grads, dx):
    """Sweep one sequence's gradients down the stack (module docstring).

    dh (n, H D): dL/dh_t of the top layer's outputs; finals[s]: a `State` of dL/dh_final
    (dL/dc_final) of direction s, or None. Adds into grads[l][d] and dx (n, L); returns
    dL/d(start) of every direction (a `State`, or None where nothing reached it).
    """
    cell, D, H = CELLS[problem.cell], problem.directions, problem.sizes[1]
    n = dh.shape[0]
    starts = [None] * (problem.num_layers * D)
    for lo, outputs in windows(n, problem.truncate, problem.stride).items():
        inject = np.zeros_like(dh)
        inject[outputs] = dh[outputs]
        for l in range(problem.num_layers - 1, -1, -1):
            below = np.zeros((n, problem.model.layers[l][0].U.shape[1]), dh.dtype)
            for d, (layer, r) in enumerate(zip(problem.model.layers[l], runs[l])):
                s = l * D + d
                hi = max(r.order.index(t) for t in outputs)
                reached = sweep(layer, cell, problem.activation, r, inject[:, d * H:(d + 1) * H],
                                lo, hi, grads[l][d], below, finals[s])
                starts[s] = add(starts[s], reached)
            inject = below
        dx += inject
    return starts


class Forward:
    """The forward pass of a validated `Problem`: every sequence's runs, h, h_final, c_final."""

    def __init__(self, problem):
        p = self.problem = problem
        B, T, H = p.B, p.T, p.sizes[1]
        self.h = np.zeros((B, T, H * p.directions), p.dtype)     # zero at padding steps
        self.h_final = np.array(p.h0)
        self.c_final = None if p.c0 is None else np.array(p.c0)
        self.runs = []
        for b in range(B):
            n = int(p.lengths[b])
            inputs = ([int(i) for i in p.x[b, :n]] if p.ids else
                      [input_column(p, b, t) for t in range(n)])
            runs = run_stack(p, inputs, initial_states(p, b))
            self.runs.append(runs)
            if n:
                self.h[b, :n] = top(runs)
            for s, r in enumerate(r for row in runs for r in row):
                self.h_final[s, b] = r.final.h
                if self.c_final is not None:
                    self.c_final[s, b] = r.final.c

    def backward(self, dh, dh_final=None, dc_final=None):
        """(Model of layer gradients, dx (B, T, L), dh0 (S, B, H), dc0 or None) from dh
        (B, T, H D) and optionally dh_final and, for the LSTM, dc_final (S, B, H; both or
        neither). dh0 (dc0) is zeros when h0 (c0) was not given; dx is zeros at padding
        steps."""
        p = self.problem
        grads = [[Layer(*(None if v is None else np.zeros_like(v) for v in layer))
                  for layer in directions] for directions in p.model.layers]
        dx = np.zeros((p.B, p.T, p.sizes[0]), p.dtype)
        dh0 = np.zeros_like(p.h0)
        dc0 = None if p.c0 is None else np.zeros_like(p.c0)
        S = dh0.shape[0]
        for b, runs in enumerate(self.runs):
            n = int(p.lengths[b])
            finals = [None if dh_final is None else
                      State(dh_final[s, b], None if dc_final is None else dc_final[s, b])
                      for s in range(S)]
            if n == 0:                   # no steps: h_final is h0
                reached = finals
            else:
                reached = _backward_sequence(p, runs, dh[b, :n], finals, grads, dx[b, :n])
            for s, state in enumerate(reached):
                if state is not None:
                    dh0[s, b] += state.h
                    if dc0 is not None:
                        dc0[s, b] += state.c
        if not p.h0_given:
            dh0[:] = 0
        if dc0 is not None and not p.c0_given:
            dc0[:] = 0
        layers = tuple(tuple(row) for row in grads)
        return Model(layers), dx, dh0, dc0


def _output(problem, fw):
    """`LayerOutput` in the caller's layout (that of `fastbptt.layer`)."""
    h = fw.h[0] if problem.single else fw.h
    h = np.ascontiguousarray(h.swapaxes(0, 1)) if problem.time_major else h
    c_final = None if fw.c_final is None else _caller_states(problem, fw.c_final)
    return LayerOutput(h, _caller_states(problem, fw.h_final), c_final)


def layer_vjp(x, params, **options):
    """``(out, back)`` as `fastbptt.layer.vjp`, from the loops of this module."""
    known_options("layer_vjp", options, LAYER_OPTIONS)
    problem = prepare_layer(x, params, **options)
    fw = Forward(problem)
    tm = problem.time_major
    out = _output(problem, fw)
    check = options.get("check_finite", True)

    def back(dh, dh_final=None, dc_final=None):
        S, B, H = problem.h0.shape
        if dc_final is not None and problem.cell != "lstm":
            raise ValueError(f"dc_final is the LSTM's cell-state gradient; the {problem.cell} "
                             "cell has no cell state (pass dc_final=None)")
        dh = _upstream("dh", dh, problem, out.h.shape, check)
        dh = (dh.swapaxes(0, 1) if tm else dh).reshape(fw.h.shape)
        finals = [None if v is None else
                  _upstream(name, v, problem, out.h_final.shape, check).reshape(S, B, H)
                  for name, v in (("dh_final", dh_final), ("dc_final", dc_final))]
        if problem.cell == "lstm" and (finals[0] is None) != (finals[1] is None):
            finals = [np.zeros((S, B, H), problem.dtype) if v is None else v for v in finals]
        model, dx, dh0, dc0 = fw.backward(dh, *finals)
        dx = None if problem.ids else (dx[0] if problem.single else dx)
        dx = np.ascontiguousarray(dx.swapaxes(0, 1)) if tm and dx is not None else dx
        return LayerGrads(problem.rebuild(model), dx, _caller_states(problem, dh0),
                          None if dc0 is None else _caller_states(problem, dc0))

    return out, back


def layer_forward(x, params, **options):
    """`LayerOutput` as `fastbptt.layer.forward`."""
    known_options("layer_forward", options, LAYER_FORWARD_OPTIONS)
    problem = prepare_layer(x, params, **options)
    return _output(problem, Forward(problem))
