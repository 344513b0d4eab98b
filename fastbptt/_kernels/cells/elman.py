"""The Elman cell: h_t = f(a_t), a_t = U x_t + W h_{t-1} + b (SPEC.md §1, §2).

Its gate buffer is the state array itself (a_t is overwritten by h_t in place), and its
gradient buffers are one array: delta_t = dL/dh_t * f'(a_t), in place on dL/dh_t. f' is
read off h (`activations.derivative`); feature-major backward passes compute it for every
step first (`prepare_fm`).
"""
from .._jit import jit
from ..activations import activate_columns, activate_vector, derivative, derivative_into


@jit(inline="always")
def prepare_fm(Sm, fp, B, act):
    """fp (H, T B) <- f'(a_t) of every step, from the states Sm (H, (T+1) B)."""
    for i in range(fp.shape[0]):
        derivative_into(fp[i], Sm[i, B:], act)


@jit(inline="always")
def forward_fm(Z, S, Sp, E, C, Cp, Hid, act, buf):
    """h = f(a) on one step's (H, B) block, in place (Z is S)."""
    activate_columns(S, 0, S.shape[1], act, buf)


@jit(inline="always")
def forward_tm(z, s, sp, e, c, cp, hid, H, act):
    """h = f(a) on one sequence's row of one step, in place (z is s)."""
    activate_vector(s[:H], act)


@jit(inline="always")
def backward_fm(dH, dZ, dZh, Z, S, Sp, E, C, Cp, Xin, Xout, fp, act):
    """delta = dL/dh * f'(a) in place on columns of dH (dZ and dZh are dH)."""
    for i in range(dH.shape[0]):
        row, f = dH[i], fp[i]
        for j in range(row.shape[0]):
            row[j] *= f[j]


@jit(inline="always")
def backward_tm(dh, dz, dzh, z, s, sp, e, c, cp, xin, xout, H, act):
    """delta = dL/dh * f'(a) in place on one row (dz and dzh are dh)."""
    for i in range(H):
        dh[i] *= derivative(s[i], act)


@jit(inline="always")
def to_h0(X, dh0, dc0):
    """The cell's own carry into h0 and c0 after step 0: Elman has none."""
    return
