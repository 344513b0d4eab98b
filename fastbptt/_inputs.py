"""Validation and conversion of the public arguments.

Every public entry point runs `prepare` before any kernel: it checks kinds, shapes and
ranges, raises TypeError/ValueError naming the argument, and returns arrays in the
compute dtype (the params' dtype). These may be the caller's own arrays, so nothing
downstream writes to them. When lengths are given, steps past a sequence's length are
overwritten in private copies (ids 0, targets -1, dense rows 0), so padding content
never reaches a kernel.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from .params import Params, read_structure

ACTIVATIONS = {"tanh": 0, "sigmoid": 1, "relu": 2, "identity": 3}
LOSSES = {"softmax_ce": 0, "mse": 1}
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@dataclass
class Problem:
    """One validated call: batch-first arrays in the compute dtype, plus the options."""

    single: bool                     # x was one sequence: results drop the batch axis
    x: np.ndarray                    # ids (B, T) int64, or dense (B, T, L); read-only
    ids: bool                        # x holds token ids
    y: Optional[np.ndarray]          # ids (B, T) int64, -1 = no loss, or (B, T, C); read-only
    y_ids: bool
    lengths: np.ndarray              # (B,) int64, 0 <= lengths <= T
    h0: np.ndarray                   # (B, H), zeros when not given
    h0_given: bool                   # dL/dh0 is reported only for an h0 that was passed
    params: Params                   # contiguous arrays of the compute dtype; b, c may be None
    rebuild: Callable                # Params of gradients -> the caller's structure
    activation: int
    loss: int
    truncate: Optional[int]          # None = full BPTT
    stride: int

    @property
    def dtype(self):
        return self.params.U.dtype

    @property
    def B(self):
        return self.x.shape[0]

    @property
    def T(self):
        return self.x.shape[1]

    @property
    def sizes(self):
        """(L, H, C)."""
        return self.params.sizes

    def padding_mask(self):
        """(B, T) bool: True at real steps."""
        return np.arange(self.T)[None, :] < self.lengths[:, None]


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


def _array(name, value):
    """np.asarray that rejects what cannot be numeric, naming the argument."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a numeric array; got {type(value).__name__}")
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{name} could not be read as an array: {exc}") from None
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold integers or floats; got dtype {arr.dtype}")
    if arr.dtype.kind == "b":
        raise TypeError(f"{name} must hold integers or floats, not booleans; "
                        f"cast with .astype(int) or .astype(float)")
    return arr


def _check_finite(name, arr, enabled=True):
    if enabled and arr.size and not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{name} holds a non-finite value ({arr[tuple(bad)]!r} at index "
                         f"{tuple(int(i) for i in bad)})")


def _params(params, check_finite=True):
    raw, rebuild = read_structure(params)
    arrays = {}
    for name in ("U", "W", "V", "b", "c"):
        value = getattr(raw, name)
        if value is None:
            if name in ("U", "W", "V"):
                raise ValueError(f"params {name} is None; U, W and V are required")
            continue
        arr = _array(f"params {name}", value)
        if arr.dtype.kind != "f":
            raise TypeError(f"params {name} must be float32 or float64; got {arr.dtype} "
                            f"(cast with .astype(np.float32))")
        arrays[name] = arr
    dtypes = {a.dtype for a in arrays.values()}
    if len(dtypes) > 1:
        listing = ", ".join(f"{k} {a.dtype}" for k, a in arrays.items())
        raise TypeError(f"params must share one dtype, float32 or float64; got {listing}")
    dtype = dtypes.pop()
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"params must be float32 or float64; got {dtype} "
                        f"(cast with .astype(np.float32))")
    U, W, V = arrays["U"], arrays["W"], arrays["V"]
    if U.ndim != 2:
        raise ValueError(f"params U must be 2-D (hidden_size, input_size); got shape {U.shape}")
    H, L = U.shape
    if W.shape != (H, H):
        raise ValueError(f"params W must be ({H}, {H}) to match U {U.shape}; got {W.shape}")
    if V.ndim != 2 or V.shape[1] != H:
        raise ValueError(f"params V must be (output_size, {H}) to match U {U.shape}; "
                         f"got {V.shape}")
    C = V.shape[0]
    if H == 0 or L == 0 or C == 0:
        raise ValueError(f"params sizes must be positive; got U {U.shape}, V {V.shape}")
    for name, size in (("b", H), ("c", C)):
        if name in arrays and arrays[name].shape != (size,):
            raise ValueError(f"params {name} must have shape ({size},) to match U {U.shape} "
                             f"and V {V.shape}; got {arrays[name].shape}")
    for name, arr in arrays.items():
        _check_finite(f"params {name}", arr, check_finite)
    clean = Params(*(np.ascontiguousarray(arrays[k]) if k in arrays else None
                     for k in ("U", "W", "V", "b", "c")))
    return clean, rebuild


def _x(x, U):
    arr = _array("x", x)
    if arr.dtype.kind in "iu":
        if arr.ndim not in (1, 2):
            raise ValueError(f"x as token ids must be (T,) or (B, T); got shape {arr.shape}")
        return arr, True, arr.ndim == 1
    if arr.ndim not in (2, 3):
        raise ValueError(f"x as dense floats must be (T, L) or (B, T, L); got shape {arr.shape}"
                         + ("; pass token ids as an integer array" if arr.ndim == 1 else ""))
    if arr.shape[-1] != U.shape[1]:
        raise ValueError(f"x has {arr.shape[-1]} features but params U is {U.shape}, "
                         f"which expects {U.shape[1]}")
    return arr, False, arr.ndim == 2


def _lengths(lengths, B, T, single):
    if lengths is None:
        return np.full(B, T, dtype=np.int64)
    arr = _array("lengths", lengths)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"lengths must hold integers; got dtype {arr.dtype}")
    want = () if single else (B,)
    if single and arr.shape == (1,):
        arr = arr.reshape(())
    if arr.shape != want:
        raise ValueError(f"lengths must have shape {want} (one per sequence of x); "
                         f"got {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() > T):
        raise ValueError(f"lengths must lie in [0, T={T}]; got values from {arr.min()} "
                         f"to {arr.max()}")
    return arr.astype(np.int64).reshape(B)


def _y(y, B, T, C, single, loss, mask, check_finite):
    arr = _array("y", y)
    lead = (T,) if single else (B, T)
    if arr.dtype.kind in "iu":
        if arr.shape != lead:
            raise ValueError(f"y as class ids must have shape {lead} to match x; got {arr.shape}")
        arr = arr.reshape(B, T)
        real = arr if mask is None else arr[mask]
        if real.size and (real.min() < -1 or real.max() >= C):
            raise ValueError(f"y class ids must lie in [-1, {C}) (C={C} from params V, "
                             f"-1 = no loss); got values from {real.min()} to {real.max()}")
        return (arr if mask is None else np.where(mask, arr, -1)).astype(np.int64, copy=False), True
    want = lead + (C,)
    if arr.shape != want:
        hint = "; pass class ids as an integer array" if arr.ndim == len(lead) else ""
        raise ValueError(f"y as float targets must have shape {want} (C={C} from params V); "
                         f"got {arr.shape}{hint}")
    arr = arr.reshape(B, T, C)
    real = arr if mask is None else arr[mask]
    _check_finite("y", real, check_finite)
    if loss == LOSSES["softmax_ce"] and real.size and real.min() < 0:
        raise ValueError(f"y float targets for softmax_ce must be non-negative weights; "
                         f"got a minimum of {real.min()}")
    return (arr if mask is None else np.where(mask[..., None], arr, 0)), False


def prepare(x, y, params, *, truncate=None, stride=1, activation="tanh", loss="softmax_ce",
            h0=None, lengths=None, check_finite=True, need_y=True) -> Problem:
    """Validate every argument and return a `Problem` of private contiguous copies."""
    act = _option("activation", activation, ACTIVATIONS)
    loss_code = _option("loss", loss, LOSSES)
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

    if not isinstance(check_finite, (bool, np.bool_)):
        raise TypeError(f"check_finite must be True or False; got {check_finite!r}")
    p, rebuild = _params(params, check_finite)
    L, H, C = p.sizes
    dtype = p.U.dtype
    xa, ids, single = _x(x, p.U)
    B = 1 if single else xa.shape[0]
    T = xa.shape[0] if single else xa.shape[1]

    lens = _lengths(lengths, B, T, single)
    # None: every step is real. Otherwise padding is overwritten in private copies.
    mask = None if lengths is None else np.arange(T)[None, :] < lens[:, None]
    if ids:
        xa = xa.reshape(B, T)
        real = xa if mask is None else xa[mask]
        if real.size and (real.min() < 0 or real.max() >= L):
            raise ValueError(f"x token ids must lie in [0, {L}) (L={L} from params U "
                             f"{p.U.shape}); got values from {real.min()} to {real.max()}")
        xc = (xa if mask is None else np.where(mask, xa, 0)).astype(np.int64, copy=False)
    else:
        xa = xa.reshape(B, T, L)
        _check_finite("x", xa if mask is None else xa[mask], check_finite)
        xc = (xa if mask is None else np.where(mask[..., None], xa, 0)).astype(dtype, copy=False)

    yc, y_ids = None, False
    if need_y:
        if y is None:
            raise TypeError("y is required: integer class ids or float targets")
        yc, y_ids = _y(y, B, T, C, single, loss_code, mask, check_finite)
        if not y_ids:
            yc = yc.astype(dtype, copy=False)

    if h0 is None:
        h0c = np.zeros((B, H), dtype=dtype)
    else:
        h = _array("h0", h0)
        want = (H,) if single else (B, H)
        if h.shape != want:
            raise ValueError(f"h0 must have shape {want} (H={H} from params W"
                             f"{'' if single else ', B from x'}); got {h.shape}")
        _check_finite("h0", h, check_finite)
        h0c = np.array(h, dtype=dtype, order="C").reshape(B, H)

    return Problem(single=single, x=xc, ids=ids, y=yc, y_ids=y_ids,
                   lengths=lens, h0=h0c, h0_given=h0 is not None, params=p, rebuild=rebuild,
                   activation=act,
                   loss=loss_code, truncate=truncate, stride=stride)
