"""Numerical robustness: huge logits, saturated activations, long float32 sums.

Each float32 run is compared with a float64 run on the same (float32) values, so the
difference is the float32 arithmetic alone.
"""
import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from conftest import ACTIVATIONS, LOSSES, TOLERANCE

DTYPES = [np.float64, np.float32]


def in_float64(params):
    return type(params)(*(None if a is None else a.astype(np.float64) for a in params))


def all_finite(result):
    return (np.isfinite(result.loss) and all(np.isfinite(g).all() for g in result.grads)
            and np.isfinite(result.h_final).all() and np.isfinite(result.dh0).all())


def error(got, want):
    """max |got - want| over the largest |want|, where anything below 1e-20 counts as 0.

    Saturated float32 states are exactly at their bounds (sigmoid(-300) = 0) where float64
    keeps 1e-130: gradients of that size are zero in either dtype.
    """
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max(initial=0.0) / max(np.abs(want).max(initial=0.0),
                                                             1e-20))


def assert_close_to(got, want, tol):
    """Loss within tol relative, every array within tol of its largest entry."""
    assert abs(got.loss - want.loss) <= tol * max(1.0, abs(want.loss)), (got.loss, want.loss)
    for name, g, w in zip("UWVbc", got.grads, want.grads):
        assert error(g, w) <= tol, (name, error(g, w))
    for name in ("h_final", "dh0"):
        assert error(getattr(got, name), getattr(want, name)) <= tol, name


def problem(dtype, seed, B=3, T=9, L=5, H=6, C=4, y_ids=True):
    rng = np.random.default_rng(seed)
    params = fastbptt.init_params(L, H, C, dtype=dtype, seed=rng)
    x = rng.integers(0, L, (B, T))
    y = rng.integers(-1, C, (B, T)) if y_ids else rng.uniform(0, 1, (B, T, C)).astype(dtype)
    h0 = rng.uniform(-1, 1, (B, H)).astype(dtype)
    return x, y, params, h0


@pytest.mark.parametrize("y_ids", [True, False], ids=["class ids", "soft targets"])
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_logits_of_ten_thousand(dtype, activation, loss, y_ids):
    """|o| around 1e4: log-sum-exp keeps the softmax loss and its gradient finite."""
    x, y, params, h0 = problem(dtype, 1, y_ids=y_ids)
    params = params._replace(V=(np.sign(params.V) * 1e4).astype(dtype),
                             c=(np.sign(params.c) * 1e4).astype(dtype))
    h, p = fastbptt.forward(x, params, activation=activation, h0=h0)
    logits = h @ params.V.T + params.c
    assert np.abs(logits).max() >= 1e4
    assert np.isfinite(p).all() and np.allclose(p.sum(axis=-1), 1)
    for truncation in [dict(), dict(truncate=3), dict(truncate=4, stride=4)]:
        options = dict(truncation, activation=activation, loss=loss, h0=h0)
        got = fastbptt.bptt(x, y, params, **options)
        assert all_finite(got)
        assert fastbptt.loss(x, y, params, activation=activation, loss=loss, h0=h0) == \
            pytest.approx(got.loss, rel=TOLERANCE[dtype])
        y64 = y if y_ids else y.astype(np.float64)
        want = reference.bptt(x, y64, in_float64(params), **dict(options, h0=h0.astype(float)))
        assert_close_to(got, want, TOLERANCE[dtype])


@pytest.mark.parametrize("activation", ["tanh", "sigmoid"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_saturated_activations(dtype, activation):
    """Pre-activations of +-1e3: states sit at the bounds, f' = 0, everything finite."""
    x, y, params, h0 = problem(dtype, 2)
    params = params._replace(U=(np.sign(params.U) * 1e3).astype(dtype),
                             W=(params.W * 1e3).astype(dtype), b=(params.b * 1e3).astype(dtype))
    h, p = fastbptt.forward(x, params, activation=activation, h0=h0)
    low = -1 if activation == "tanh" else 0
    assert np.isfinite(h).all() and np.isfinite(p).all()
    assert h.min() >= low and h.max() <= 1
    assert np.isin(h, [low, 1]).mean() > 0.5          # mostly exactly at the bounds
    for truncation in [dict(), dict(truncate=3), dict(truncate=4, stride=4)]:
        for loss in LOSSES:
            options = dict(truncation, activation=activation, loss=loss, h0=h0)
            got = fastbptt.bptt(x, y, params, **options)
            assert all_finite(got)
            want = reference.bptt(x, y, in_float64(params),
                                  **dict(options, h0=h0.astype(float)))
            assert_close_to(got, want, TOLERANCE[dtype])


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_float32_over_a_long_sequence(activation, loss):
    """T = 20 000, truncate=20, H = 16: float32 within 1e-4 of float64 on the same values."""
    rng = np.random.default_rng(3)
    T, H, L, C = 20_000, 16, 12, 10
    p32 = fastbptt.init_params(L, H, C, dtype=np.float32, seed=rng)
    p64 = in_float64(p32)
    for B, stride in [(1, 1), (4, 20)]:
        x, y = rng.integers(0, L, (B, T)), rng.integers(-1, C, (B, T))
        h0 = rng.uniform(-0.5, 0.5, (B, H)).astype(np.float32)
        options = dict(truncate=20, stride=stride, activation=activation, loss=loss)
        got = fastbptt.bptt(x, y, p32, h0=h0, **options)
        want = fastbptt.bptt(x, y, p64, h0=h0.astype(np.float64), **options)
        assert got.grads.U.dtype == np.float32 and want.grads.U.dtype == np.float64
        assert_close_to(got, want, 1e-4)


def test_float32_dense_inputs_over_a_long_sequence():
    rng = np.random.default_rng(4)
    T, H, L, C = 20_000, 16, 6, 5
    p32 = fastbptt.init_params(L, H, C, dtype=np.float32, seed=rng)
    x = rng.normal(size=(T, L)).astype(np.float32)
    y = rng.uniform(0, 1, (T, C)).astype(np.float32)
    got = fastbptt.bptt(x, y, p32, truncate=20)
    want = fastbptt.bptt(x.astype(np.float64), y.astype(np.float64), in_float64(p32),
                         truncate=20)
    assert_close_to(got, want, 1e-4)
