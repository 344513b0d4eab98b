"""The kernels (`fastbptt.bptt`, `fastbptt.layer.vjp`) against the reference, in float64.

The grid of `models.cases` with every truncation family, on both kernel paths, for
every cell; and on the narrow path with 9 sequences, whose steps walk W in panels
(`_kernels.matvec.panels_axpy`): two groups of 4 and one of 1.
"""
from models import IMPLS, cases, compare, params

TOLERANCE = 1e-10


@params(cases(head=False, per_shape=2))
def test_kernels_match_reference(rng, kernel_path, case):
    errors = compare(case, rng, IMPLS["kernels"], IMPLS["reference"])
    assert max(errors.values()) <= TOLERANCE, errors


@params(cases(head=False))
def test_kernels_match_reference_with_panels(rng, monkeypatch, case):
    from fastbptt import _stack
    monkeypatch.setattr(_stack, "NARROW", 10**9)
    errors = compare(case, rng, IMPLS["kernels"], IMPLS["reference"], B=9)
    assert max(errors.values()) <= TOLERANCE, errors
