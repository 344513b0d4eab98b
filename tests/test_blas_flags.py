"""Products that raise the FE_INVALID flag on finite data, as OpenBLAS kernels can.

Such a flag comes and goes with the memory earlier calls left (fastbptt._blas_flags), so
the arrays here raise it on every ``@``: a product of one of them first computes
inf - inf (raising the flag, as the kernel's stray work does) and then returns the exact
product. The suite turns warnings into errors, so each test fails if the flag reaches
NumPy's warning, and each checks that the values are those of plain arrays.
"""
import dataclasses

import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from fastbptt.params import Layer, Model
from fastbptt.sampling import _probabilities
from conftest import make_problem


class Flagging(np.ndarray):
    """An array whose products raise the invalid flag and return the exact result."""

    def __matmul__(self, other):
        np.subtract(np.inf, np.inf)
        return np.asarray(self) @ np.asarray(other)

    def __rmatmul__(self, other):
        np.subtract(np.inf, np.inf)
        return np.asarray(other) @ np.asarray(self)


def flagging(v):
    return None if v is None else np.asarray(v).view(Flagging)


def flagging_problem(problem):
    layers = tuple(tuple(Layer(*map(flagging, layer)) for layer in row)
                   for row in problem.model.layers)
    model = Model(layers, flagging(problem.model.V), flagging(problem.model.c))
    return dataclasses.replace(problem, model=model)


def test_the_flag_is_raised_by_these_arrays():
    with pytest.raises(RuntimeWarning, match="invalid value"):
        flagging(np.eye(2)) @ np.ones(2)


def arrays(result):
    """The result's arrays in a fixed order, as plain arrays."""
    out = []
    for v in result:
        if v is None or isinstance(v, float):
            continue
        out += [np.asarray(a) for a in fastbptt.params.leaves(v).values()] \
            if not isinstance(v, np.ndarray) else [np.asarray(v)]
    return out


def assert_same(got, expected):
    got, expected = arrays(got), arrays(expected)
    assert len(got) == len(expected) > 0
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


CELLS = [("elman", {"truncate": 3, "stride": 3}), ("lstm", {}), ("gru", {})]


@pytest.mark.parametrize("cell, truncation", CELLS, ids=[c for c, _ in CELLS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_reference_ignores_the_flag(rng, monkeypatch, cell, truncation, dtype):
    x, y, _, options = make_problem(rng, B=2, T=5, L=5, H=4, C=3, dtype=dtype,
                                    with_lengths=True, with_h0=False)
    params = fastbptt.init_params(5, 4, 3, cell=cell, num_layers=2, bidirectional=cell != "elman",
                                  dtype=dtype, seed=rng)
    options.update(truncation)
    expected = reference.bptt(x, y, params, **options)
    prepare = reference.head.prepare
    monkeypatch.setattr(reference.head, "prepare",
                        lambda *a, **k: flagging_problem(prepare(*a, **k)))
    got = reference.bptt(x, y, params, **options)
    assert got.loss == expected.loss
    assert_same(got, expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_reference_layer_vjp_ignores_the_flag(rng, monkeypatch, dtype):
    x = rng.standard_normal((2, 5, 3)).astype(dtype)
    params = fastbptt.init_params(3, 4, 1, cell="lstm", dtype=dtype, seed=rng)
    layer = params.layers[0][0]
    dh = rng.standard_normal((2, 5, 4)).astype(dtype)
    out, back = reference.layer_vjp(x, layer)
    expected = (out.h, out.h_final, *back(dh))
    prepare = reference.stack.prepare_layer
    monkeypatch.setattr(reference.stack, "prepare_layer",
                        lambda *a, **k: flagging_problem(prepare(*a, **k)))
    out, back = reference.layer_vjp(x, layer)
    assert_same((out.h, out.h_final, *back(dh)), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_forward_probabilities_ignore_the_flag(rng, monkeypatch, dtype):
    x, _, params, options = make_problem(rng, B=3, T=4, dtype=dtype, with_lengths=True)
    options = {k: options[k] for k in ("h0", "lengths") if k in options}
    expected = fastbptt.forward(x, params, **options)
    validate = fastbptt.api._validate

    def flagging_head(*a, **k):
        problem = validate(*a, **k)
        m = problem.model
        return dataclasses.replace(problem, model=m._replace(V=flagging(m.V), c=flagging(m.c)))

    monkeypatch.setattr(fastbptt.api, "_validate", flagging_head)
    assert_same(fastbptt.forward(x, params, **options), expected)


def test_sampling_probabilities_ignore_the_flag(rng):
    V, h, c = rng.standard_normal((5, 4)), rng.standard_normal(4), rng.standard_normal(5)
    np.testing.assert_array_equal(_probabilities(h, flagging(V), c, 0.7),
                                  _probabilities(h, V, c, 0.7))
