"""The GRU cell in PyTorch's equations and gate order (SPEC.md §6).

The inputs' part z = U x_t + b (rows r, z, n) is in the gate buffer; the hidden part
Hid = W h_{t-1} + bh arrives apart, since b_hn sits inside r (...):

    r = σ(z_r + Hid_r)      u = σ(z_z + Hid_z)      n = tanh(z_n + r hn),  hn = Hid_n
    h_t = (1 - u) n + u h_{t-1}

The forward step overwrites the gates with r, u, n and keeps hn (E) for the backward
step. Backward, with X holding the direct term u_{t+1} dh_{t+1} from step t + 1 on
entry:

    d = dh + X                     dn = d (1 - u) (1 - n²)
    du = d (h_{t-1} - n) u (1 - u) dr = dn hn r (1 - r)
    input side dZ = (dr, du, dn);  hidden side dZh = (dr, du, dn r);  X = d u

Loops read and write few arrays each, so that they vectorize (see `lstm`).
"""
from .._jit import jit
from ..copies import add_row, add_rows, copy_row
from ..mathfuncs import sigmoid_in_place, sigmoid_rows, tanh_in_place, tanh_rows

SUMS = False       # backward_fm does not add to the lag-major sum itself


@jit(inline="always")
def _candidate(zr, zn, e, hn):
    """e = hn (kept for the backward step); zn += r hn."""
    copy_row(e, hn)
    for j in range(zn.shape[0]):
        zn[j] += zr[j] * e[j]


@jit(inline="always")
def _mix(zz, zn, hp, h):
    """h = (1 - u) n + u h_{t-1}, in two loops, as the LSTM's `lstm._cell`."""
    for j in range(h.shape[0]):
        h[j] = (1 - zz[j]) * zn[j]
    for j in range(h.shape[0]):
        h[j] += zz[j] * hp[j]


@jit(inline="always")
def _backward(dh, zr, zz, zn, hp, e, x, dr, du, dn, dhn):
    for j in range(dh.shape[0]):
        dh[j] += x[j]
    for j in range(dn.shape[0]):
        dn[j] = dh[j] * (1 - zz[j]) * (1 - zn[j] * zn[j])
    for j in range(du.shape[0]):
        du[j] = dh[j] * (hp[j] - zn[j]) * zz[j] * (1 - zz[j])
    for j in range(dr.shape[0]):
        dr[j] = dn[j] * e[j] * zr[j] * (1 - zr[j])
    for j in range(dhn.shape[0]):
        dhn[j] = dn[j] * zr[j]
    for j in range(x.shape[0]):
        x[j] = dh[j] * zz[j]


@jit(inline="always")
def prepare_fm(Sm, fp, B, act):
    return


@jit(inline="always")
def forward_fm(Zm, Sm, Em, Cm, cs, B, Hid, act, buf):
    H = Sm.shape[0]
    a = cs
    b = cs + B
    p = cs - B
    for i in range(2 * H):
        add_row(Zm[i, a:b], Hid[i])                 # r, u: inputs' and hidden parts
    sigmoid_rows(Zm[:2 * H], a, b)
    for i in range(H):
        _candidate(Zm[i, a:b], Zm[2 * H + i, a:b], Em[i, a:b], Hid[2 * H + i])
    tanh_rows(Zm[2 * H:], a, b)                     # n
    for i in range(H):
        _mix(Zm[H + i, a:b], Zm[2 * H + i, a:b], Sm[i, p:a], Sm[i, a:b])


@jit(inline="always")
def forward_tm(Z, S, E, C, Hid, t, b, H, act, j0, j1):
    z = Z[t + 1, b]
    hid = Hid[b]
    r, u, n = z[j0:j1], z[H + j0:H + j1], z[2 * H + j0:2 * H + j1]
    add_row(r, hid[j0:j1])                          # r, u: inputs' and hidden parts
    add_row(u, hid[H + j0:H + j1])
    sigmoid_in_place(r)
    sigmoid_in_place(u)
    _candidate(r, n, E[t + 1, b, j0:j1], hid[2 * H + j0:2 * H + j1])
    tanh_in_place(n)
    _mix(u, n, S[t, b, j0:j1], S[t + 1, b, j0:j1])


@jit(inline="always")
def backward_fm(dH, dZ, dZh, cd, Zm, Sm, Em, Cm, cs, B, X, cx, fp, n, act, total, add):
    H = dH.shape[0]
    d = cd
    e = cd + n
    s = cs
    u = cs + n
    for i in range(H):
        _backward(dH[i, d:e], Zm[i, s:u], Zm[H + i, s:u], Zm[2 * H + i, s:u],
                  Sm[i, s - B:u - B], Em[i, s:u], X[i, cx:cx + n], dZ[i, d:e],
                  dZ[H + i, d:e], dZ[2 * H + i, d:e], dZh[2 * H + i, d:e])
        copy_row(dZh[i, d:e], dZ[i, d:e])
        copy_row(dZh[H + i, d:e], dZ[H + i, d:e])


@jit(inline="always")
def backward_tm(dH, dZ, dZh, Z, S, E, C, X, t, b, B, H, act, j0, j1):
    z = Z[t + 1, b]
    dz = dZ[t * B + b]
    dzh = dZh[t * B + b]
    r, u, n = j0, H + j0, 2 * H + j0
    m = j1 - j0
    _backward(dH[t * B + b, j0:j1], z[r:r + m], z[u:u + m], z[n:n + m], S[t, b, j0:j1],
              E[t + 1, b, j0:j1], X[b, j0:j1], dz[r:r + m], dz[u:u + m], dz[n:n + m],
              dzh[n:n + m])
    copy_row(dzh[r:r + m], dz[r:r + m])
    copy_row(dzh[u:u + m], dz[u:u + m])


@jit(inline="always")
def to_h0(X, dh0, dc0):
    """The direct term u_0 dh_0 completes dL/dh0 (empty dh0: not asked for)."""
    if dh0.size:
        add_rows(dh0, X)
