"""float32 results against float64 ones of the same model: every gradient as accurate as
the matrix products' (dW, dV), and every cell within 1e-4 on ordinary sizes."""
import numpy as np
import pytest

import fastbptt


def relative(a, b):
    return float(np.abs(np.asarray(a, np.float64) - b).max() / np.abs(b).max())


def test_sums_over_many_steps_keep_the_products_accuracy(kernel_path):
    """db and the dU scatter sum over all B T steps (1.28 M here); summed in float32 they
    lost ~1e-5 relative, ten times dW's and dV's error."""
    rng = np.random.default_rng(0)
    B, T, L, H, C = 64, 20000, 5, 8, 5
    p64 = fastbptt.init_params(L, H, C, dtype=np.float64, seed=1)
    p32 = fastbptt.Params(*(a.astype(np.float32) for a in p64))
    x, y = rng.integers(0, L, (B, T)), rng.integers(0, C, (B, T))
    g64 = fastbptt.grad(x, y, p64, truncate=10, stride=10)
    g32 = fastbptt.grad(x, y, p32, truncate=10, stride=10)
    errors = {k: relative(getattr(g32, k), getattr(g64, k)) for k in ("U", "W", "V", "b", "c")}
    products = max(errors["W"], errors["V"])
    assert products < 1e-5, errors
    for name in ("U", "b", "c"):
        assert errors[name] <= products, errors


@pytest.mark.parametrize("cell", ["elman", "lstm", "gru"])
@pytest.mark.parametrize("layers, bidirectional", [(1, False), (2, True)])
def test_float32_within_1e_4_of_float64(kernel_path, cell, layers, bidirectional):
    rng = np.random.default_rng(1)
    B, T, L, H, C = 5, 30, 7, 16, 6
    m64 = fastbptt.init_params(L, H, C, cell=cell, num_layers=layers,
                               bidirectional=bidirectional, dtype=np.float64, seed=2)
    leaves64 = fastbptt.params.leaves(m64)
    m32 = fastbptt.init_params(L, H, C, cell=cell, num_layers=layers,
                               bidirectional=bidirectional, dtype=np.float32, seed=2)
    for name, a in fastbptt.params.leaves(m32).items():
        a[...] = leaves64[name]
    x, y = rng.integers(0, L, (B, T)), rng.integers(0, C, (B, T))
    lengths = rng.integers(1, T + 1, B)
    r64 = fastbptt.bptt(x, y, m64, lengths=lengths)
    r32 = fastbptt.bptt(x, y, m32, lengths=lengths)
    assert abs(r32.loss - r64.loss) <= 1e-4 * abs(r64.loss)
    g64, g32 = fastbptt.params.leaves(r64.grads), fastbptt.params.leaves(r32.grads)
    assert g64.keys() == g32.keys()
    for name in g64:
        assert g32[name].dtype == np.float32
        assert relative(g32[name], g64[name]) <= 1e-4, name
    assert relative(r32.h_final, r64.h_final) <= 1e-4
