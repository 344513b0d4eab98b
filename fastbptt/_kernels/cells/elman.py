"""The Elman cell: h_t = f(a_t), a_t = U x_t + W h_{t-1} + b (SPEC.md §1, §2).

Its gate buffer is the state array itself (a_t is overwritten by h_t in place), and its
gradient buffers are one array: delta_t = dL/dh_t * f'(a_t), in place on dL/dh_t. f' is
read off h (`activations.times_derivative`); feature-major backward passes compute it for every
step first (`prepare_fm`).
"""
from .._jit import jit
from ..activations import activate_columns, activate_vector, derivative_into, times_derivative


SUMS = True       # backward_fm adds to the lag-major sum itself

@jit(inline="always")
def prepare_fm(Sm, fp, B, act):
    """fp (H, T B) <- f'(a_t) of every step, from the states Sm (H, (T+1) B)."""
    for i in range(fp.shape[0]):
        derivative_into(fp[i], Sm[i, B:], act)


@jit(inline="always")
def forward_fm(Zm, Sm, Em, Cm, cs, B, Hid, act, buf):
    """h = f(a) on one step's block of B columns from cs, in place (Zm is Sm)."""
    activate_columns(Sm, cs, B, act, buf)


@jit(inline="always")
def forward_tm(Z, S, E, C, Hid, t, b, H, act, j0, j1):
    """h = f(a) on units j0 ... j1-1 of sequence b's row of step t, in place (Z is S)."""
    activate_vector(S[t + 1, b, j0:j1], act)


@jit(inline="always")
def backward_fm(dH, dZ, dZh, cd, Zm, Sm, Em, Cm, cs, B, X, cx, fp, n, act, total, add):
    """delta = dL/dh * f'(a) in place on n columns of dH from cd (dZ and dZh are dH),
    each also added to (``add``) or written into ``total``'s first n columns unless it is
    empty (the lag-major pass's sum and its copy of a lag, in the same pass over
    memory). One loop per case, so that each vectorizes."""
    if total.shape[0] and add:
        for i in range(dH.shape[0]):
            _mul_add(dH[i, cd:cd + n], fp[i, cd:cd + n], total[i, :n])
    elif total.shape[0]:
        for i in range(dH.shape[0]):
            _mul_copy(dH[i, cd:cd + n], fp[i, cd:cd + n], total[i, :n])
    else:
        for i in range(dH.shape[0]):
            _mul(dH[i, cd:cd + n], fp[i, cd:cd + n])


@jit(inline="always")
def _mul_add(row, f, out):
    """row *= f, and out += the new row."""
    for j in range(row.shape[0]):
        v = row[j] * f[j]
        row[j] = v
        out[j] += v


@jit(inline="always")
def _mul_copy(row, f, out):
    """row *= f, and out = the new row."""
    for j in range(row.shape[0]):
        v = row[j] * f[j]
        row[j] = v
        out[j] = v


@jit(inline="always")
def _mul(row, f):
    for j in range(row.shape[0]):
        row[j] *= f[j]


@jit(inline="always")
def backward_tm(dH, dZ, dZh, Z, S, E, C, X, t, b, B, H, act, j0, j1):
    """delta = dL/dh * f'(a) in place on units j0 ... j1-1 of sequence b's row of step t
    (dZ and dZh are dH)."""
    dh = dH[t * B + b]
    s = S[t + 1, b]
    for i in range(j0, j1):
        dh[i] = times_derivative(dh[i], s[i], act)


@jit(inline="always")
def to_h0(X, dh0, dc0):
    """The cell's own carry into h0 and c0 after step 0: Elman has none."""
    return
