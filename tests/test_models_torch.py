"""The reference against PyTorch autograd, in float64, to 1e-10 relative.

``nn.RNN``/``nn.LSTM``/``nn.GRU`` + ``nn.Linear`` + summed cross-entropy (or squared
error), packed sequences for ragged batches, h0 and c0 given: loss, every gradient,
h_final, c_final, dh0, dc0; the layer VJP with random dh, dh_final, dc_final: the
states, every gradient, dx, dh0, dc0. Every case of `models.cases` that PyTorch computes
(full BPTT, tanh or relu), two flag rotations per shape.
"""
import pytest

from models import IMPLS, cases, compare, params

pytest.importorskip("torch")

TOLERANCE = 1e-10


@params(cases(head=False, per_shape=2, only="torch"))
def test_reference_matches_torch(rng, case):
    errors = compare(case, rng, IMPLS["reference"], IMPLS["torch"], empty=False)
    assert max(errors.values()) <= TOLERANCE, errors
