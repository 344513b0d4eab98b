"""The row copies between batch-first arrays and rows in step order (`_kernels.batch_steps`)
against NumPy's transposes and `directions.permute_steps`, the way `fastbptt.layer` made
these arrays before."""
import numpy as np
import pytest

from fastbptt._kernels.batch_steps import batch_from_steps, steps_from_batch
from fastbptt._kernels.directions import permute_steps, reversal_index

DTYPES = [np.float32, np.float64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("B,T", [(1, 1), (1, 9), (5, 4), (32, 3)])
def test_batch_from_steps_is_the_transpose(dtype, B, T):
    rng = np.random.default_rng(B * 100 + T)
    W, N = 6, 16
    states = rng.standard_normal((T, B, N)).astype(dtype)
    src = states[:, :, :W]                                  # rows N apart, W used
    dst = np.full((B, T, W), np.nan, dtype)
    batch_from_steps(src, dst)
    np.testing.assert_array_equal(dst, src.transpose(1, 0, 2))


def _old_way(src, c0, K, dst, lengths, reverse):
    """G in step order from the masked transpose, then reordered for a reverse direction."""
    B, T = src.shape[:2]
    G = src.transpose(1, 0, 2)[:, :, c0:c0 + K].copy()
    G[~(np.arange(T)[None, :] < lengths[:, None]).T] = 0
    G = G.reshape(T * B, K)
    if reverse:
        idx = np.empty(T * B, np.int64)
        reversal_index(lengths, T, idx)
        permute_steps(G, dst, idx, True, False)
    else:
        dst[:, :K] = G


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("lengths", [[4, 4, 4], [4, 1, 3], [0, 4, 2], [2, 2, 0]])
@pytest.mark.parametrize("c0", [0, 5])
@pytest.mark.parametrize("time_major", [False, True])
def test_steps_from_batch_matches_the_masked_transpose(dtype, reverse, lengths, c0,
                                                       time_major):
    rng = np.random.default_rng(len(lengths) + sum(lengths) + c0)
    B, T, K, N = len(lengths), 4, 5, 8
    lengths = np.array(lengths, np.int64)
    src = rng.standard_normal((B, T, 2 * K)).astype(dtype)
    want = np.full((T * B, N), 7.0, dtype)                    # columns past K: untouched
    got = want.copy()
    _old_way(src, c0, K, want, lengths, reverse)
    if time_major:                                            # the same, (T, B, F)
        steps_from_batch(np.ascontiguousarray(src.transpose(1, 0, 2)), c0, K, got, lengths,
                         reverse, True)
    else:
        steps_from_batch(src, c0, K, got, lengths, reverse)
    np.testing.assert_array_equal(got, want)
    assert np.all(got[:, K:] == 7.0)


def test_steps_from_batch_reads_strided_input():
    """A caller's dh need not be contiguous."""
    rng = np.random.default_rng(3)
    lengths = np.array([3, 1], np.int64)
    big = rng.standard_normal((2, 6, 8))
    src = big[:, ::2, 1:7]                                    # (2, 3, 6), every stride odd
    want, got = np.zeros((6, 6)), np.zeros((6, 6))
    _old_way(np.ascontiguousarray(src), 0, 6, want, lengths, True)
    steps_from_batch(src, 0, 6, got, lengths, True)
    np.testing.assert_array_equal(got, want)
