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
def forward_fm(Z, S, Sp, E, C, Cp, Hid, act, buf):
    H = S.shape[0]
    for i in range(H):
        _forward(Z[i], Z[H + i], Z[2 * H + i], Hid[i], Hid[H + i], Hid[2 * H + i], Sp[i],
                 E[i], S[i])


@jit(inline="always")
def forward_tm(z, s, sp, e, c, cp, hid, H, act):
    _forward(z[:H], z[H:2 * H], z[2 * H:3 * H], hid[:H], hid[H:2 * H], hid[2 * H:3 * H],
             sp[:H], e[:H], s[:H])


@jit(inline="always")
def backward_fm(dH, dZ, dZh, Z, S, Sp, E, C, Cp, Xin, Xout, fp, act):
    H = dH.shape[0]
    for i in range(H):
        _backward(dH[i], Z[i], Z[H + i], Z[2 * H + i], Sp[i], E[i], Xin[i], Xout[i],
                  dZ[i], dZ[H + i], dZ[2 * H + i], dZh[2 * H + i])
        dZh[i, :] = dZ[i]
        dZh[H + i, :] = dZ[H + i]


@jit(inline="always")
def backward_tm(dh, dz, dzh, z, s, sp, e, c, cp, xin, xout, H, act):
    _backward(dh[:H], z[:H], z[H:2 * H], z[2 * H:3 * H], sp[:H], e[:H], xin[:H], xout[:H],
              dz[:H], dz[H:2 * H], dz[2 * H:3 * H], dzh[2 * H:3 * H])
    dzh[:2 * H] = dz[:2 * H]


@jit(inline="always")
def to_h0(X, dh0, dc0):
    """The direct term u_0 dh_0 completes dL/dh0 (empty dh0: not asked for)."""
    if dh0.size:
        dh0 += X
