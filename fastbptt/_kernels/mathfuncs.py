"""Vectorizable tanh, sigmoid and exp for float32 arrays.

Numba's np.tanh/np.exp call libm one scalar at a time (no SVML here). These use only
arithmetic that LLVM vectorizes, evaluated in float64 so the float32 result is within
one ulp of the exact value (the tests measure this over the whole float32 range):

- expm1(w) for |w| <= 0.57 by its Taylor series to degree 12 (truncation < 1e-14);
- expm1(2^n w) by n doublings expm1(2z) = expm1(z) (expm1(z) + 2), free of cancellation;
- exp(z) for z <= 0 as exp(z / 256) squared 8 times.

float64 arrays use libm (np.tanh, np.exp), exact to NumPy's accuracy. `sigmoid` and
`tanh` pick the function for their argument's type when a kernel compiles.
"""
import math

from numba import types
from numba.extending import overload

from ._jit import jit

TANH_SATURATION = 9.02      # float32 tanh(x) rounds to +-1 beyond |x| = 9.01
EXP_UNDERFLOW = -110.0      # float32 exp(z) rounds to 0 below z = -103.98


@jit(inline="always")
def _expm1_small(w):
    """expm1(w) for |w| <= 0.57, float64, Horner form of the Taylor series to w^12."""
    p = 1.0 / 479001600.0
    p = 1.0 / 39916800.0 + w * p
    p = 1.0 / 3628800.0 + w * p
    p = 1.0 / 362880.0 + w * p
    p = 1.0 / 40320.0 + w * p
    p = 1.0 / 5040.0 + w * p
    p = 1.0 / 720.0 + w * p
    p = 1.0 / 120.0 + w * p
    p = 1.0 / 24.0 + w * p
    p = 1.0 / 6.0 + w * p
    p = 0.5 + w * p
    p = 1.0 + w * p
    return w * p


@jit(inline="always")
def tanh32(x):
    """tanh(x) in float64 arithmetic for a float32 x (expm1(2|x|) / (expm1(2|x|) + 2))."""
    y = abs(float(x))
    if y > TANH_SATURATION:
        y = TANH_SATURATION
    a = _expm1_small(y * (2.0 / 32.0))
    for _ in range(5):
        a = a * (a + 2.0)
    return math.copysign(a / (a + 2.0), x)


@jit(inline="always")
def exp_neg32(z):
    """exp(z) for z <= 0 (NaN stays NaN), float64 arithmetic for a float32 result."""
    z = float(z)
    if z < EXP_UNDERFLOW:
        z = EXP_UNDERFLOW
    e = 1.0 + _expm1_small(z * (1.0 / 256.0))
    for _ in range(8):
        e = e * e
    return e


@jit(inline="always")
def sigmoid32(x):
    """1 / (1 + exp(-x)) without cancellation: e = exp(-|x|), then 1/(1+e) or e/(1+e)."""
    e = exp_neg32(-abs(float(x)))
    return 1.0 / (1.0 + e) if x >= 0 else e / (1.0 + e)


@jit(inline="always")
def sigmoid64(x):
    """1 / (1 + exp(-x)) from libm, without overflow (float64)."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def sigmoid(x):
    """The logistic function in x's float type (`sigmoid32` or `sigmoid64`)."""
    raise NotImplementedError("called from compiled kernels only")


def tanh(x):
    """tanh in x's float type (`tanh32` or libm's)."""
    raise NotImplementedError("called from compiled kernels only")


@overload(sigmoid)
def _sigmoid(x):
    if x == types.float32:
        return lambda x: sigmoid32(x)
    return lambda x: sigmoid64(x)


@overload(tanh)
def _tanh(x):
    if x == types.float32:
        return lambda x: tanh32(x)
    return lambda x: math.tanh(x)
