"""A padded batch is the sum of its sequences; padding, id/one-hot and dtype don't leak."""
import numpy as np
import pytest

import fastbptt
from fastbptt import reference

L, H, C = 5, 7, 3
T = 9
LENGTHS = np.array([9, 4, 0, 7, 1])       # full, partial, empty, partial, one step
B = len(LENGTHS)
NAMES = ("U", "W", "V", "b", "c")
ACTIVATIONS = ["tanh", "sigmoid", "relu", "identity"]
LOSSES = ["softmax_ce", "mse"]
TRUNCATIONS = {"full": {}, "k3s1": dict(truncate=3), "k4s4": dict(truncate=4, stride=4),
               "k5s2": dict(truncate=5, stride=2)}


def make_params(seed=0, dtype=np.float64):
    return fastbptt.init_params(L, H, C, dtype=dtype, seed=seed)


def make_batch(seed, x_kind="ids", y_kind="ids"):
    """x, y (B, T, ...) with padding filled by garbage of the right kind, and h0 (B, H)."""
    rng = np.random.default_rng(seed)
    if x_kind == "ids":
        x = rng.integers(0, L, (B, T))
    else:
        x = rng.normal(size=(B, T, L))
    if y_kind == "ids":
        y = rng.integers(-1, C, (B, T))   # includes -1 (no loss)
    else:
        y = rng.uniform(0, 1, (B, T, C))  # soft, non-negative: valid for both losses
    h0 = rng.normal(0, 0.5, (B, H))
    return x, y, h0


def scale(a):
    return max(np.abs(a).max(initial=0.0), 1e-300)


def assert_close(actual, expected, rtol=1e-10, ref_scale=None):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    s = ref_scale if ref_scale is not None else scale(expected)
    np.testing.assert_allclose(actual, expected, rtol=0, atol=rtol * s)


def assert_results_equal(r1, r2):
    """Bitwise equality of two BPTTResults with Params grads."""
    assert r1.loss == r2.loss
    for name in NAMES:
        assert np.array_equal(getattr(r1.grads, name), getattr(r2.grads, name)), name
    assert np.array_equal(r1.h_final, r2.h_final)
    assert np.array_equal(r1.dh0, r2.dh0)


def onehot(ids, n, dtype=np.float64):
    """Rows of eye(n); id -1 becomes an all-zero row."""
    out = np.zeros(ids.shape + (n,), dtype)
    idx = np.nonzero(ids >= 0)
    out[idx + (ids[idx],)] = 1
    return out


# (a) ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("trunc", TRUNCATIONS.values(), ids=TRUNCATIONS.keys())
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("kind", ["ids", "dense"])
def test_batch_is_sum_of_single_runs(kernel_path, kind, activation, loss, trunc):
    params = make_params(1)
    x, y, h0 = make_batch(2, kind, kind)
    opts = dict(activation=activation, loss=loss, **trunc)
    batch = fastbptt.bptt(x, y, params, h0=h0, lengths=LENGTHS, **opts)

    singles = [fastbptt.bptt(x[b, :n], y[b, :n], params, h0=h0[b], **opts)
               for b, n in enumerate(LENGTHS)]
    total = sum(r.loss for r in singles)
    assert batch.loss == pytest.approx(total, rel=1e-12)
    for name in NAMES:
        want = sum(getattr(r.grads, name) for r in singles)
        assert_close(getattr(batch.grads, name), want)
    for b, r in enumerate(singles):
        assert r.h_final.shape == (H,) and r.dh0.shape == (H,)
        assert_close(batch.h_final[b], r.h_final, ref_scale=scale(batch.h_final))
        assert_close(batch.dh0[b], r.dh0, ref_scale=scale(batch.dh0))
    empty = list(LENGTHS).index(0)
    assert np.array_equal(batch.h_final[empty], h0[empty])
    assert not batch.dh0[empty].any()
    assert batch.dh0.any()


# (b) ---------------------------------------------------------------------------------------

def scribble(x, y, x_kind, y_kind, how):
    """Copies of x, y with every padding step overwritten."""
    x, y = x.copy(), y.copy()
    pad = np.arange(T)[None, :] >= LENGTHS[:, None]
    if x_kind == "ids":
        x[pad] = {"valid": L - 1, "huge": 10**6, "negative": -7}[how]
    else:
        x[pad] = {"valid": 3.5, "huge": 1e300, "negative": np.nan}[how]
    if y_kind == "ids":
        y[pad] = {"valid": C - 1, "huge": 10**6, "negative": -7}[how]
    else:
        y[pad] = {"valid": 0.25, "huge": 1e300, "negative": np.nan}[how]
    return x, y


@pytest.mark.parametrize("how", ["valid", "huge", "negative"])
@pytest.mark.parametrize("kind", ["ids", "dense"])
@pytest.mark.parametrize("loss,activation,trunc", [
    ("softmax_ce", "tanh", {}),
    ("mse", "sigmoid", dict(truncate=3)),
    ("softmax_ce", "relu", dict(truncate=4, stride=4)),
    ("mse", "identity", dict(truncate=5, stride=2)),
])
def test_padding_content_is_ignored(kind, how, loss, activation, trunc):
    params = make_params(3)
    x, y, h0 = make_batch(4, kind, kind)
    opts = dict(activation=activation, loss=loss, h0=h0, lengths=LENGTHS, **trunc)
    clean = fastbptt.bptt(x, y, params, **opts)
    x2, y2 = scribble(x, y, kind, kind, how)
    assert_results_equal(fastbptt.bptt(x2, y2, params, **opts), clean)
    assert_results_equal(reference.bptt(x2, y2, params, **opts),
                         reference.bptt(x, y, params, **opts))
    fwd, fwd2 = (fastbptt.forward(a, params, activation=activation, h0=h0, lengths=LENGTHS)
                 for a in (x, x2))
    assert np.array_equal(fwd.h, fwd2.h) and np.array_equal(fwd.p, fwd2.p)
    assert fastbptt.loss(x2, y2, params, activation=activation, loss=loss, h0=h0,
                         lengths=LENGTHS) == fastbptt.loss(x, y, params, activation=activation,
                                                           loss=loss, h0=h0, lengths=LENGTHS)


# (c) ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("trunc", [{}, dict(truncate=3, stride=2)], ids=["full", "k3s2"])
@pytest.mark.parametrize("loss", LOSSES)
def test_ids_equal_onehot_rows(loss, trunc):
    params = make_params(5)
    x, y, h0 = make_batch(6, "ids", "ids")
    if loss == "mse":
        # for mse, id -1 means "no loss" while a zero row still pulls o toward 0
        y = np.where(y < 0, 0, y)
    opts = dict(loss=loss, h0=h0, lengths=LENGTHS, **trunc)
    base = fastbptt.bptt(x, y, params, **opts)
    variants = {
        "x one-hot": fastbptt.bptt(onehot(x, L), y, params, **opts),
        "y one-hot": fastbptt.bptt(x, onehot(y, C), params, **opts),
        "both one-hot": fastbptt.bptt(onehot(x, L), onehot(y, C), params, **opts),
    }
    for label, r in variants.items():
        assert r.loss == pytest.approx(base.loss, rel=1e-12), label
        for name in NAMES:
            assert_close(getattr(r.grads, name), getattr(base.grads, name))
        assert_close(r.h_final, base.h_final)
        assert_close(r.dh0, base.dh0)


def test_mse_no_loss_id_differs_from_zero_row():
    """-1 is "no loss" for mse; an all-zero row is the target 0 and does add loss."""
    params = make_params(5)
    y = np.array([0, -1, 2])
    x = np.array([1, 2, 3])
    with_ids = fastbptt.bptt(x, y, params, loss="mse")
    with_rows = fastbptt.bptt(x, onehot(y, C), params, loss="mse")
    h, _ = fastbptt.forward(x, params)
    o1 = params.V @ h[1] + params.c
    assert with_rows.loss - with_ids.loss == pytest.approx(0.5 * o1 @ o1, rel=1e-10)


# (d) ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("kind", ["ids", "dense"])
def test_float32_in_float32_out(kind, loss):
    p64 = make_params(7)
    p32 = fastbptt.Params(*(a.astype(np.float32) for a in p64))
    x, y, h0 = make_batch(8, kind, kind)       # float64 x, y, h0 with float32 params
    opts = dict(loss=loss, h0=h0, lengths=LENGTHS, truncate=4, stride=2)
    r32 = fastbptt.bptt(x, y, p32, **opts)
    r64 = fastbptt.bptt(x, y, p64, **opts)
    assert type(r32.loss) is float
    assert r32.loss == pytest.approx(r64.loss, rel=1e-4)
    for name in NAMES:
        got = getattr(r32.grads, name)
        assert got.dtype == np.float32, name
        assert_close(got, getattr(r64.grads, name), rtol=1e-4)
    for got, want in ((r32.h_final, r64.h_final), (r32.dh0, r64.dh0)):
        assert got.dtype == np.float32
        assert_close(got, want, rtol=1e-4)
    loss_value, grads = fastbptt.value_and_grad(x, y, p32, **opts)
    assert type(loss_value) is float
    assert all(g.dtype == np.float32 for g in grads)
    assert type(fastbptt.loss(x, y, p32, loss=loss, h0=h0, lengths=LENGTHS)) is float
    fwd = fastbptt.forward(x, p32, h0=h0, lengths=LENGTHS)
    assert fwd.h.dtype == np.float32 and fwd.p.dtype == np.float32


# (e) ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["ids", "dense"])
def test_inputs_are_not_mutated(kind):
    params = {k: v for k, v in zip(NAMES, make_params(9))}
    x, y, h0 = make_batch(10, kind, kind)
    x, y = scribble(x, y, kind, kind, "valid" if kind == "ids" else "negative")  # NaN padding
    lengths = LENGTHS.copy()
    before = [a.copy() for a in (*params.values(), x, y, h0, lengths)]
    opts = dict(h0=h0, lengths=lengths)
    for impl in (fastbptt, reference):
        impl.bptt(x, y, params, truncate=3, **opts)
        impl.bptt(x, y, params, truncate=4, stride=4, loss="mse", **opts)
        impl.bptt(x, y, params, **opts)
    fastbptt.forward(x, params, **opts)
    fastbptt.loss(x, y, params, **opts)
    after = (*params.values(), x, y, h0, lengths)
    for old, new in zip(before, after):
        assert new.dtype == old.dtype
        assert np.array_equal(new, old, equal_nan=new.dtype.kind == "f")


# (f) ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["ids", "dense"])
def test_result_shapes(kind):
    params = make_params(11)
    x, y, h0 = make_batch(12, kind, kind)
    single = fastbptt.bptt(x[0], y[0], params, h0=h0[0])
    assert single.h_final.shape == (H,) and single.dh0.shape == (H,)
    assert single.grads.U.shape == (H, L) and single.grads.V.shape == (C, H)
    batch = fastbptt.bptt(x, y, params, h0=h0, lengths=LENGTHS)
    assert batch.h_final.shape == (B, H) and batch.dh0.shape == (B, H)
    one = fastbptt.bptt(x[:1], y[:1], params, h0=h0[:1])
    assert one.h_final.shape == (1, H) and one.dh0.shape == (1, H)
    assert_close(one.h_final[0], single.h_final)
    assert_close(one.dh0[0], single.dh0)
    no_h0 = fastbptt.bptt(x, y, params, lengths=LENGTHS)
    assert no_h0.h_final.shape == (B, H) and no_h0.dh0.shape == (B, H)


@pytest.mark.parametrize("impl", [fastbptt.bptt, reference.bptt], ids=["kernels", "reference"])
def test_dh0_is_zero_without_h0(impl):
    """dh0 is reported for an h0 that was passed; without one it is zeros (and W^T delta_0
    is not, so passing zeros explicitly gives a nonzero dh0)."""
    rng = np.random.default_rng(5)
    params = fastbptt.init_params(5, 7, 3, dtype=np.float64, seed=rng)
    x, y = rng.integers(0, 5, size=(2, 6)), rng.integers(0, 3, size=(2, 6))
    assert not impl(x, y, params).dh0.any()
    assert impl(x, y, params, h0=np.zeros((2, 7))).dh0.any()
