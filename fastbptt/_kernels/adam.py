"""Adam's update of one parameter array in one pass (`fastbptt.optim.Adam`).

The NumPy form takes eleven passes over the array and its moments; on the default model
of ``fastbptt train`` that is 0.7 ms a step, a twentieth of a step on two workers. This
loop does the same operations in the same order and precision, without contraction into
fused multiply-adds, so its results are NumPy's to the bit.
"""
import math

from ._jit import jit


@jit(fastmath=False)
def adam_update(p, g, m, v, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, scale):
    """For 1-D arrays: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g²;
    p -= scale m / (sqrt(v) + eps); the scalars are of the arrays' dtype."""
    n = p.shape[0]
    if g.shape[0] != n or m.shape[0] != n or v.shape[0] != n:
        raise ValueError("adam_update: p, g, m and v must have the same length")
    for i in range(n):
        gi = g[i]
        mi = m[i] * beta1 + one_minus_beta1 * gi
        vi = v[i] * beta2 + one_minus_beta2 * (gi * gi)
        m[i] = mi
        v[i] = vi
        p[i] -= mi / (math.sqrt(vi) + eps) * scale
