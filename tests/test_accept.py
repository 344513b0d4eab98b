"""`accept`, the quick path for common calls, agrees with `prepare` or steps aside.

For every valid common call it must build the same `Problem` as `prepare`; for every
bad call of `test_inputs.BAD_CALLS` (and every uncommon one) it must return None
without raising, so that `prepare` raises its message.
"""
import dataclasses

import numpy as np
import pytest

import fastbptt
from fastbptt._accept import accept
from fastbptt._inputs import prepare
from test_inputs import BAD_CALLS, P, X, Y

H = P.W.shape[0]


def same_problem(a, b):
    for field in dataclasses.fields(a):
        name = field.name
        u, v = getattr(a, name), getattr(b, name)
        if name == "rebuild":
            z = np.zeros(1)
            g = fastbptt.Model(((fastbptt.Layer(z, z, z),),), z, z)
            assert type(u(g)) is type(v(g)) and str(u(g)) == str(v(g))
        elif name == "model":
            assert all((s is None and t is None) or s is t
                       for s, t in zip(u.layers[0][0] + (u.V, u.c), v.layers[0][0] + (v.V, v.c))), name
        elif isinstance(u, np.ndarray) or isinstance(v, np.ndarray):
            assert isinstance(u, np.ndarray) and isinstance(v, np.ndarray), name
            assert u.dtype == v.dtype and u.shape == v.shape, name
            np.testing.assert_array_equal(u, v, err_msg=name)
        else:
            assert u == v and type(u) is type(v), name


COMMON = [
    ("batch", lambda: (X, Y, P, {})),
    ("one sequence", lambda: (X[0].copy(), Y[0].copy(), P, {})),
    ("no loss at some steps", lambda: (X, np.where(Y > 0, Y, -1), P, {})),
    ("float32", lambda: (X, Y, fastbptt.Params(*(None if v is None else v.astype(np.float32)
                                                  for v in P)), {})),
    ("no biases", lambda: (X, Y, P._replace(b=None, c=None), {})),
    ("dict params", lambda: (X, Y, dict(P._asdict()), {})),
    ("list params", lambda: (X, Y, list(P[:3]), {})),
    ("h0", lambda: (X, Y, P, {"h0": np.ones((2, H))})),
    ("h0 of one sequence", lambda: (X[0].copy(), Y[0].copy(), P, {"h0": np.ones(H)})),
    ("windows", lambda: (X, Y, P, {"truncate": 3, "stride": 1})),
    ("chunks", lambda: (X, Y, P, {"truncate": 2, "stride": 2})),
    ("window longer than T", lambda: (X, Y, P, {"truncate": 100, "stride": 1})),
    ("options", lambda: (X, Y, P, {"activation": "relu", "loss": "mse",
                                   "check_finite": False})),
]


@pytest.mark.parametrize("make", [c[1] for c in COMMON], ids=[c[0] for c in COMMON])
def test_accept_builds_what_prepare_builds(make):
    x, y, params, options = make()
    quick = accept(x, y, params, **options)
    assert quick is not None
    same_problem(quick, prepare(x, y, params, **options))


def test_accept_builds_what_prepare_builds_without_targets():
    quick = accept(X, None, P, need_y=False)
    assert quick is not None
    same_problem(quick, prepare(X, None, P, need_y=False))


def read_only(a):
    b = a.copy()
    b.flags.writeable = False
    return b


UNCOMMON = [
    ("lengths", lambda: (X, Y, P, {"lengths": [6, 3]})),
    ("list x", lambda: (X.tolist(), Y, P, {})),
    ("int32 ids", lambda: (X.astype(np.int32), Y, P, {})),
    ("strided x", lambda: (np.repeat(X, 2, axis=1)[:, ::2], Y, P, {})),
    ("read-only W", lambda: (X, Y, P._replace(W=read_only(P.W)), {})),
    ("read-only x", lambda: (read_only(X), Y, P, {})),
    ("dense x", lambda: (np.zeros((2, 6, P.U.shape[1])), Y, P, {})),
    ("float targets", lambda: (X, np.zeros((2, 6, P.V.shape[0])), P, {})),
    ("numpy integer truncate", lambda: (X, Y, P, {"truncate": np.int64(3)})),
    ("empty batch", lambda: (X[:0], Y[:0], P, {})),
]


@pytest.mark.parametrize("make", [c[1] for c in UNCOMMON], ids=[c[0] for c in UNCOMMON])
def test_accept_leaves_uncommon_calls_to_prepare(make):
    x, y, params, options = make()
    assert accept(x, y, params, **options) is None
    prepare(x, y, params, **options)          # valid: prepare takes it


MISSING = [(f"{name} is None", lambda name=name: (X, Y, P._replace(**{name: None}), {}))
           for name in ("U", "W", "V")]


@pytest.mark.parametrize("change", [c[1] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_accept_never_takes_or_raises_for_a_bad_call(change):
    x, y, params, options = change(X, Y, P)
    assert accept(x, y, params, **options) is None


@pytest.mark.parametrize("make", [c[1] for c in MISSING], ids=[c[0] for c in MISSING])
def test_accept_leaves_missing_params_to_prepare(make):
    x, y, params, options = make()
    assert accept(x, y, params, **options) is None
    with pytest.raises(ValueError, match="U, W and V are required"):
        prepare(x, y, params, **options)
