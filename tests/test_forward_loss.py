"""forward (states and softmax outputs), loss, and the empty sequence."""
import numpy as np
import pytest

import fastbptt
from fastbptt import reference

L, H, C, T = 5, 7, 3, 9
LENGTHS = np.array([9, 0, 4, 1])
B = len(LENGTHS)
NAMES = ("U", "W", "V", "b", "c")
ACTIVATIONS = ["tanh", "sigmoid", "relu", "identity"]
LOSSES = ["softmax_ce", "mse"]


def make_params(seed=0, dtype=np.float64, bias=True):
    return fastbptt.init_params(L, H, C, dtype=dtype, seed=seed, bias=bias)


def make_data(seed, kind="ids", batch=True):
    rng = np.random.default_rng(seed)
    lead = (B, T) if batch else (T,)
    x = rng.integers(0, L, lead) if kind == "ids" else rng.normal(size=lead + (L,))
    y = rng.integers(-1, C, lead)
    h0 = rng.normal(0, 0.5, lead[:-1] + (H,))
    return x, y, h0


def close(actual, expected, rtol=1e-10):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    atol = rtol * max(np.abs(expected).max(initial=0.0), 1e-300)
    return np.abs(actual - expected).max(initial=0.0) <= atol


def numpy_loss(h, params, y, loss):
    """Summed loss of states h (n, H) and class ids y (n,), written out independently."""
    o = h @ params.V.T + params.c
    total = 0.0
    for t, target in enumerate(y):
        if target < 0:
            continue
        if loss == "mse":
            row = np.eye(C)[target]
            total += 0.5 * np.sum((o[t] - row) ** 2)
        else:
            total -= o[t, target] - np.log(np.sum(np.exp(o[t])))
    return total


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("kind", ["ids", "dense"])
def test_forward_batch(kind, activation):
    params = make_params(1)
    x, _, h0 = make_data(2, kind)
    h, p = fastbptt.forward(x, params, activation=activation, h0=h0, lengths=LENGTHS)
    assert h.shape == (B, T, H) and p.shape == (B, T, C)
    states = reference.layer_forward(x, fastbptt.Layer(params.U, params.W, params.b),
                                     activation=activation, h0=h0, lengths=LENGTHS).h
    for b, n in enumerate(LENGTHS):
        assert np.allclose(p[b, :n].sum(axis=1), 1.0, rtol=0, atol=1e-12)
        assert (p[b, :n] > 0).all()
        assert not p[b, n:].any() and not h[b, n:].any()
        if n == 0:
            continue
        want = states[b, :n]
        assert close(h[b, :n], want)
        o = want @ params.V.T + params.c
        softmax = np.exp(o) / np.exp(o).sum(axis=1, keepdims=True)
        assert close(p[b, :n], softmax)


@pytest.mark.parametrize("kind", ["ids", "dense"])
def test_forward_single(kind):
    params = make_params(3)
    x, _, h0 = make_data(4, kind, batch=False)
    h, p = fastbptt.forward(x, params, activation="sigmoid", h0=h0)
    assert h.shape == (T, H) and p.shape == (T, C)
    hb, pb = fastbptt.forward(x[None], params, activation="sigmoid", h0=h0[None])
    assert close(h, hb[0]) and close(p, pb[0])
    # one step by hand from h0
    x0 = np.eye(L)[x[0]] if kind == "ids" else x[0]
    h_first = 1 / (1 + np.exp(-(params.U @ x0 + params.W @ h0 + params.b)))
    assert close(h[0], h_first)
    assert np.allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)


def test_forward_h0_matters():
    params = make_params(5)
    x, _, h0 = make_data(6, batch=False)
    assert not close(fastbptt.forward(x, params, h0=h0).h[0],
                     fastbptt.forward(x, params).h[0], rtol=1e-3)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_loss_agrees_everywhere(activation, loss):
    params = make_params(7)
    x, y, h0 = make_data(8)
    opts = dict(activation=activation, loss=loss, h0=h0, lengths=LENGTHS)
    value = fastbptt.loss(x, y, params, **opts)
    assert type(value) is float and value > 0
    assert fastbptt.bptt(x, y, params, **opts).loss == pytest.approx(value, rel=1e-12)
    vg, _ = fastbptt.value_and_grad(x, y, params, **opts)
    assert type(vg) is float and vg == pytest.approx(value, rel=1e-12)
    # truncation changes gradients, never the loss
    assert fastbptt.bptt(x, y, params, truncate=2, **opts).loss == pytest.approx(value,
                                                                                 rel=1e-12)
    assert reference.bptt(x, y, params, **opts).loss == pytest.approx(value, rel=1e-12)
    h, _ = fastbptt.forward(x, params, activation=activation, h0=h0, lengths=LENGTHS)
    by_hand = sum(numpy_loss(h[b, :n], params, y[b, :n], loss) for b, n in enumerate(LENGTHS))
    assert value == pytest.approx(by_hand, rel=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_value_and_grad_returns_python_float(dtype):
    params = make_params(9, dtype=dtype)
    x, y, _ = make_data(10, batch=False)
    value, grads = fastbptt.value_and_grad(x, y, params)
    assert type(value) is float
    assert type(fastbptt.loss(x, y, params)) is float
    assert type(fastbptt.bptt(x, y, params).loss) is float
    assert isinstance(grads, fastbptt.Params) and grads.U.dtype == dtype


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("shape", ["single_ids", "single_dense", "batch_ids", "batch_dense"])
def test_empty_sequence(shape, loss):
    params = make_params(11)
    batch, kind = shape.split("_")
    lead = (2, 0) if batch == "batch" else (0,)
    x = np.zeros(lead, np.int64) if kind == "ids" else np.zeros(lead + (L,))
    y = np.zeros(lead, np.int64)
    h0 = np.random.default_rng(12).normal(size=lead[:-1] + (H,))
    assert fastbptt.loss(x, y, params, loss=loss) == 0.0
    for impl in (fastbptt, reference):
        r = impl.bptt(x, y, params, loss=loss, h0=h0)
        assert r.loss == 0.0 and type(r.loss) is float
        for name, g in zip(NAMES, r.grads):
            assert g.shape == getattr(params, name).shape and not g.any(), name
        assert np.array_equal(r.h_final, h0)
        assert r.dh0.shape == h0.shape and not r.dh0.any()
    value, grads = fastbptt.value_and_grad(x, y, params, loss=loss, truncate=3)
    assert value == 0.0 and not any(g.any() for g in grads)
    h, p = fastbptt.forward(x, params)
    assert h.shape == lead + (H,) and p.shape == lead + (C,)


def test_all_lengths_zero():
    params = make_params(13)
    x, y, h0 = make_data(14)
    zeros = np.zeros(B, np.int64)
    r = fastbptt.bptt(x, y, params, h0=h0, lengths=zeros)
    assert r.loss == 0.0 and not any(g.any() for g in r.grads)
    assert np.array_equal(r.h_final, h0) and not r.dh0.any()
    assert fastbptt.loss(x, y, params, h0=h0, lengths=zeros) == 0.0
    h, p = fastbptt.forward(x, params, h0=h0, lengths=zeros)
    assert h.shape == (B, T, H) and not h.any() and not p.any()


@pytest.mark.parametrize("H,B", [(1, 1), (4, 1), (1, 3), (5, 2)])
def test_results_do_not_share_memory_with_later_calls(H, B):
    """Scratch memory is reused between calls; nothing returned may point into it."""
    rng = np.random.default_rng(3)
    params = fastbptt.init_params(4, H, 3, dtype=np.float64, seed=rng)
    x1, x2 = rng.integers(0, 4, size=(B, 6)), rng.integers(0, 4, size=(B, 6))
    y = rng.integers(0, 3, size=(B, 6))
    first_fwd = fastbptt.forward(x1, params)
    first = fastbptt.bptt(x1, y, params, h0=np.zeros((B, H)))
    kept = [a.copy() for a in (*first_fwd, first.h_final, first.dh0, *first.grads)]
    fastbptt.forward(x2, params)
    fastbptt.bptt(x2, y, params, h0=np.ones((B, H)))
    for old, now in zip(kept, (*first_fwd, first.h_final, first.dh0, *first.grads)):
        assert np.array_equal(old, now)


@pytest.mark.parametrize("weight", [0.3, 0.7, 1.0])
@pytest.mark.parametrize("logit", [1e12 / 3, 1e7 / 3, 3.0])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cross_entropy_of_large_logits_does_not_cancel(weight, logit, dtype):
    """The target is the largest logit, by ~1e6 and more: the loss is 0 to the last bit for
    one class, and log(1 + e^-(o1 - o2)) for two, never below 0 (w log z - w o lost the
    rounding of w o, as much as 1e-5 here)."""
    U, W = np.ones((1, 1), dtype), np.zeros((1, 1), dtype)
    x = np.full((1, 1, 1), logit, dtype)                      # identity: h = o = logit
    one = fastbptt.Params(U, W, np.ones((1, 1), dtype))
    assert fastbptt.bptt(x, np.full((1, 1, 1), weight), one, activation="identity").loss == 0
    two = fastbptt.Params(U, W, np.array([[1.0], [0.0]], dtype))
    y = np.array([[[weight, 0.0]]])
    loss = fastbptt.bptt(x, y, two, activation="identity").loss
    want = weight * np.log1p(np.exp(-float(dtype(logit))))
    rtol = 1e-12 if dtype is np.float64 else 1e-6             # float32's exp and log
    assert loss >= 0 and abs(loss - want) <= 1e-15 + rtol * want, (loss, want)
    ids = fastbptt.bptt(x, np.zeros((1, 1), np.int64), two, activation="identity").loss
    assert ids >= 0 and abs(ids - want / weight) <= 1e-15 + rtol * want / weight
