"""Between the caller's batch-first (B, T, F) arrays and the engine's rows in step order.

`fastbptt.layer` hands back each step's states batch-first and takes dL/dh batch-first
(or time-major, `steps_from_batch`'s ``time_major``), while a narrow batch keeps them
time-major, row t B + b for step t of sequence b. NumPy copies a transposed view through
its general strided loops; these loops move whole contiguous rows instead (B 32, T 100,
H 128 float32: about a third of the time). Values are moved, never computed, so the
results are the same bits either way.
"""
from ._jit import jit
from .copies import copy_row


@jit
def batch_from_steps(src, dst):
    """dst[b, t, :] = src[t, b, :] for src (T, B, W) and dst (B, T, W), rows contiguous."""
    T, B = src.shape[0], src.shape[1]
    for b in range(B):
        for t in range(T):
            copy_row(dst[b, t], src[t, b])


@jit
def steps_from_batch(src, c0, K, dst, lengths, reverse, time_major=False):
    """dst's rows in step order from batch-first src (B, T, F), or time-major src
    (T, B, F) when ``time_major``, dst (T B, N >= K): dst[s B + b, :K] = src[b, t, c0:c0 + K]
    (src[t, b, ...]) at the real steps s < lengths[b], where t = s, or lengths[b] - 1 - s
    for a reverse direction (`directions.reversal_index`); zeros at padding steps.
    Columns of dst beyond K keep what they held."""
    if time_major:
        T, B = src.shape[0], src.shape[1]
        for s in range(T):
            for b in range(B):
                n = lengths[b]
                row = dst[s * B + b, 0:K]
                if s < n:
                    copy_row(row, src[n - 1 - s if reverse else s, b, c0:c0 + K])
                else:
                    for j in range(K):
                        row[j] = 0
        return
    B, T = src.shape[0], src.shape[1]
    for b in range(B):
        n = lengths[b]
        for s in range(T):
            row = dst[s * B + b, 0:K]
            if s < n:
                copy_row(row, src[b, n - 1 - s if reverse else s, c0:c0 + K])
            else:
                for j in range(K):
                    row[j] = 0
