"""Activations and their derivatives on the rows of feature-major state arrays.

Codes (shared with `fastbptt._inputs.ACTIVATIONS`): 0 tanh, 1 sigmoid, 2 relu, 3 identity.
Derivatives are read off the output h = f(a) (SPEC.md §2). Both dtypes use the
vectorizable functions of `mathfuncs`.
"""

from ._jit import jit
from .mathfuncs import sigmoid_elman, tanh_elman

TANH, SIGMOID, RELU, IDENTITY = 0, 1, 2, 3


@jit(inline="always")
def _activate_segment(v, act):
    """v <- f(v) on a contiguous 1-D array; inlined, so that each loop vectorizes in place."""
    n = v.shape[0]
    if act == RELU:
        for i in range(n):
            if v[i] < 0:             # NaN stays NaN
                v[i] = 0
    elif act == TANH:
        for i in range(n):
            v[i] = tanh_elman(v[i])
    elif act == SIGMOID:
        for i in range(n):
            v[i] = sigmoid_elman(v[i])


@jit(wide=True)
def activate_vector(v, act):
    """v <- f(v) on a contiguous 1-D array."""
    _activate_segment(v, act)


@jit(wide=True)
def activate_columns(m, start, width, act, buf):
    """f() on columns start ... start+width-1 of the C-contiguous 2-D array m.

    Wide blocks run in place, row segment by row segment (each a contiguous slice, so
    the loop vectorizes: indexing m in two dimensions kept it scalar, 5.7 ns per tanh
    against 0.7); narrow ones (a few sequences) are gathered into the contiguous buffer
    buf first, so the functions still run as vectors.
    """
    rows, stop = m.shape[0], start + width
    if act == IDENTITY:
        return
    if width < 16:
        v = buf[:rows * width]
        for i in range(rows):
            for b in range(width):
                v[i * width + b] = m[i, start + b]
        activate_vector(v, act)
        for i in range(rows):
            for b in range(width):
                m[i, start + b] = v[i * width + b]
    else:
        for i in range(rows):
            _activate_segment(m[i, start:stop], act)


@jit(inline="always")
def times_derivative(g, h, act):
    """g f'(a) for one output h = f(a): relu's f' is [h > 0], 1 at h = inf and 0 at NaN
    (as `derivative_into`, the reference and PyTorch), identity's 1."""
    if act == TANH:
        return g * (1 - h * h)
    if act == SIGMOID:
        return g * (h * (1 - h))
    if act == RELU:
        return g * 1 if h > 0 else g * 0
    return g


@jit(wide=True)
def derivative_into(out, h, act):
    """out <- f'(a) for contiguous 1-D h = f(a) (identity: ones)."""
    n = h.shape[0]
    if act == TANH:
        for i in range(n):
            out[i] = 1 - h[i] * h[i]
    elif act == SIGMOID:
        for i in range(n):
            out[i] = h[i] * (1 - h[i])
    elif act == RELU:
        for i in range(n):
            out[i] = 1 if h[i] > 0 else 0
    else:
        for i in range(n):
            out[i] = 1
