"""Activations and their derivatives, applied in place to rows of a state array.

Codes (shared with `fastbptt._inputs.ACTIVATIONS`): 0 tanh, 1 sigmoid, 2 relu, 3 identity.
Derivatives are read off the output h = f(a) (SPEC.md §2).
"""
import numpy as np

from ._jit import jit

TANH, SIGMOID, RELU, IDENTITY = 0, 1, 2, 3


@jit(inline="always")
def activate_row(a, act):
    """a <- f(a), elementwise on a 1-D array."""
    if act == TANH:
        for i in range(a.shape[0]):
            a[i] = np.tanh(a[i])
    elif act == SIGMOID:
        for i in range(a.shape[0]):
            a[i] = 1.0 / (1.0 + np.exp(-a[i]))
    elif act == RELU:
        for i in range(a.shape[0]):
            if a[i] < 0:             # NaN stays NaN
                a[i] = 0.0


@jit(inline="always")
def scale_by_derivative(g, h, act):
    """g <- g * f'(a) for rows g and h = f(a) of the same length."""
    if act == TANH:
        for i in range(g.shape[0]):
            g[i] *= 1.0 - h[i] * h[i]
    elif act == SIGMOID:
        for i in range(g.shape[0]):
            g[i] *= h[i] * (1.0 - h[i])
    elif act == RELU:
        for i in range(g.shape[0]):
            if h[i] <= 0:
                g[i] = 0.0
