"""Random sizes for the model grid, against the reference (hypothesis, profile "ci" of
conftest.py: derandomized).

The grids of `test_models_kernels` run every cell, stack, direction, truncation family
and flag of `models.Case` at one size: H = 2, less than one vector register, and B = 3
or 9. Here each example draws a case of that grid and its sizes too: H up to 40 (in
float64, up to 10 vector registers of 4 lanes, or 5 of 8 with AVX-512: whole panels and
a narrower last one), B up to 40 (one sequence, the groups of 2 or 4 sequences of
`matvec.panels_axpy` and what is left of them), T, L and C, on both kernel paths.
`bptt` and the layer VJP (with random upstream gradients) agree with the reference in
float64.
"""
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from conftest import use_kernel_path
from models import IMPLS, cases, compare

TOLERANCE = 1e-10
GRID = cases(head=False)


@pytest.mark.parametrize("path", ["narrow", "blas"])
@settings(max_examples=40)
@given(data=st.data())
def test_models_at_random_sizes_match_reference(path, data):
    case = data.draw(st.sampled_from(GRID), label="case")
    sizes = dict(B=data.draw(st.integers(1, 40), label="B"),
                 T=data.draw(st.integers(2, 7), label="T"),
                 L=data.draw(st.integers(1, 9), label="L"),
                 H=data.draw(st.integers(1, 40), label="H"),
                 C=data.draw(st.integers(2, 7), label="C"))
    note(case.id)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    with pytest.MonkeyPatch.context() as patch:
        use_kernel_path(patch, path)
        errors = compare(case, rng, IMPLS["kernels"], IMPLS["reference"], **sizes)
    assert all(e <= TOLERANCE for e in errors.values()), errors
