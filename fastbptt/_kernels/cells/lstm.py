"""The LSTM cell in PyTorch's equations and gate order (SPEC.md §6).

Gates z = U x_t + W h_{t-1} + b, rows i, f, g, o; the forward step overwrites them with
their activations i = σ(z_i), f = σ(z_f), g = tanh(z_g), o = σ(z_o), which the backward
step reads: c_t = f c_{t-1} + i g, h_t = o tanh(c_t), with tanh(c_t) kept (E) for the
backward step (recomputing it there cost 0.5 ms of G1's backward pass). Backward, with X
holding the carry dc_{t+1} f_{t+1} from step t + 1 on entry:

    X    = dc = dh o (1 - tanh²c) + X
    dz_o = dh tanh(c) o (1 - o)        dz_i = dc g i (1 - i)
    dz_f = dc c_{t-1} f (1 - f)        dz_g = dc i (1 - g²)
    X    = dc f                        (to step t - 1; dL/dc0 after step 0)

The input side and the hidden side share the gates' gradients (dZh is dZ). Each loop
below reads and writes few arrays: a loop over many arrays makes LLVM give up
vectorizing it for the aliasing checks it would need (measured: 33 ns an element for
the forward step in one loop, against a fraction of that in these).
"""
from .._jit import jit
from ..copies import copy_row, copy_rows
from ..mathfuncs import sigmoid_in_place, sigmoid_rows, tanh_in_place
from ..mathfuncs import tanh_rows, tanh_rows_into

SUMS = False       # backward_fm does not add to the lag-major sum itself


@jit(inline="always")
def _cell(zi, zf, zg, cp, c):
    """c = f c_{t-1} + i g, in two loops: each sum then has one product that a fused
    multiply-add can take, so every driver that inlines this rounds it alike (a sum of
    two products may be fused either way, and LLVM chose differently in different
    drivers)."""
    for j in range(c.shape[0]):
        c[j] = zi[j] * zg[j]
    for j in range(c.shape[0]):
        c[j] += zf[j] * cp[j]


@jit(inline="always")
def _product(h, tc, zo):
    for j in range(h.shape[0]):
        h[j] = tc[j] * zo[j]


@jit(inline="always")
def _backward(dh, zi, zf, zg, zo, tc, cp, x, di, df, dg, do):
    """The step's gradients; tc = tanh(c_t), kept by the forward step."""
    for j in range(x.shape[0]):
        x[j] += dh[j] * zo[j] * (1 - tc[j] * tc[j])
    for j in range(do.shape[0]):
        do[j] = dh[j] * tc[j] * zo[j] * (1 - zo[j])
    for j in range(di.shape[0]):
        di[j] = x[j] * zg[j] * zi[j] * (1 - zi[j])
    for j in range(df.shape[0]):
        df[j] = x[j] * cp[j] * zf[j] * (1 - zf[j])
    for j in range(dg.shape[0]):
        dg[j] = x[j] * zi[j] * (1 - zg[j] * zg[j])
    for j in range(x.shape[0]):
        x[j] *= zf[j]


@jit(inline="always")
def prepare_fm(Sm, fp, B, act):
    return


@jit(inline="always")
def forward_fm(Zm, Sm, Em, Cm, cs, B, Hid, act, buf):
    H = Sm.shape[0]
    a = cs
    b = cs + B
    p = cs - B
    sigmoid_rows(Zm[:2 * H], a, b)                  # i, f
    tanh_rows(Zm[2 * H:3 * H], a, b)                # g
    sigmoid_rows(Zm[3 * H:], a, b)                  # o
    for i in range(H):
        _cell(Zm[i, a:b], Zm[H + i, a:b], Zm[2 * H + i, a:b], Cm[i, p:a], Cm[i, a:b])
    tanh_rows_into(Cm, a, Em, a, B)
    for i in range(H):
        _product(Sm[i, a:b], Em[i, a:b], Zm[3 * H + i, a:b])


@jit(inline="always")
def forward_tm(Z, S, E, C, Hid, t, b, H, act, j0, j1):
    z = Z[t + 1, b]
    i, f, g, o = z[j0:j1], z[H + j0:H + j1], z[2 * H + j0:2 * H + j1], z[3 * H + j0:3 * H + j1]
    sigmoid_in_place(i)
    sigmoid_in_place(f)
    tanh_in_place(g)
    sigmoid_in_place(o)
    _cell(i, f, g, C[t, b, j0:j1], C[t + 1, b, j0:j1])
    e = E[t + 1, b, j0:j1]
    copy_row(e, C[t + 1, b, j0:j1])     # then tanh in place: one tanh kernel compiled,
    tanh_in_place(e)                    # not a second one that writes elsewhere
    _product(S[t + 1, b, j0:j1], e, o)


@jit(inline="always")
def backward_fm(dH, dZ, dZh, cd, Zm, Sm, Em, Cm, cs, B, X, cx, fp, n, act, total, add):
    H = dH.shape[0]
    d = cd
    e = cd + n
    s = cs
    u = cs + n
    for i in range(H):
        _backward(dH[i, d:e], Zm[i, s:u], Zm[H + i, s:u], Zm[2 * H + i, s:u],
                  Zm[3 * H + i, s:u], Em[i, s:u], Cm[i, s - B:u - B], X[i, cx:cx + n],
                  dZ[i, d:e], dZ[H + i, d:e], dZ[2 * H + i, d:e], dZ[3 * H + i, d:e])


@jit(inline="always")
def backward_tm(dH, dZ, dZh, Z, S, E, C, X, t, b, B, H, act, j0, j1):
    z = Z[t + 1, b]
    r = t * B + b
    dz = dZ[r]
    i, f, g, o = j0, H + j0, 2 * H + j0, 3 * H + j0
    n = j1 - j0
    _backward(dH[r, j0:j1], z[i:i + n], z[f:f + n], z[g:g + n], z[o:o + n],
              E[t + 1, b, j0:j1], C[t, b, j0:j1], X[b, j0:j1], dz[i:i + n], dz[f:f + n],
              dz[g:g + n], dz[o:o + n])


@jit(inline="always")
def to_h0(X, dh0, dc0):
    """dL/dc0 is the carry after step 0 (empty dc0: not asked for)."""
    if dc0.size:
        copy_rows(dc0, X)
