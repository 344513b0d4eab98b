"""The GRU cell in PyTorch's equations and gate order (SPEC.md §6).

The inputs' part z = U x_t + b (rows r, z, n) is in the gate buffer; the hidden part
Hid = W h_{t-1} + bh arrives apart, since b_hn sits inside r (...):

    r = σ(z_r + Hid_r)      u = σ(z_z + Hid_z)      n = tanh(z_n + r hn),  hn = Hid_n
    h_t = (1 - u) n + u h_{t-1}

The forward step overwrites the gates with r, u, n and keeps hn (E) for the backward
step. Backward, with dh_t completed by the direct term X = u_{t+1} dh_{t+1}:

    d = dh + X                     dn = d (1 - u) (1 - n²)
    du = d (h_{t-1} - n) u (1 - u) dr = dn hn r (1 - r)
    input side dZ = (dr, du, dn);  hidden side dZh = (dr, du, dn r);  X = d u
"""
from .._jit import jit
from ..mathfuncs import sigmoid, tanh


SUMS = False       # backward_fm adds to the lag-major sum itself

@jit(inline="always")
def _forward(zr, zz, zn, hr, hz, hn, hp, e, h):
    for j in range(h.shape[0]):
        r = sigmoid(zr[j] + hr[j])
        u = sigmoid(zz[j] + hz[j])
        m = hn[j]
        n = tanh(zn[j] + r * m)
        zr[j], zz[j], zn[j] = r, u, n
        e[j] = m
        h[j] = (1 - u) * n + u * hp[j]


@jit(inline="always")
def _backward(dh, zr, zz, zn, hp, e, xin, xout, dr_, du_, dn_, dhn_):
    for j in range(dh.shape[0]):
        r, u, n = zr[j], zz[j], zn[j]
        d = dh[j] + xin[j]
        dn = d * (1 - u) * (1 - n * n)
        du = d * (hp[j] - n) * u * (1 - u)
        dr = dn * e[j] * r * (1 - r)
        dr_[j], du_[j], dn_[j] = dr, du, dn
        dhn_[j] = dn * r
        xout[j] = d * u


@jit(inline="always")
def prepare_fm(Sm, fp, B, act):
    return


@jit(inline="always")
def forward_fm(Zm, Sm, Em, Cm, cs, B, Hid, act, buf):
    H = Sm.shape[0]
    a, b, p = cs, cs + B, cs - B
    for i in range(H):
        _forward(Zm[i, a:b], Zm[H + i, a:b], Zm[2 * H + i, a:b], Hid[i], Hid[H + i],
                 Hid[2 * H + i], Sm[i, p:a], Em[i, a:b], Sm[i, a:b])


@jit(inline="always")
def forward_tm(Z, S, E, C, Hid, t, b, H, act):
    z = Z[t + 1, b]
    hid = Hid[b]
    _forward(z[:H], z[H:2 * H], z[2 * H:3 * H], hid[:H], hid[H:2 * H], hid[2 * H:3 * H],
             S[t, b, :H], E[t + 1, b, :H], S[t + 1, b, :H])


@jit(inline="always")
def backward_fm(dH, dZ, dZh, cd, Zm, Sm, Em, Cm, cs, B, Xin, cxi, Xout, cxo, fp, n, act,
                total):
    H = dH.shape[0]
    d, s, p = slice(cd, cd + n), slice(cs, cs + n), slice(cs - B, cs - B + n)
    for i in range(H):
        _backward(dH[i, d], Zm[i, s], Zm[H + i, s], Zm[2 * H + i, s], Sm[i, p], Em[i, s],
                  Xin[i, cxi:cxi + n], Xout[i, cxo:cxo + n], dZ[i, d], dZ[H + i, d],
                  dZ[2 * H + i, d], dZh[2 * H + i, d])
        dZh[i, d] = dZ[i, d]
        dZh[H + i, d] = dZ[H + i, d]


@jit(inline="always")
def backward_tm(dH, dZ, dZh, Z, S, E, C, X, t, b, B, H, act):
    z = Z[t + 1, b]
    dz = dZ[t * B + b]
    dzh = dZh[t * B + b]
    x = X[b, :H]
    _backward(dH[t * B + b, :H], z[:H], z[H:2 * H], z[2 * H:3 * H], S[t, b, :H],
              E[t + 1, b, :H], x, x, dz[:H], dz[H:2 * H], dz[2 * H:3 * H], dzh[2 * H:3 * H])
    dzh[:2 * H] = dz[:2 * H]


@jit(inline="always")
def to_h0(X, dh0, dc0):
    """The direct term u_0 dh_0 completes dL/dh0 (empty dh0: not asked for)."""
    if dh0.size:
        dh0 += X
