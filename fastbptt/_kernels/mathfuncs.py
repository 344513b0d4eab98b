"""Vectorizable tanh, sigmoid and exp for float32 arrays.

Numba's np.tanh/np.exp call libm one scalar at a time (no SVML here). These use only
arithmetic that LLVM vectorizes, evaluated in float64 so the float32 result is within
one ulp of the exact value (the tests measure this over the whole float32 range):

- exp(z) for z <= 0 as 2^k e^r, z = k ln2 + r, |r| <= ln2 / 2;
- tanh(x) = expm1(2|x|) / (expm1(2|x|) + 2) with expm1(t) = 2^k expm1(r) + 2^k - 1,
  t = k ln2 + r, |r| <= ln2 / 2 (k = 0 below t = ln2 / 2, where it is expm1(r) itself;
  above, the two terms cancel to no less than a quarter of their size); expm1(r) by its
  Taylor series to degree 9 (relative error < 3e-11, a two-thousandth of a float32 ulp).
  On a Zen 3 core tanh took 2.0 ns a value against 2.5 ns for the form before it,
  expm1(2|x| / 32) by 12 terms and 5 doublings expm1(2z) = expm1(z) (expm1(z) + 2); exp
  0.95 ns against 1.4 ns for exp(z / 256) by 12 terms squared 8 times, and the sigmoid,
  which takes it, 1.6 ns against 2.1 ns.

float64 arrays take `exp64` and `tanh64` (Cephes' exp and tanh: rational functions that
LLVM vectorizes, within 2 ulp of libm's, measured by the tests). libm, one value at a
time, took 5 and 15 ns a value against their 1.0 and 1.9 ns; an Elman forward pass in
float64 took 7.5 times its float32 time.

The gated cells evaluate five of these per hidden unit and step, so for them `sigmoid`
and `tanh` (which pick the function for their argument's type when a kernel compiles)
take float32 arithmetic throughout for float32 (`exp32`, `sigmoid_fast32`,
`tanh_fast32`: within a few ulp, measured by the tests, and 16 lanes to a vector
register instead of 8), and `sigmoid64` and `tanh64` for float64.
"""
import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ._jit import jit
from ._overload import called_overload, inline_overload

TANH_SATURATION = 9.02      # float32 tanh(x) rounds to +-1 beyond |x| = 9.01
EXP_UNDERFLOW = -110.0      # float32 exp(z) rounds to 0 below z = -103.98


@intrinsic
def _float32_with_bits(typingctx, bits):
    """The float32 whose bit pattern is the int32 ``bits`` (a no-op LLVM vectorizes)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@intrinsic
def _float64_with_bits(typingctx, bits):
    """The float64 whose bit pattern is the int64 ``bits``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def _bits_of_float64(typingctx, x):
    """The int64 bit pattern of the float64 ``x``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@jit(inline="always")
def _expm1_reduced(r):
    """expm1(r) for |r| <= ln2 / 2, float64, Horner form of the Taylor series to r^9."""
    p = 1.0 / 362880.0
    p = 1.0 / 40320.0 + r * p
    p = 1.0 / 5040.0 + r * p
    p = 1.0 / 720.0 + r * p
    p = 1.0 / 120.0 + r * p
    p = 1.0 / 24.0 + r * p
    p = 1.0 / 6.0 + r * p
    p = 0.5 + r * p
    p = 1.0 + r * p
    return r * p


# 1.5 2^52: k + 1.5 2^52 (-2^51 <= k < 2^51 an integer) holds k in the low bits of its
# mantissa, in two's complement
_SHIFT = 6755399441055744.0
_SHIFT_BITS = 0x4338000000000000
_LOG2E_64 = 1.4426950408889634
_LN2_64 = 0.6931471805599453


@jit(inline="always")
def _pow2_reduced(z):
    """(2^k, r) with z = k ln2 + r, k = round(z / ln2), for |z| < 700: k by adding and
    taking away 1.5 2^52, which rounds to an integer (the kernels contract a * b + c into
    one FMA, and reassociate nothing); 2^k from k's bits."""
    k = (z * _LOG2E_64 + _SHIFT) - _SHIFT
    r = z - k * _LN2_64
    return _float64_with_bits((_bits_of_float64(k + _SHIFT) - _SHIFT_BITS + 1023) << 52), r


@jit(inline="always")
def tanh32(x):
    """tanh(x) in float64 arithmetic for a float32 x (expm1(2|x|) / (expm1(2|x|) + 2),
    expm1 by range reduction: module docstring): 2|x| = k ln2 + r, k <= 26, and
    expm1(2|x|) = 2^k expm1(r) + 2^k - 1. NaN stays NaN."""
    y = abs(float(x))
    if y > TANH_SATURATION:
        y = TANH_SATURATION
    scale, r = _pow2_reduced(y + y)
    e = scale * _expm1_reduced(r) + (scale - 1.0)
    return math.copysign(e / (e + 2.0), x)


@jit(inline="always")
def exp_neg32(z):
    """exp(z) for z <= 0 (NaN stays NaN), float64 arithmetic for a float32 result: 2^k
    (1 + expm1(r)), z = k ln2 + r, k >= -159."""
    z = float(z)
    if z < EXP_UNDERFLOW:
        z = EXP_UNDERFLOW
    scale, r = _pow2_reduced(z)
    return scale + scale * _expm1_reduced(r)


@jit(inline="always")
def sigmoid32(x):
    """1 / (1 + exp(-x)) without cancellation: e = exp(-|x|), then 1/(1+e) or e/(1+e)."""
    e = exp_neg32(-abs(float(x)))
    return 1.0 / (1.0 + e) if x >= 0 else e / (1.0 + e)


# ln of the least normal float64, and the top of the range where 2^k stays normal
_EXP64_LO, _EXP64_HI = -708.3964185322641, 709.78
_LOG2E64 = 1.4426950408889634
_LN2_HI64, _LN2_LO64 = 6.93145751953125e-1, 1.42860682030941723212e-6
_EP0, _EP1 = 1.26177193074810590878e-4, 3.02994407707441961300e-2
_EP2 = 9.99999999999999999910e-1
_EQ0, _EQ1 = 3.00198505138664455042e-6, 2.52448340349684104192e-3
_EQ2, _EQ3 = 2.27265548208155028766e-1, 2.00000000000000000009e0
_TP0, _TP1 = -9.64399179425052238628e-1, -9.92877231001918586564e1
_TP2 = -1.61468768441708447952e3
_TQ0, _TQ1, _TQ2 = 1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3


@jit(inline="always")
def exp64(x):
    """exp(x) for a float64 x (Cephes' exp: x = k ln2 + r, |r| <= ln2 / 2, e^r =
    1 + 2 r P(r^2) / (Q(r^2) - r P(r^2)), 2^k from its bits), within 2 ulp of libm's;
    0 below -708.396 (where libm gives a subnormal), NaN for NaN. Arguments above 709.78
    (where exp overflows) are clamped there: the kernels take it of 2|x| <= 44 and of
    arguments <= 0 alone."""
    y = min(max(x, _EXP64_LO), _EXP64_HI)
    k = np.floor(y * _LOG2E64 + 0.5)
    r = y - k * _LN2_HI64 - k * _LN2_LO64
    rr = r * r
    p = r * ((_EP0 * rr + _EP1) * rr + _EP2)
    q = ((_EQ0 * rr + _EQ1) * rr + _EQ2) * rr + _EQ3
    e = 1.0 + 2.0 * (p / (q - p))
    scale = _float64_with_bits((np.int64(k) + np.int64(1023)) << np.int64(52))
    return e * scale * np.float64(x >= _EXP64_LO)


@jit(inline="always")
def tanh64(x):
    """tanh(x) for a float64 x (Cephes' tanh): x + x^3 P(x^2) / Q(x^2) below |x| =
    0.625, else 1 - 2 / (exp64(2|x|) + 1), with x's sign; within 2 ulp of libm's."""
    y = min(abs(x), 22.0)                 # tanh(22) rounds to 1
    z = y * y
    p = ((_TP0 * z + _TP1) * z + _TP2) / (((z + _TQ0) * z + _TQ1) * z + _TQ2)
    small = y + y * z * p
    large = 1.0 - 2.0 / (exp64(2.0 * y) + 1.0)
    w = np.float64(y < 0.625)             # arithmetic, not a branch: it vectorizes
    return math.copysign(w * small + (1.0 - w) * large, x)


@jit(inline="always")
def sigmoid64(x):
    """1 / (1 + exp(-x)) without cancellation or overflow (float64): e = exp64(-|x|),
    then 1/(1+e) or e/(1+e)."""
    e = exp64(-abs(x))
    return 1.0 / (1.0 + e) if x >= 0 else e / (1.0 + e)


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
    """tanh in x's float type (`tanh_fast32` or `tanh64`)."""
    raise NotImplementedError("called from compiled kernels only")


@inline_overload(sigmoid)
def _sigmoid32(x):
    if x == types.float32:
        return lambda x: sigmoid_fast32(x)
    return None


@called_overload(sigmoid)
def _sigmoid64(x):
    if x == types.float64:
        return lambda x: sigmoid64(x)
    return None


@inline_overload(tanh)
def _tanh(x):
    if x == types.float32:
        return lambda x: tanh_fast32(x)
    return lambda x: tanh64(x)


# Elman's activations and the softmax's exp, picked for the argument's float type when a
# kernel compiles, so that a kernel compiles only its own dtype's arithmetic: float32
# takes the functions above (correctly rounded or 1 ulp off), float64 `tanh64`,
# `sigmoid64` and `exp64`.

def tanh_elman(x):
    """tanh in x's float type: `tanh32` for float32, `tanh64` for float64."""
    raise NotImplementedError("called from compiled kernels only")


def sigmoid_elman(x):
    """1 / (1 + exp(-x)) in x's float type: `sigmoid32` for float32, `sigmoid64` for
    float64."""
    raise NotImplementedError("called from compiled kernels only")


def exp_shifted(v, shift):
    """exp(v - shift) for v <= shift, v an entry of a float32 array (`exp_neg32`) or of a
    float64 one (`exp64`), shift float64."""
    raise NotImplementedError("called from compiled kernels only")


@inline_overload(tanh_elman)
def _tanh_elman(x):
    if x == types.float32:
        return lambda x: tanh32(x)
    return lambda x: tanh64(x)


@inline_overload(sigmoid_elman)
def _sigmoid_elman(x):
    if x == types.float32:
        return lambda x: sigmoid32(x)
    return lambda x: sigmoid64(x)


@inline_overload(exp_shifted)
def _exp_shifted(v, shift):
    if v == types.float32:
        return lambda v, shift: exp_neg32(v - shift)
    return lambda v, shift: exp64(v - shift)


# The gated cells apply these to one segment at a time in time-major layout (a row of
# the gates is a sequence, a gate a range of its columns), and to blocks of rows in
# feature-major layout (a gate of every unit is a row, the step's B sequences its
# columns): there one call takes a gate's rows, since called once per unit a function
# over 32 columns cost about 7 ns a call, as much again as its arithmetic (0.45 ns
# against 0.24 ns an entry). They are compiled once per array type and called, not
# inlined into every step function: inlined, each call site brought its own copy of the
# vector code, and compile time grew with them. Their integer arguments are never
# constants at a call site: Numba compiles a function again for each literal value.

@jit(wide=True)
def sigmoid_in_place(v):
    """v <- sigmoid(v) on a contiguous 1-D array."""
    for j in range(v.shape[0]):
        v[j] = sigmoid(v[j])


@jit(wide=True)
def tanh_in_place(v):
    """v <- tanh(v) on a contiguous 1-D array."""
    for j in range(v.shape[0]):
        v[j] = tanh(v[j])


@jit(wide=True)
def sigmoid_rows(Z, a, b):
    """Z[i, a:b] <- sigmoid(Z[i, a:b]) for every row i (rows contiguous)."""
    for i in range(Z.shape[0]):
        v = Z[i, a:b]
        for j in range(v.shape[0]):
            v[j] = sigmoid(v[j])


@jit(wide=True)
def tanh_rows(Z, a, b):
    """Z[i, a:b] <- tanh(Z[i, a:b]) for every row i (rows contiguous)."""
    for i in range(Z.shape[0]):
        v = Z[i, a:b]
        for j in range(v.shape[0]):
            v[j] = tanh(v[j])


@jit(wide=True)
def tanh_rows_into(src, sc, dst, dc, n):
    """dst[i, dc:dc + n] <- tanh(src[i, sc:sc + n]) for every row i of src."""
    for i in range(src.shape[0]):
        s = src[i, sc:sc + n]
        d = dst[i, dc:dc + n]
        for j in range(n):
            d[j] = tanh(s[j])
