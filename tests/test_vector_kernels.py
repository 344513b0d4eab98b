"""Kernels written as explicit vector code, and the validation scans.

- `rows_axpy`, the register-blocked step of narrow batches: its blocks cover 16 (with
  AVX-512), 8, 4, 2 and 1 vector registers for groups of 1 to 4 sequences, walked
  forward or backward; the shapes here reach every combination, and the end-to-end cases
  run hidden sizes that need several blocks and padding through the narrow forward and
  backward paths.
- `panels_axpy` on `panel_columns`' panels, the step of narrow batches of 4 sequences or
  more: a blocked product (KC rows at a time for every group of 4 sequences, 2 without
  AVX-512: `simd.PANEL_GROUP`), the last 1 to 3 sequences in groups of 2 and 1, a
  narrower last panel (3, 2 or 1 registers of output), K beyond and below KC; every
  sequence's outputs the same bits whatever group it falls in; and on panels larger than
  `PREFETCH_BYTES`, where the groups prefetch the next chunk of rows as they go.
- `transpose_into`, whose full tiles go through registers.
- `all_finite` and `id_range`, which validation runs before falling back to NumPy.
"""
import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from fastbptt._kernels.blas import TRANSPOSE_BLOCKED, TRANSPOSE_ROWS, transpose_into
from fastbptt._kernels.checks import all_finite, id_range
from fastbptt._kernels.matvec import (KC, PANEL_BYTES, PREFETCH_BYTES, PREFETCH_GROUPS,
                                     VECTOR_BYTES, padded, paneled, panel_columns,
                                     panels_axpy, rows_axpy)
from conftest import assert_agree, make_problem

DTYPES = [np.float32, np.float64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_padded_width_is_whole_registers(dtype):
    lanes = VECTOR_BYTES // np.dtype(dtype).itemsize
    assert [padded(n, dtype) for n in (1, lanes, lanes + 1)] == [lanes, lanes, 2 * lanes]


def check_rows_axpy(rng, dtype, S, K, N, reverse, gap=0):
    """rows_axpy against NumPy for S sequences whose rows lie ``gap`` entries apart."""
    R = rng.standard_normal((K, N)).astype(dtype)
    x = rng.standard_normal((S, K + gap)).astype(dtype)[:, :K]
    out_all = rng.standard_normal((S, N + gap)).astype(dtype)
    out = out_all[:, :N]
    before = out_all.copy()
    expected = out.astype(np.float64) + x.astype(np.float64) @ R.astype(np.float64)
    rows_axpy(R, x, out, reverse)
    scale = np.abs(R).sum(axis=0).max() * np.abs(x).max() + 1
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(out, expected, rtol=0, atol=tol * scale,
                               err_msg=f"S={S} K={K} N={N}")
    np.testing.assert_array_equal(out_all[:, N:], before[:, N:])   # the gaps untouched


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reverse", [False, True])
def test_rows_axpy_matches_numpy(rng, dtype, reverse):
    lanes = VECTOR_BYTES // np.dtype(dtype).itemsize
    # 1 ... 40 registers: every mix of 16-, 8-, 4-, 2- and 1-register blocks
    for vectors in range(1, 41):
        N = vectors * lanes
        for K in (1, 2, 3, N - 5 if N > 5 else 4):
            check_rows_axpy(rng, dtype, 1, K, N, reverse)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("S", [2, 3, 4, 5, 6, 7, 9])
def test_rows_axpy_matches_numpy_for_several_sequences(rng, dtype, reverse, S):
    """Groups of 4, then one of the 1 to 3 left, each with its blocks of 16, 8 or 4
    registers."""
    lanes = VECTOR_BYTES // np.dtype(dtype).itemsize
    for vectors in (1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 23):
        N = vectors * lanes
        for K in (1, 4, N - 3 if N > 3 else 2):
            check_rows_axpy(rng, dtype, S, K, N, reverse, gap=3)


def test_rows_axpy_with_no_rows_leaves_out_alone(rng):
    out = rng.standard_normal((2, 16)).astype(np.float32)
    before = out.copy()
    rows_axpy(np.empty((0, 16), np.float32), np.empty((2, 0), np.float32), out, True)
    rows_axpy(np.zeros((4, 16), np.float32), np.empty((0, 4), np.float32), out[:0], True)
    np.testing.assert_array_equal(out, before)


@pytest.mark.parametrize("R_shape,x_shape,out_shape", [
    ((4, 15), (1, 4), (1, 15)),       # width not a whole number of registers
    ((4, 16), (1, 3), (1, 16)),       # x shorter than R's rows
    ((4, 16), (1, 4), (1, 32)),       # out wider than R
    ((4, 16), (2, 4), (1, 16)),       # more sequences in x than in out
])
def test_rows_axpy_refuses_shapes_it_would_overrun(R_shape, x_shape, out_shape):
    with pytest.raises(ValueError, match="rows_axpy"):
        rows_axpy(np.zeros(R_shape, np.float32), np.zeros(x_shape, np.float32),
                  np.zeros(out_shape, np.float32), False)


def test_rows_axpy_refuses_strided_rows():
    R = np.zeros((4, 32), np.float32)
    with pytest.raises(ValueError, match="rows_axpy"):
        rows_axpy(R[:, ::2], np.zeros((1, 4), np.float32), np.zeros((1, 16), np.float32),
                  False)
    with pytest.raises(ValueError, match="rows_axpy"):
        rows_axpy(R[:, :16].copy(), np.zeros((1, 8), np.float32)[:, ::2],
                  np.zeros((1, 16), np.float32), False)


@pytest.mark.parametrize("dtype", DTYPES)
def test_panel_columns_cuts_and_pads(rng, dtype):
    pw = PANEL_BYTES // np.dtype(dtype).itemsize
    K, n, N = 5, 2 * pw + 3, padded(2 * pw + 3, dtype)
    P = paneled(N, dtype)
    assert P == 3 * pw
    R = rng.standard_normal((K, n)).astype(dtype)
    Rc = np.full(K * P, np.nan, dtype)
    panel_columns(R, Rc, N)
    full = np.zeros((K, P), dtype)
    full[:, :n] = R
    for c0 in range(0, P, pw):
        np.testing.assert_array_equal(Rc[c0 * K:(c0 + pw) * K].reshape(K, pw),
                                      full[:, c0:c0 + pw])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("S", [1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12, 13, 32])
def test_panels_axpy_matches_numpy(rng, dtype, S):
    lanes = VECTOR_BYTES // np.dtype(dtype).itemsize
    for vectors in (1, 2, 3, 4, 5, 7, 8, 11):
        N = vectors * lanes
        for K in (1, 3, KC - 1, KC, KC + 1, 2 * KC + 5):
            R = rng.standard_normal((K, N)).astype(dtype)
            Rc = np.empty(K * paneled(N, dtype), dtype)
            panel_columns(R, Rc, N)
            x = rng.standard_normal((S, K + 2)).astype(dtype)[:, :K]
            out_all = rng.standard_normal((S, N + 3)).astype(dtype)
            out, before = out_all[:, :N], out_all.copy()
            expected = out.astype(np.float64) + x.astype(np.float64) @ R.astype(np.float64)
            alone = [before[s:s + 1, :N].copy() for s in range(S)]
            panels_axpy(Rc, K, x, out)
            for s in range(S):          # one sequence alone: the same bits as in the batch
                panels_axpy(Rc, K, x[s:s + 1], alone[s])
                np.testing.assert_array_equal(alone[s][0], out[s])
            scale = np.abs(R).sum(axis=0).max() * np.abs(x).max() + 1
            tol = 1e-6 if dtype == np.float32 else 1e-14
            np.testing.assert_allclose(out, expected, rtol=0, atol=tol * scale,
                                       err_msg=f"S={S} K={K} N={N}")
            np.testing.assert_array_equal(out_all[:, N:], before[:, N:])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("S", [4 * PREFETCH_GROUPS, 4 * PREFETCH_GROUPS + 3, 64])
def test_panels_axpy_prefetching_matches_numpy(rng, dtype, S):
    """Panels larger than PREFETCH_BYTES, enough sequences to prefetch: the same sums,
    and every sequence the same bits as alone (one sequence never prefetches)."""
    size = np.dtype(dtype).itemsize
    N = 63 * (VECTOR_BYTES // size)                 # 15 whole panels and one of 3 registers
    K = PREFETCH_BYTES // (paneled(N, dtype) * size) + KC // 3
    assert K * paneled(N, dtype) * size > PREFETCH_BYTES and K % KC
    R = rng.standard_normal((K, N)).astype(dtype)
    Rc = np.empty(K * paneled(N, dtype), dtype)
    panel_columns(R, Rc, N)
    x = rng.standard_normal((S, K)).astype(dtype)
    out = rng.standard_normal((S, N)).astype(dtype)
    before = out.copy()
    expected = out.astype(np.float64) + x.astype(np.float64) @ R.astype(np.float64)
    panels_axpy(Rc, K, x, out)
    scale = np.abs(R).sum(axis=0).max() * np.abs(x).max() + 1
    tol = 1e-6 if dtype == np.float32 else 1e-14
    np.testing.assert_allclose(out, expected, rtol=0, atol=tol * scale)
    for s in (0, S // 2, S - 1):
        alone = before[s:s + 1].copy()
        panels_axpy(Rc, K, x[s:s + 1], alone)
        np.testing.assert_array_equal(alone[0], out[s])


@pytest.mark.parametrize("bad", ["panels", "x", "out"])
def test_panels_axpy_refuses_shapes_it_would_overrun(bad):
    K, N, S = 4, 16, 8
    Rc = np.zeros(K * paneled(N, np.float32) - (bad == "panels"), np.float32)
    x = np.zeros((S, K + (bad == "x")), np.float32)
    out = np.zeros((S - (bad == "out"), N), np.float32)
    with pytest.raises(ValueError, match="panels_axpy"):
        panels_axpy(Rc, K, x, out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("H", [16, 33, 128, 300])
@pytest.mark.parametrize("B", [1, 2, 3, 5, 9])
@pytest.mark.parametrize("truncation", [(None, 1), (6, 6)], ids=["full", "chunks6"])
def test_narrow_paths_match_reference_at_larger_sizes(rng, dtype, H, B, truncation):
    """Several blocks, padding, and enough steps for both walking directions to matter."""
    x, y, params, options = make_problem(rng, B=B, T=31, L=11, H=H, C=7, dtype=dtype,
                                          with_h0=True, with_lengths=True, scale=0.5)
    options.update(truncate=truncation[0], stride=truncation[1])
    assert_agree(fastbptt.bptt(x, y, params, **options),
                 reference.bptt(x, y, params, **options), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (7, 5), (16, 16), (8, 8), (33, 64), (128, 101),
                                   (100, 128), (17, 40), (300, 70), (2 * TRANSPOSE_ROWS, 48),
                                   "blocked"])
def test_transpose_into_matches_numpy(rng, dtype, shape):
    if shape == "blocked":      # past TRANSPOSE_BLOCKED, neither side a whole number of tiles
        entries = TRANSPOSE_BLOCKED[np.dtype(dtype).itemsize // 8] // np.dtype(dtype).itemsize
        shape = (2 * TRANSPOSE_ROWS + 3, entries // (2 * TRANSPOSE_ROWS) + 45)
    rows, cols = shape
    a = rng.standard_normal(shape).astype(dtype)
    out = np.zeros((cols, rows), dtype)
    transpose_into(a, out)
    np.testing.assert_array_equal(out, a.T)
    # views: rows padded on both sides (the vector tiles), and strided rows (entry by entry)
    wide = np.zeros((rows, cols + 7), dtype)
    wide[:, 3:3 + cols] = a
    padded_out = np.full((cols, rows + 5), -1, dtype)
    transpose_into(wide[:, 3:3 + cols], padded_out[:, 1:1 + rows])
    np.testing.assert_array_equal(padded_out[:, 1:1 + rows], a.T)
    assert (padded_out[:, 0] == -1).all() and (padded_out[:, 1 + rows:] == -1).all()
    strided = np.zeros((cols, 2 * rows), dtype)
    transpose_into(a, strided[:, ::2])
    np.testing.assert_array_equal(strided[:, ::2], a.T)
    assert not strided[:, 1::2].any()


def test_transpose_into_refuses_a_mismatched_output():
    with pytest.raises(ValueError, match="transpose_into"):
        transpose_into(np.zeros((16, 32), np.float32), np.zeros((16, 32), np.float32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_finite_finds_every_kind_of_non_finite_anywhere(rng, dtype):
    a = (rng.uniform(-1, 1, 1000) * (np.finfo(dtype).max / 2)).astype(dtype)   # huge, finite
    assert all_finite(a)
    for bad in (np.nan, np.inf, -np.inf):
        for where in (0, 517, 999):
            b = a.copy()
            b[where] = bad
            assert not all_finite(b), (bad, where)
    assert all_finite(np.empty(0, dtype))


def test_id_range_is_min_and_max(rng):
    ids = rng.integers(-5, 70, size=333)
    assert id_range(ids) == (ids.min(), ids.max())
    assert id_range(np.array([4])) == (4, 4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_aligned_and_unaligned_W_give_identical_results(rng, dtype):
    """The narrow sweep reads an aligned W in place and copies an unaligned one."""
    x, y, params, options = make_problem(rng, B=1, T=20, L=9, H=32, C=5, dtype=dtype,
                                         with_h0=True)
    size = np.dtype(dtype).itemsize
    results = []
    for offset in (0, size):              # bytes past a 64-byte boundary
        raw = np.zeros(params.W.nbytes + 128, np.uint8)
        start = -raw.ctypes.data % 64 + offset
        W = raw[start:start + params.W.nbytes].view(dtype).reshape(params.W.shape)
        W[:] = params.W
        assert W.ctypes.data % 64 == offset
        results.append(fastbptt.bptt(x, y, params._replace(W=W), **options))
    for a, b in zip(results[0].grads + (results[0].dh0,), results[1].grads + (results[1].dh0,)):
        if a is not None:
            np.testing.assert_array_equal(a, b)
    assert_agree(results[0], reference.bptt(x, y, params, **options), dtype)
