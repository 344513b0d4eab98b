"""The common call accepted in a few microseconds, before the general validation.

`fastbptt._inputs.prepare` handles every kind of argument and explains every problem;
on a small problem its generality costs about as much as a third of the kernels' time
(measured: 9 us of Python for W2, against 3 us here). `accept` recognises the call a
training loop makes over and over (ndarray token ids, params as contiguous arrays of
one float dtype, no lengths) and builds the same `Problem` directly, running the same
checks. Anything else, including anything wrong, returns None, and `prepare` then
decides, so every error still comes from one place with one message.
"""
from __future__ import annotations

import numpy as np

from ._inputs import (ACTIVATIONS, BLAS_INT, FLOAT_DTYPES, LOSSES, Problem, _INT64,
                      _full_bptt, _lengths, _private, _scannable)
from ._kernels.checks import all_finite, id_range
from .params import Layer, Model, Params, read_structure

def _plain(arr, dtypes):
    """Whether arr is an ndarray (no subclass) of one of ``dtypes`` that the kernels can
    read in place."""
    return type(arr) is np.ndarray and _scannable(arr, dtypes)


def _as_params(g):
    """The `Params` of a one-layer Model of gradients."""
    layer = g.layers[0][0]
    return Params(layer.U, layer.W, g.V, layer.b, g.c)


def _ids_within(arr, low, high):
    lo, hi = id_range(arr.reshape(-1))
    return low <= lo and hi < high


def accept(x, y, params, *, truncate=None, stride=1, activation="tanh", loss="softmax_ce",
           h0=None, lengths=None, check_finite=True, need_y=True, cell=None, c0=None):
    """`prepare`'s `Problem` for a common, valid call; None for anything else."""
    act = ACTIVATIONS.get(activation) if type(activation) is str else None
    loss_code = LOSSES.get(loss) if type(loss) is str else None
    if act is None or loss_code is None or lengths is not None or type(stride) is not int:
        return None
    if (cell is not None and cell != "elman") or c0 is not None:
        return None
    if check_finite is not True and check_finite is not False:
        return None
    if truncate is None:
        if stride != 1:
            return None
    elif type(truncate) is not int or not 1 <= stride <= truncate:
        return None
    try:
        p, rebuild = read_structure(params)
    except (TypeError, ValueError):
        return None
    U, W, V, b, c = p
    if type(U) is not np.ndarray or W is None or V is None:
        return None
    dtype = U.dtype                 # (not getattr: np.dtype(...) == None is True)
    if dtype not in FLOAT_DTYPES:
        return None
    arrays = [a for a in p if a is not None]
    if not all(_plain(a, (dtype,)) for a in arrays) or U.ndim != 2 or V.ndim != 2:
        return None
    H, L = U.shape
    C = V.shape[0]
    if not (H and L and C) or W.shape != (H, H) or V.shape[1] != H:
        return None
    if (b is not None and b.shape != (H,)) or (c is not None and c.shape != (C,)):
        return None
    if not _plain(x, _INT64) or x.ndim not in (1, 2) or not x.size:
        return None
    single = x.ndim == 1
    B, T = (1, x.shape[0]) if single else x.shape
    if B * (T + 1) > BLAS_INT:
        return None                     # `prepare` says why
    if need_y and (not _plain(y, _INT64) or y.shape != x.shape):
        return None
    if h0 is not None and (not _plain(h0, (dtype,)) or h0.shape != ((H,) if single else (B, H))):
        return None
    if check_finite and not all(all_finite(a.reshape(-1)) for a in arrays):
        return None
    if check_finite and h0 is not None and not all_finite(h0.reshape(-1)):
        return None
    x, y = _private(x), (_private(y) if need_y else y)     # the ids checked are those read
    if not _ids_within(x, 0, L) or (need_y and not _ids_within(y, -1, C)):
        return None
    if _full_bptt(truncate, stride, T):
        truncate, stride = None, 1
    return Problem(single=single, x=x.reshape(B, T), ids=True,
                   y=y.reshape(B, T) if need_y else None, y_ids=need_y,
                   lengths=_lengths(None, B, T, single, x.shape),
                   h0=np.zeros((1, B, H), dtype) if h0 is None else h0.reshape(1, B, H).copy(),
                   h0_given=h0 is not None, model=Model(((Layer(U, W, b),),), V, c),
                   rebuild=_as_params if type(params) is Params else
                   lambda g: rebuild(_as_params(g)),
                   activation=act, loss=loss_code, truncate=truncate, stride=stride,
                   B=B, T=T, sizes=(L, H, C), dtype=dtype)
