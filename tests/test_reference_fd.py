"""The NumPy reference against central finite differences, in float64.

Truncated gradients are checked against differences of the surrogate loss in which
each output's window starts from a frozen state (see fastbptt.gradcheck).
"""
import itertools

import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from conftest import ACTIVATIONS, LOSSES, TRUNCATIONS, make_problem, truncation_id

TOLERANCE = 1e-6


def test_window_starts_are_spec_section_3s():
    """lo(t), written out by hand from SPEC.md §3 (windows of k steps ending at the end of
    each block of s outputs): the finite differences below build their surrogate from the
    same rule, so they cannot see it wrong."""
    def starts(k, s, n):
        return [reference.layer.window_start(t, k, s) for t in range(n)]
    assert starts(5, 2, 8) == [0, 0, 0, 0, 1, 1, 3, 3]
    assert starts(4, 3, 9) == [0, 0, 0, 2, 2, 2, 5, 5, 5]
    assert starts(3, 1, 6) == [0, 0, 0, 1, 2, 3]
    assert starts(4, 4, 9) == [0, 0, 0, 0, 4, 4, 4, 4, 8]
    assert starts(None, 1, 4) == [0, 0, 0, 0]


@pytest.mark.parametrize("truncation", TRUNCATIONS, ids=truncation_id)
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_reference_matches_finite_differences(rng, activation, loss, truncation):
    truncate, stride = truncation
    # every combination of biases x h0 x lengths for this (activation, loss, truncation)
    for bias, with_h0, with_lengths in itertools.product([True, False], repeat=3):
        x, y, params, options = make_problem(rng, B=2, T=7, bias=bias, with_h0=with_h0,
                                             with_lengths=with_lengths)
        errors = fastbptt.check_grad(x, y, params, impl=reference.bptt, truncate=truncate,
                                     stride=stride, activation=activation, loss=loss,
                                     **options)
        assert set(errors) == ({"U", "W", "V"} | ({"b", "c"} if bias else set())
                               | ({"h0"} if with_h0 else set()))
        assert all(e <= TOLERANCE for e in errors.values()), (errors, bias, with_h0,
                                                              with_lengths)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("x_ids,y_ids", [(False, True), (True, False), (False, False)])
def test_dense_inputs_and_targets_match_finite_differences(rng, loss, x_ids, y_ids):
    for truncate, stride in [(None, 1), (3, 1), (3, 3)]:
        x, y, params, options = make_problem(rng, B=2, T=6, x_ids=x_ids, y_ids=y_ids,
                                             with_h0=True, with_lengths=True)
        errors = fastbptt.check_grad(x, y, params, impl=reference.bptt, truncate=truncate,
                                     stride=stride, loss=loss, **options)
        assert all(e <= TOLERANCE for e in errors.values()), errors


def test_single_sequence_matches_finite_differences(rng):
    x, y, params, options = make_problem(rng, T=9, with_h0=True, batch=False)
    errors = fastbptt.check_grad(x, y, params, impl=reference.bptt, truncate=4, **options)
    assert all(e <= TOLERANCE for e in errors.values()), errors


def test_kernels_match_finite_differences(rng):
    """check_grad's default checks the kernels themselves."""
    for truncation in TRUNCATIONS:
        truncate, stride = truncation
        x, y, params, options = make_problem(rng, B=2, T=7, with_h0=True, with_lengths=True)
        errors = fastbptt.check_grad(x, y, params, truncate=truncate, stride=stride,
                                     **options)
        assert all(e <= TOLERANCE for e in errors.values()), (truncation, errors)


def test_check_grad_detects_a_wrong_gradient(rng):
    """A gradient missing the derivative at the output's own step (SPEC.md §4) fails."""
    x, y, params, options = make_problem(rng, B=1, T=5)

    def broken(*args, **kwargs):
        result = reference.bptt(*args, **kwargs)
        grads = result.grads._replace(W=result.grads.W * 1.001)
        return result._replace(grads=grads)

    errors = fastbptt.check_grad(x, y, params, impl=broken)
    assert errors["W"] > 1e-4
    assert errors["U"] <= TOLERANCE


def test_truncated_gradient_is_not_the_full_gradient(rng):
    """The surrogate matters: the truncated gradient differs from differences of L."""
    x, y, params, _ = make_problem(rng, B=1, T=8, no_loss=False)
    full = reference.grad(x, y, params)
    cut = reference.grad(x, y, params, truncate=2)
    assert np.abs(full.W - cut.W).max() > 1e-3 * np.abs(full.W).max()
    assert np.array_equal(full.V, cut.V)
