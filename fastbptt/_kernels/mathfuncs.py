"""Vectorizable tanh, sigmoid and exp for float32 arrays.

Numba's np.tanh/np.exp call libm one scalar at a time (no SVML here). These use only
arithmetic that LLVM vectorizes, evaluated in float64 so the float32 result is within
one ulp of the exact value (the tests measure this over the whole float32 range):

- expm1(w) for |w| <= 0.57 by its Taylor series to degree 12 (truncation < 1e-14);
- expm1(2^n w) by n doublings expm1(2z) = expm1(z) (expm1(z) + 2), free of cancellation;
- exp(z) for z <= 0 as exp(z / 256) squared 8 times.

float64 arrays use libm (np.tanh, np.exp), exact to NumPy's accuracy.

The gated cells evaluate five of these per hidden unit and step, so for them `sigmoid`
and `tanh` (which pick the function for their argument's type when a kernel compiles)
take float32 arithmetic throughout for float32 (`exp32`, `sigmoid_fast32`,
`tanh_fast32`: within a few ulp, measured by the tests, and 16 lanes to a vector
register instead of 8), and libm for float64.
"""
import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic, overload

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


@intrinsic
def _float32_with_bits(typingctx, bits):
    """The float32 whose bit pattern is the int32 ``bits`` (a no-op LLVM vectorizes)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


_F = np.float32
_EXP_LO, _EXP_HI = _F(-87.3), _F(88.37)          # 2^k stays a normal float32 (k <= 127)
_LOG2E, _LN2_HI, _LN2_LO = _F(1.44269504088896341), _F(0.693359375), _F(-2.12194440e-4)
_E1, _E2, _E3 = _F(1.9875691500e-4), _F(1.3981999507e-3), _F(8.3334519073e-3)
_E4, _E5, _E6 = _F(4.1665795894e-2), _F(1.6666665459e-1), _F(5.0000001201e-1)
_T3, _T5, _T7 = _F(-1 / 3), _F(2 / 15), _F(-17 / 315)
_T9, _T11 = _F(62 / 2835), _F(-1382 / 155925)
_ONE, _TWO, _HALF = _F(1), _F(2), _F(0.5)
_TANH_SMALL, _TANH_CLAMP = _F(0.3), _F(TANH_SATURATION)


@jit(inline="always")
def exp32(x):
    """exp(x) in float32 arithmetic for a float32 x (Cephes' expf: x = k ln2 + r with
    |r| <= ln2 / 2, e^r by a polynomial of degree 7, 2^k from its bits), within 1 ulp;
    clamped to [-87.3, 88.37]. Everything in it vectorizes, 16 lanes to a register."""
    x = min(max(x, _EXP_LO), _EXP_HI)
    k = np.floor(x * _LOG2E + _HALF)       # float32: math.floor gives an int64
    r = x - k * _LN2_HI - k * _LN2_LO
    p = ((((_E1 * r + _E2) * r + _E3) * r + _E4) * r + _E5) * r + _E6
    p = p * (r * r) + r + _ONE
    return p * _float32_with_bits((np.int32(k) + np.int32(127)) << np.int32(23))


@jit(inline="always")
def sigmoid_fast32(x):
    """1 / (1 + exp(-x)) in float32 arithmetic (`exp32`), within a few ulp; 0 below
    -88.37, where exp32(-x) is clamped (the exact value is at most 4.2e-39), so that a
    gate saturated that far has the derivative 0, as libm's sigmoid gives it."""
    return _ONE / (_ONE + exp32(-x)) * np.float32(x >= -_EXP_HI)


@jit(inline="always")
def tanh_fast32(x):
    """tanh(x) in float32 arithmetic: its Taylor series to x^11 below |x| = 0.3, else
    1 - 2 / (e^{2|x|} + 1) (`exp32`), with x's sign; within a few ulp."""
    y = min(abs(x), _TANH_CLAMP)
    y2 = y * y
    small = y + y * y2 * (_T3 + y2 * (_T5 + y2 * (_T7 + y2 * (_T9 + y2 * _T11))))
    large = _ONE - _TWO / (exp32(_TWO * y) + _ONE)
    w = np.float32(y < _TANH_SMALL)          # arithmetic, not a branch: it inlines cleanly
    return math.copysign(w * small + (_ONE - w) * large, x)


def sigmoid(x):
    """The logistic function in x's float type (`sigmoid32` or `sigmoid64`)."""
    raise NotImplementedError("called from compiled kernels only")


def tanh(x):
    """tanh in x's float type (`tanh32` or libm's)."""
    raise NotImplementedError("called from compiled kernels only")


@overload(sigmoid, inline="always")
def _sigmoid32(x):
    if x == types.float32:
        return lambda x: sigmoid_fast32(x)
    return None


@overload(sigmoid)
def _sigmoid64(x):
    if x == types.float64:
        return lambda x: sigmoid64(x)
    return None


@overload(tanh, inline="always")
def _tanh(x):
    if x == types.float32:
        return lambda x: tanh_fast32(x)
    return lambda x: math.tanh(x)


# Elman's activations and the softmax's exp, picked for the argument's float type when a
# kernel compiles, so that a kernel compiles only its own dtype's arithmetic: float32
# takes the functions above (correctly rounded or 1 ulp off), float64 takes libm.

def tanh_elman(x):
    """tanh in x's float type: `tanh32` for float32, libm's for float64."""
    raise NotImplementedError("called from compiled kernels only")


def sigmoid_elman(x):
    """1 / (1 + exp(-x)) in x's float type: `sigmoid32` for float32, libm's exp for
    float64."""
    raise NotImplementedError("called from compiled kernels only")


def exp_shifted(v, shift):
    """exp(v - shift) for v <= shift, v an entry of a float32 array (`exp_neg32`) or of a
    float64 one (libm), shift float64."""
    raise NotImplementedError("called from compiled kernels only")


@overload(tanh_elman, inline="always")
def _tanh_elman(x):
    if x == types.float32:
        return lambda x: tanh32(x)
    return lambda x: np.tanh(x)


@overload(sigmoid_elman, inline="always")
def _sigmoid_elman(x):
    if x == types.float32:
        return lambda x: sigmoid32(x)
    return lambda x: 1.0 / (1.0 + np.exp(-x))


@overload(exp_shifted, inline="always")
def _exp_shifted(v, shift):
    if v == types.float32:
        return lambda v, shift: exp_neg32(v - shift)
    return lambda v, shift: np.exp(v - shift)


# The gated cells apply these to one segment at a time in time-major layout (a row of
# the gates is a sequence, a gate a range of its columns), and to blocks of rows in
# feature-major layout (a gate of every unit is a row, the step's B sequences its
# columns): there one call takes a gate's rows, since called once per unit a function
# over 32 columns cost about 7 ns a call, as much again as its arithmetic (0.45 ns
# against 0.24 ns an entry). They are compiled once per array type and called, not
# inlined into every step function: inlined, each call site brought its own copy of the
# vector code, and compile time grew with them. Their integer arguments are never
# constants at a call site: Numba compiles a function again for each literal value.

@jit
def sigmoid_in_place(v):
    """v <- sigmoid(v) on a contiguous 1-D array."""
    for j in range(v.shape[0]):
        v[j] = sigmoid(v[j])


@jit
def tanh_in_place(v):
    """v <- tanh(v) on a contiguous 1-D array."""
    for j in range(v.shape[0]):
        v[j] = tanh(v[j])


@jit
def sigmoid_rows(Z, a, b):
    """Z[i, a:b] <- sigmoid(Z[i, a:b]) for every row i (rows contiguous)."""
    for i in range(Z.shape[0]):
        v = Z[i, a:b]
        for j in range(v.shape[0]):
            v[j] = sigmoid(v[j])


@jit
def tanh_rows(Z, a, b):
    """Z[i, a:b] <- tanh(Z[i, a:b]) for every row i (rows contiguous)."""
    for i in range(Z.shape[0]):
        v = Z[i, a:b]
        for j in range(v.shape[0]):
            v[j] = tanh(v[j])


@jit
def tanh_rows_into(src, sc, dst, dc, n):
    """dst[i, dc:dc + n] <- tanh(src[i, sc:sc + n]) for every row i of src."""
    for i in range(src.shape[0]):
        s = src[i, sc:sc + n]
        d = dst[i, dc:dc + n]
        for j in range(n):
            d[j] = tanh(s[j])
