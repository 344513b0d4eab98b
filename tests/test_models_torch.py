"""The kernels and the reference against PyTorch autograd, in float64, to 1e-10 relative.

``nn.RNN``/``nn.LSTM``/``nn.GRU`` + ``nn.Linear`` + summed cross-entropy (or squared
error), packed sequences for ragged batches, h0 and c0 given: loss, every gradient,
h_final, c_final, dh0, dc0; the layer VJP with random dh, dh_final, dc_final: the
states, every gradient, dx, dh0, dc0.

The full product of what PyTorch computes (full BPTT) on one and two layers: cell (Elman
with tanh and with relu, GRU, LSTM) x 1-2 layers x 1-2 directions x biases x ragged
lengths x h0 (and c0) given x token ids or dense inputs, the target kind and loss
rotating over it; the LSTM with h0 alone and with c0 alone (PyTorch's ``nn.LSTM`` then
gets zeros for the other); and the flag rotations of `models.cases` for three layers and
the reverse layer.
"""
import itertools

import pytest

from models import IMPLS, Case, cases, compare, params

pytest.importorskip("torch")

TOLERANCE = 1e-10
CELLS = [("elman", "tanh"), ("elman", "relu"), ("gru", "tanh"), ("lstm", "tanh")]
BOOLS = (False, True)


def product():
    """Every cell x layers x directions x biases x ragged x state x ids (state: h0 and
    c0 given or not; for the LSTM also h0 alone and c0 alone)."""
    out = []
    for (cell, activation), layers, directions, bias, ragged, ids in itertools.product(
            CELLS, (1, 2), (1, 2), BOOLS, BOOLS, BOOLS):
        states = (False, True, "h0", "c0") if cell == "lstm" else (False, True)
        for state in states:
            y_ids, mse = divmod(len(out) % 4, 2)      # targets and loss rotate
            out.append(Case(cell, layers, directions, False, "full", activation, ragged,
                            state, ids, bias, bool(y_ids), bool(mse)))
    return out


def rotation():
    """The shapes beyond the product: three layers, and one reverse layer."""
    return [case for case in cases(head=False, per_shape=2, only="torch")
            if case.layers > 2 or case.reverse]


GRID = product() + rotation()


@pytest.mark.parametrize("impl", ["kernels", "reference"])
@params(GRID)
def test_matches_torch(rng, case, impl):
    errors = compare(case, rng, IMPLS[impl], IMPLS["torch"], empty=False)
    assert all(e <= TOLERANCE for e in errors.values()), errors


def test_the_grid_is_the_full_product():
    """4 cells x 64 flag combinations, the LSTM's 64 more with h0 or c0 alone."""
    keys = {(c.cell, c.activation, c.layers, c.directions, c.bias, c.ragged, c.state, c.ids)
            for c in GRID if c.layers <= 2 and not c.reverse}
    assert len(keys) == 4 * 64 + 64
    assert {(c.y_ids, c.mse) for c in GRID} == set(itertools.product(BOOLS, BOOLS))
    assert {(c.layers, c.directions, c.reverse) for c in rotation()} == \
        {(1, 1, True), (3, 1, False), (3, 2, False)}
