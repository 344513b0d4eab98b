"""The LSTM cell in PyTorch's equations and gate order (SPEC.md §6).

Gates z = U x_t + W h_{t-1} + b, rows i, f, g, o; the forward step overwrites them with
their activations i = σ(z_i), f = σ(z_f), g = tanh(z_g), o = σ(z_o), which the backward
step reads: c_t = f c_{t-1} + i g, h_t = o tanh(c_t). Backward, with dc carried from step
t + 1 as dc_{t+1} f_{t+1} (the cell's "extra" carry, X):

    dc   = dh o (1 - tanh²c) + X
    dz_o = dh tanh(c) o (1 - o)        dz_i = dc g i (1 - i)
    dz_f = dc c_{t-1} f (1 - f)        dz_g = dc i (1 - g²)
    X    = dc f                        (to step t - 1; dL/dc0 after step 0)

The input side and the hidden side share the gates' gradients (dZh is dZ).
"""
from .._jit import jit
from ..mathfuncs import sigmoid, tanh


SUMS = False       # backward_fm adds to the lag-major sum itself

@jit(inline="always")
def _forward(zi, zf, zg, zo, cp, c, h):
    for j in range(h.shape[0]):
        ig, fg, og = sigmoid(zi[j]), sigmoid(zf[j]), sigmoid(zo[j])
        g = tanh(zg[j])
        cj = fg * cp[j] + ig * g
        zi[j], zf[j], zg[j], zo[j] = ig, fg, g, og
        c[j] = cj
        h[j] = og * tanh(cj)


@jit(inline="always")
def _backward(dh, zi, zf, zg, zo, c, cp, xin, xout, di, df, dg, do):
    for j in range(dh.shape[0]):
        ig, fg, g, og = zi[j], zf[j], zg[j], zo[j]
        tc = tanh(c[j])
        d = dh[j]
        dc = d * og * (1 - tc * tc) + xin[j]
        do[j] = d * tc * og * (1 - og)
        di[j] = dc * g * ig * (1 - ig)
        df[j] = dc * cp[j] * fg * (1 - fg)
        dg[j] = dc * ig * (1 - g * g)
        xout[j] = dc * fg


@jit(inline="always")
def prepare_fm(Sm, fp, B, act):
    return


@jit(inline="always")
def forward_fm(Zm, Sm, Em, Cm, cs, B, Hid, act, buf):
    H = Sm.shape[0]
    a, b, p = cs, cs + B, cs - B
    for i in range(H):
        _forward(Zm[i, a:b], Zm[H + i, a:b], Zm[2 * H + i, a:b], Zm[3 * H + i, a:b],
                 Cm[i, p:a], Cm[i, a:b], Sm[i, a:b])


@jit(inline="always")
def forward_tm(Z, S, E, C, Hid, t, b, H, act):
    z = Z[t + 1, b]
    _forward(z[:H], z[H:2 * H], z[2 * H:3 * H], z[3 * H:4 * H], C[t, b, :H], C[t + 1, b, :H],
             S[t + 1, b, :H])


@jit(inline="always")
def backward_fm(dH, dZ, dZh, cd, Zm, Sm, Em, Cm, cs, B, Xin, cxi, Xout, cxo, fp, n, act,
                total):
    H = dH.shape[0]
    d, s, p = slice(cd, cd + n), slice(cs, cs + n), slice(cs - B, cs - B + n)
    xi, xo = slice(cxi, cxi + n), slice(cxo, cxo + n)
    for i in range(H):
        _backward(dH[i, d], Zm[i, s], Zm[H + i, s], Zm[2 * H + i, s], Zm[3 * H + i, s],
                  Cm[i, s], Cm[i, p], Xin[i, xi], Xout[i, xo], dZ[i, d], dZ[H + i, d],
                  dZ[2 * H + i, d], dZ[3 * H + i, d])


@jit(inline="always")
def backward_tm(dH, dZ, dZh, Z, S, E, C, X, t, b, B, H, act):
    z = Z[t + 1, b]
    dz = dZ[t * B + b]
    x = X[b, :H]
    _backward(dH[t * B + b, :H], z[:H], z[H:2 * H], z[2 * H:3 * H], z[3 * H:4 * H],
              C[t + 1, b, :H], C[t, b, :H], x, x, dz[:H], dz[H:2 * H], dz[2 * H:3 * H],
              dz[3 * H:4 * H])


@jit(inline="always")
def to_h0(X, dh0, dc0):
    """dL/dc0 is the carry after step 0 (empty dc0: not asked for)."""
    if dc0.size:
        dc0[:] = X
