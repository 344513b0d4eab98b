"""The cells: one module each for its step math, forward and backward, and nothing else.

The drivers (`..forward`, `..narrow`, `..backward`) own the time loops, the products with
W, truncation and padding; at each step they call the hooks below with a cell tag as the
first argument. A tag is an empty array whose dtype names the cell (`TAGS`): Numba then
compiles a driver once per cell, with that cell's hooks (called, but for Elman's time-major
ones: `_step_hook`), and only for the cells a program uses; and the tag costs nothing at
call time.

Hooks (every cell module defines each). Feature-major ones take whole C-contiguous
(rows, columns) matrices and the columns to work on, so that every row segment they
loop over is contiguous and vectorizes (a view of a block would not be known to be):
step arrays (Zm, Sm, Em, Cm) at columns cs ... (the step before at cs - B), gradient
arrays (dH, dZ, dZh, fp) at cd ..., the carry X at cx ..., n columns
(one step's B, or every step's in lag-major passes). Time-major ones take the 3-D state
arrays (steps as rows of the gradient arrays), a step t and sequence b, and the units
j0 ... j1-1 to work on (0 ... H, or one thread's part when threads split the units,
`..narrow_units`), and read only the rows and units they need.
- ``prepare_fm(Sm, fp, B, act)``: before a feature-major backward pass (Elman's f').
- ``forward_fm(Zm, Sm, Em, Cm, cs, B, Hid, act, buf)`` and
  ``forward_tm(Z, S, E, C, Hid, t, b, H, act, j0, j1)``: the step from its gates.
- ``backward_fm(dH, dZ, dZh, cd, Zm, Sm, Em, Cm, cs, B, X, cx, fp, n, act, total, add)`` and
  ``backward_tm(dH, dZ, dZh, Z, S, E, C, X, t, b, B, H, act, j0, j1)``: from dH = dL/dh_t (the
  injected gradient plus W^T dZh_{t+1}) and the cell's own carry X from step t + 1
  (zero where truncation cuts it), the input-side gradients dZ of the gates, the
  hidden-side ones dZh, and in X, in place, the carry to step t - 1. A cell whose
  ``SUMS`` is True also adds dZ to ``total`` (``add``) or copies it there when
  ``total`` is not empty (the lag-major pass's sum and its copy of the lag, fused into
  the same pass over memory); for the others the driver does it.
- ``to_h0(X, dh0, dc0)``: what the carry after step 0 adds to dL/dh0 and dL/dc0.

Z holds the gates (the inputs' part U x + b before the forward step), S/s the states
h_t, Sp/sp h_{t-1}, C/Cp the LSTM's c_t and c_{t-1}, E/e what a gated cell keeps of a
step for its backward step (the GRU's W_n h_{t-1} + b_hn, the LSTM's tanh(c_t)), Hid/hid
the GRU's W h_{t-1} + bh.
"""
import functools

import numpy as np

from .._overload import called_overload, inline_overload
from . import elman, gru, lstm

ELMAN, GRU, LSTM = np.empty(0, np.int8), np.empty(0, np.int16), np.empty(0, np.int32)
TAGS = {"elman": ELMAN, "gru": GRU, "lstm": LSTM}
_MODULES = {np.dtype(np.int8): elman, np.dtype(np.int16): gru, np.dtype(np.int32): lstm}


def _module(tag):
    """The cell module of a tag's Numba type."""
    return _MODULES[np.dtype(str(tag.dtype))]


def _step_hook(stub):
    """Register the decorated typing function as ``stub``'s implementation twice: inlined
    into the driver for the Elman cell, whose time-major step is a few vector operations
    on one sequence's row (a call's cost showed on one short sequence: W2 took 2% longer),
    and called for a gated cell, whose step math inlined made each driver take 1 to 2 s
    longer to compile. (The feature-major hooks work on B columns or more a call, and are
    called for every cell.)"""
    def register(typing):
        @functools.wraps(typing)
        def inlined(tag, *args):
            return typing(tag, *args) if _module(tag) is elman else None

        @functools.wraps(typing)
        def called(tag, *args):
            return None if _module(tag) is elman else typing(tag, *args)

        inline_overload(stub)(inlined)
        called_overload(stub)(called)
        return typing
    return register


def _stub(tag, *args):
    raise NotImplementedError("cell hooks are called from compiled kernels only")


def prepare_fm(tag, Sm, fp, B, act):
    _stub(tag)


def forward_fm(tag, Zm, Sm, Em, Cm, cs, B, Hid, act, buf):
    _stub(tag)


def forward_tm(tag, Z, S, E, C, Hid, t, b, H, act, j0, j1):
    _stub(tag)


def backward_fm(tag, dH, dZ, dZh, cd, Zm, Sm, Em, Cm, cs, B, X, cx, fp, n, act, total, add):
    _stub(tag)


def backward_tm(tag, dH, dZ, dZh, Z, S, E, C, X, t, b, B, H, act, j0, j1):
    _stub(tag)


def to_h0(tag, X, dh0, dc0):
    _stub(tag)


def sums(tag):
    _stub(tag)


@inline_overload(prepare_fm)
def _prepare_fm(tag, Sm, fp, B, act):
    impl = _module(tag).prepare_fm
    return lambda tag, Sm, fp, B, act: impl(Sm, fp, B, act)


@called_overload(forward_fm)
def _forward_fm(tag, Zm, Sm, Em, Cm, cs, B, Hid, act, buf):
    impl = _module(tag).forward_fm
    return lambda tag, Zm, Sm, Em, Cm, cs, B, Hid, act, buf: impl(Zm, Sm, Em, Cm, cs, B, Hid,
                                                                    act, buf)


@_step_hook(forward_tm)
def _forward_tm(tag, Z, S, E, C, Hid, t, b, H, act, j0, j1):
    impl = _module(tag).forward_tm
    return lambda tag, Z, S, E, C, Hid, t, b, H, act, j0, j1: impl(Z, S, E, C, Hid, t, b, H,
                                                                   act, j0, j1)


@called_overload(backward_fm)
def _backward_fm(tag, dH, dZ, dZh, cd, Zm, Sm, Em, Cm, cs, B, X, cx, fp, n, act, total, add):
    impl = _module(tag).backward_fm

    def call(tag, dH, dZ, dZh, cd, Zm, Sm, Em, Cm, cs, B, X, cx, fp, n, act, total, add):
        impl(dH, dZ, dZh, cd, Zm, Sm, Em, Cm, cs, B, X, cx, fp, n, act, total, add)

    return call


@_step_hook(backward_tm)
def _backward_tm(tag, dH, dZ, dZh, Z, S, E, C, X, t, b, B, H, act, j0, j1):
    impl = _module(tag).backward_tm

    def call(tag, dH, dZ, dZh, Z, S, E, C, X, t, b, B, H, act, j0, j1):
        impl(dH, dZ, dZh, Z, S, E, C, X, t, b, B, H, act, j0, j1)

    return call


@inline_overload(to_h0)
def _to_h0(tag, X, dh0, dc0):
    impl = _module(tag).to_h0
    return lambda tag, X, dh0, dc0: impl(X, dh0, dc0)


@inline_overload(sums)
def _sums(tag):
    value = _module(tag).SUMS
    return lambda tag: value
