"""The upstream gradients `back` takes: checked against the compute dtype's range, read
only at real steps, and named in every message."""
import numpy as np
import pytest

import fastbptt
from fastbptt.params import leaves


@pytest.fixture
def layer32():
    rng = np.random.default_rng(3)
    return fastbptt.Layer(rng.standard_normal((4, 3)).astype(np.float32),
                          rng.standard_normal((4, 4)).astype(np.float32) * 0.3)


@pytest.mark.parametrize("shape,where", [((2, 5, 4), (0, 0, 0)), ((5, 4), (2, 1))])
def test_float64_dh_beyond_float32_is_refused(layer32, shape, where):
    x = np.ones(shape[:-1] + (3,), np.float32)
    out, back = fastbptt.layer.vjp(x, layer32)
    dh = np.zeros(shape)
    dh[where] = 1e39
    with pytest.raises(ValueError, match=rf"dh holds a value that overflows float32.*"
                                         rf"at index \({', '.join(map(str, where))}\)"):
        back(dh)
    final = np.full(out.h_final.shape, -1e39)
    with pytest.raises(ValueError, match="dh_final holds a value that overflows float32"):
        back(np.zeros(shape), final)


def test_padding_steps_of_dh_are_not_read(layer32):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 3)).astype(np.float32)
    out, back = fastbptt.layer.vjp(x, layer32, lengths=[5, 3])
    dh = rng.standard_normal((2, 5, 4))
    clean = dh.copy()
    clean[1, 3:] = 0
    dh[1, 3:] = np.nan
    dh[1, 4, 0] = 1e300                       # beyond float32 too: not read either
    given = dh.copy()
    got, want = back(dh), back(clean)
    assert np.array_equal(dh, given, equal_nan=True)      # not changed in place
    for name, value in leaves(want.grads).items():
        assert np.array_equal(leaves(got.grads)[name], value), name
    assert np.array_equal(got.dx, want.dx) and np.array_equal(got.dh0, want.dh0)
    dh[1, 2, 1] = np.inf                      # a real step
    with pytest.raises(ValueError, match=r"dh holds a non-finite value \(inf at index "
                                         r"\(1, 2, 1\)\)"):
        back(dh)


def test_dc_final_of_the_wrong_shape_names_c_final():
    params = fastbptt.init_params(3, 4, 2, cell="lstm", dtype=np.float64, seed=0)
    (layer,), = params.layers
    out, back = fastbptt.layer.vjp(np.ones((2, 5, 3)), layer)
    with pytest.raises(ValueError, match=r"dc_final must have shape \(2, 4\), that of "
                                         r"out\.c_final"):
        back(np.zeros((2, 5, 4)), dc_final=np.zeros((2, 3)))


@pytest.mark.parametrize("shape", [(6, 3), (1, 6, 3), (4, 1, 3)])
def test_dx_is_not_overwritten_by_later_calls(layer32, shape):
    """One sequence or one step: dx's transposed scratch view is contiguous as it is."""
    rng = np.random.default_rng(5)
    out, back = fastbptt.layer.vjp(rng.standard_normal(shape).astype(np.float32), layer32)
    r = back(np.ones(out.h.shape, np.float32))
    kept = r.dx.copy()
    back(2 * np.ones(out.h.shape, np.float32))
    fastbptt.layer.vjp(rng.standard_normal(shape).astype(np.float32), layer32)[1](
        np.ones(out.h.shape, np.float32))
    assert np.array_equal(r.dx, kept)


@pytest.mark.parametrize("cell", ["elman", "gru", "lstm"])
def test_dh_final_joins_at_each_sequences_last_real_step(cell):
    """dh_final is dL/dh at each sequence's last real step (lengths[b] - 1): back(0,
    dh_final) equals back of a dh holding it at that step, and the reference's."""
    rng = np.random.default_rng(7)
    layer = fastbptt.init_params(3, 4, 3, cell=cell, num_layers=2, dtype=np.float64,
                                 seed=2).layers[0][0]
    lengths = np.array([5, 3, 0])
    x, h0 = rng.standard_normal((3, 5, 3)), rng.standard_normal((3, 4))
    out, back = fastbptt.layer.vjp(x, layer, lengths=lengths, h0=h0)
    dh_final = rng.standard_normal(out.h_final.shape)
    got = back(np.zeros(out.h.shape), dh_final)
    dh = np.zeros(out.h.shape)
    for b, n in enumerate(lengths):
        if n:
            dh[b, n - 1] = dh_final[b]
    placed = back(dh)
    want = fastbptt.reference.layer_vjp(x, layer, lengths=lengths, h0=h0)[1](
        np.zeros(out.h.shape), dh_final)
    for name, g in leaves(got.grads).items():
        assert np.allclose(g, leaves(placed.grads)[name], rtol=1e-12, atol=1e-14), name
        assert np.allclose(g, leaves(want.grads)[name], rtol=1e-10, atol=1e-13), name
        assert np.abs(g).max() > 0, name
    assert np.allclose(got.dx, placed.dx, rtol=1e-12, atol=1e-14)
    assert np.array_equal(got.dh0[2], dh_final[2])          # a sequence of no steps
    assert np.allclose(got.dh0, want.dh0, rtol=1e-10, atol=1e-13)
