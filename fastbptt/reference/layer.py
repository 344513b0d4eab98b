"""One direction of one layer over one sequence: the time loop, forward and backward.

`run` steps a cell through the sequence's real steps in the direction's order (a reverse
direction reads steps n-1, ..., 0, as PyTorch's packed sequences do, SPEC.md §8). `sweep`
carries gradients back through positions hi, hi-1, ..., lo of that order, adding at each
step the gradient injected there, and returns what reaches the state before position lo
when lo is 0 (dL/dh0, dL/dc0); for lo > 0 that state is frozen (SPEC.md §3, §7).

Truncation groups the steps whose injected gradients flow back alike (`windows`): outputs
t with the same lo(t) cross the same steps, so one sweep from the last of them down to lo
carries all of their gradients (the backward pass is linear in them). Full BPTT is one
sweep (SPEC.md §2's delta recursion), chunks one sweep per chunk (min-char-rnn), windows of
stride 1 one sweep per output (document 003's loop).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._blas_flags import ignore_harmless_flags
from .cells import State, add

__all__ = ["Run", "run", "sweep", "window_start", "windows"]


def window_start(t, truncate, stride):
    """lo(t): the earliest step that the error of output t reaches (SPEC.md §3), for
    truncate k >= 1 (None: full BPTT) and stride 1 <= s <= k."""
    if truncate is None:
        return 0
    if not 1 <= stride <= truncate:
        raise ValueError(f"window_start needs 1 <= stride <= truncate; got stride={stride}, "
                         f"truncate={truncate}")
    return max(0, (t // stride + 1) * stride - truncate)


def windows(n, truncate, stride):
    """{lo: [t, ...]}: the steps t < n grouped by lo(t), each group in step order."""
    groups = {}
    for t in range(n):
        groups.setdefault(window_start(t, truncate, stride), []).append(t)
    return groups


@dataclass
class Run:
    """One direction of one layer after its forward pass over one sequence."""

    order: list          # the steps in the order this direction reads them
    inputs: list         # inputs[i]: the input at step order[i] (a vector or a token id)
    start: State         # the state before the first step (h0, c0)
    states: list         # states[i]: the state after step order[i]
    caches: list         # caches[i]: what the cell's backward step needs there

    def before(self, i):
        """The state before position i."""
        return self.states[i - 1] if i else self.start

    @property
    def final(self):
        """The state after the last real step (the start for a sequence of no steps)."""
        return self.states[-1] if self.states else self.start

    def h(self):
        """h_t for t = 0 ... n-1 in step order, (n, H)."""
        h = np.zeros((len(self.order), self.start.h.shape[0]), self.start.h.dtype)
        for i, t in enumerate(self.order):
            h[t] = self.states[i].h
        return h


def _token(x):
    return isinstance(x, (int, np.integer))


def _input_part(U, x):
    """U x: the column of U at a token id (the product with its one-hot vector, with no
    other column of U in it), or the product with a dense input."""
    return U[:, x] if _token(x) else U @ x


@ignore_harmless_flags
def run(layer, cell, activation, inputs, start, reverse=False):
    """The forward pass of one direction over one sequence's inputs (in step order):
    vectors, or token ids."""
    order = list(range(len(inputs)))
    if reverse:
        order.reverse()
    out = Run(order, [inputs[t] for t in order], start, [], [])
    state = start
    for x in out.inputs:
        gi = _input_part(layer.U, x) if layer.b is None else _input_part(layer.U, x) + layer.b
        gh = layer.W @ state.h if layer.bh is None else layer.W @ state.h + layer.bh
        state, cache = cell.step(gi, gh, state, activation)
        out.states.append(state)
        out.caches.append(cache)
    return out


@ignore_harmless_flags
def sweep(layer, cell, activation, r, inject, lo, hi, grads, dx, final=None):
    """Carry gradients back through positions hi ... lo of run ``r``.

    inject (n, H): dL/dh_t added when the sweep reaches step t; final: None, or a `State`
    of dL/dh_final (and, for the LSTM, dL/dc_final) added at the last position, n-1, if
    the sweep starts there. Adds the layer's gradients into ``grads`` (a `Layer` of
    arrays) and, for a dense input, U^T dL/dgi into dx[t]. Returns dL/d(start) as a
    `State` when lo is 0, else None (the state before lo is frozen).
    """
    zeros = np.zeros_like(r.start.h)
    carry = State(zeros, None if r.start.c is None else zeros)
    for i in range(hi, lo - 1, -1):
        t = r.order[i]
        carry = State(carry.h + inject[t], carry.c)
        if i == len(r.order) - 1:
            carry = add(carry, final)
        dgi, dgh, dh_direct, dc_before = cell.step_back(r.caches[i], *carry, activation)
        x = r.inputs[i]
        if _token(x):                   # the outer product with a one-hot vector
            grads.U[:, x] += dgi
        else:
            grads.U[:] += np.outer(dgi, x)
            dx[t] += layer.U.T @ dgi
        grads.W[:] += np.outer(dgh, r.before(i).h)
        if grads.b is not None:
            grads.b[:] += dgi
        if grads.bh is not None:
            grads.bh[:] += dgh
        carry = State(layer.W.T @ dgh + dh_direct, dc_before)
    return carry if lo == 0 else None
