"""``time_major=True`` in `fastbptt.layer`: x, h, dh and dx (T, B, ...) instead of
(B, T, ...). Every result is the batch-first call's, transposed, bit for bit; one sequence
is the same either way; messages point into the caller's array."""
import itertools

import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from fastbptt._inputs import prepare_layer
from fastbptt._stack import make_plan
from fastbptt.params import Layer, Model, leaves

GATES = {"elman": 1, "gru": 3, "lstm": 4}
T, L, H = 6, 5, 4


def model(rng, cell, directions, dtype, num_layers=2):
    G = GATES[cell]

    def layer(width):
        arrays = [rng.standard_normal((G * H, width)) * 0.5,
                  rng.standard_normal((G * H, H)) * 0.5, rng.standard_normal(G * H) * 0.1]
        if cell == "gru":
            arrays.append(rng.standard_normal(G * H) * 0.1)
        return Layer(*(a.astype(dtype) for a in arrays))

    return Model(tuple(tuple(layer(L if l == 0 else H * directions)
                             for _ in range(directions)) for l in range(num_layers)))


def inputs(rng, B, dense, dtype):
    return (rng.standard_normal((B, T, L)).astype(dtype) if dense
            else rng.integers(0, L, (B, T)))


def assert_same_gradients(want, got):
    for name, value in leaves(want.grads).items():
        assert np.array_equal(leaves(got.grads)[name], value), name
    assert np.array_equal(want.dh0, got.dh0)
    assert (want.dc0 is None) == (got.dc0 is None)
    if want.dc0 is not None:
        assert np.array_equal(want.dc0, got.dc0)


# B 2 runs on the narrow kernels (time-major states), B 4100 on the feature-major ones
NARROW = {2: True, 4100: False}
CASES = [c for c in itertools.product(
    ("elman", "gru", "lstm"), NARROW, (False, True), (1, 2), (None, 3),
    (np.float32, np.float64)) if not (c[3] == 2 and c[4])]


@pytest.mark.parametrize("cell, B, dense, directions, truncate, dtype", CASES)
def test_time_major_is_the_batch_first_call_transposed(cell, B, dense, directions, truncate,
                                                       dtype):
    rng = np.random.default_rng([B, directions, int(dense)])
    params = model(rng, cell, directions, dtype)
    x = inputs(rng, B, dense, dtype)
    assert make_plan(prepare_layer(x, params)).narrow is NARROW[B]
    options = dict(lengths=rng.integers(0, T + 1, B), h0=rng.standard_normal(
        (2 * directions, B, H)).astype(dtype), truncate=truncate, stride=truncate or 1)
    if cell == "lstm":
        options["c0"] = rng.standard_normal((2 * directions, B, H)).astype(dtype)
    want, want_back = fastbptt.layer.vjp(x, params, **options)
    xt = np.ascontiguousarray(x.swapaxes(0, 1))
    given = xt.copy()
    got, back = fastbptt.layer.vjp(xt, params, time_major=True, **options)
    assert np.array_equal(xt, given)                       # not changed in place
    assert got.h.shape == (T, B, H * directions) and got.h.flags.c_contiguous
    assert np.array_equal(got.h, want.h.swapaxes(0, 1))
    assert np.array_equal(got.h_final, want.h_final)
    if cell == "lstm":
        assert np.array_equal(got.c_final, want.c_final)
    assert np.array_equal(fastbptt.layer.forward(xt, params, time_major=True, lengths=options[
        "lengths"], h0=options["h0"], c0=options.get("c0")).h, got.h)

    dh = rng.standard_normal(want.h.shape).astype(dtype)
    finals = {"dh_final": rng.standard_normal(want.h_final.shape).astype(dtype)}
    if cell == "lstm":
        finals["dc_final"] = rng.standard_normal(want.c_final.shape).astype(dtype)
    expected = want_back(dh, **finals)
    for dh_t in (np.ascontiguousarray(dh.swapaxes(0, 1)), dh.swapaxes(0, 1)):
        result = back(dh_t, **finals)
        assert_same_gradients(expected, result)
        if dense:
            assert result.dx.shape == xt.shape and result.dx.flags.c_contiguous
            assert np.array_equal(result.dx, expected.dx.swapaxes(0, 1))
        else:
            assert result.dx is None


@pytest.mark.parametrize("dense", [False, True])
def test_one_sequence_is_the_same_either_way(dense):
    rng = np.random.default_rng(7)
    params = model(rng, "lstm", 2, np.float64)
    x = inputs(rng, 1, dense, np.float64)[0]
    want, want_back = fastbptt.layer.vjp(x, params)
    got, back = fastbptt.layer.vjp(x, params, time_major=True)
    assert np.array_equal(got.h, want.h) and got.h.shape == (T, 2 * H)
    dh = rng.standard_normal(want.h.shape)
    expected, result = want_back(dh), back(dh)
    assert_same_gradients(expected, result)
    if dense:
        assert np.array_equal(result.dx, expected.dx)


@pytest.mark.parametrize("shape", [(0, 3), (4, 0)], ids=["no steps", "no sequences"])
def test_empty_calls_keep_the_time_major_shapes(shape):
    params = model(np.random.default_rng(1), "gru", 1, np.float64, num_layers=1)
    x = np.zeros(shape + (L,))
    out, back = fastbptt.layer.vjp(x, params, time_major=True)
    assert out.h.shape == shape + (H,)
    assert back(np.zeros(out.h.shape)).dx.shape == x.shape


@pytest.mark.parametrize("cell", ["elman", "lstm"])
def test_the_reference_takes_time_major_batches_too(cell):
    rng = np.random.default_rng(11)
    params = model(rng, cell, 2, np.float64)
    x = inputs(rng, 3, True, np.float64)
    lengths = [6, 2, 4]
    want, want_back = reference.layer_vjp(x, params, lengths=lengths)
    xt = np.ascontiguousarray(x.swapaxes(0, 1))
    got, back = reference.layer_vjp(xt, params, lengths=lengths, time_major=True)
    assert np.array_equal(got.h, want.h.swapaxes(0, 1))
    assert np.array_equal(reference.layer_forward(xt, params, lengths=lengths,
                                                  time_major=True).h, got.h)
    dh = rng.standard_normal(want.h.shape)
    expected, result = want_back(dh), back(np.ascontiguousarray(dh.swapaxes(0, 1)))
    assert_same_gradients(expected, result)
    assert np.array_equal(result.dx, expected.dx.swapaxes(0, 1))
    kernels, kernels_back = fastbptt.layer.vjp(xt, params, lengths=lengths, time_major=True)
    np.testing.assert_allclose(kernels.h, got.h, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(kernels_back(dh.swapaxes(0, 1)).dx, result.dx, rtol=1e-10,
                               atol=1e-12)


def test_check_layer_grad_reads_time_major_batches():
    rng = np.random.default_rng(5)
    params = model(rng, "gru", 2, np.float64)
    xt = rng.standard_normal((T, 3, L))
    dh = rng.standard_normal((T, 3, 2 * H))
    options = dict(lengths=[6, 3, 5], h0=rng.standard_normal((4, 3, H)), time_major=True)
    errors = fastbptt.check_layer_grad(xt, params, dh, **options)
    assert max(errors.values()) < 1e-6, errors

    def batch_first_dx(x, p, **kw):                 # a VJP that returns dx batch-first
        out, back = fastbptt.layer.vjp(x, p, **kw)

        def wrong(*args):
            r = back(*args)
            return r._replace(dx=np.ascontiguousarray(r.dx.swapaxes(0, 1)).reshape(r.dx.shape))
        return out, wrong

    errors = fastbptt.check_layer_grad(xt, params, dh, impl=batch_first_dx, **options)
    assert errors["x"] > 1e-2 and max(v for k, v in errors.items() if k != "x") < 1e-6


def test_messages_point_into_the_time_major_array():
    rng = np.random.default_rng(2)
    params = model(rng, "elman", 1, np.float32, num_layers=1)
    vjp = fastbptt.layer.vjp
    with pytest.raises(ValueError, match=r"x as token ids must be \(T,\) or \(T, B\); got "
                                         r"shape \(2, 3, 4\)"):
        vjp(np.zeros((2, 3, 4), np.int64), params, time_major=True)
    with pytest.raises(ValueError, match=r"x as dense floats must be \(T, L\) or \(T, B, L\)"):
        vjp(np.zeros((2, 3, 4, 5), np.float32), params, time_major=True)
    ids = np.zeros((T, 3), np.int64)
    ids[4, 1] = L
    with pytest.raises(ValueError, match=rf"x token ids must lie in \[0, {L}\).* at index "
                                         r"\(4, 1\)"):
        vjp(ids, params, time_major=True)
    ids[4, 1] = 0
    with pytest.raises(ValueError, match=r"lengths must have shape \(3,\) \(one per sequence "
                                         rf"of x, which has shape \({T}, 3\)\)"):
        vjp(ids, params, time_major=True, lengths=[1, 2])
    dense = np.zeros((T, 3, L), np.float32)
    dense[2, 0, 1] = np.nan
    with pytest.raises(ValueError, match=r"x holds a non-finite value \(nan at index "
                                         r"\(2, 0, 1\)\)"):
        vjp(dense, params, time_major=True)
    dense[2, 0, 1] = 0
    dense[5, 2, 3] = np.nan                    # a padding step of sequence 2: not read
    out, back = vjp(dense, params, time_major=True, lengths=[6, 6, 5])
    dh = np.zeros((T, 3, H), np.float32)
    dh[5, 2] = np.nan                          # padding again
    assert np.isfinite(back(dh).dx).all()
    dh[4, 2, 0] = np.inf
    with pytest.raises(ValueError, match=r"dh holds a non-finite value \(inf at index "
                                         r"\(4, 2, 0\)\)"):
        back(dh)
    with pytest.raises(ValueError, match=rf"dh must have shape \({T}, 3, {H}\), that of out\.h"):
        back(np.zeros((3, T, H), np.float32))
    with pytest.raises(TypeError, match="time_major must be True or False; got 'yes'"):
        vjp(dense, params, time_major="yes")
