"""The logits of time-major states taken rows first (h_t^T V^T, then transposed) equal
the product taken as V h_t, for every cell, direction layout, loss and dtype."""
import numpy as np
import pytest

import fastbptt
from fastbptt import api


def leaves(result):
    out = []
    for item in result:
        if isinstance(item, np.ndarray):
            out.append(item)
        elif isinstance(item, tuple):
            out += leaves(item)
        elif item is not None:
            out.append(np.asarray(item))
    return out


def spy_on_logits(monkeypatch):
    """A list that records, for each call of `direction_logits`, whether it took the
    logits rows first."""
    taken = []
    kernel = api.direction_logits

    def spy(*args):
        taken.append(args[-1] is not None)
        return kernel(*args)

    monkeypatch.setattr(api, "direction_logits", spy)
    return taken


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("loss", ["softmax_ce", "mse"])
@pytest.mark.parametrize("cell, layers, bidirectional", [
    ("elman", 1, False), ("lstm", 1, True), ("gru", 2, True), ("elman", 2, False)])
@pytest.mark.parametrize("B, C", [(1, 65), (5, 16), (32, 128)])
def test_rows_first_logits_equal_the_other_product(monkeypatch, dtype, loss, cell, layers,
                                                    bidirectional, B, C):
    rng = np.random.default_rng(B + C)
    params = fastbptt.init_params(20, 24, C, cell=cell, num_layers=layers,
                                  bidirectional=bidirectional, dtype=dtype, seed=3)
    x, y = rng.integers(0, 20, (B, 17)), rng.integers(0, C, (B, 17))
    lengths = rng.integers(1, 18, B) if B > 1 else None
    taken = spy_on_logits(monkeypatch)
    monkeypatch.setattr(api, "ROWS_FIRST_COLUMNS", 0)
    rows_first = fastbptt.bptt(x, y, params, loss=loss, lengths=lengths)
    assert taken and all(taken)
    monkeypatch.setattr(api, "ROWS_FIRST_CLASSES", 0)
    taken.clear()
    other = fastbptt.bptt(x, y, params, loss=loss, lengths=lengths)
    assert not any(taken)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    for a, b in zip(leaves(rows_first), leaves(other), strict=True):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, np.abs(b).max()))


@pytest.mark.parametrize("B, T, C, taken", [(1, 100, 65, False), (32, 100, 65, True),
                                             (32, 100, 129, False), (16, 64, 16, True),
                                             (16, 63, 16, False)])
def test_rows_first_for_few_classes_and_many_columns(monkeypatch, B, T, C, taken):
    rng = np.random.default_rng(0)
    params = fastbptt.init_params(10, 16, C, seed=0)
    seen = spy_on_logits(monkeypatch)
    fastbptt.bptt(rng.integers(0, 10, (B, T)), rng.integers(0, C, (B, T)), params)
    assert seen == ([True] if taken else [])
