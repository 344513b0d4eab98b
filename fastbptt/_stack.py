"""A validated problem's layers, run forward and backward (SPEC.md §7, §8).

`run_forward` runs every layer and direction of ``problem.model`` over the inputs and
keeps what the backward pass needs in a `Forward`; its `Forward.backward` takes
G_t = dL/dh_t of the top layer's outputs (put in place by the output layer in
`fastbptt.api`, or from the caller in `fastbptt.layer`) and returns the gradients of
every layer, dL/dh0 and, for dense inputs, dL/dx. Both APIs run the same loops.

Layout, chosen once per call (`make_plan`): narrow batches keep states time-major,
(T+1, B, N), and step with the vector kernels (`_kernels.narrow`); the others keep them
feature-major, (H, T+1, B), and step with a BLAS product (`_kernels.forward`,
`_kernels.backward`). Per-output windows (stride < truncate) run their backward pass
feature-major in either case (lag-major for stride 1, one sweep per group of outputs
beyond; one layer only).

Directions: a reverse direction runs the same kernels on its inputs reordered so that
each sequence starts from its last real step (`_kernels.directions`); its states stay in
that order, and are put back in step order where another layer or the head reads them.
Layer l > 0 of a bidirectional stack reads [h_fwd_t, h_rev_t], 2H features.
"""
from __future__ import annotations

import contextlib
import threading
from typing import NamedTuple

import numpy as np

from ._kernels.backward import backward_groups, backward_lag_major, backward_sweep
from ._kernels.batch_steps import steps_from_batch
from ._kernels.cells import TAGS
from ._kernels.directions import permute_steps, reversal_index
from ._kernels.forward import forward
from ._kernels.inputs import (gather_inputs, gather_inputs_part, input_grads,
                              input_weight_grads, project_inputs, scatter_ids,
                              scatter_ids_part)
from ._kernels.matvec import pack_panels, pad_weights, padded, paneled
from ._kernels.narrow import (NARROW, PANELS, backward_narrow, backward_narrow_whole,
                              forward_narrow, narrow_h0_grads, narrow_weight_grads,
                              to_feature_major)
from ._kernels.narrow_units import backward_units, forward_units
from ._threads import (can_slice, ensure_default_threads, one_blas_thread, run_parties,
                       run_slices, threads_in_use)
from ._workspace import workspace
from .params import Layer

# Batches of NARROW to PANELS - 1 sequences on one thread run narrow, walking whole rows
# of W, one pass per group of up to four sequences (`matvec.passes`), or panels
# (`walks_panels`), whatever W's size: a BLAS product per step of so few columns packs W
# again every step. Measured on one thread, T = 50, calls in turns in one process, whole
# rows against a BLAS product per step, float32:
# LSTM H = 512 (W 4 MB), B = 7, 38.4 against 90.8 ms; LSTM H = 1024 (16 MB), B = 4, 5
# and 7, 0.50, 0.47 and 0.43 of the time; GRU H = 1024, B = 6 and 7, 0.43 and 0.42;
# Elman H = 2048 (16 MB), B = 4 and 7, 0.77 and 0.87. (Batches that walked more than
# 8 MB a step so took the BLAS product until 2026-12-05: 2 to 2.4 times slower than
# PyTorch's nn.LSTM at B = 7, H = 512.)
# Batches of PANELS sequences or more walk W in panels (`matvec.panels_axpy`), which beat
# a BLAS product per step at every size measured up to NARROW_MOST sequences (one
# thread, float32: LSTM H = 1024, B = 16 in 0.71 of the time; B = 32, 0.80; GRU H = 1024,
# B = 32, 0.80; Elman H = 1024, B = 64, 0.91; LSTM H = 512, B = 128, 0.92). With panels
# walked 1024 rows at a time, also at B = 256 and 512 (T = 50, calls in turns in one
# process; float32: LSTM H = 256, B = 256, 0.85, B = 512, 0.88; LSTM H = 128 0.92; GRU
# H = 256 0.90; Elman H = 128 0.89, H = 256 0.995 and 0.945 (B = 512), H = 512 0.89;
# float64: LSTM 0.88, Elman H = 256 1.02; per-output windows, whose backward pass is
# lag-major either way, 1.01 and 0.985). On n threads the batch runs as n slices at once
# (`batch_slices`), each of PANELS sequences or more, up to NARROW_MOST sequences too: on
# two threads, T = 20 and 50, float32, slices took 0.31 to 0.69 of the time of a BLAS
# product per step, which batches of more than 128 took until 2026-12-06 (Elman H = 128,
# B = 256, 1024 and 4096, 0.31 to 0.49; Elman H = 256 to 1024, B = 256 and 512, 0.43 to
# 0.66; LSTM H = 128 to 512, B = 256 to 4096, 0.54 to 0.69; GRU H = 128 to 512, B = 256
# and 2048, 0.49 to 0.56). Fewer than PANELS sequences a thread run on one thread's
# narrow kernels, with the products over all steps on n BLAS threads, or split by units
# (`unit_slices`); a BLAS product per step on two threads, which they took until
# 2026-12-06, took from 1.2 to 2.8 times as long (T = 50 and 100, float32, calls in
# turns: LSTM H = 1024, B = 6, 183 against 66 ms; LSTM H = 128, B = 8, 7.5 against 4.6;
# GRU H = 1024, B = 8, 119 against 98; Elman H = 128, B = 4, 1.19 against 0.91).
# Beyond 512 on one thread too, where the BLAS product per step had been kept (T = 4 to
# 20, float32, in turns, panels against it): Elman H = 128, B = 513, 1024 and 4096, 0.45,
# 0.39 and 0.38 of the time; LSTM H = 128, B = 513 and 1024, 0.69 and 0.61; LSTM H = 256,
# B = 1024 and 4096, 0.74 and 0.72; Elman H = 512 and 1024, B = 1024, 0.62 and 0.73; GRU
# H = 512, B = 1024, 0.73; LSTM H = 512, B = 2048, 0.80.
# Elman batches of 5 to 7 sequences walk W in panels too where W is 2 MB or more, and of 4
# where it is 16 MB or more: whole rows took two passes over W a step (groups of 4 and the
# rest), panels one from L3 or memory. One thread, T = 50, calls in turns, panels against
# whole rows: float32 H = 1024 (4 MB), B = 5, 6, 7, 0.70, 0.86, 0.90; H = 2048, 0.62, 0.65,
# 0.76; float64 H = 512 (2 MB) 0.91, 0.90, 0.93; H = 768 0.88, 0.84, 0.90; float32 H = 768
# (2.25 MB), B = 5, 0.98; with W of 1 MB or less 0.98 to 1.11. B = 4: float32 H = 2048
# (16 MB) 0.84, float64 H = 1024 (8 MB) 0.97, float32 H = 1024 1.11, float64 H = 512 1.10.
ELMAN_PANELS_BYTES = 2 << 20
ELMAN_PANELS_BYTES_4 = 16 << 20
# Batches of up to NARROW_MOST run narrow without AVX-512 too (a Zen 3 core, AVX2, with
# `simd.ACCUMULATORS` and `simd.PANEL_GROUP`; one thread, float32, token ids, T = 50 (20
# at H = 1024), calls in turns in one process, a BLAS product per step over narrow):
# B = 4 to 64, 1.00 to 2.69 (Elman H = 128, 256 and 1024, LSTM H = 128, 256 and 1024, GRU
# H = 256); B = 256, 0.97 to 1.08; B = 512 to 2048, 0.83 to 1.08 (Elman H = 128 and 256,
# LSTM H = 128 and 256, GRU H = 256).
NARROW_MOST = 4096
# Sliced narrow batches with a W of UNITS_BYTES or more, whose hidden units split into
# whole panels per thread, run split by units instead (`unit_slices`): each thread then
# reads its part of W every step rather than all of it. Measured on two threads, B = 32,
# T = 50, medians of calls in turns in one process, by units against by sequences:
# LSTM H = 1024 (W 16 MB) 164 against 188 ms (40 rounds); Elman H = 2048 (16 MB) 146
# against 211; LSTM H = 1024 float64 (32 MB) 408 against 455; GRU H = 2048 (48 MB) 439
# against 505 (9 rounds each). With W of 4 to 12 MB (LSTM H = 512 and 768, GRU and
# Elman H = 1024) even or up to 5% slower, as the threads wait for each other at every
# step.
UNITS_BYTES = 16 << 20
# Fewer than NARROW sequences of a gated cell split by units, in panels, from a W of
# FEW_UNITS_BYTES (an Elman layer's from UNITS_BYTES): on one thread their steps walk
# whole rows of all of W. Two threads, T = 50, float32, calls in turns, by units against
# one thread's whole rows, B = 1, 2, 3: LSTM H = 512 (4 MB) 0.46, 0.63, 0.71 to 0.88;
# GRU H = 640 (4.7 MB) 0.56 (B = 1), 0.96 (B = 3); GRU H = 768 0.55, 0.64 (B = 1, 3);
# LSTM H = 768 0.80, 0.65, 0.68; GRU H = 1024 0.52, 0.57, 0.75; LSTM H = 1024 0.56,
# 0.57, 0.75; Elman H = 2048 (16 MB) 0.49 and 0.68 (B = 1, 3). With less: GRU H = 512
# (3 MB) 1.32 to 1.57, LSTM H = 384 2.0, LSTM H = 256 3.9; Elman H = 1024 (4 MB) 0.83 to
# 1.13, H = 1408 (7.6 MB) 1.26 and 0.71. (Batches of 4 to 7 in panels with less than
# UNITS_BYTES: 1.18 to 1.33.)
FEW_UNITS_BYTES = 4 << 20
# On n threads, a gated cell's batch of 4 n to 8 n - 1 sequences with a W of
# GATED_SLICES_BYTES or more runs in n slices of 4 or more (its groups of 4 in panels are
# the same in any slice of whole groups), not on one thread. Two threads, T = 50,
# float32, calls in turns, slices against one thread: LSTM H = 448 (3.2 MB), B = 8,
# 0.77; LSTM H = 512, B = 8 and 12, 0.77 to 0.82; GRU H = 512 (3 MB), B = 8, 0.74 to
# 0.80; LSTM H = 768, B = 8, 0.81; GRU H = 1024, B = 8, 0.75; GRU H = 448 (2.4 MB),
# B = 12, 0.81. With less: LSTM H = 384 (2.4 MB) and GRU H = 384, B = 8, 1.16; LSTM
# H = 256, B = 8 and 12, 1.23 and 1.33; LSTM H = 128, B = 8, 1.37.
GATED_SLICES_BYTES = 3 << 20
# Calls of one or two steps with a W of at least this many bytes take a BLAS product per
# step on W itself (`Direction.WTp` is then the view W.T): the narrow kernels first copy
# W^T (`matvec.pad_weights`), which costs a few passes over W, as much as the steps
# themselves. One thread, float32 unless said, calls in turns in one process, BLAS
# against narrow (B = 1, 8, 32): T = 1, GRU H = 1024 0.36, 0.53, 0.66; LSTM H = 512 0.57,
# 0.63, 0.70; Elman H = 256 (256 KB) 0.89, 0.91, 1.02; LSTM H = 128 (256 KB) 0.94, 0.80,
# 0.96; Elman H = 128 (64 KB) 1.19, 1.13, 1.05. T = 2, LSTM H = 1024 0.54, 0.74, 0.88;
# float64 Elman H = 512 (2 MB) 0.68, 0.94, 1.10; Elman H = 512 (1 MB) 0.78, 1.03, 1.09.
# From T = 4 on the narrow kernels win but for B = 1 (Elman H = 512, B = 8: 1.29).
FEW_STEPS = {1: 256 << 10, 2: 2 << 20}


def _narrow(problem):
    """Whether the batch runs time-major on the narrow kernels (`_kernels.narrow`): below
    NARROW sequences always; up to NARROW_MOST on one thread, and on n (in n slices of
    PANELS sequences or more, or split by units, or below PANELS n on one thread); never
    for the few steps of FEW_STEPS with a large W. The choice does not depend on the
    truncation, so that `forward` computes the very states `bptt` does. Chosen once per
    call (kept on the problem), so a thread count changed meanwhile cannot split a call
    across paths."""
    if problem.narrow is None:
        B, threads = problem.B, threads_in_use()
        W = problem.model.layers[0][0].W
        sliced = threads > 1 and can_slice()
        few = W.nbytes >= FEW_STEPS.get(problem.T, 1 << 62)
        problem.narrow = not few and (B < NARROW or B <= NARROW_MOST and (
            threads == 1 or sliced or B < PANELS * threads))
        least = NARROW if problem.cell != "elman" and W.nbytes >= GATED_SLICES_BYTES \
            else PANELS
        problem.slices = batch_slices(B, least) if problem.narrow and sliced else (0, B)
        problem.units = unit_slices(problem, threads) if problem.narrow and sliced else None
        if problem.units:
            problem.slices = (0,) + tuple(part[3] for part in problem.units)
    return problem.narrow


def unit_slices(problem, n):
    """The n threads' parts when a narrow batch runs split by hidden units
    (`_kernels.narrow_units`): (u0, u1, b0, b1) per thread, units u0 ... u1-1 and the
    sequences b0 ... b1-1 whose start and finish it does (`batch_slices` where the batch
    splits so, else n nearly equal parts), each thread's units whole panels of W's
    columns (`matvec.paneled`). None for a smaller W (`UNITS_BYTES`; FEW_UNITS_BYTES
    for fewer than NARROW sequences of a gated cell), where H does not split so, or
    where a batch of NARROW or more does not walk W in panels (`walks_panels`); fewer
    than NARROW split so walk W in panels too."""
    H, dtype, B = problem.sizes[1], problem.dtype, problem.B
    W = problem.model.layers[0][0].W
    size = H // n
    few = B < NARROW
    if W.nbytes < (FEW_UNITS_BYTES if few and problem.cell != "elman" else UNITS_BYTES) \
            or H % n or paneled(size, dtype) != size or not (few or walks_panels(B, W)):
        return None
    b = problem.slices if len(problem.slices) == n + 1 else \
        tuple(B * i // n for i in range(n + 1))
    return tuple((i * size, (i + 1) * size, b[i], b[i + 1]) for i in range(n))


def walks_panels(B, W):
    """Whether a narrow batch of B sequences walks W (a layer's, every layer's size) in
    panels (`matvec.panels_axpy`) rather than whole rows (`matvec.rows_axpy`): from
    PANELS sequences; from NARROW for a gated cell, and for Elman where W has
    ELMAN_PANELS_BYTES or more (ELMAN_PANELS_BYTES_4 for a batch of NARROW, which whole
    rows walk in one pass)."""
    if B >= PANELS or B >= NARROW and W.shape[0] > W.shape[1]:
        return True
    return B >= NARROW and W.nbytes >= (ELMAN_PANELS_BYTES_4 if B == NARROW
                                        else ELMAN_PANELS_BYTES)


def batch_slices(B, least=PANELS):
    """Bounds of the slices of a narrow batch that run at once, one per thread: a
    multiple of 4 sequences each (the last takes the rest), ``least`` or more (PANELS, or
    NARROW for a gated cell's large W, `GATED_SLICES_BYTES`), so that every sequence
    goes through the same register blocks as in one slice."""
    n = threads_in_use()
    if n == 1 or B < least * n:
        return (0, B)
    size = B // n // 4 * 4
    return tuple(i * size for i in range(n)) + (B,)


def row_slices(rows, parallel):
    """Bounds of slices of ``rows`` rows (of a matrix product's output), one per thread
    when ``parallel`` (`split`), multiples of 16 rows each but the last; else one."""
    if not parallel:
        return (0, rows)
    n = min(threads_in_use(), max(1, rows // 64))
    size = ((rows + n - 1) // n + 15) // 16 * 16
    return tuple(min(i * size, rows) for i in range(n)) + (rows,)


def split(problem):
    """Whether the call runs narrow slices at once on several threads (see
    `_threads.one_blas_thread`)."""
    _narrow(problem)
    return len(problem.slices) > 2


class Plan(NamedTuple):
    narrow: bool          # states time-major (forward layout)
    chunk: int            # where the backward sweep cuts: T + 1 never, k chunks, 0 windows
    back_tm: bool         # the backward pass runs time-major


_PLANS = {}


def make_plan(problem):
    """The layouts and the backward mode of a validated problem, chosen once."""
    narrow = _narrow(problem)
    k, s = problem.truncate, problem.stride     # None: nothing is cut (`prepare`)
    chunk = problem.T + 1 if k is None else (k if s == k else 0)
    plan = _PLANS.get((narrow, chunk))
    if plan is None:
        if len(_PLANS) > 64:
            _PLANS.clear()
        plan = _PLANS[narrow, chunk] = Plan(narrow, chunk, narrow and chunk > 0)
    return plan


_ZEROS = {}


def bias_or_zeros(vector, size, dtype):
    """The bias, or zeros for none (kept from call to call: the kernels only read it)."""
    if vector is not None:
        return vector
    key = (size, dtype)
    zeros = _ZEROS.get(key)
    if zeros is None:
        zeros = _ZEROS[key] = np.zeros(size, dtype)
    return zeros


def steps(states, time_major, H):
    """h_1 ... h_T of a state array as a 2-D view, step t of sequence b at t B + b:
    (T B, H) when time-major, (H, T B) when feature-major."""
    if time_major:
        T1, B = states.shape[0], states.shape[1]
        return states.reshape(T1 * B, states.shape[2])[B:, :H]
    K, T1, B = states.shape
    return states.reshape(K, T1 * B)[:, B:]


class Direction:
    """One direction of one layer after the forward pass."""

    __slots__ = ("l", "d", "layer", "reverse", "states", "gates", "cells", "kept", "src",
                 "width", "src_tm", "ids", "WTp", "Wp", "WTc", "Wc", "UT")

    def __init__(self, l, d, layer, reverse):
        self.l, self.d, self.layer, self.reverse = l, d, layer, reverse
        self.states = None       # (H, T+1, B) or (T+1, B, N), in this direction's step order
        self.gates = None        # (G H, T+1, B) or (T+1, B, NG); the states for Elman
        self.cells = None        # the LSTM's c_t like the states; empty for other cells
        self.kept = None         # what a gated cell keeps of each step; empty for Elman
        self.src = None          # its inputs: a state-like array, or None for token ids
        self.width = 0           # features of src that are inputs
        self.src_tm = False
        self.ids = None          # token ids (T B,), in this direction's step order
        self.WTp = self.Wp = self.WTc = self.Wc = self.UT = None


class _ViewsPerThread(threading.local):
    """The views a `Forward` remembers, one dict per thread that uses it."""

    def __init__(self):
        self.views = {}

    def get(self, key):
        return self.views.get(key)

    def __setitem__(self, key, value):
        self.views[key] = value


class Forward:
    """What the forward pass leaves for the backward pass.

    The workspace keeps one per shape of call (`_forward_for`), with its directions'
    arrays and the views taken of them, and the calls of that shape that follow (a
    training loop's) reuse it: a small call then pays for little beyond its kernels.

    Scratch arrays come from the workspace of the thread that runs the pass. A Forward
    of the workspace is its thread's alone; one whose arrays are fresh (a `layer.vjp`'s
    ``back``, which any thread may call, several at once) remembers its scratch views
    per thread, so that no two threads ever write the same scratch.
    """

    __slots__ = ("problem", "plan", "dirs", "h_final", "c_final", "idx", "store", "H",
                 "tag", "no_bh", "no_c_final", "no_dh0", "no_dc", "_shapes", "_views")

    def __init__(self, problem, plan, store):
        self.problem, self.plan = problem, plan
        self.h_final = self.c_final = self.idx = None
        self.tag = TAGS[problem.cell]
        self.store = store       # where the kept arrays come from: the workspace, or
        self.dirs = []           # fresh ones for a backward pass that outlives the call
        self.H = problem.sizes[1]
        self._shapes = {}        # name: (shape, dtype) of the scratch of `named`
        self._views = {} if store is workspace else _ViewsPerThread()

    def forget_views(self):
        """Drop the scratch views the calling thread took for a fresh Forward (a `back`'s),
        so that between its calls it pins none of that thread's workspace, which
        `clear_workspace` can then free."""
        if self.store is not workspace:
            self._views.views = {}

    def release(self):
        """Forget the call: its problem (the caller's x, y, h0, params) and results. A
        Forward of the workspace outlives its call in the workspace's cache of shapes,
        which must not keep a caller's arrays alive; its own arrays stay for the next
        call of its shape."""
        self.problem = self.plan = self.h_final = self.c_final = self.idx = None
        for row in self.dirs:
            for direction in row:
                direction.layer = direction.ids = direction.src = None

    def nbytes(self):
        """The bytes of the arrays this Forward holds (the caller's params not counted)."""
        arrays = [getattr(d, name) for row in self.dirs for d in row
                  for name in Direction.__slots__]
        arrays += [self.h_final, self.c_final, self.idx]
        return sum({id(a): a.nbytes for a in arrays if isinstance(a, np.ndarray)}.values())

    @property
    def parallel(self):
        """Whether this call's batch runs in slices on several threads (`split`)."""
        return split(self.problem)

    def scratch(self, name, shape, dtype):
        """A workspace array, remembered by name for the calls that reuse this Forward
        (so one name always asks for one shape: a Forward serves one shape of call)."""
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = workspace.get(name, shape, dtype)
        return view

    def named(self, name):
        """The scratch array `_forward_for` sized under ``name`` (the backward pass's
        carries X, and dUT and dUT64 for the ids' scatter)."""
        return self.scratch(name, *self._shapes[name])

    def top(self):
        """The top layer's outputs h_t (H D features) in step order, as a 2-D view of the
        forward layout ((T B, H D) time-major, (H D, T B) feature-major)."""
        top = self.dirs[-1]
        if len(top) == 1 and not top[0].reverse:
            view = self._views.get("top")
            if view is None:
                view = self._views["top"] = steps(top[0].states, self.plan.narrow, self.H)
            return view
        return steps(_natural_output(self, len(self.dirs), "top"), self.plan.narrow,
                     self.H * len(top))

    def backward_arrays(self, direction):
        """A direction's (states, gates, cells, kept) in the backward pass's layout:
        feature-major copies (made by `convert_states`) when a narrow batch runs
        lag-major; for Elman the gates are the states."""
        d = direction
        if self.plan.narrow == self.plan.back_tm:
            return d.states, d.gates, d.cells, d.kept
        arrays = self._views.get(d)
        if arrays is None:
            arrays = self._views[d] = self._feature_major_arrays(d)
        return arrays

    def _feature_major_arrays(self, d):
        p = self.problem
        shape = (p.T + 1, p.B)
        S = self.scratch(f"hs{d.l}.{d.d}~", (self.H,) + shape, p.dtype)
        Z = S if d.gates is d.states else \
            self.scratch(f"gates{d.l}.{d.d}~", (d.layer.W.shape[0],) + shape, p.dtype)
        C = self.scratch(f"cells{d.l}.{d.d}~", (d.cells.shape[2] and self.H,) + shape,
                         p.dtype)
        E = self.scratch(f"kept{d.l}.{d.d}~", (d.kept.shape[2] and self.H,) + shape,
                         p.dtype)
        return S, Z, C, E

    def convert_states(self):
        """Make the feature-major copies `backward_arrays` returns, where needed: once
        after the forward pass, before the first `backward_arrays`."""
        if self.plan.narrow == self.plan.back_tm:
            return
        for row in self.dirs:
            for d in row:
                S, Z, C, E = self.backward_arrays(d)
                to_feature_major(d.states, S)
                if Z is not S:
                    to_feature_major(d.gates, Z)
                if C.shape[0]:
                    to_feature_major(d.cells, C)
                if E.shape[0]:
                    to_feature_major(d.kept, E)

    def gradient_buffers(self):
        """For each direction of the top layer, its (G H, T B) or (T B, N) array that must
        hold G_t = dL/dh_t (in that direction's step order) before `backward`."""
        buffers = self._views.get("buffers")
        if buffers is None:
            buffers = self._views["buffers"] = [self._buffer(d) for d in self.dirs[-1]]
        return buffers

    def _buffer(self, direction):
        """A direction's dH: G_t = dL/dh_t on entry to its backward pass."""
        p, H = self.problem, self.H
        name = f"delta{direction.l}.{direction.d}"
        if self.plan.back_tm:
            return self.scratch(name, (p.T * p.B, direction.states.shape[2]), p.dtype)
        return self.scratch(name, (H, p.T * p.B), p.dtype)

    def _gate_buffers(self, direction, dH):
        """(dZ, dZh): the gates' gradients, input side and hidden side (dH itself for
        Elman; one array for the LSTM)."""
        if direction.gates is direction.states:
            return dH, dH
        p, GH = self.problem, direction.layer.W.shape[0]
        shape = (p.T * p.B, direction.gates.shape[2]) if self.plan.back_tm else \
            (GH, p.T * p.B)
        dZ = self.scratch("dZ", shape, p.dtype)
        return dZ, (self.scratch("dZh", shape, p.dtype) if p.cell == "gru" else dZ)

    def inject(self, G):
        """Put G_t ((H D, T B) in step order) into the top layer's buffers of a
        feature-major backward pass, reordered for a reverse direction."""
        H = self.H
        for direction, buf in zip(self.dirs[-1], self.gradient_buffers()):
            part = G[direction.d * H:(direction.d + 1) * H]
            if direction.reverse:
                permute_steps(part, buf, self.idx, False, False)
            else:
                buf[:] = part

    def inject_rows(self, g):
        """Put the caller's dL/dh, batch-first (B, T, H D) or time-major (T, B, H D) as the
        problem's ``time_major`` says, into the top layer's buffers of a time-major
        backward pass, zeros at padding steps, reordered for a reverse direction: one
        copy of each row (`_kernels.batch_steps`)."""
        H, p = self.H, self.problem
        for direction, buf in zip(self.dirs[-1], self.gradient_buffers()):
            steps_from_batch(g, direction.d * H, H, buf, p.lengths, direction.reverse,
                             p.time_major)

    def backward(self, dh_final=None, dc_final=None, need_dx=False):
        """Every layer's gradients from the top layer's G (`gradient_buffers`).

        dh_final (and the LSTM's dc_final), (layers x directions, B, H), optional:
        dL/dh_final (dL/dc_final), injected at each sequence's last real step. Returns
        (layers of gradients, ``layers[l][d]`` a `Layer`; dh0 and dc0 (layers x
        directions, B, H), None when neither h0 nor c0 was given (dc0 None for other
        cells than the LSTM); dx (B, T, L), or (T, B, L) for a time-major problem, or
        None).
        """
        if self.parallel:
            with one_blas_thread():
                return self._backward(dh_final, dc_final, need_dx)
        return self._backward(dh_final, dc_final, need_dx)

    def _backward(self, dh_final, dc_final, need_dx):
        p, plan, H = self.problem, self.plan, self.H
        D = len(self.dirs[0])
        tm = plan.back_tm
        starts = p.h0_given or p.c0_given
        shape = (len(self.dirs) * D, p.B, H)
        dh0 = np.zeros(shape, p.dtype) if starts else None
        dc0 = np.zeros(shape, p.dtype) if starts and p.cell == "lstm" else None
        buffers = self.gradient_buffers()
        no_dc = self.no_dc
        if len(self.dirs) == D == 1 and dh_final is None and dc_final is None and not need_dx:
            # one layer, one direction, nothing more injected: the loop below in short
            layer = self._layer_backward(self.dirs[0][0], buffers[0], dh0, dc0, no_dc, None)
            return ((layer,),), dh0, dc0, None
        grads = [[None] * D for _ in self.dirs]
        dx = None
        for l in range(len(self.dirs) - 1, -1, -1):
            if dh_final is not None:
                for direction, buf in zip(self.dirs[l], buffers):
                    _inject_final(p, buf, tm, dh_final[l * D + direction.d], H)
            below = dX = None
            if l or (need_dx and not p.ids):
                below = [self._buffer(d) for d in self.dirs[l - 1]] if l else None
                dX = _dx_targets(self, l, below, need_dx)
            for direction, buf in zip(self.dirs[l], buffers):
                s = l * D + direction.d
                dcf = dc_final[s] if dc_final is not None else no_dc
                grads[l][direction.d] = self._layer_backward(direction, buf, dh0, dc0, dcf,
                                                             dX)
                if dh_final is not None or dc_final is not None:
                    _finals_of_empty(p, s, dh_final, dc_final, dh0, dc0)
            if l:
                _combine(self, l, below, dX)
                buffers = below
            elif dX is not None:
                dx = _user_dx(self, dX)
        return tuple(map(tuple, grads)), dh0, dc0, dx

    def _layer_backward(self, direction, buf, dh0, dc0, dcf, dX):
        """One direction's backward pass from G in buf: its Layer of gradients; dL/dh0
        and dL/dc0 into dh0, dc0; dL/dx into dX's entry for it (see `_dx_targets`)."""
        p, plan, H = self.problem, self.plan, self.H
        layer, dtype = direction.layer, p.dtype
        s = direction.l * len(self.dirs[0]) + direction.d
        B, T = p.B, p.T
        GH = layer.W.shape[0]
        dU, dW = np.empty(layer.U.shape, dtype), np.empty(layer.W.shape, dtype)
        db = np.empty(GH, dtype) if layer.b is not None else self.no_bh      # (0,): none
        dbh = np.empty(GH, dtype) if layer.bh is not None else self.no_bh
        S, Z, C, E = self.backward_arrays(direction)
        dZ, dZh = self._gate_buffers(direction, buf)
        X = self.named("X")
        gated = dZ is not buf
        starts = dh0 is not None
        if plan.back_tm:
            none = self.no_dh0
            h0s = (dh0[s] if starts else none, dc0[s] if starts and dc0 is not None else none)
            Wp = direction.Wp if direction.Wc is None else None      # one of the two
            if self.parallel:
                if p.units:
                    run_parties(backward_units, p.units, self.tag, S, Z, E, C, direction.Wc,
                                layer.W, p.activation, plan.chunk, p.lengths, dcf, buf, dZ,
                                dZh, X)
                else:
                    run_slices(backward_narrow, p.slices, self.tag, S, Z, E, C, Wp,
                               direction.Wc, layer.W, p.activation, plan.chunk, p.lengths,
                               dcf, buf, dZ, dZh, X)
                run_slices(narrow_weight_grads, row_slices(GH, True), S, dZ, dZh, dW, db, dbh)
                narrow_h0_grads(self.tag, layer.W, dZh, X, *h0s)
            else:
                backward_narrow_whole(self.tag, S, Z, E, C, Wp, direction.Wc, layer.W,
                                      p.activation, plan.chunk, p.lengths, dcf, buf, dZ, dZh,
                                      X, dW, db, dbh, *h0s)
        else:
            if starts:
                dh0_t, dc0_t = self.scratch("dh0", (H, B), dtype), \
                    self.scratch("dc0", (H, B), dtype)
            else:
                dh0_t = dc0_t = self.scratch("no dh0 fm", (H, 0), dtype)
            n = T * B
            m = (T + 1) * B
            Sm, Zm = S.reshape(H, m), Z.reshape(Z.shape[0], m)
            Em, Cm = E.reshape(E.shape[0], m), C.reshape(C.shape[0], m)
            fp = self.scratch("fprime", (0 if gated else H, n), dtype)
            if plan.chunk:
                backward_sweep(self.tag, Sm, Zm, Em, Cm, direction.WTp, p.activation,
                               plan.chunk, p.lengths, dcf, buf, dZ, dZh, X, fp, dW, db,
                               dbh, dh0_t, dc0_t)
            else:           # windows: lag-major for s = 1, groups of s outputs beyond
                windows = backward_lag_major if p.stride == 1 else backward_groups
                windows(self.tag, Sm, Zm, Em, Cm, direction.WTp, p.activation, p.truncate,
                        p.stride, p.lengths, dcf, buf, dZ, dZh, X, fp,
                        self._lags(direction, buf, dZ, dZh), dW, db, dbh, dh0_t, dc0_t)
            if starts:
                dh0[s] = dh0_t.T
                if dc0 is not None:
                    dc0[s] = dc0_t.T
        if direction.src is None:
            deltas = (dZ, None) if plan.back_tm else (None, dZ)     # the layout's
            dUT = self.named("dUT"), self.named("dUT64")
            if self.parallel:
                run_slices(scatter_ids_part, row_slices(GH, True), *deltas, direction.ids,
                           dU, *dUT)
            else:
                scatter_ids(*deltas, direction.ids, dU, *dUT)
        else:
            src, width, src_tm = direction.src, direction.width, direction.src_tm
            run_slices(input_weight_grads, row_slices(GH, self.parallel), dZ, plan.back_tm,
                       src, width, src_tm, dU)
            if dX is not None:
                run_slices(input_grads, row_slices(T * B, self.parallel), dZ, plan.back_tm,
                           src_tm, width, layer.U, dX[direction.d], 0.0)
        return Layer(dU, dW, db if layer.b is not None else None,
                     dbh if layer.bh is not None else None)

    def _lags(self, direction, dH, dZ, dZh):
        """The lag-major pass's scratch (`_kernels.backward._lag_major`)."""
        lags = self._views.get("lags")
        if lags is None:
            lags = self._views["lags"] = self._new_lags(direction, dH, dZ, dZh)
        return lags

    def _new_lags(self, direction, dH, dZ, dZh):
        p, H = self.problem, self.H
        n = p.T * p.B
        GH = direction.layer.W.shape[0]
        prev = self.scratch("lag prev", (GH, n), p.dtype)
        h = self.scratch("lag h", (H, n), p.dtype)
        if dZ is dH:                                   # Elman: one array per lag
            x = self.scratch("lag x", (0, n), p.dtype)
            return prev, h, h, h, x, x
        z = self.scratch("lag z", (GH, n), p.dtype)
        zh = z if dZh is dZ else self.scratch("lag zh", (GH, n), p.dtype)
        return (prev, h, z, zh, self.scratch("lag xp", (H, n), p.dtype),
                self.scratch("lag xn", (H, n), p.dtype))


def _finals_of_empty(p, s, dh_final, dc_final, dh0, dc0):
    """dL/dh_final (dc_final) of sequences with no steps go to dh0 (dc0): their h_final is
    h0 (c_final c0)."""
    empty = p.lengths == 0
    if dh_final is not None and dh0 is not None:
        dh0[s, empty] += dh_final[s, empty]
    if dc_final is not None and dc0 is not None:
        dc0[s, empty] += dc_final[s, empty]


def _inject_final(p, buf, tm, dh_final, H):
    """Add dh_final (B, H) at each sequence's last real step of buf (a sequence of
    length 0 has none: its h_final is h0, see `Forward.backward`)."""
    B = p.B
    for b in range(B):
        n = int(p.lengths[b])
        if n == 0:
            continue
        col = (n - 1) * B + b
        if tm:
            buf[col, :H] += dh_final[b]
        else:
            buf[:, col] += dh_final[b]


def _dx_targets(fw, l, below, need_dx):
    """Where each direction of layer l writes U^T delta: for l > 0 with one forward
    direction, straight into the layer below's G buffer; with two directions, into
    scratch arrays that `_combine` reorders and adds; for layer 0, a dense dx array
    when asked for (None otherwise)."""
    p, plan = fw.problem, fw.plan
    dirs = fw.dirs[l]
    if l == 0 and (not need_dx or p.ids):
        return None
    if l and len(dirs) == 1 and not dirs[0].reverse:
        return [below[0]]
    width = dirs[0].width
    shape = (p.T * p.B, width) if dirs[0].src_tm else (width, p.T * p.B)
    return [workspace.get(f"dX{l}.{d.d}", shape, p.dtype) for d in dirs]


def _combine(fw, l, below, dX):
    """The layer below's G from layer l's U^T delta (two directions, or one reversed):
    G_below[d'] = the rows (columns) d' H ... of each direction's dX, in d''s step order."""
    dirs = fw.dirs[l]
    if len(dirs) == 1 and not dirs[0].reverse:
        return
    H, tm = fw.H, fw.plan.back_tm
    for target, lower in zip(below, fw.dirs[l - 1]):
        for k, direction in enumerate(dirs):
            part = dX[k][:, lower.d * H:(lower.d + 1) * H] if tm else \
                dX[k][lower.d * H:(lower.d + 1) * H]
            if direction.reverse == lower.reverse:
                if k == 0:
                    (target[:, :H] if tm else target)[:] = part
                else:
                    (target[:, :H] if tm else target)[:] += part
            else:
                permute_steps(part, target, fw.idx, tm, k > 0)


def _user_dx(fw, dX):
    """dL/dx in the caller's layout, (B, T, L) or time-major (T, B, L), from layer 0's
    U^T delta of each direction (in x's layout of `_dense_x`, each in its direction's
    step order)."""
    p = fw.problem
    time_major = p.time_major
    dirs = fw.dirs[0]
    L = p.sizes[0]
    tm = dirs[0].src_tm
    total = dX[0]
    if dirs[0].reverse:
        total = workspace.get("dx", dX[0].shape, p.dtype)
        permute_steps(dX[0], total, fw.idx, tm, False)
    for k in range(1, len(dirs)):
        permute_steps(dX[k], total, fw.idx, tm, True)
    if tm:
        dx = total.reshape(p.T, p.B, L)
        dx = dx if time_major else np.ascontiguousarray(dx.transpose(1, 0, 2))
    else:
        order = (1, 2, 0) if time_major else (2, 1, 0)
        dx = np.ascontiguousarray(total.reshape(L, p.T, p.B).transpose(order))
    # Time-major from a time-major pass, one sequence or one step: the view is
    # contiguous already, and is scratch memory that the next call overwrites; `back`'s
    # dx is the caller's own.
    return dx.copy() if np.may_share_memory(dx, total) else dx


def _natural_output(fw, l, name):
    """The outputs of layer l - 1 in step order, both directions side by side: a
    state-like array (H D, T+1, B) or (T+1, B, H D) (step block 0 unused)."""
    p, plan, H = fw.problem, fw.plan, fw.H
    dirs = fw.dirs[l - 1]
    D = len(dirs)
    shape = (p.T + 1, p.B, H * D) if plan.narrow else (H * D, p.T + 1, p.B)
    out = fw.store.get(f"{name}{l}", shape, p.dtype)
    target = steps(out, plan.narrow, H * D)
    for direction in dirs:
        source = steps(direction.states, plan.narrow, H)
        part = target[:, direction.d * H:(direction.d + 1) * H] if plan.narrow else \
            target[direction.d * H:(direction.d + 1) * H]
        if direction.reverse:
            permute_steps(source, part, fw.idx, plan.narrow, False)
        else:
            part[:] = source
    return out


def _dense_x(p, store, time_major):
    """The caller's dense x (B, T, L) as a state-like array: time-major (T+1, B, L) or
    feature-major (L, T+1, B). Time-major moves whole rows of L features, feature-major
    every number on its own: at B 32, T 100, L 65 float32, 0.035 against 0.11 ms (and
    0.036 against 0.16 ms to bring dx back, `_user_dx`)."""
    L = p.sizes[0]
    if time_major:
        xs = store.get("x", (p.T + 1, p.B, L), p.dtype)
        xs[1:] = p.x.transpose(1, 0, 2)
    else:
        xs = store.get("x", (L, p.T + 1, p.B), p.dtype)
        xs[:, 1:] = p.x.transpose(2, 1, 0)
    return xs


def _forward_for(p, plan, store):
    """A `Forward` for the problem: its directions with the arrays the forward pass fills
    (states, gates, the LSTM's cells, what the GRU keeps, W^T and W padded). The
    workspace's are kept per shape of call, and whether it splits by units (which
    walks W in panels where one thread may not)."""
    D = len(p.model.layers[0])
    key = None
    if store is workspace:
        key = (plan.narrow, plan.back_tm, p.B, p.T, p.sizes, p.dtype.num, p.ids, p.cell,
               len(p.model.layers), D, p.reverse, p.units is not None)
        fw = store.get_object(key)
        if fw is not None:
            fw.problem, fw.plan = p, plan
            return fw
    fw = Forward(p, plan, store)
    H, B, T, dtype = p.sizes[1], p.B, p.T, p.dtype
    GH = p.model.layers[0][0].W.shape[0]
    N, NG = padded(H, dtype), padded(GH, dtype)
    lstm, gru = p.cell == "lstm", p.cell == "gru"

    def state_like(name, rows, width):
        shape = (T + 1, B, width if rows else 0) if plan.narrow else (rows, T + 1, B)
        return store.get(name, shape, dtype)

    for l in range(len(p.model.layers)):
        row = []
        for d in range(D):
            direction = Direction(l, d, None, d == 1 or p.reverse)
            name = f"{l}.{d}"
            direction.states = state_like(f"states{name}", H, N)
            direction.gates = direction.states if GH == H else \
                state_like(f"gates{name}", GH, NG)
            direction.cells = state_like(f"cells{name}", H if lstm else 0, N)
            direction.kept = state_like(f"kept{name}", H if gru or lstm else 0, N)
            direction.WTp = store.get(f"WTp{name}", (H, NG), dtype)
            direction.Wp = store.get(f"Wp{name}", (GH, N), dtype)
            # W^T and W walked in column panels (`matvec.panels_axpy`; `walks_panels`)
            panels = plan.narrow and (p.units is not None or
                                      walks_panels(B, p.model.layers[0][0].W))
            # (None, not an empty array: the kernels then compile without the panels' code)
            direction.WTc = store.get(f"WTc{name}", (H * paneled(NG, dtype),), dtype) \
                if panels else None
            direction.Wc = store.get(f"Wc{name}", (GH * paneled(N, dtype),), dtype) \
                if panels else None
            # token ids gathered from the rows of U^T (see the gathers in `_kernels.inputs`)
            by_rows = plan.narrow and (T * B >= 16 * p.sizes[0] or
                                       p.sizes[0] * dtype.itemsize >= 1024)
            direction.UT = store.get(f"UT{name}", (p.sizes[0], GH) if by_rows else (0, 0),
                                     dtype)
            row.append(direction)
        fw.dirs.append(row)
    # empty arrays that stand for what the cell or the call has not (never workspace
    # views: a fresh Forward, a `back`'s, would pin its thread's scratch with them)
    fw.no_bh = np.empty((0,), dtype)
    fw.no_c_final = np.empty((len(p.model.layers) * D, B, 0), dtype)
    fw.no_dh0 = fw.no_dc = np.empty((0, H), dtype)
    dUT = (p.sizes[0], NG) if plan.back_tm else (0, 0)
    fw._shapes.update(X=((B, N) if plan.back_tm else (H if GH > H else 0, B), dtype),
                      dUT=(dUT, dtype), dUT64=(dUT, np.float64),
                      hid=(((B, NG if gru else 0) if plan.narrow else (GH if gru else 0, B)),
                           dtype))      # the GRU's scratch (empty for the other cells)
    if key is not None:
        store.put_object(key, fw)
    return fw


@contextlib.contextmanager
def forward_pass(problem):
    """`run_forward` into the workspace for the length of a call: the `Forward`, released
    (`Forward.release`) when the call is done with it."""
    fw = run_forward(problem)
    try:
        yield fw
    finally:
        fw.release()


def run_forward(problem, store=workspace):
    """Run every layer and direction; return the `Forward` (states, h_final, ...)."""
    ensure_default_threads()
    if split(problem):
        with one_blas_thread():
            return _run_forward(problem, store, True)
    return _run_forward(problem, store, False)


def _run_forward(problem, store, parallel):
    fw = _forward_for(problem, make_plan(problem), store)
    try:
        _fill(fw, parallel)
    except BaseException:               # (a Ctrl-C, a MemoryError): the workspace's cache
        fw.release()                    # of shapes keeps none of the caller's arrays
        raise
    if store is not workspace:          # a `back`'s: the ids' gather table is the forward
        for row in fw.dirs:             # pass's alone (a copy of U, L G H numbers)
            for direction in row:
                direction.UT = None
    return fw


def _fill(fw, parallel):
    """The forward pass of every layer and direction into ``fw``."""
    p, plan, store = fw.problem, fw.plan, fw.store
    L, H, C = p.sizes
    B, T, dtype = p.B, p.T, p.dtype
    D = len(p.model.layers[0])
    idx = None
    if D == 2 or p.reverse:
        idx = np.empty(T * B, np.int64)
        reversal_index(p.lengths, T, idx)
    hid = fw.named("hid")
    S = len(p.model.layers) * D
    fw.h_final = h_final = np.empty((S, B, H), dtype)
    fw.c_final = c_final = np.empty((S, B, H), dtype) if p.cell == "lstm" else fw.no_c_final
    fw.idx = idx
    x_ids = p.x.T.reshape(-1) if p.ids else None
    # dense x time-major where the backward pass is: its input-side products then take
    # x's rows as the layers above take the states below
    x_tm = plan.back_tm
    x_dense = None if p.ids else _dense_x(p, store, x_tm)
    gru = p.cell == "gru"
    for l, layers in enumerate(p.model.layers):
        below = None
        if l:
            lower = fw.dirs[l - 1]
            if len(lower) == 1 and not lower[0].reverse:
                below = (lower[0].states, H, plan.narrow)
            else:
                below = (_natural_output(fw, l, "cat"), H * len(lower), plan.narrow)
        for direction, layer in zip(fw.dirs[l], layers):
            direction.layer = layer
            GH = layer.W.shape[0]
            gates = direction.gates
            bias = bias_or_zeros(layer.b, GH, dtype)
            ids = None          # token ids that the narrow time loop gathers step by step
            if l == 0 and p.ids:
                direction.ids = x_ids[idx] if direction.reverse else x_ids
                outs = (gates, None) if plan.narrow else (None, gates)    # the layout's
                if plan.narrow and (p.units or not parallel) and direction.UT.size:
                    ids = direction.ids             # (`inputs.gather_step`)
                elif parallel:
                    run_slices(gather_inputs_part, row_slices(GH, True), direction.ids,
                               layer.U, direction.UT, bias, *outs)
                else:
                    gather_inputs(direction.ids, layer.U, direction.UT, bias, *outs)
            else:
                if l == 0:
                    src, width, src_tm = x_dense, L, x_tm
                else:
                    src, width, src_tm = below
                if direction.reverse:
                    src = _reversed_src(fw, src, src_tm, width, f"src{l}.{direction.d}")
                direction.src, direction.width, direction.src_tm = src, width, src_tm
                run_slices(project_inputs, row_slices(T * B, parallel), src, width, src_tm,
                           layer.U, bias, gates, plan.narrow)
            if not plan.narrow and T in FEW_STEPS:     # W^T's copy would not pay
                direction.WTp = layer.W.T
            elif direction.WTc is None or not plan.back_tm:    # else panels alone serve
                pad_weights(layer.W, direction.WTp, direction.Wp)
            s = l * D + direction.d
            bh = bias_or_zeros(layer.bh, GH, dtype) if gru else fw.no_bh
            states, cells = direction.states, direction.cells
            if plan.narrow:
                WTc = direction.WTc
                if WTc is not None:
                    run_slices(pack_panels, (0, 1, 2) if parallel else (0, 2), layer.W,
                               WTc, direction.WTp.shape[1], direction.Wc, direction.Wp.shape[1])
                c0 = p.c0[s] if p.c0 is not None else p.h0[s]
                WTp = direction.WTp if WTc is None else None
                if p.units:
                    run_parties(forward_units, p.units, fw.tag, WTc, layer.W, p.activation,
                                p.lengths, p.h0[s], c0, gates, states, direction.kept, cells,
                                hid, bh, h_final[s], c_final[s], ids, layer.U,
                                direction.UT, bias)
                else:
                    run_slices(forward_narrow, p.slices, fw.tag, WTp, WTc, p.activation,
                               p.lengths, p.h0[s], c0, gates, states, direction.kept,
                               cells, hid, bh, h_final[s], c_final[s], ids, layer.U,
                               direction.UT, bias)
            else:
                states[:, 0] = p.h0[s].T
                if p.cell == "lstm":
                    cells[:, 0] = p.c0[s].T
                forward(fw.tag, layer.W, p.activation, p.lengths, gates, states,
                        direction.kept, cells, hid, bh, fw.scratch("columns", (H * B,), dtype))
                h_final[s] = states[:, p.lengths, np.arange(B)].T
                if p.cell == "lstm":
                    c_final[s] = cells[:, p.lengths, np.arange(B)].T


def _reversed_src(fw, src, src_tm, width, name):
    """src (a state-like array) with its steps reordered for a reverse direction."""
    out = fw.store.get(name, src.shape, src.dtype)
    permute_steps(steps(src, src_tm, src.shape[2] if src_tm else src.shape[0]),
                  steps(out, src_tm, src.shape[2] if src_tm else src.shape[0]),
                  fw.idx, src_tm, False)
    return out
