"""The float32 tanh, sigmoid and exp of the kernels against float64 NumPy, over the whole
float32 range: every finite bit pattern in a fixed stride (all of them with
FASTBPTT_EXHAUSTIVE=1), plus the special values. Also the float32-only forms the gated
cells evaluate per element (`exp32`, `sigmoid_fast32`, `tanh_fast32`), and the float64
functions against NumPy's (libm)."""
import os

import numpy as np
import pytest

from numba import njit

from fastbptt._kernels.activations import RELU, SIGMOID, TANH, activate_vector
from fastbptt._kernels.mathfuncs import exp32, sigmoid_fast32, tanh_fast32
from fastbptt._kernels.output import _exp_shifted_sum

STRIDE = 1 if os.environ.get("FASTBPTT_EXHAUSTIVE") == "1" else 4099
MAX_ULP = 1.0      # measured: tanh 0.5002, sigmoid and exp 0.50000007 (rounded or 1 off)
CHUNK = 1 << 24


def float32_sample():
    """Finite float32 values, every STRIDE-th bit pattern, in chunks."""
    for start in range(0, 1 << 32, CHUNK * STRIDE):
        bits = np.arange(start, min(start + CHUNK * STRIDE, 1 << 32), STRIDE, dtype=np.uint64)
        x = bits.astype(np.uint32).view(np.float32)
        yield x[np.isfinite(x)]


def ulp_error(got, exact):
    """|got - exact| in units of the float32 spacing at the exact value."""
    spacing = np.spacing(np.abs(exact.astype(np.float32))).astype(np.float64)
    spacing = np.maximum(spacing, np.finfo(np.float32).smallest_subnormal)
    return np.abs(got.astype(np.float64) - exact) / spacing


def sigmoid64(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def exp_kernel(x):
    out = x.copy()
    sums = np.zeros(x.shape, np.float64)
    _exp_shifted_sum(out, np.zeros_like(x), sums)
    np.testing.assert_array_equal(sums, out)        # each column's sum: its one entry
    return out


def activation_kernel(code):
    def apply(x):
        out = x.copy()
        activate_vector(out, code)
        return out
    return apply


CASES = {
    "tanh": (activation_kernel(TANH), np.tanh, lambda x: x),
    "sigmoid": (activation_kernel(SIGMOID), sigmoid64, lambda x: x),
    "exp": (exp_kernel, np.exp, lambda x: -np.abs(x)),      # the softmax only takes exp(z <= 0)
}


@pytest.mark.parametrize("name", CASES)
def test_float32_functions_within_one_ulp(name):
    kernel, exact, domain = CASES[name]
    worst, count = 0.0, 0
    for x in float32_sample():
        x = domain(x)
        err = ulp_error(kernel(x), exact(x.astype(np.float64)))
        worst = max(worst, float(err.max()))
        count += x.size
    assert count > 1_000_000
    assert worst <= MAX_ULP, f"{name}: worst error {worst} ulp over {count} values"


@pytest.mark.parametrize("name", ["tanh", "sigmoid"])
def test_special_values(name):
    kernel = CASES[name][0]
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 50.0, -50.0], np.float32)
    got = kernel(x)
    assert np.isnan(got[0])
    tiny = x[5]                                   # the smallest subnormal
    if name == "tanh":
        np.testing.assert_array_equal(got[1:], [1, -1, 0, 0, tiny, -tiny, 1, -1])
        assert np.signbit(got[4]) and not np.signbit(got[3])
    else:
        want = [1, 0, 0.5, 0.5, 0.5, 0.5, 1, np.float32(sigmoid64(-50.0))]
        np.testing.assert_array_equal(got[1:], want)
        assert got[-1] > 0                         # 1.9e-22, not flushed to zero


def test_exp_special_values():
    got = exp_kernel(np.array([np.nan, -np.inf, 0.0, -0.0, -103.0, -104.0, -200.0], np.float32))
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[1:4], [0, 1, 1])
    assert got[4] == np.float32(np.exp(-103.0)) and got[4] > 0     # a subnormal, kept
    np.testing.assert_array_equal(got[5:], [np.float32(np.exp(-104.0)), 0])


def test_relu_keeps_nan_and_zeros_negatives():
    got = activation_kernel(RELU)(np.array([np.nan, -1.0, -0.0, 2.0], np.float32))
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[1:], [0, 0, 2])


def float64_sample(rng):
    """float64 values over the ranges where exp, tanh and sigmoid change, and beyond."""
    return np.concatenate([rng.normal(scale=s, size=200_000) for s in (1e-8, 0.3, 1, 5, 30)] +
                          [rng.uniform(-760, 760, 200_000), np.linspace(-1, 1, 100_001)])


def ulp_error64(got, exact):
    """|got - exact| in units of the float64 spacing at the exact value."""
    spacing = np.maximum(np.spacing(np.abs(exact)), np.finfo(np.float64).smallest_subnormal)
    return np.abs(got - exact) / spacing


@pytest.mark.parametrize("name", CASES)
def test_float64_functions_within_two_ulp_of_libm(name):
    """float64 takes `exp64`, `tanh64` and `sigmoid64` (vectorized rational functions),
    within 2 ulp of NumPy's libm wherever the value is a normal float64 (3 against
    NumPy's 1 / (1 + exp(-x)), itself rounded twice; measured: 2, 2, 3), and within the
    smallest normal below it."""
    kernel, exact, domain = CASES[name]
    x = domain(float64_sample(np.random.default_rng(0)))
    got, want = kernel(x), exact(x)
    normal = np.abs(want) >= np.finfo(np.float64).tiny
    bound = 3.0 if name == "sigmoid" else 2.0
    assert ulp_error64(got[normal], want[normal]).max() <= bound, name
    assert np.abs(got[~normal] - want[~normal]).max(initial=0) <= np.finfo(np.float64).tiny


@pytest.mark.parametrize("name", ["tanh", "sigmoid"])
def test_float64_special_values(name):
    kernel = CASES[name][0]
    tiny = np.finfo(np.float64).smallest_subnormal
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, 800.0, -800.0, 30.0])
    got = kernel(x)
    assert np.isnan(got[0])
    if name == "tanh":
        np.testing.assert_array_equal(got[1:], [1, -1, 0, 0, tiny, -tiny, 1, -1, 1])
        assert np.signbit(got[4]) and not np.signbit(got[3])
    else:
        np.testing.assert_array_equal(got[1:9], [1, 0, 0.5, 0.5, 0.5, 0.5, 1, 0])
        assert got[9] == pytest.approx(sigmoid64(30.0), rel=1e-15) and got[9] < 1


def test_float64_exp_special_values():
    got = exp_kernel(np.array([np.nan, -np.inf, 0.0, -0.0, -708.396, -709.0, -800.0]))
    assert np.isnan(got[0])
    np.testing.assert_array_equal(got[1:4], [0, 1, 1])
    assert got[4] == pytest.approx(np.exp(-708.396), rel=1e-15)     # a normal float64
    np.testing.assert_array_equal(got[5:], 0)      # below the normal range: 0


@njit
def _each(f, x):
    out = np.empty_like(x)
    for i in range(x.size):
        out[i] = f(x[i])
    return out


FAST32 = {     # measured worst ulp over normal results: 0.95, 1.97, 2.27
    "exp32": (exp32, np.exp, lambda x: np.clip(x, np.float32(-87.3), np.float32(88.37)), 1.0),
    "sigmoid_fast32": (sigmoid_fast32, sigmoid64, lambda x: x, 2.5),
    "tanh_fast32": (tanh_fast32, np.tanh, lambda x: x, 2.5),
}


@pytest.mark.parametrize("name", FAST32)
def test_float32_only_forms(name):
    """Within their bound in ulp wherever the exact value is a normal float32, and
    within the smallest normal of it (1.2e-38) where it is subnormal; never inf or NaN."""
    f, exact, domain, bound = FAST32[name]
    worst, worst_sub, count = 0.0, 0.0, 0
    for x in float32_sample():
        x = domain(x).astype(np.float32)
        got = _each(f, x)
        want = exact(x.astype(np.float64))
        assert np.isfinite(got).all(), name
        normal = np.abs(want) >= np.finfo(np.float32).tiny
        worst = max(worst, float(ulp_error(got[normal], want[normal]).max()))
        worst_sub = max(worst_sub, float(np.abs(got[~normal] - want[~normal]).max(initial=0)))
        count += x.size
    assert count > 1_000_000
    assert worst <= bound, f"{name}: worst error {worst} ulp over {count} values"
    assert worst_sub <= np.finfo(np.float32).tiny, name


def test_sigmoid_fast32_of_a_gate_saturated_beyond_exp32s_range_is_zero():
    """Below -88.37, where exp32(-x) is clamped, the gates' sigmoid stayed at 4.2e-39 for
    every x down to -inf, so a gate saturated that far kept a derivative: 0 where the
    exact value is below that, NaN still NaN."""
    x = np.array([-88.3, -88.5, -100.0, -1e30, -np.inf, np.nan], np.float32)
    got = _each(sigmoid_fast32, x)
    assert got[0] == pytest.approx(sigmoid64(-88.3), rel=1e-5)      # a subnormal, kept
    np.testing.assert_array_equal(got[1:5], 0)
    assert np.isnan(got[5])


def test_exp32_top_of_range_is_finite():
    """Up to the clamp, 2^k stays a normal float32: exp32(88.7) is exp(88.37), not inf."""
    got = _each(exp32, np.array([88.3, 88.37, 88.7, 1e30], np.float32))
    assert np.isfinite(got).all()
    assert ulp_error(got[:2], np.exp(np.float32([88.3, 88.37]).astype(np.float64))).max() <= 1
