"""float32 results against float64 ones of the same model: every gradient as accurate as
the matrix products' (dW, dV), and every cell within 1e-4 on ordinary sizes (loss, every
gradient, h_final, c_final, dh0, dc0; token ids and dense inputs, with h0 and c0 or not)."""
import numpy as np
import pytest

import fastbptt


def relative(a, b):
    """max |a - b| / max |b| (max |a - b| where b is 0); inf when either is not finite."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, (a.shape, b.shape)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("inf")
    scale, diff = np.abs(b).max(initial=0.0), np.abs(a - b).max(initial=0.0)
    return float(diff / scale) if scale else float(diff)


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
    assert errors["W"] < 1e-5 and errors["V"] < 1e-5, errors
    products = max(errors["W"], errors["V"])
    for name in ("U", "b", "c"):
        assert errors[name] <= products, errors


@pytest.mark.parametrize("B, T, truncate, stride", [(128, 512, None, 1), (600, 200, None, 1),
                                                    (64, 100, 5, 1)],
                         ids=["time-major", "feature-major", "windows"])
def test_the_output_bias_gradient_near_a_fitted_head(B, T, truncate, stride):
    """dc = the sum over all B T steps of the softmax's errors, which cancel near a fitted
    head: summed in float32 it lost 6e-5 to 1e-4 relative here (ten times PyTorch's error
    over 2.5 M steps), where the sum over more than 4096 steps now runs in float64."""
    rng = np.random.default_rng(0)
    L = H = C = 8
    p = fastbptt.init_params(L, H, C, dtype=np.float64, seed=0)
    x, y = rng.integers(0, L, (B, T)), rng.integers(0, C, (B, T))
    counts = np.bincount(y.ravel(), minlength=C)
    p = p._replace(V=p.V * 1e-3, c=np.log(counts / counts.sum()))   # predicts y's frequencies
    p32 = fastbptt.Params(*(a.astype(np.float32) for a in p))
    p64 = fastbptt.Params(*(a.astype(np.float64) for a in p32))
    g32 = fastbptt.grad(x, y, p32, truncate=truncate, stride=stride)
    g64 = fastbptt.grad(x, y, p64, truncate=truncate, stride=stride)
    assert relative(g32.c, g64.c) < 2e-5


@pytest.mark.parametrize("states", [False, True], ids=["zero-states", "h0-c0"])
@pytest.mark.parametrize("inputs", ["ids", "dense"])
@pytest.mark.parametrize("cell", ["elman", "lstm", "gru"])
@pytest.mark.parametrize("layers, bidirectional", [(1, False), (2, True)])
def test_float32_within_1e_4_of_float64(kernel_path, cell, layers, bidirectional, inputs,
                                        states):
    """Loss, every gradient, h_final, c_final, dh0 and dc0 (zeros both ways without h0
    and c0), for token ids and dense inputs, with and without h0 and c0."""
    rng = np.random.default_rng(1)
    B, T, L, H, C = 5, 30, 7, 16, 6
    m64 = fastbptt.init_params(L, H, C, cell=cell, num_layers=layers,
                               bidirectional=bidirectional, dtype=np.float64, seed=2)
    leaves64 = fastbptt.params.leaves(m64)
    m32 = fastbptt.init_params(L, H, C, cell=cell, num_layers=layers,
                               bidirectional=bidirectional, dtype=np.float32, seed=2)
    for name, a in fastbptt.params.leaves(m32).items():
        a[...] = leaves64[name]
    # float32 numbers, so that both calls see the same inputs and states
    x = rng.integers(0, L, (B, T)) if inputs == "ids" else \
        rng.normal(size=(B, T, L)).astype(np.float32)
    y = rng.integers(0, C, (B, T))
    options = {"lengths": rng.integers(1, T + 1, B)}
    if states:
        S = layers * (2 if bidirectional else 1)
        shape = (B, H) if isinstance(m64, fastbptt.Params) else (S, B, H)
        options["h0"] = rng.normal(size=shape).astype(np.float32)
        if cell == "lstm":
            options["c0"] = rng.normal(size=shape).astype(np.float32)
    as64 = {k: v.astype(np.float64) if v.dtype == np.float32 else v
            for k, v in options.items()}
    r64 = fastbptt.bptt(np.asarray(x, np.float64) if inputs == "dense" else x, y, m64, **as64)
    r32 = fastbptt.bptt(x, y, m32, **options)
    assert abs(r32.loss - r64.loss) <= 1e-4 * abs(r64.loss)
    g64, g32 = fastbptt.params.leaves(r64.grads), fastbptt.params.leaves(r32.grads)
    assert g64.keys() == g32.keys()
    for name in g64:
        assert g32[name].dtype == np.float32
        assert relative(g32[name], g64[name]) <= 1e-4, name
    fields = ["h_final", "dh0"] + (["c_final", "dc0"] if cell == "lstm" else [])
    assert (r32.c_final is None) == (cell != "lstm") == (r64.c_final is None)
    for name in fields:
        got, want = getattr(r32, name), getattr(r64, name)
        assert got.dtype == np.float32, name
        assert relative(got, want) <= 1e-4, (name, relative(got, want))
        if name in ("dh0", "dc0"):
            assert want.any() == states, name       # zeros without h0 and c0


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_gates_saturated_by_extreme_inputs_have_no_derivative(cell):
    """A gate whose sigmoid saturates beyond float32's exp range kept a derivative of
    about 4e-39: times an input near float32's largest it put errors of 40% into dU, and
    an infinite input (check_finite=False) made dU infinite where 0 * inf is NaN, as in
    float64 and in the reference."""
    from fastbptt import reference
    rng = np.random.default_rng(0)
    L, H, C, B, T = 4, 8, 5, 3, 7
    y = rng.integers(0, C, (B, T))
    params = fastbptt.init_params(L, H, C, cell=cell, dtype=np.float32, seed=0)
    wide = fastbptt.Model(tuple(tuple(fastbptt.Layer(*[None if a is None else
                                                       a.astype(np.float64) for a in layer])
                                      for layer in row) for row in params.layers),
                          params.V.astype(np.float64), params.c.astype(np.float64))
    x = rng.standard_normal((B, T, L)).astype(np.float32)
    x[0, 2, 1] = np.finfo(np.float32).max
    got = fastbptt.grad(x, y, params).layers[0][0].U
    want = fastbptt.grad(x.astype(np.float64), y, wide).layers[0][0].U
    assert relative(got, want) < 1e-6
    x[0, 2, 1] = -np.inf
    got = fastbptt.grad(x, y, params, check_finite=False).layers[0][0].U
    want = reference.grad(x, y, params, check_finite=False).layers[0][0].U
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got[:, 1]).any() and not np.isinf(got).any()


@pytest.mark.parametrize("cell, B", [("lstm", 1), ("lstm", 4), ("lstm", 8), ("elman", 1),
                                     ("elman", 8)])
def test_a_gate_saturated_by_its_bias_keeps_the_products_accuracy(cell, B):
    """A narrow batch's step product W h_{t-1} was summed onto the input part U x_t + b:
    each of its H multiply-adds rounded at the size of a large bias (-80), and a
    saturated gate, e^z, made that 1e-4 relative error in h and every gradient, 20
    times PyTorch's float32 (a few 1e-6 once the product is summed apart)."""
    rng = np.random.default_rng(0)
    H, L, C, T = 1024, 16, 10, 5
    models = [fastbptt.init_params(L, H, C, cell=cell, num_layers=2, dtype=dtype, seed=0)
              for dtype in (np.float64, np.float32)]
    b = models[0].layers[0][0].b
    if cell == "lstm":
        b[3 * H:] -= 80.0                           # the output gates closed
    else:
        b -= 60.0                                   # sigmoid units at e^-60
    for name, a in fastbptt.params.leaves(models[1]).items():
        a[...] = fastbptt.params.leaves(models[0])[name]
    x = rng.standard_normal((B, T, L)).astype(np.float32)   # the same numbers in both
    y = rng.integers(0, C, (B, T))
    states = {"h0": rng.standard_normal((2, B, H)).astype(np.float32)}
    if cell == "lstm":
        states["c0"] = rng.standard_normal((2, B, H)).astype(np.float32)
    activation = {"activation": "sigmoid"} if cell == "elman" else {}
    want, got = (fastbptt.bptt(x.astype(dtype), y, model, **activation,
                               **{k: v.astype(dtype) for k, v in states.items()})
                 for dtype, model in zip((np.float64, np.float32), models))
    errors = {name: relative(a, fastbptt.params.leaves(want.grads)[name])
              for name, a in fastbptt.params.leaves(got.grads).items()}
    errors["h_final"] = relative(got.h_final, want.h_final)
    assert max(errors.values()) < 2e-5, errors


@pytest.mark.parametrize("cell", ["elman", "gru"])
def test_bias_gradients_whose_steps_cancel_keep_their_accuracy(cell):
    """A narrow batch summed each bias gradient down its T B steps in float32 (up to
    4096 of them): with the steps' terms cancelling, the GRU's lost 2e-4 relative, 30
    times PyTorch's float32 error."""
    rng = np.random.default_rng(0)
    B, T, L, H = 8, 512, 4, 16
    layers = [fastbptt.init_params(L, H, 2, cell=cell, num_layers=2, dtype=dtype,
                                   seed=0).layers[0][0] for dtype in (np.float64, np.float32)]
    for name in ("U", "W"):
        getattr(layers[0], name)[...] *= 0.1
    for name, a in layers[1]._asdict().items():
        if a is not None:
            a[...] = getattr(layers[0], name)
    x = rng.standard_normal((B, T, L)).astype(np.float32)
    dh = np.where(np.arange(T)[None, :, None] < T // 2, 1.0, -1.0) * np.ones((B, T, H))
    dh = (dh + rng.standard_normal((B, T, H)) * 1e-3).astype(np.float32)
    want, got = (fastbptt.layer.vjp(x.astype(dtype), layer)[1](dh.astype(dtype)).grads
                 for dtype, layer in zip((np.float64, np.float32), layers))
    for name in ("b", "bh") if cell == "gru" else ("b",):
        assert relative(getattr(got, name), getattr(want, name)) < 2e-5, name
