"""The kernels (`fastbptt.bptt`, `fastbptt.layer.vjp`) against the reference, in float64.

The grid of `models.cases` with every truncation family, on both kernel paths, for
every cell.
"""
from models import IMPLS, cases, compare, params

TOLERANCE = 1e-10


@params(cases(head=False, per_shape=2))
def test_kernels_match_reference(rng, kernel_path, case):
    errors = compare(case, rng, IMPLS["kernels"], IMPLS["reference"])
    assert max(errors.values()) <= TOLERANCE, errors
