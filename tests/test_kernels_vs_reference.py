"""The Numba kernels against the NumPy reference over a grid of every option.

Tolerances are relative to the largest entry of each reference gradient: 1e-10 in
float64, 1e-4 in float32.
"""
import itertools

import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from conftest import ACTIVATIONS, LOSSES, TRUNCATIONS, assert_agree, make_problem, truncation_id

# bias, x as ids, y as ids, h0 given, lengths given
LAYOUTS = list(itertools.product([True, False], repeat=5))


@pytest.mark.parametrize("truncation", TRUNCATIONS, ids=truncation_id)
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_kernels_match_reference(rng, kernel_path, activation, loss, truncation):
    truncate, stride = truncation
    cases = itertools.product([np.float64, np.float32], [1, 3], [0, 1, 2, 17])
    for n, (dtype, B, T) in enumerate(cases):
        # the 4 dtype-and-B cases of each T take the 4 (h0, lengths) pairs, so that at
        # T = 17, where truncations cut, every truncation meets each pair; the rest turns
        # with the truncation
        i = TRUNCATIONS.index(truncation)
        bias, x_ids, y_ids, with_h0, with_lengths = LAYOUTS[(n // 4 + 4 * (n % 4) + 7 * i)
                                                            % len(LAYOUTS)]
        x, y, params, options = make_problem(
            rng, B=B, T=T, H=7, C=3, dtype=dtype, bias=bias, x_ids=x_ids, y_ids=y_ids,
            with_h0=with_h0, with_lengths=with_lengths)
        options.update(truncate=truncate, stride=stride, activation=activation, loss=loss)
        assert_agree(fastbptt.bptt(x, y, params, **options),
                     reference.bptt(x, y, params, **options), dtype)


@pytest.mark.parametrize("layout", LAYOUTS,
                         ids=lambda v: "-".join(str(int(f)) for f in v))
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_layout_matches_reference(rng, kernel_path, dtype, layout):
    bias, x_ids, y_ids, with_h0, with_lengths = layout
    for truncation in [(None, 1), (3, 1), (4, 4), (5, 2)]:
        for batch in (True, False):
            x, y, params, options = make_problem(
                rng, B=3, T=17, H=5, C=3, dtype=dtype, bias=bias, x_ids=x_ids,
                y_ids=y_ids, with_h0=with_h0, with_lengths=with_lengths, batch=batch)
            options.update(truncate=truncation[0], stride=truncation[1])
            assert_agree(fastbptt.bptt(x, y, params, **options),
                         reference.bptt(x, y, params, **options), dtype)


@pytest.mark.parametrize("truncate,stride", [(k, s) for k in (1, 2, 5, 9) for s in range(1, k + 1)])
def test_every_stride_matches_reference(rng, kernel_path, truncate, stride):
    x, y, params, options = make_problem(rng, B=3, T=23, H=9, C=5, with_h0=True,
                                         with_lengths=True)
    options.update(truncate=truncate, stride=stride)
    assert_agree(fastbptt.bptt(x, y, params, **options),
                 reference.bptt(x, y, params, **options), np.float64)


def test_window_longer_than_sequence_is_full_bptt(rng):
    x, y, params, options = make_problem(rng, B=3, T=12, with_h0=True)
    full = fastbptt.bptt(x, y, params, **options)
    for truncate, stride in [(12, 1), (100, 1), (12, 12), (100, 100)]:
        cut = fastbptt.bptt(x, y, params, truncate=truncate, stride=stride, **options)
        assert_agree(cut, full, np.float64)


def _one_row_far_apart(a):
    """``a`` (one row) as a view whose row stride is beyond the BLAS's 32-bit integers:
    C-contiguous to NumPy, the same numbers."""
    return np.repeat(a, 5, axis=0)[::10**10]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_one_row_weights_with_any_row_stride(rng, kernel_path, dtype):
    """A one-row V (C = 1), or U and W (H = 1), reached the BLAS with its row stride as
    the leading dimension, which wrapped: the BLAS refused the product, wrote nothing,
    and the loss and gradients came from whatever the workspace held."""
    x, y, params, options = make_problem(rng, B=3, T=6, H=4, C=1, dtype=dtype, x_ids=True,
                                         y_ids=False)
    want = reference.bptt(x, y, params, **options)
    far = params._replace(V=_one_row_far_apart(params.V))
    for _ in range(2):                         # the second call reuses the workspace
        assert_agree(fastbptt.bptt(x, y, far, **options), want, dtype)
    x, y, params, options = make_problem(rng, B=3, T=6, H=1, C=3, dtype=dtype, x_ids=False,
                                         y_ids=True)
    want = reference.bptt(x, y, params, **options)
    far = params._replace(U=_one_row_far_apart(params.U), W=_one_row_far_apart(params.W))
    for _ in range(2):
        assert_agree(fastbptt.bptt(x, y, far, **options), want, dtype)
    kept = {k: options[k] for k in options if k in ("h0", "lengths")}
    out, back = fastbptt.layer.vjp(x, fastbptt.Layer(far.U, far.W, far.b), **kept)
    plain_out, plain_back = fastbptt.layer.vjp(
        x, fastbptt.Layer(params.U, params.W, params.b), **kept)
    dh = rng.standard_normal(out.h.shape).astype(dtype)
    got, expected = back(dh), plain_back(dh)
    assert np.array_equal(out.h, plain_out.h) and np.all(np.isfinite(out.h))
    for name in ("dx", "dh0"):
        assert np.array_equal(getattr(got, name), getattr(expected, name)), name
    for g, e in zip(got.grads, expected.grads):
        assert (g is None and e is None) or np.array_equal(g, e)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("cell", ["elman", "gru", "lstm"])
def test_a_column_of_u_no_token_reads_is_not_in_the_reference(cell, bad):
    """Unchecked (check_finite=False), a NaN or inf in U's column for an id that no step
    has stays out of every result, in the reference as in the kernels: a token's input is
    its column of U, not the product with a one-hot vector, whose zeros times that column
    gave NaN everywhere."""
    model = fastbptt.init_params(5, 4, 5, cell=cell, num_layers=2, dtype=np.float64, seed=0)
    model.layers[0][0].U[:, 3] = bad
    x, y = np.array([[0, 1, 2, 4, 1], [4, 4, 0, 2, 2]]), np.array([[1, 2, 0, 4, 4], [0] * 5])
    got = fastbptt.bptt(x, y, model, check_finite=False)
    want = reference.bptt(x, y, model, check_finite=False)
    assert np.isfinite(want.loss) and want.loss == pytest.approx(got.loss, rel=1e-12)
    for name, a in fastbptt.params.leaves(want.grads).items():
        b = fastbptt.params.leaves(got.grads)[name]
        assert np.isfinite(a).all(), name
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12 * np.abs(a).max(), err_msg=name)
    out, back = reference.layer_vjp(x, fastbptt.Model(model.layers), check_finite=False)
    grads = back(np.ones_like(out.h)).grads
    assert np.isfinite(out.h).all()
    assert all(np.isfinite(a).all() for a in fastbptt.params.leaves(grads).values())
