"""Gradient clipping, the character codec, and the stream batcher's coverage and state."""
import numpy as np
import pytest

import fastbptt
from fastbptt.text import Codec, StreamBatcher, unigram_entropy


def grads_of(U, W, V, b=None, c=None):
    return fastbptt.Params(*(None if a is None else np.array(a, np.float64)
                             for a in (U, W, V, b, c)))


def test_clip_by_norm_returns_the_norm_before():
    g = grads_of([[3.0]], [[0.0]], [[4.0]], [0.0], [0.0])     # norm 5
    norm = fastbptt.clip_grads(g, max_norm=1.0)
    assert norm == pytest.approx(5.0)
    assert g.U[0, 0] == pytest.approx(0.6) and g.V[0, 0] == pytest.approx(0.8)
    assert fastbptt.clip_grads(g, max_norm=1.0) == pytest.approx(1.0)


def test_norm_below_the_limit_leaves_gradients_alone():
    g = grads_of([[0.3]], [[0.4]], [[0.0]])
    assert fastbptt.clip_grads(g, max_norm=1.0) == pytest.approx(0.5)
    assert g.U[0, 0] == 0.3 and g.W[0, 0] == 0.4


def test_clip_by_value_in_place_for_dicts_and_tuples():
    d = {"U": np.array([[-7.0, 2.0]]), "W": np.array([[6.0]]), "V": np.array([[-1.0]])}
    norm = fastbptt.clip_grads(d, max_value=5.0)
    assert norm == pytest.approx(np.sqrt(49 + 4 + 36 + 1))
    np.testing.assert_array_equal(d["U"], [[-5.0, 2.0]])
    np.testing.assert_array_equal(d["W"], [[5.0]])
    t = (np.array([[10.0]], np.float32), np.array([[0.0]], np.float32),
         np.array([[-10.0]], np.float32))
    fastbptt.clip_grads(t, max_value=1.0)
    assert t[0][0, 0] == 1 and t[2][0, 0] == -1 and t[0].dtype == np.float32


def test_a_value_bound_beyond_float32s_range_clips_without_a_warning():
    """np.clip cast 1e300 to float32 and warned of the overflow, an error where warnings
    are (the test suite's); the bound is inf there, as the cast gives."""
    g = fastbptt.Params(np.full((1, 2), np.inf, np.float32), np.ones((1, 1), np.float32),
                        np.full((1, 2), -3e38, np.float32))
    fastbptt.clip_grads(g, max_value=1e300)
    assert np.isposinf(g.U).all() and (g.V == np.float32(-3e38)).all()


def test_both_modes_norm_first_then_value():
    g = grads_of([[30.0, 0.0]], [[40.0]], [[0.0]])            # norm 50
    assert fastbptt.clip_grads(g, max_norm=10.0, max_value=7.0) == pytest.approx(50.0)
    np.testing.assert_allclose(g.U, [[6.0, 0.0]])
    np.testing.assert_allclose(g.W, [[7.0]])                  # 8 scaled, then clipped


def test_clip_rejects_bad_limits():
    g = grads_of([[1.0]], [[1.0]], [[1.0]])
    with pytest.raises(ValueError):
        fastbptt.clip_grads(g, max_norm=0.0)
    with pytest.raises(ValueError):
        fastbptt.clip_grads(g, max_value=-1.0)


def test_bad_limits_are_refused_before_any_gradient_changes():
    g = grads_of([[30.0, 0.0]], [[40.0]], [[0.0]])
    with pytest.raises(ValueError, match="max_value must be positive"):
        fastbptt.clip_grads(g, max_norm=0.1, max_value=-1)
    np.testing.assert_array_equal(g.U, [[30.0, 0.0]])
    for bad in ("1", True, 1j):
        with pytest.raises(TypeError, match="max_norm must be a number or None"):
            fastbptt.clip_grads(g, max_norm=bad)
    with pytest.raises(ValueError, match="max_norm must be positive"):
        fastbptt.clip_grads(g, max_norm=float("nan"))


def test_the_norm_of_float32_gradients_whose_squares_overflow():
    """Entries of 1e20 square beyond float32: the norm is summed again in float64, and
    clipping scales them instead of zeroing them."""
    g = fastbptt.Params(np.full((2, 3), 1e20, np.float32), np.zeros((2, 2), np.float32),
                        np.full((3, 2), 1e-3, np.float32))
    norm = fastbptt.clip_grads(g, max_norm=1.0)
    assert norm == pytest.approx(np.sqrt(6) * 1e20, rel=1e-6)
    np.testing.assert_allclose(g.U, 1 / np.sqrt(6), rtol=1e-6)
    assert fastbptt.clip.global_norm(g._replace(W=np.full((2, 2), np.inf, np.float32))) == np.inf


@pytest.mark.parametrize("big", [1e200, 1e308])
def test_the_norm_of_float64_gradients_whose_squares_overflow(big):
    """Entries beyond 1.3e154 square beyond float64: the norm was inf and clipping zeroed
    every gradient. A norm beyond float64's range (2e308) is inf; clipping still scales."""
    g = fastbptt.Params(np.full((2, 2), big), np.full((2, 2), 3e38, np.float32),
                        np.full((3, 2), 1.0, np.float32))
    norm = fastbptt.clip_grads(g, max_norm=1.0)
    assert norm == (pytest.approx(2 * big, rel=1e-12) if big < 1e300 else np.inf)
    np.testing.assert_allclose(g.U, 0.5, rtol=1e-12)
    assert fastbptt.clip.global_norm(g) == pytest.approx(1.0, rel=1e-7)
    assert not g.W.any() and not g.V.any()      # scaled below float32's range: 0, rightly
    g = fastbptt.Params(np.full((1, 1), big), np.full((1, 1), np.inf), np.ones((1, 1)))
    assert fastbptt.clip.global_norm(g) == np.inf           # not NaN: inf beside a scaled part
    floats = fastbptt.Params(np.full((2, 2), 3e38, np.float32), np.ones((1, 1), np.float32),
                             np.zeros((1, 1), np.float32))
    fastbptt.clip_grads(floats, max_norm=1.0)         # 1 / 6e38 is below float32's normals
    np.testing.assert_allclose(floats.U, 0.5, rtol=1e-6)


@pytest.mark.parametrize("tiny", [1e-200, 1e-160])
def test_the_norm_of_tiny_float64_gradients_beside_a_zero_one(tiny):
    """Squares below float64's normals are summed again scaled; an all-zero gradient
    beside them scaled them back down to 0 (or lost their digits)."""
    g = fastbptt.Params(np.full((4, 3), tiny), np.full((4, 4), tiny), np.zeros((3, 4)))
    assert fastbptt.clip.global_norm(g) == pytest.approx(np.sqrt(28) * tiny, rel=1e-12)
    norm = fastbptt.clip_grads(g, max_norm=tiny)
    assert norm == pytest.approx(np.sqrt(28) * tiny, rel=1e-12)
    np.testing.assert_allclose(g.U, tiny / np.sqrt(28), rtol=1e-12)


def test_codec_decodes_only_its_own_ids():
    codec = Codec.from_text("hello world")
    assert codec.decode(codec.encode("low")) == "low" and codec.decode([]) == ""
    for bad in ([-1], [len(codec)], [99]):              # -1: a target step without loss
        with pytest.raises(ValueError, match=rf"ids must lie in \[0, {len(codec)}\) .*; "
                                             rf"got {bad[0]}"):
            codec.decode(bad)
    with pytest.raises(TypeError, match="ids must be integers; got float64"):
        codec.decode([1.7])


def test_codec_round_trip_and_serialisation():
    text = "def f(x):\n    return x * 2  # café ✓\n"
    codec = Codec.from_text(text)
    ids = codec.encode(text)
    assert ids.dtype == np.int64 and ids.max() == len(codec) - 1
    assert codec.decode(ids) == text
    again = Codec.from_array(codec.to_array())
    assert again == codec and again.decode(again.encode(text)) == text
    with pytest.raises(ValueError, match="not in the vocabulary: 'Zz'"):
        codec.encode("Zz")
    assert codec.encode("").size == 0


def test_unigram_entropy():
    assert unigram_entropy(np.array([0, 1, 0, 1]), 3) == pytest.approx(np.log(2))
    assert unigram_entropy(np.array([2, 2, 2]), 3) == 0.0


def test_batcher_covers_each_segment_once_per_pass():
    ids = np.arange(103)
    b = StreamBatcher(ids, batch=4, steps=7)          # segments of 25: 4 calls of 7, last 4
    assert b.segment == 25 and b.calls_per_pass == 4
    xs, ys, fresh = [], [], []
    for _ in range(b.calls_per_pass):
        x, y, f = b.next()
        xs.append(x)
        ys.append(y)
        fresh.append(f)
    assert fresh == [True, False, False, False]
    assert [x.shape[1] for x in xs] == [7, 7, 7, 4]
    X, Y = np.concatenate(xs, axis=1), np.concatenate(ys, axis=1)
    np.testing.assert_array_equal(X, np.arange(100).reshape(4, 25))
    np.testing.assert_array_equal(Y, X + 1)          # y is the next character
    x, y, f = b.next()                                # a new pass starts over
    assert f and b.passes == 1
    np.testing.assert_array_equal(x, xs[0])


def test_batcher_state_round_trip():
    ids = np.arange(50)
    a = StreamBatcher(ids, 3, 4)
    for _ in range(5):
        a.next()
    b = StreamBatcher(ids, 3, 4)
    b.load_state_dict(a.state_dict())
    for _ in range(6):
        np.testing.assert_array_equal(a.next().x, b.next().x)


@pytest.mark.parametrize("steps, length", [(6, 30), (7, 30), (30, 30)])
def test_chunked_calls_equal_one_truncated_call(steps, length):
    """SPEC.md §3: calls of T steps carrying h_final into h0, summed, equal one call over
    each whole segment with truncate = stride = T (loss and every gradient)."""
    rng = np.random.default_rng(steps)
    B, L, H = 3, 6, 5
    ids = rng.integers(0, L, size=B * length + 1)
    params = fastbptt.init_params(L, H, L, dtype=np.float64, seed=2)
    batcher = StreamBatcher(ids, B, steps)
    assert batcher.segment == length
    total, sums, h = 0.0, None, None
    for _ in range(batcher.calls_per_pass):
        x, y, fresh = batcher.next()
        out = fastbptt.bptt(x, y, params, truncate=steps, stride=steps,
                            h0=None if fresh else h)
        h = out.h_final
        total += out.loss
        sums = out.grads if sums is None else fastbptt.Params(
            *(a + g for a, g in zip(sums, out.grads)))
    whole = fastbptt.bptt(batcher.inputs, batcher.targets, params, truncate=steps,
                          stride=steps)
    assert total == pytest.approx(whole.loss, rel=1e-12)
    for name, got, want in zip(params._fields, sums, whole.grads):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(h, whole.h_final, rtol=1e-12)
    # per cursor: each row alone is the same stream
    for b in range(B):
        one = fastbptt.bptt(batcher.inputs[b], batcher.targets[b], params, truncate=steps,
                            stride=steps)
        np.testing.assert_allclose(one.h_final, whole.h_final[b], rtol=1e-12)


def test_window_truncation_runs_in_the_stream_loop():
    """stride=1 with the state carried: each call equals the reference's."""
    from fastbptt import reference

    rng = np.random.default_rng(5)
    ids = rng.integers(0, 4, size=41)
    params = fastbptt.init_params(4, 3, 4, dtype=np.float64, seed=3)
    batcher = StreamBatcher(ids, 2, 8)
    h = None
    for _ in range(batcher.calls_per_pass):
        x, y, fresh = batcher.next()
        h0 = np.zeros((2, 3)) if fresh else h
        out = fastbptt.bptt(x, y, params, truncate=3, stride=1, h0=h0)
        ref = reference.bptt(x, y, params, truncate=3, stride=1, h0=h0)
        assert out.loss == pytest.approx(ref.loss, rel=1e-12)
        np.testing.assert_allclose(out.grads.W, ref.grads.W, rtol=1e-9, atol=1e-12)
        h = out.h_final


def test_token_ids_are_integers_of_0_or_more_else_refused_in_one_line():
    """evaluate truncated float ids and took bools; StreamBatcher wrapped a uint64 id of
    2**64 - 1 to -1, a step without loss; a negative segment was named as a short stream."""
    from fastbptt.train import evaluate
    p = fastbptt.init_params(5, 4, 5, seed=0)
    ids = np.arange(40) % 5
    for bad, error, words in [(ids + 0.9, TypeError, "ids must be integer token ids; got "
                                                      "dtype float64"),
                              (ids % 2 == 1, TypeError, "got dtype bool"),
                              (np.array([0, 1, 2, 2**64 - 1], np.uint64), ValueError,
                               r"ids must be token ids, in \[0, 2\*\*63\)"),
                              (np.array([0, 1, -2, 3]), ValueError,
                               "ids must be token ids, 0 or more; got -2")]:
        with pytest.raises(error, match=words):
            evaluate(p, bad)
        with pytest.raises(error, match=words):
            StreamBatcher(bad, 1, 2)
    with pytest.raises(ValueError, match="segment must be at least 1"):
        StreamBatcher(np.arange(21), 2, 3, segment=-1)
    with pytest.raises(TypeError, match="streams must be an int"):
        evaluate(p, ids, streams="a")
    with pytest.raises(ValueError, match="streams must be at least 1; got -3"):
        evaluate(p, ids, streams=-3)
    assert np.isnan(unigram_entropy([], 3))


def test_a_codec_holds_unicode_characters_only():
    """A lone surrogate made a codec that could not encode its own text."""
    with pytest.raises(ValueError, match="a lone surrogate"):
        Codec.from_text("ab\udc80")
    for codes, words in (([-1], r"codes must be Unicode code points, in \[0, 0x10FFFF\]; "
                                "got -1"),
                         (np.array([2**40]), "codes must be Unicode code points"),
                         ([0xD800], "a lone surrogate")):
        with pytest.raises(ValueError, match=words):
            Codec.from_array(codes)
    with pytest.raises(TypeError, match="chars must be characters"):
        Codec(None)
    with pytest.raises(ValueError, match=r"^characters not in the vocabulary: '\\ud800'$"):
        Codec.from_text("abc").encode("a\ud800")       # not the UTF-32 codec's error


def test_a_trainer_checks_its_options_codec_and_ids():
    from fastbptt.train import TrainOptions, Trainer
    codec, ids = Codec.from_text("abcde"), np.arange(100) % 5
    with pytest.raises(ValueError, match="--batch must be an integer of at least 1; got 0"):
        Trainer(TrainOptions(hidden=4, cell="elman", batch=0), ids, codec)
    with pytest.raises(ValueError, match="a stream of 100 ids is too short for 200 cursors"):
        Trainer(TrainOptions(hidden=4, cell="elman", batch=200), ids, codec)
    with pytest.raises(TypeError, match="codec must be a fastbptt.text.Codec"):
        Trainer(TrainOptions(hidden=4, cell="elman"), ids, None)
    trainer = Trainer(TrainOptions(hidden=4, cell="elman", batch=2, seq_length=5), ids, codec)
    with pytest.raises(TypeError, match="prime must be a str"):
        trainer.sample(prime=None)


def test_read_only_gradients_are_named_and_huge_limits_clip_nothing():
    frozen = np.ones((2, 2))
    frozen.setflags(write=False)
    g = {"U": np.ones((2, 2)), "W": frozen}
    with pytest.raises(ValueError, match="grads W is read-only, and clip_grads clips in place"):
        fastbptt.clip_grads(g, max_norm=1.0)
    assert fastbptt.clip_grads(g) == pytest.approx(np.sqrt(8))    # nothing to write
    assert fastbptt.clip_grads(dict(g, W=np.ones((2, 2))), max_norm=10**400) == \
        pytest.approx(np.sqrt(8))                         # an int beyond floats: no limit
    fastbptt.set_num_threads(np.int64(1))                  # NumPy's ints, as elsewhere
    assert fastbptt.get_num_threads() == 1
