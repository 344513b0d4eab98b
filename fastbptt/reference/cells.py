"""One step of each cell, forward and backward, in PyTorch's equations (SPEC.md §1, §6).

A cell sees the two projections of a step, gi = U x_t + b (input side) and
gh = W h_{t-1} + bh (hidden side), and the state before the step; it returns the state
after it and what its backward step needs. Its backward step takes dL/dh_t and, for the
LSTM, dL/dc_t, and returns dL/dgi, dL/dgh and the part of dL/dh_{t-1} (dL/dc_{t-1}) that
does not pass through W. The layer (`fastbptt.reference.layer`) does the products with
U and W and the sums over steps, the same for every cell.

An Elman or LSTM layer stores one bias b = b_ih + b_hh in gi (bh is None): both act only
through their sum, so dL/dgi = dL/dgh there. The GRU keeps b_hn in gh, inside r * (...).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

__all__ = ["State", "add", "activate", "derivative", "sigmoid", "CELLS"]


class State(NamedTuple):
    """A layer's state between two steps: h, and the LSTM's cell state c (None otherwise)."""

    h: np.ndarray
    c: Optional[np.ndarray] = None


def add(a, b):
    """a + b for two States (or their gradients); None stands for zero."""
    if a is None or b is None:
        return b if a is None else a
    return State(a.h + b.h, None if a.c is None else a.c + b.c)


def sigmoid(a):
    """1 / (1 + e^-a), with e^-|a| so that nothing overflows."""
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1 / (1 + e), e / (1 + e))


ACTIVATION_CODES = {"tanh": 0, "sigmoid": 1, "relu": 2, "identity": 3}


def activation_code(activation):
    """The code of an activation given by name ("tanh") or code (0 ... 3)."""
    code = ACTIVATION_CODES.get(activation) if isinstance(activation, str) else activation
    if isinstance(code, bool) or code not in (0, 1, 2, 3):
        raise ValueError(f"activation must be one of {', '.join(ACTIVATION_CODES)} or its "
                         f"code 0 ... 3; got {activation!r}")
    return code


def activate(a, activation):
    """f(a) for the activation tanh, sigmoid, relu or identity (by name, or by its code
    0, 1, 2, 3)."""
    activation = activation_code(activation)
    if activation == 0:
        return np.tanh(a)
    if activation == 1:
        return sigmoid(a)
    if activation == 2:
        return np.maximum(a, 0)
    return a


def derivative(h, activation):
    """f'(a) read off the output h = f(a) (SPEC.md §2); activation as for `activate`."""
    activation = activation_code(activation)
    if activation == 0:
        return 1 - h * h
    if activation == 1:
        return h * (1 - h)
    if activation == 2:
        return (h > 0).astype(h.dtype)
    return np.ones_like(h)


class Elman:
    """h_t = f(a_t), a_t = U x_t + W h_{t-1} + b."""

    gates = 1

    @staticmethod
    def step(gi, gh, before, activation):
        h = activate(gi + gh, activation)
        return State(h), h

    @staticmethod
    def step_back(h, dh, dc, activation):
        delta = dh * derivative(h, activation)             # dL/da_t
        return delta, delta, 0, None


class LSTM:
    """z = U x_t + W h_{t-1} + b in rows i, f, g, o; c_t = f c_{t-1} + i g, h_t = o tanh(c_t)."""

    gates = 4

    @staticmethod
    def step(gi, gh, before, activation):
        zi, zf, zg, zo = np.split(gi + gh, 4)
        i, f, g, o = sigmoid(zi), sigmoid(zf), np.tanh(zg), sigmoid(zo)
        c = f * before.c + i * g
        tanh_c = np.tanh(c)
        return State(o * tanh_c, c), (i, f, g, o, tanh_c, before.c)

    @staticmethod
    def step_back(cache, dh, dc, activation):
        i, f, g, o, tanh_c, c_before = cache
        do = dh * tanh_c
        dc = dc + dh * o * (1 - tanh_c * tanh_c)           # c_t reaches L through h_t too
        di, df, dg = dc * g, dc * c_before, dc * i
        dz = np.concatenate([di * i * (1 - i),              # sigma' = s (1 - s)
                             df * f * (1 - f),
                             dg * (1 - g * g),              # tanh' = 1 - tanh^2
                             do * o * (1 - o)])
        return dz, dz, 0, dc * f


class GRU:
    """r = s(gi_r + gh_r), z = s(gi_z + gh_z), n = tanh(gi_n + r gh_n),
    h_t = (1 - z) n + z h_{t-1}, with gi = U x_t + b, gh = W h_{t-1} + bh."""

    gates = 3

    @staticmethod
    def step(gi, gh, before, activation):
        ir, iz, i_n = np.split(gi, 3)
        hr, hz, hn = np.split(gh, 3)
        r, z = sigmoid(ir + hr), sigmoid(iz + hz)
        n = np.tanh(i_n + r * hn)
        return State((1 - z) * n + z * before.h), (r, z, n, hn, before.h)

    @staticmethod
    def step_back(cache, dh, dc, activation):
        r, z, n, hn, h_before = cache
        dn = dh * (1 - z) * (1 - n * n)                    # dL/d(gi_n + r gh_n)
        dr = dn * hn * r * (1 - r)                          # dL/d(gi_r + gh_r)
        dz = dh * (h_before - n) * z * (1 - z)              # dL/d(gi_z + gh_z)
        dgi = np.concatenate([dr, dz, dn])
        dgh = np.concatenate([dr, dz, dn * r])              # gh_n enters as r * gh_n
        return dgi, dgh, dh * z, None


CELLS = {"elman": Elman, "gru": GRU, "lstm": LSTM}
