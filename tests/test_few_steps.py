"""Calls of one or two steps with a large W take a BLAS product per step on W itself
(`fastbptt._stack.FEW_STEPS`), reading W^T as the view W.T (`_kernels.blas.gemm` takes
a view whose columns are contiguous): the narrow kernels' transposed copy of W would
cost more than the steps. Which calls take it, and their results against the reference
and against the narrow kernels on the same data, in float64."""
import dataclasses
import math

import numpy as np
import pytest
from numba import njit

import fastbptt
from fastbptt import _stack
from fastbptt._inputs import prepare_layer
from fastbptt._kernels.blas import gemm, scratch
from fastbptt.params import CELLS
from models import (BACK_FIELDS, BPTT_FIELDS, IMPLS, OUT_FIELDS, cases, compare,
                    disagreement, params)

TOLERANCE = 1e-10


def smallest_width(cell, T, dtype):
    """The least H whose W (G H, H) has FEW_STEPS[T] bytes or more."""
    return math.ceil(math.sqrt(_stack.FEW_STEPS[T] / (CELLS[cell] * np.dtype(dtype).itemsize)))


def narrow(cell, H, B, T, dtype):
    layers = fastbptt.init_params(5, H, 3, cell=cell, num_layers=2, dtype=dtype,
                                  seed=0).layers
    x = np.zeros((B, T), np.int64)
    return _stack.make_plan(prepare_layer(x, fastbptt.Model(layers[:1]))).narrow


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("T", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_which_calls_take_the_BLAS_products(cell, T, dtype):
    H = smallest_width(cell, T, dtype)
    assert not narrow(cell, H, 1, T, dtype)
    assert not narrow(cell, H, 32, T, dtype)
    assert narrow(cell, H - 1, 1, T, dtype)          # W just below FEW_STEPS[T] bytes
    assert narrow(cell, H, 1, 3, dtype)              # three steps: the narrow kernels


@njit          # (not cached: a cache here would not see gemm's file change)
def _product(a, b, c, trans_a):
    gemm(a, b, c, 1.0, 0.0, trans_a, False, scratch(c))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(5, 3), (1, 4), (4, 1), (1, 1), (64, 48)])
@pytest.mark.parametrize("trans_a", [False, True])
def test_gemm_reads_a_transposed_view(rng, dtype, shape, trans_a):
    """a as a view whose columns are contiguous (cut from M.T, M row-major): the product
    of a contiguous copy of it and NumPy's, to rounding (the BLAS sums in another order
    when it reads the operand transposed); every entry of c written."""
    M = rng.standard_normal((shape[1] + 3, shape[0] + 2)).astype(dtype)
    a = M[1:1 + shape[1], 2:].T                       # columns contiguous, rows not
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    b = rng.standard_normal((k, 6)).astype(dtype)
    got, want = np.full((m, 6), np.nan, dtype), np.full((m, 6), np.nan, dtype)
    _product(a, b, got, trans_a)
    _product(np.ascontiguousarray(a), b, want, trans_a)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(got, (a.T if trans_a else a) @ b, rtol=tol, atol=tol)


@pytest.fixture
def few_steps(monkeypatch):
    """Every call of one or two steps takes the BLAS products, whatever W's size."""
    monkeypatch.setattr(_stack, "FEW_STEPS", {1: 0, 2: 0})


@params(cases(head=False))
@pytest.mark.parametrize("T", [1, 2])
def test_few_steps_match_reference(rng, few_steps, case, T):
    """The model grid; its ragged batches (lengths 1 to T - 1, one T, one 0) need two
    steps."""
    if case.ragged and T == 1:
        case = dataclasses.replace(case, ragged=False)
    errors = compare(case, rng, IMPLS["kernels"], IMPLS["reference"], B=5, T=T)
    assert all(e <= TOLERANCE for e in errors.values()), errors


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("T", [1, 2])
def test_a_large_W_agrees_with_the_narrow_kernels(rng, monkeypatch, cell, T):
    """At the sizes that take the BLAS products of themselves: two layers, both
    directions, ragged, h0 (c0) given, and the layer VJP with random upstream gradients;
    the same call on the narrow kernels (FEW_STEPS emptied) agrees."""
    H, B = smallest_width(cell, T, np.float64), 3
    model = fastbptt.init_params(7, H, 5, cell=cell, num_layers=2, bidirectional=True,
                                 dtype=np.float64, seed=rng)
    x, y = rng.integers(0, 7, (B, T)), rng.integers(0, 5, (B, T))
    options = dict(lengths=np.array([T, T - 1, 1]), h0=rng.standard_normal((4, B, H)))
    if cell == "lstm":
        options["c0"] = rng.standard_normal((4, B, H))
    dh = rng.standard_normal((B, T, 2 * H))
    dh[np.arange(T)[None, :] >= options["lengths"][:, None]] = 0

    def run():
        result = fastbptt.bptt(x, y, model, **options)
        out, back = fastbptt.layer.vjp(x, fastbptt.Model(model.layers), **options)
        return result, out, back(dh)

    assert not narrow(cell, H, B, T, np.float64)
    few = run()
    monkeypatch.setattr(_stack, "FEW_STEPS", {})
    assert narrow(cell, H, B, T, np.float64)
    many = run()
    errors = disagreement(few[0], many[0], BPTT_FIELDS)
    errors.update(disagreement(few[1], many[1], OUT_FIELDS))
    errors.update({"back " + k: v for k, v in
                   disagreement(few[2], many[2], BACK_FIELDS).items()})
    assert all(e <= TOLERANCE for e in errors.values()), errors
