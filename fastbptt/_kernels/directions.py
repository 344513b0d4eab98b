"""Steps in reverse order, for a layer's reverse direction (SPEC.md §8).

A reverse direction reads each sequence from its last real step, lengths[b] - 1, down to
0, as `torch.nn.utils.rnn.pack_padded_sequence` does. It runs on the forward kernels
with its inputs reordered: step s of sequence b takes step lengths[b] - 1 - s for
s < lengths[b]; padding steps keep their place (they stay at the end). The reordering
is its own inverse, so one index array serves both ways.
"""
from ._jit import jit


@jit
def reversal_index(lengths, T, out):
    """out (T B,) <- the step order of a reverse direction: out[s B + b] = t B + b with
    t = lengths[b] - 1 - s for s < lengths[b], else t = s."""
    B = lengths.shape[0]
    for b in range(B):
        n = lengths[b]
        for s in range(T):
            t = n - 1 - s if s < n else s
            out[s * B + b] = t * B + b


@jit
def permute_steps(src, dst, idx, time_major, add):
    """dst step j <- src step idx[j] (added to dst's when ``add``), for steps as the
    columns of (K, T B) arrays, or as the rows of (T B, K) arrays when ``time_major``
    (the first K columns of dst's rows; dst may be wider)."""
    n = idx.shape[0]
    if time_major:
        K = src.shape[1]
        for j in range(n):
            s, d = src[idx[j]], dst[j]
            if add:
                for i in range(K):
                    d[i] += s[i]
            else:
                for i in range(K):
                    d[i] = s[i]
    else:
        for i in range(src.shape[0]):
            s, d = src[i], dst[i]
            if add:
                for j in range(n):
                    d[j] += s[idx[j]]
            else:
                for j in range(n):
                    d[j] = s[idx[j]]
