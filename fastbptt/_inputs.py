"""Validation and conversion of the public arguments.

Every public entry point runs `prepare` before any kernel: it checks kinds, shapes and
ranges, raises TypeError/ValueError naming the argument, and returns arrays in the
compute dtype (the params' dtype). These may be the caller's own arrays, so nothing
downstream writes to them; big-endian, read-only and non-contiguous arrays are copied,
since a kernel cannot take them (or would compile again for them). When lengths are
given, steps past a sequence's length are overwritten in private copies (ids 0,
targets -1, dense rows 0), so padding content never reaches a kernel, and ids and
values there are neither range- nor NaN-checked.
"""
from __future__ import annotations

import numbers
import operator
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from ._kernels.checks import all_finite, id_range
from ._masks import refuse_masked as _refuse_masked
from .params import Model, Params
from ._params_check import check_layers, check_model
from ._ranges import shown

ACTIVATIONS = {"tanh": 0, "sigmoid": 1, "relu": 2, "identity": 3}
LOSSES = {"softmax_ce": 0, "mse": 1}
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass(slots=True)
class Problem:
    """One validated call: batch-first arrays in the compute dtype, plus the options."""

    single: bool                     # x was one sequence: results drop the batch axis
    x: np.ndarray                    # ids (B, T) int64, or dense (B, T, L); read-only
    ids: bool                        # x holds token ids
    y: Optional[np.ndarray]          # ids (B, T) int64, -1 = no loss, or (B, T, C); read-only
    y_ids: bool
    lengths: np.ndarray              # (B,) int64, 0 <= lengths <= T
    h0: np.ndarray                   # (layers x directions, B, H), zeros when not given
    h0_given: bool                   # dL/dh0 is reported only for an h0 that was passed
    model: Model                     # contiguous arrays of the compute dtype; biases may be None
    rebuild: Callable                # Model of gradients -> the caller's structure
    activation: int
    loss: int
    truncate: Optional[int]          # None = full BPTT
    stride: int
    B: int                           # sequences
    T: int                           # steps
    sizes: tuple                     # (L, H, C) of the params; C = 0 without a head
    dtype: np.dtype                  # the params' dtype, the compute dtype
    stacked: bool = False            # params were a stack: states are (layers x dirs, B, H)
    cell: str = "elman"
    c0: Optional[np.ndarray] = None  # LSTM: like h0
    c0_given: bool = False
    reverse: bool = False            # layer calls: run the layer from each sequence's end
    time_major: bool = False         # layer calls: the caller's batch is (T, B, ...) (x, h,
                                     # dh, dx; never for one sequence); x here is batch-first
    narrow: Optional[bool] = None    # the kernel path, once `_stack._narrow` has chosen it
    slices: Optional[tuple] = None   # with it, the narrow batch's slices (`batch_slices`)
    units: Optional[tuple] = None    # and the threads' ranges of units, or None (`unit_slices`)

    def padding_mask(self):
        """(B, T) bool: True at real steps."""
        return np.arange(self.T)[None, :] < self.lengths[:, None]

    @property
    def params(self):
        """The `Params` of one Elman layer with its head."""
        layer = self.model.layers[0][0]
        return Params(layer.U, layer.W, self.model.V, layer.b, self.model.c)

    @property
    def num_layers(self):
        return len(self.model.layers)

    @property
    def directions(self):
        return len(self.model.layers[0])


# The keyword options of the entry points with a head (`fastbptt.bptt`'s) and of the layer's
# (`fastbptt.layer.vjp`'s), for those that take them as **options and pass them on.
HEAD_OPTIONS = frozenset({"truncate", "stride", "activation", "loss", "h0", "lengths",
                          "check_finite", "cell", "c0"})
LAYER_OPTIONS = frozenset({"cell", "activation", "h0", "c0", "lengths", "reverse", "truncate",
                           "stride", "check_finite", "time_major"})
LAYER_FORWARD_OPTIONS = LAYER_OPTIONS - {"truncate", "stride"}     # `fastbptt.layer.forward`'s


def known_options(caller, options, known):
    """The TypeError Python would raise for an unknown keyword of ``caller`` itself, rather
    than of a function it passes its options to."""
    if not options.keys() <= known:
        name = min(options.keys() - known)
        raise TypeError(f"{caller}() got an unexpected keyword argument {name!r}; its options "
                        f"are {', '.join(sorted(known))}")


def _name_list(options):
    return ", ".join(repr(k) for k in options)


def _option(name, value, options):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, one of {_name_list(options)}; got {value!r}")
    if value not in options:
        raise ValueError(f"unknown {name} {value!r}; valid values are {_name_list(options)}")
    return options[value]


def _int_option(name, value, *, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int; got a bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int{' or None' if allow_none else ''}; "
                        f"got {type(value).__name__}") from None


def _array(name, value, what="integers or floats"):
    """np.asarray that rejects what cannot be numeric, naming the argument.

    Arrays of non-native byte order (big-endian files) come back converted to native
    order: Numba's kernels cannot read them.
    """
    if value is None:
        raise TypeError(f"{name} must be a numeric array; got None")
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a numeric array; got {type(value).__name__}")
    _refuse_masked(name, value)
    if getattr(value, "requires_grad", False) is True and hasattr(value, "detach"):
        raise TypeError(f"{name} is a tensor that requires grad, which NumPy cannot read: pass "
                        f"it with .detach() (fastbptt computes the gradients itself; "
                        f"fastbptt.torch's modules take part in autograd)")
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise ValueError(f"{name} could not be read as an array: {exc}") from None
    if arr.dtype.kind not in "biuf":
        big, floats = _beyond_64_bits(arr)
        if big is not None and "float" in what and (floats or "integer" not in what):
            try:
                fix = f"write it as a float ({float(big)!r})"
            except OverflowError:
                fix = "it is beyond float64's range too: scale the values into it"
            raise ValueError(f"{name} holds an integer beyond 64 bits ({shown(big)}), which "
                             f"NumPy keeps as a Python object; {fix}")
        if big is not None:
            raise ValueError(f"{name} holds an integer beyond 64 bits ({shown(big)}), which no "
                             f"id or length can be")
        raise TypeError(f"{name} must hold {what}; got dtype {arr.dtype}")
    if arr.dtype.kind == "b":
        cast = " or ".join(f".astype({t})" for t in ("int", "float") if t in what)
        raise TypeError(f"{name} must hold {what}, not booleans; cast with {cast}")
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr


def _beyond_64_bits(arr):
    """``(big, floats)``: an integer beyond int64 and uint64 of an object array that holds
    real numbers alone (as NumPy makes a list holding one), else None; and whether the
    array holds floats beside integers."""
    if arr.dtype != object or not arr.size or not all(
            isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))
            for v in arr.flat):
        return None, False
    big = next((v for v in arr.flat
                if isinstance(v, numbers.Integral) and not -2**63 <= v < 2**64), None)
    return big, any(not isinstance(v, numbers.Integral) for v in arr.flat)


def _in_dtype(name, arr, dtype, check_finite, shape=None, mask=None):
    """``arr`` in the compute dtype; ValueError naming ``name`` for a finite value that
    the conversion turns into an inf (a float64 beyond float32's range), as for an inf.

    ``arr`` was checked for NaN and inf already; ``shape`` is the caller's shape of it,
    for the index in the message; ``mask`` (B, T): True at real steps, as for
    `_check_finite` (None: every step is real).
    """
    if arr.dtype.itemsize <= dtype.itemsize:
        return arr.astype(dtype, copy=False)
    with np.errstate(over="ignore"):            # reported below, not as a warning
        out = arr.astype(dtype)
    if not check_finite or not out.size or (_scannable(out, FLOAT_DTYPES)
                                             and all_finite(out.reshape(-1))):
        return out
    bad = ~np.isfinite(out) & np.isfinite(arr)
    if mask is not None:
        bad &= mask.reshape(mask.shape + (1,) * (arr.ndim - mask.ndim))
    if bad.any():
        here, theirs = _first(bad, shape)
        wider = " or float64 params" if dtype != np.float64 else ""
        raise ValueError(f"{name} holds a value that overflows {dtype.name}, the params' "
                         f"dtype ({arr[here]!s} at index {theirs}); pass values within "
                         f"+-{np.finfo(dtype).max:.4g}{wider}, or check_finite=False to "
                         f"skip this check")
    return out


def _private(arr):
    """A copy of ``arr`` that only this call can reach.

    Token ids, class ids and lengths index memory in the kernels, so the values checked
    must be the values read: each is copied before its check, and the kernels read the
    copy. A caller's array that another thread changes during the call (a data loader
    refilling its buffer) then cannot steer a kernel outside its arrays, nor a later
    `fastbptt.layer` ``back``, which reads the same copy; float inputs index nothing and
    are read in place (a ``back`` keeps copies of what it reads).
    """
    return arr.copy()


def _for_kernels(arr):
    """``arr`` itself when a kernel may read it in place, else a private copy.

    Numba types a read-only array apart from a writable one, so a read-only input would
    compile a second set of kernels (seconds) instead of reusing the first.
    """
    flags = arr.flags
    if flags.c_contiguous and flags.writeable:
        return arr
    return np.array(arr, order="C")


def _first(bad, shape=None):
    """The first True entry of ``bad``: (its index in ``bad``, that index in ``shape``).

    ``shape`` is the caller's shape when ``bad`` is a reshaped view of the caller's
    array (one sequence seen as a batch of one), so messages point into their array.
    """
    flat = int(np.flatnonzero(bad)[0])
    here = np.unravel_index(flat, bad.shape)
    theirs = np.unravel_index(flat, bad.shape if shape is None else shape)
    return here, tuple(int(i) for i in theirs)


def _scannable(arr, kinds):
    """Whether a one-pass scan (`fastbptt._kernels.checks`) can read arr as it is.

    Only contiguous, writable arrays of the dtypes the scans are compiled for: any
    other kind would compile another signature (seconds) to save microseconds.
    """
    flags = arr.flags
    return arr.dtype in kinds and flags.c_contiguous and flags.writeable


_INT64 = (np.dtype(np.int64),)


def _check_finite(name, arr, enabled=True, mask=None, shape=None):
    """ValueError naming ``name`` for a NaN or inf at a real step.

    ``mask`` (B, T): True at real steps (None: every step is real); ``shape``: the
    caller's shape of ``arr``, for the index in the message.
    """
    if not enabled or not arr.size:
        return
    if mask is None and _scannable(arr, FLOAT_DTYPES) and all_finite(arr.reshape(-1)):
        return
    ok = np.isfinite(arr)
    if mask is not None:
        ok |= ~mask.reshape(mask.shape + (1,) * (arr.ndim - mask.ndim))    # padding
    if not ok.all():
        here, theirs = _first(~ok, shape)
        raise ValueError(f"{name} holds a non-finite value ({float(arr[here])} at index "
                         f"{theirs}); pass finite values, or check_finite=False to skip "
                         f"this check")


def _check_ids(name, arr, low, high, mask, what, shape=None):
    """ValueError unless every id of ``arr`` (B, T) at a real step lies in [low, high).

    ``what()`` says where the bounds come from (called only for the message).
    """
    if mask is None and arr.size and _scannable(arr, _INT64):
        lo, hi = id_range(arr.reshape(-1))
        if lo >= low and hi < high:
            return
    real = arr if mask is None else arr[mask]
    if not real.size or (real.min() >= low and real.max() < high):
        return
    bad = (arr < low) | (arr >= high)
    if mask is not None:
        bad &= mask
    if bad.any():
        here, theirs = _first(bad, shape)
        raise ValueError(f"{name} must lie in [{low}, {high}) ({what()}); got {arr[here]} at "
                         f"index {theirs} (values from {real.min()} to {real.max()})")


def _listed_nothing(value, arr):
    """Whether ``value`` is a list of no numbers ([] or [[]]), which NumPy reads as
    float64 (``arr``): no ids rather than floats (an empty float array stays floats)."""
    return not isinstance(value, np.ndarray) and arr.dtype.kind == "f" and not arr.size


def _x(x, U, U_name="params U", time_major=False):
    arr = _array("x", x, "integer token ids or float inputs")
    batch = "(T, B" if time_major else "(B, T"
    if _listed_nothing(x, arr) and arr.ndim in (1, 2) and not arr.shape[-1]:
        arr = arr.astype(np.int64)          # [] or [[]]: no ids (dense x has L >= 1 features)
    if arr.dtype.kind in "iu":
        if arr.ndim not in (1, 2):
            hint = (f"; dense inputs {batch}, L) must be floats, e.g. x.astype(np.float32)"
                    if arr.ndim == 3 else "")
            raise ValueError(f"x as token ids must be (T,) or {batch}); got shape {arr.shape}"
                             + hint)
        return arr, True, arr.ndim == 1
    if arr.ndim not in (2, 3):
        raise ValueError(f"x as dense floats must be (T, L) or {batch}, L); got shape "
                         f"{arr.shape}"
                         + ("; pass token ids as an integer array" if arr.ndim == 1 else ""))
    if arr.shape[-1] != U.shape[1]:
        hint = ("; a 2-D float x is one sequence (T, L): pass a batch of token ids as an "
                "integer array" if arr.ndim == 2 else "")
        raise ValueError(f"x of shape {arr.shape} has {arr.shape[-1]} features but {U_name} "
                         f"is {U.shape}, which expects {U.shape[1]}{hint}")
    return arr, False, arr.ndim == 2


_FULL_LENGTHS = {}


def _lengths(lengths, B, T, single, x_shape):
    if lengths is None:        # kept from call to call: nothing writes to it
        full = _FULL_LENGTHS.get((B, T))
        if full is None:
            if len(_FULL_LENGTHS) > 64:
                _FULL_LENGTHS.clear()
            full = _FULL_LENGTHS[B, T] = np.full(B, T, dtype=np.int64)
        return full
    arr = _private(_array("lengths", lengths, "integers"))
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.int64)             # [] for a batch of no sequences
    if arr.dtype.kind not in "iu":
        raise TypeError(f"lengths must hold integers; got dtype {arr.dtype}; cast with "
                        f".astype(int)")
    want = () if single else (B,)
    if single and arr.shape == (1,):
        arr = arr.reshape(())
    if arr.shape != want:
        raise ValueError(f"lengths must have shape {want} (one per sequence of x, which has "
                         f"shape {x_shape}); got {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() > T):
        raise ValueError(f"lengths must lie in [0, T={T}] (T from x of shape {x_shape}); "
                         f"got values from {arr.min()} to {arr.max()}")
    return arr.astype(np.int64).reshape(B)


def _steps(x_shape, B, T, single):
    """What x holds, for messages about y."""
    if single:
        return f"x of shape {x_shape} is one sequence of T={T} steps"
    return f"x of shape {x_shape} is B={B} sequences of T={T} steps"


def _y(y, B, T, C, single, loss, mask, check_finite, x_shape, V_shape):
    arr = _array("y", y, "integer class ids or float targets")
    lead = (T,) if single else (B, T)
    if _listed_nothing(y, arr) and arr.shape == lead:
        arr = arr.astype(np.int64)          # [] or [[]] for no steps: no class ids
    if arr.dtype.kind in "iu":
        if arr.shape != lead:
            hint = ("; pass float targets as a float array" if arr.ndim == len(lead) + 1
                    else "")
            raise ValueError(f"y as class ids must have shape {lead} "
                             f"({_steps(x_shape, B, T, single)}); "
                             f"got {arr.shape}{hint}")
        arr = _private(arr.reshape(B, T))
        _check_ids("y class ids", arr, -1, C, mask,
                   lambda: f"C={C} from params V {V_shape}, -1 = no loss", shape=lead)
        arr = arr.astype(np.int64, copy=False)   # before the -1s: uint8's -1 would be 255
        return (arr if mask is None else np.where(mask, arr, -1)), True
    want = lead + (C,)
    if arr.shape != want:
        hint = "; pass class ids as an integer array" if arr.shape == lead else ""
        raise ValueError(f"y as float targets must have shape {want} "
                         f"({_steps(x_shape, B, T, single)}, C={C} from params V {V_shape}); "
                         f"got {arr.shape}{hint}")
    arr = arr.reshape(B, T, C)
    _check_finite("y", arr, check_finite, mask, shape=want)
    real = arr if mask is None else arr[mask]
    if loss == LOSSES["softmax_ce"] and (real < 0).any():      # (a NaN hides no -5)
        negative = arr < 0
        if mask is not None:
            negative &= mask[..., None]
        if negative.any():
            here, theirs = _first(negative, want)
            raise ValueError(f"y float targets for softmax_ce must be non-negative weights; "
                             f"got {float(arr[here])} at index {theirs}")
    return (arr if mask is None else np.where(mask[..., None], arr, 0)), False


BLAS_INT = 2 ** 31 - 1      # the BLAS takes sizes and leading dimensions as 32-bit ints


def blas_sizes(B, T, L, C, rows):
    """ValueError when a matrix the kernels hand to the BLAS would have a side beyond its
    32-bit integers: B (T + 1) columns (the products over all steps, whose step slices
    of the states, T + 1 steps with h0, have that leading dimension), L inputs, C
    outputs, or ``rows`` (a bound on the gates' rows of all directions)."""
    for name, size in (("B·(T+1) (sequences times steps, and the initial state)", B * (T + 1)),
                       ("L (input size)", L),
                       ("C (output size)", C), ("the hidden layer's gate rows", rows)):
        if size > BLAS_INT:
            raise ValueError(f"{name} is {size:,}, beyond the {BLAS_INT:,} the BLAS can "
                             f"index: split the batch or the sequences into calls of fewer "
                             f"steps (carry h_final into h0)")


def _full_bptt(truncate, stride, T):
    """Whether BPTT(truncate; stride) cuts nothing in T steps: lo(t) = 0 for every t < T.

    lo(t) = max(0, (t // s + 1) s - k) grows with t, so it is 0 for all t < T exactly
    when it is at t = T - 1: the end of the last block, ((T - 1) // s + 1) s, is at most
    k (always so for one block, s >= T). Such calls run as full BPTT, so sizes beyond
    the kernels' integers (truncate=10**20) never reach them.
    """
    return truncate is None or stride >= T or ((T - 1) // stride + 1) * stride <= truncate


def _truncation(truncate, stride):
    """(truncate, stride) checked: None or k >= 1, and 1 <= s <= k."""
    truncate = _int_option("truncate", truncate, allow_none=True)
    stride = _int_option("stride", stride)
    if truncate is not None and truncate < 1:
        raise ValueError(f"truncate must be at least 1 (or None for full BPTT); got {truncate}")
    if stride < 1:
        raise ValueError(f"stride must be at least 1; got {stride}")
    if truncate is None and stride != 1:
        raise ValueError(f"stride={stride} needs truncate: the stride groups outputs for "
                         f"truncated BPTT; pass truncate=k with {stride} <= k")
    if truncate is not None and stride > truncate:
        raise ValueError(f"stride must not exceed truncate; got stride={stride}, "
                         f"truncate={truncate}")
    return truncate, stride


def _stack_truncation(checked, truncate, stride, reverse):
    """Refuse what SPEC.md §8 leaves out: windows (s < k) on a stack, and any truncation
    with a reverse direction (after calls that cut nothing became full BPTT)."""
    if truncate is None:
        return
    layers, D = len(checked.model.layers), len(checked.model.layers[0])
    if D == 2 or reverse:
        what = "bidirectional layers" if D == 2 else "reverse=True"
        raise ValueError(f"truncate={truncate} is not supported with {what}: truncation "
                         "counts steps back from each output in the forward direction only; "
                         "pass truncate=None (full BPTT) for a reverse direction")
    if layers > 1 and stride < truncate:
        raise ValueError(f"truncate={truncate} with stride={stride} (a window per output) is not "
                         f"supported on a stack of {layers} layers: an output's window would "
                         "end at different steps in different layers; pass stride=truncate "
                         "(chunks, which truncate every layer alike) or use one layer")


def _state(name, value, checked, B, single, x_shape, check_finite):
    """h0 or c0 as (layers x directions, B, H) of the compute dtype (zeros for None)."""
    L, H, C = checked.sizes
    S = len(checked.model.layers) * len(checked.model.layers[0])
    dtype = checked.dtype
    if value is None:
        return np.zeros((S, B, H), dtype=dtype)
    h = _array(name, value, "floats")
    if checked.stacked:
        want = (S, H) if single else (S, B, H)
        why = (f"{S} = layers x directions, H={H} from params layers[0][0] W "
               f"{checked.model.layers[0][0].W.shape}"
               f"{'' if single else f', B={B} from x of shape {x_shape}'}")
    else:
        want = (H,) if single else (B, H)
        why = (f"H={H} from params W {checked.model.layers[0][0].W.shape}"
               f"{'' if single else f', B={B} from x of shape {x_shape}'}")
    if h.shape != want:
        raise ValueError(f"{name} must have shape {want} ({why}); got {h.shape}")
    _check_finite(name, h, check_finite)
    return np.array(_in_dtype(name, h, dtype, check_finite), order="C").reshape(S, B, H)


def _check(checked, x, lengths, check_finite, time_major=False):
    """x and lengths against the params: (xc, ids, single, B, T, lens, mask, x_shape).
    ``time_major``: a batch of x is (T, B, ...); xc is batch-first all the same, and
    messages point into the caller's array."""
    L, H, C = checked.sizes
    first = checked.model.layers[0][0]
    U_name = "params layers[0][0] U" if checked.stacked else "params U"
    xa, ids, single = _x(x, first.U, U_name, time_major)
    x_shape = xa.shape
    swap = time_major and not single
    B = 1 if single else xa.shape[int(swap)]
    T = xa.shape[0] if single else xa.shape[1 - int(swap)]
    blas_sizes(B, T, L, C, 4 * 2 * H)           # before any copy of that size
    lens = _lengths(lengths, B, T, single, x_shape)
    # None: every step is real. Otherwise padding is overwritten in private copies.
    mask = None if lengths is None else np.arange(T)[None, :] < lens[:, None]
    theirs = mask if mask is None or not swap else mask.T        # in the caller's layout
    if ids:
        xa = _private(xa if swap else xa.reshape(B, T))     # the ids checked are the ids
        _check_ids("x token ids", xa, 0, L, theirs,         # the kernels read
                   lambda: f"L={L} from {U_name} {first.U.shape}", shape=x_shape)
        xc = (xa if theirs is None else np.where(theirs, xa, 0)).astype(np.int64, copy=False)
    else:
        xa = xa if swap else xa.reshape(B, T, L)
        _check_finite("x", xa, check_finite, theirs, shape=x_shape)
        xc = _in_dtype("x", xa if theirs is None else np.where(theirs[..., None], xa, 0),
                       checked.dtype, check_finite, shape=x_shape)
    if swap:
        xc = xc.swapaxes(0, 1)
    return _for_kernels(xc), ids, single, B, T, lens, mask, x_shape


def _problem(checked, x, y, *, truncate, stride, activation, loss, h0, c0, lengths,
             check_finite, need_y, reverse=False, time_major=False):
    if not isinstance(check_finite, (bool, np.bool_)):
        raise TypeError(f"check_finite must be True or False; got {check_finite!r}")
    act = ACTIVATIONS[activation]
    if checked.cell != "elman" and activation != "tanh":
        raise ValueError(f"activation={activation!r} applies to the Elman cell only; the "
                         f"{checked.cell.upper()} cell has its own gates: leave activation "
                         "at its default")
    if c0 is not None and checked.cell != "lstm":
        raise ValueError(f"c0 is the LSTM's cell state; the {checked.cell} cell has none "
                         "(pass c0=None)")
    L, H, C = checked.sizes
    xc, ids, single, B, T, lens, mask, x_shape = _check(checked, x, lengths, check_finite,
                                                         time_major)
    if _full_bptt(truncate, stride, T):
        truncate, stride = None, 1
    _stack_truncation(checked, truncate, stride, reverse)

    yc, y_ids = None, False
    if need_y:
        if y is None:
            raise TypeError("y is required: integer class ids or float targets")
        yc, y_ids = _y(y, B, T, C, single, loss, mask, check_finite, x_shape,
                       checked.model.V.shape)
        if not y_ids:
            yc = _in_dtype("y", yc, checked.dtype, check_finite,
                           shape=((T,) if single else (B, T)) + (C,))
        yc = _for_kernels(yc)
    h0c = _state("h0", h0, checked, B, single, x_shape, check_finite)
    c0c = (_state("c0", c0, checked, B, single, x_shape, check_finite)
           if checked.cell == "lstm" else None)
    return Problem(single=single, x=xc, ids=ids, y=yc, y_ids=y_ids, lengths=lens, h0=h0c,
                   h0_given=h0 is not None, model=checked.model, rebuild=checked.rebuild,
                   activation=act, loss=loss, truncate=truncate, stride=stride, B=B, T=T,
                   sizes=checked.sizes, dtype=checked.dtype, stacked=checked.stacked,
                   cell=checked.cell, c0=c0c, c0_given=c0 is not None, reverse=reverse,
                   time_major=time_major and not single)


def prepare(x, y, params, *, truncate=None, stride=1, activation="tanh", loss="softmax_ce",
            h0=None, lengths=None, check_finite=True, need_y=True, cell=None, c0=None) -> Problem:
    """Validate every argument of a call with the head and return a `Problem` of arrays
    the kernels can read.

    Arrays are the caller's own where they already have the right dtype, layout and
    are writable (treat them as read-only), private copies otherwise.
    """
    _option("activation", activation, ACTIVATIONS)
    loss_code = _option("loss", loss, LOSSES)
    truncate, stride = _truncation(truncate, stride)
    if not isinstance(check_finite, (bool, np.bool_)):
        raise TypeError(f"check_finite must be True or False; got {check_finite!r}")
    checked = check_model(params, cell=cell, check_finite=check_finite)
    return _problem(checked, x, y, truncate=truncate, stride=stride, activation=activation,
                    loss=loss_code, h0=h0, c0=c0, lengths=lengths, check_finite=check_finite,
                    need_y=need_y)


def prepare_layer(x, params, *, cell=None, activation="tanh", h0=None, c0=None, lengths=None,
                  reverse=False, truncate=None, stride=1, check_finite=True,
                  time_major=False) -> Problem:
    """`prepare` for `fastbptt.layer`: one layer or a stack, no head and no targets;
    ``time_major``: a batch of x is (T, B, ...) (the `Problem`'s x is batch-first)."""
    _option("activation", activation, ACTIVATIONS)
    truncate, stride = _truncation(truncate, stride)
    if not isinstance(reverse, (bool, np.bool_)):
        raise TypeError(f"reverse must be True or False; got {reverse!r}")
    if not isinstance(check_finite, (bool, np.bool_)):
        raise TypeError(f"check_finite must be True or False; got {check_finite!r}")
    if not isinstance(time_major, (bool, np.bool_)):
        raise TypeError(f"time_major must be True or False; got {time_major!r}")
    checked = check_layers(params, cell=cell, check_finite=check_finite)
    if reverse and checked.stacked:
        raise ValueError("reverse=True is for one layer; a stack's directions come from its "
                         "params (layers[l] = (forward, reverse))")
    return _problem(checked, x, None, truncate=truncate, stride=stride, activation=activation,
                    loss=0, h0=h0, c0=c0, lengths=lengths, check_finite=check_finite,
                    need_y=False, reverse=bool(reverse), time_major=bool(time_major))
