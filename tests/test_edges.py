"""Edge sizes: no steps, no sequences, an empty sequence in a batch, sizes of 1, and a
sequence of 100 000 steps in O(T H) memory."""
import itertools
import tracemalloc

import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from conftest import ACTIVATIONS, LOSSES, TRUNCATIONS, assert_agree, make_problem, \
    relative_error, truncation_id

L, H, C = 5, 4, 3
NAMES = ("U", "W", "V", "b", "c")
DTYPES = [np.float64, np.float32]


def empty_call(dtype, lead, x_ids, y_ids, h0_dtype=None):
    """x, y, h0 of shape ``lead`` = (T,) or (B, T) with a zero somewhere, and params."""
    params = fastbptt.init_params(L, H, C, dtype=dtype, seed=0)
    x = np.zeros(lead, np.int64) if x_ids else np.zeros(lead + (L,), dtype)
    y = np.zeros(lead, np.int64) if y_ids else np.zeros(lead + (C,), dtype)
    h0 = np.random.default_rng(1).normal(size=lead[:-1] + (H,)).astype(h0_dtype or dtype)
    return x, y, params, h0


def assert_nothing_happened(result, params, h0, dtype):
    """Loss 0.0, zero gradients shaped and typed like params, h_final = h0, dh0 = 0."""
    assert result.loss == 0.0 and type(result.loss) is float
    for name, g, p in zip(NAMES, result.grads, params):
        assert g.shape == p.shape and g.dtype == dtype and not g.any(), name
    assert result.h_final.dtype == dtype and result.h_final.shape == h0.shape
    assert np.array_equal(result.h_final, h0.astype(dtype))
    assert result.dh0.dtype == dtype and result.dh0.shape == h0.shape and not result.dh0.any()


LEADS = {"one sequence T=0": (0,), "batch T=0": (3, 0), "B=0": (0, 6), "B=0 T=0": (0, 0)}


@pytest.mark.parametrize("truncation", [(None, 1), (3, 1), (4, 4)], ids=truncation_id)
@pytest.mark.parametrize("x_ids,y_ids", [(True, True), (False, False), (True, False)])
@pytest.mark.parametrize("lead", LEADS.values(), ids=LEADS.keys())
@pytest.mark.parametrize("dtype", DTYPES)
def test_no_steps_or_no_sequences(dtype, lead, x_ids, y_ids, truncation):
    x, y, params, h0 = empty_call(dtype, lead, x_ids, y_ids)
    options = dict(truncate=truncation[0], stride=truncation[1])
    lengths = {} if len(lead) == 1 else {"lengths": np.full(lead[0], lead[1])}
    for impl in (fastbptt, reference):
        for extra in ({}, lengths):
            result = impl.bptt(x, y, params, h0=h0, **options, **extra)
            assert_nothing_happened(result, params, h0, dtype)
    without_h0 = fastbptt.bptt(x, y, params, **options)
    assert_nothing_happened(without_h0, params, np.zeros_like(h0), dtype)
    value, grads = fastbptt.value_and_grad(x, y, params, **options)
    assert value == 0.0 and type(value) is float and not any(g.any() for g in grads)
    assert not any(g.any() for g in fastbptt.grad(x, y, params, **options))
    for loss in LOSSES:
        assert fastbptt.loss(x, y, params, loss=loss, h0=h0) == 0.0
    h, p = fastbptt.forward(x, params, h0=h0)
    assert h.shape == lead + (H,) and p.shape == lead + (C,)
    assert h.dtype == p.dtype == dtype


def test_no_sequences_from_lists():
    """B = 0 written as Python lists: lengths=[] is a batch of no sequences."""
    params = fastbptt.init_params(L, H, C, dtype=np.float64, seed=0)
    x, y = np.zeros((0, 6), np.int64), np.zeros((0, 6), np.int64)
    result = fastbptt.bptt(x, y, params, lengths=[], h0=np.zeros((0, H)))
    assert_nothing_happened(result, params, np.zeros((0, H)), np.float64)


def test_h0_of_another_dtype_comes_back_in_the_params_dtype():
    x, y, params, h0 = empty_call(np.float32, (2, 0), True, True, h0_dtype=np.float64)
    result = fastbptt.bptt(x, y, params, h0=h0)
    assert result.h_final.dtype == np.float32
    assert np.array_equal(result.h_final, h0.astype(np.float32))


@pytest.mark.parametrize("truncation", [(None, 1), (3, 1), (4, 4), (5, 2)], ids=truncation_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_an_empty_sequence_in_a_batch_changes_nothing(rng, dtype, truncation):
    """A length of 0: that sequence adds nothing, keeps h0, gets dh0 = 0."""
    for B in (3, 6):                               # narrow and BLAS batches
        x, y, params, options = make_problem(rng, B=B, T=7, L=L, H=H, C=C, dtype=dtype,
                                             with_h0=True)
        options.update(truncate=truncation[0], stride=truncation[1])
        lengths = np.full(B, 7)
        lengths[1], lengths[-1] = 0, 4
        got = fastbptt.bptt(x, y, params, lengths=lengths, **options)
        assert_agree(got, reference.bptt(x, y, params, lengths=lengths, **options), dtype)
        assert np.array_equal(got.h_final[1], options["h0"][1]) and not got.dh0[1].any()
        keep = np.arange(B) != 1
        rest = fastbptt.bptt(x[keep], y[keep], params, lengths=lengths[keep],
                             **dict(options, h0=options["h0"][keep]))
        assert_agree(got._replace(h_final=got.h_final[keep], dh0=got.dh0[keep]), rest, dtype)
        h, p = fastbptt.forward(x, params, lengths=lengths, h0=options["h0"])
        assert not h[1].any() and not p[1].any()


SIZES = {"H=1": (5, 1, 3), "L=1": (1, 4, 3), "C=1": (5, 4, 1), "all 1": (1, 1, 1)}


@pytest.mark.parametrize("sizes", SIZES.values(), ids=SIZES.keys())
@pytest.mark.parametrize("dtype", DTYPES)
def test_sizes_of_one(rng, dtype, sizes):
    L1, H1, C1 = sizes
    cases = itertools.product(ACTIVATIONS, LOSSES, TRUNCATIONS[:6], [True, False], [1, 5])
    for activation, loss, (truncate, stride), x_ids, B in cases:
        x, y, params, options = make_problem(
            rng, B=B, T=9, L=L1, H=H1, C=C1, dtype=dtype, x_ids=x_ids, y_ids=x_ids,
            with_h0=True, with_lengths=True)
        options.update(truncate=truncate, stride=stride, activation=activation, loss=loss)
        got = fastbptt.bptt(x, y, params, **options)
        assert_agree(got, reference.bptt(x, y, params, **options), dtype)
        if C1 == 1 and loss == "softmax_ce":
            # One class: p = 1, so no gradient whatever the targets, and no loss but the
            # rounding of sum_i y_i log Z - sum_i y_i o_i (the kernels' form of the loss).
            assert not any(g.any() for g in got.grads)
            h = fastbptt.forward(x, params, h0=options["h0"], lengths=options.get("lengths"),
                                 activation=activation).h
            logits = np.abs(h @ params.V.T + (params.c if params.c is not None else 0))
            weights = 1 if x_ids else np.abs(y).max(initial=0)
            bound = 4 * np.finfo(dtype).eps * logits.sum() * weights
            assert abs(got.loss) <= bound, (got.loss, bound)


# A very long sequence ---------------------------------------------------------------------

LONG_T, LONG_H = 100_000, 8


def traced_peak(fn):
    """(result, peak bytes NumPy and Python allocated while fn ran, scratch freed first).

    Numba's kernels allocate nothing here but a few scalars; every array lives in NumPy.
    """
    fastbptt.clear_workspace()
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        fastbptt.clear_workspace()


@pytest.mark.parametrize("truncation", [(10, 1), (10, 10), (64, 1)], ids=truncation_id)
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_long_sequence_runs_in_linear_memory(dtype, truncation):
    """T = 100 000 with a window: finite results, and peak memory a few T x H arrays.

    k = 64 tells O(T H) from O(T k H) apart: the windows' lag-major pass keeps two
    (H, T) buffers, however long the window.
    """
    truncate, stride = truncation
    rng = np.random.default_rng(5)
    params = fastbptt.init_params(8, LONG_H, 8, dtype=dtype, seed=rng)
    x, y = rng.integers(0, 8, LONG_T), rng.integers(-1, 8, LONG_T)
    result, peak = traced_peak(
        lambda: fastbptt.bptt(x, y, params, truncate=truncate, stride=stride))
    unit = LONG_T * LONG_H * np.dtype(dtype).itemsize
    assert peak < 20 * unit, f"peak {peak / unit:.1f} arrays of T x H"
    assert np.isfinite(result.loss) and result.loss > 0
    assert all(np.isfinite(g).all() and g.any() for g in result.grads)
    assert np.isfinite(result.h_final).all()


def test_a_long_stream_in_chunks_is_the_sum_of_its_pieces():
    """Chunked TBPTT over 100 000 steps = pieces of whole chunks with h0 carried along."""
    rng = np.random.default_rng(6)
    params = fastbptt.init_params(8, LONG_H, 8, dtype=np.float64, seed=rng)
    x, y = rng.integers(0, 8, LONG_T), rng.integers(-1, 8, LONG_T)
    whole = fastbptt.bptt(x, y, params, truncate=10, stride=10)
    h, loss, grads = np.zeros(LONG_H), 0.0, [np.zeros_like(p) for p in params]
    for start in range(0, LONG_T, 25_000):
        piece = fastbptt.bptt(x[start:start + 25_000], y[start:start + 25_000], params,
                              truncate=10, stride=10, h0=h)
        h, loss = piece.h_final, loss + piece.loss
        grads = [g + p for g, p in zip(grads, piece.grads)]
    assert abs(loss - whole.loss) <= 1e-10 * whole.loss
    for name, g, w in zip(NAMES, grads, whole.grads):
        assert relative_error(g, w) <= 1e-10, name
    np.testing.assert_allclose(h, whole.h_final, rtol=0, atol=1e-12)
