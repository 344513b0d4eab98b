"""The output layer and loss: logits, softmax or squared error, and dL/do, all steps at once."""
import numpy as np

from ._jit import jit

SOFTMAX_CE, MSE = 0, 1


@jit
def output_errors(h, VT, c, loss_kind, y_ids, y_dense, ids, lengths, err):
    """Return the summed loss and write e_t = dL/do_t into err (T, B, C).

    h (T, B, H) are the states h_0 ... h_{T-1}; VT (H, C) = V.T; c (C,) (zeros for no bias).
    Targets are y_ids (T, B) with -1 = no loss, or y_dense (T, B, C); ``ids`` says which.
    Rows at padding steps (t >= lengths[b]) get zero error and no loss.
    The loss is accumulated in float64 whatever the compute dtype.
    """
    T, B, H = h.shape
    C = err.shape[2]
    np.dot(h.reshape(T * B, H), VT, err.reshape(T * B, C))
    total = 0.0
    for t in range(T):
        for b in range(B):
            e = err[t, b]
            target = -1
            if ids:
                target = y_ids[t, b]
            if t >= lengths[b] or (ids and target < 0):
                e[:] = 0.0
                continue
            for i in range(C):
                e[i] += c[i]
            if loss_kind == MSE:
                sq = 0.0
                for i in range(C):
                    if ids:
                        if i == target:
                            e[i] -= 1.0
                    else:
                        e[i] -= y_dense[t, b, i]
                    sq += e[i] * e[i]
                total += 0.5 * sq
                continue
            # softmax_ce through a stable log-sum-exp
            m = e[0]
            for i in range(1, C):
                m = max(m, e[i])
            s = 0.0
            for i in range(C):
                s += np.exp(e[i] - m)
            log_z = m + np.log(s)
            if ids:
                total += log_z - e[target]
                for i in range(C):
                    e[i] = np.exp(e[i] - log_z)
                e[target] -= 1.0
            else:
                w = 0.0
                dot = 0.0
                for i in range(C):
                    w += y_dense[t, b, i]
                    dot += y_dense[t, b, i] * (e[i] - log_z)
                total -= dot
                for i in range(C):
                    e[i] = np.exp(e[i] - log_z) * w - y_dense[t, b, i]
    return total
