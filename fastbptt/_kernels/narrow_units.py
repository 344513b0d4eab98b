"""Narrow batches on several threads, each owning a range of the hidden units.

Split by sequences (`narrow.forward_narrow` on slices of the batch), every thread reads
all of W at every step: for an LSTM at H = 1024 that is 16 MB a step from the shared
cache, per thread. Split by units, each thread computes every sequence's gates of its
own units, from its own columns of W^T (forward) or of W (backward), so the threads
together read W once a step, and each keeps the whole batch in its register blocks.
The next step's product reads every unit of this one, so the threads meet after every
step (`sync.meet`).

A thread's units u0 ... u1-1 are whole panels of every gate (`matvec.panels_axpy`):
gate g's columns g H + u0 ... g H + u1 - 1 of W^T's panels, and columns u0 ... u1 - 1
of W's. Every output adds its terms in the same order as on one thread, and the step
math is elementwise, so the results are the same bits. The work before and after the
time loop (initial states, finals, zeroing past each sequence's end) is per sequence,
and each thread does it for its slice of the batch, b0 ... b1-1.
"""
from ._jit import jit
from .blas import transpose_into
from .cells import backward_tm, forward_tm
from .copies import add_row, copy_row, longest
from .inputs import gather_columns
from .matvec import panels_axpy
from .narrow import finish_narrow, start_narrow
from .sync import meet


@jit
def forward_units(cell, WTc, W, act, lengths, h0, c0, Z, S, E, C, Hid, bh, h_final,
                  c_final, ids, U, UT, bias, sync, party, parties, u0, u1, b0, b1):
    """`narrow.forward_narrow` of the whole batch on W^T's panels (WTc; W (G H, H) gives
    the sizes), this thread's part: units u0 ... u1-1 of every step, and the start and
    finish of sequences b0 ... b1-1. Returns False when another party failed (`sync`).

    ids, U, UT, bias: token ids (T B,) whose gates' input part U[:, x_t] + b each step
    gathers, this thread its own units, just before the step's product (as
    `narrow.forward_narrow` does; gathering every step first wrote G4's 26 MB of gates
    out to memory and read them back), from the rows of UT (L, G H), whose columns of
    these units it fills from U first. ids None: Z holds the input part on entry."""
    B = S.shape[1]
    GH, H = W.shape
    G = GH // H
    n = u1 - u0
    if ids is not None:
        for g in range(G):
            c = g * H + u0
            transpose_into(U[c:c + n, 0:U.shape[1]], UT[:, c:c + n])
    start_narrow(h0, c0, S, C, b0, b1)
    if not meet(sync, party, parties, 1):
        return False
    apart = Hid.shape[1] > 0
    for t in range(longest(lengths)):
        target = Hid if apart else Z[t + 1]
        for g in range(G):
            c = g * H + u0
            if ids is not None:
                gather_columns(ids, UT, bias, Z[t + 1], t, 0, B, c, c + n)
            if apart:
                for b in range(B):
                    copy_row(Hid[b, c:c + n], bh[c:c + n])
            panels_axpy(WTc[c * H:(c + n) * H], H, S[t, :, :H], target[:, c:c + n])
        for b in range(B):
            if t < lengths[b]:
                forward_tm(cell, Z, S, E, C, Hid, t, b, H, act, u0, u1)
            else:                   # past its end: kept at zero, so nothing grows there
                S[t + 1, b, u0:u1] = 0
                if C.shape[2] > 0:
                    C[t + 1, b, u0:u1] = 0
        if not meet(sync, party, parties, t + 2):
            return False
    finish_narrow(lengths, Z, S, E, C, h_final, c_final, b0, b1)
    return True


@jit
def backward_units(cell, S, Z, E, C, Wc, W, act, chunk, lengths, dcf, dH, dZ, dZh, X,
                   sync, party, parties, u0, u1, b0, b1):
    """`narrow.backward_narrow`'s steps for the whole batch on W's panels (Wc; W (G H, H)
    gives the sizes), this thread's part: units u0 ... u1-1 of every step (and the
    padding columns of dH in the rows of sequences b0 ... b1-1). The weights' gradients
    follow apart (`narrow.narrow_weight_grads`). Returns False when another party
    failed."""
    T, B, N = S.shape[0] - 1, S.shape[1], S.shape[2]
    GH, H = W.shape
    if N > H:                       # the padding columns
        for t in range(T):
            dH[t * B + b0:t * B + b1, H:] = 0
    n = u1 - u0
    for t in range(T - 1, -1, -1):
        if t + 1 < T and (t + 1) % chunk != 0:
            panels_axpy(Wc[u0 * GH:u1 * GH], GH, dZh[(t + 1) * B:(t + 2) * B, :GH],
                        dH[t * B:(t + 1) * B, u0:u1])
        else:
            X[:, u0:u1] = 0
        for b in range(B):
            if dcf.shape[0] and lengths[b] == t + 1:
                add_row(X[b, u0:u1], dcf[b, u0:u1])
            backward_tm(cell, dH, dZ, dZh, Z, S, E, C, X, t, b, B, H, act, u0, u1)
        if not meet(sync, party, parties, T - t):
            return False
    return True
