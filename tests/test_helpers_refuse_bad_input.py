"""The public helpers around the entry points (sampling, optimisers, clipping, text,
gradient checks, the reference's building blocks, the JAX bridge) refuse what the entry
points refuse, naming the argument, instead of reading it wrongly or failing inside."""
import os

import numpy as np
import numpy.ma as ma
import pytest

import fastbptt
from fastbptt import reference
from fastbptt.sampling import sample_ids
from fastbptt.text import Codec, StreamBatcher

P = fastbptt.init_params(5, 4, 5, seed=0)
MASKED = "is a masked array, and fastbptt does not read masks"


def test_masked_arrays_are_refused_by_every_helper():
    grads = fastbptt.grad(np.array([0, 1, 2]), np.array([1, 2, 3]), P)
    masked_U = grads._replace(U=ma.masked_array(grads.U, mask=True))
    copy = fastbptt.Params(*(a.copy() for a in P))
    calls = [
        (lambda: sample_ids(P, ma.masked_array([0, 3], mask=[0, 1]), 3, rng=0),
         "prime_ids " + MASKED),
        (lambda: fastbptt.SGD(0.1).step(copy, masked_U), "grads 'U' " + MASKED),
        (lambda: fastbptt.clip_grads(masked_U, max_norm=1.0), "grads U " + MASKED),
        (lambda: Codec("abcde").decode(ma.masked_array([0, 1], mask=[1, 0])), "ids " + MASKED),
        (lambda: StreamBatcher(ma.masked_array(np.arange(8), mask=[1, 0] * 4), 1, 3),
         "ids " + MASKED),
        (lambda: fastbptt.from_torch({"weight_ih_l0": ma.masked_array(np.ones((4, 5))),
                                      "weight_hh_l0": np.zeros((4, 4))}),
         r"rnn_state_dict\['weight_ih_l0'\] " + MASKED),
    ]
    for call, phrase in calls:
        with pytest.raises(TypeError, match=phrase):
            call()
    assert np.array_equal(copy.U, P.U)


def test_the_jax_functions_refuse_masked_arrays():
    pytest.importorskip("jax", reason="needs JAX (the jax extra)")
    from fastbptt import jax as fj

    layer = fastbptt.Layer(P.U, P.W)
    x = np.array([[0, 1, 2], [3, 4, 0]])
    for kwargs, name in (({"lengths": ma.masked_array([3, 2], mask=[1, 0])}, "lengths"),
                         ({"h0": ma.masked_array(np.zeros((2, 4)), mask=True)}, "h0")):
        with pytest.raises(TypeError, match=f"^{name} " + MASKED):
            fj.rnn(layer, x, **kwargs)
    with pytest.raises(TypeError, match="^x " + MASKED):
        fj.rnn(layer, ma.masked_array(x, mask=x == 0))
    with pytest.raises(TypeError, match="^params U " + MASKED):
        fj.rnn(fastbptt.Layer(ma.masked_array(P.U), P.W), x)


def test_clip_grads_takes_float_arrays_and_real_bounds():
    with pytest.raises(TypeError, match="grads U must be a float NumPy array .*got int64"):
        fastbptt.clip_grads({"U": np.array([[6, 8]]), "W": np.zeros((1, 1)),
                             "V": np.zeros((1, 1))}, max_norm=5)
    with pytest.raises(TypeError, match="got complex64"):
        fastbptt.clip_grads(P._replace(U=P.U + 0j), max_norm=5)
    with pytest.raises(TypeError, match="got list"):
        fastbptt.clip_grads(P._replace(U=P.U.tolist()), max_norm=5)
    with pytest.raises(TypeError, match="max_norm must be a number or None; got complex64"):
        fastbptt.clip_grads(fastbptt.Params(*(a.copy() for a in P)),
                            max_norm=np.complex64(1 + 5j))


@pytest.mark.parametrize("make", [lambda v: fastbptt.SGD(v), lambda v: fastbptt.Adam(v),
                                  lambda v: fastbptt.SGD(0.1, momentum=v),
                                  lambda v: fastbptt.Adam(eps=v)])
def test_optimizer_options_may_not_be_complex(make):
    with pytest.raises(TypeError, match="must be a number; got complex128"):
        make(np.complex128(0.1 + 5j))


def test_sampling_checks_params_as_grad_does():
    codec = Codec.from_text("abcde")
    cases = [(P._replace(V=P.V[:, :3]), ValueError, r"params V must be \(output_size, 4\)"),
             (P._replace(c=P.c[:3]), ValueError, r"params c must have shape \(5,\)"),
             (P._replace(U=P.U + 0j), TypeError, "params U must hold floats"),
             (P._replace(U=P.U.astype(np.float64)), TypeError, "params must share one dtype"),
             (P._replace(V=P.V.tolist()), TypeError, "params must share one dtype")]
    for params, error, phrase in cases:
        with pytest.raises(error, match=phrase):
            fastbptt.sample(params, codec, prime="a", chars=3, rng=0)
    with pytest.raises(ValueError, match=r"unknown activation \['tanh'\]"):
        fastbptt.sample(P, codec, chars=3, activation=["tanh"])
    with pytest.raises(TypeError, match="codec must be a fastbptt.Codec .*got str"):
        fastbptt.sample(P, "abcde", prime="a", chars=3)


def test_text_helpers_check_their_arguments():
    ids = np.arange(20)
    cases = [(lambda: StreamBatcher(ids, 2.0, 3), "batch must be an int; got 2.0"),
             (lambda: StreamBatcher(ids, None, 3), "batch must be an int; got None"),
             (lambda: StreamBatcher(ids, 2, 2.5), "steps must be an int; got 2.5"),
             (lambda: StreamBatcher(ids + 0.5, 2, 3), "ids must be integer token ids; got "
                                                      "dtype float64"),
             (lambda: Codec([1, 2]), r"a vocabulary is characters .*got 1"),
             (lambda: Codec(["ab", "c"]), "got 'ab'"),
             (lambda: Codec("abc").encode(b"ab"), "text must be a str; got bytes"),
             (lambda: Codec.from_array([97.9, 98.2]), "codes must be a 1-D array of integer "
                                                      "code points; got 1-D float64")]
    for call, phrase in cases:
        with pytest.raises(TypeError, match=phrase):
            call()
    assert StreamBatcher(ids, 2, 3, segment=np.int64(9)).next().x.shape == (2, 3)


def test_a_batcher_state_without_a_position_is_refused():
    batcher = StreamBatcher(np.arange(100) % 5, 2, 5)
    for state, phrase in (({}, "the batcher state has no 'pos' or 'passes' entry"),
                          ({"pos": 3}, "the batcher state has no 'passes' entry"),
                          ([3, 0], "a batcher state must be a dict from state_dict"),
                          ({"pos": 99, "passes": 0}, "batcher position 99 .* outside")):
        with pytest.raises(ValueError, match=phrase):
            batcher.load_state_dict(state)
    assert batcher.state_dict() == {"pos": 0, "passes": 0}


def test_the_corpus_readers_take_one_path_and_say_what_max_chars_is_too_small_for(tmp_path):
    from fastbptt import corpus

    (tmp_path / "one.txt").write_text("hello there")
    one = corpus.read_files(str(tmp_path / "one.txt"))     # a path, not its characters
    assert one.text == "hello there" and one.description == "one.txt: 11 characters"
    assert corpus.read_files(tmp_path / "one.txt").text == "hello there"
    for bad, error, phrase in ((0, ValueError, "max_chars must be at least 1; got 0"),
                               (2.5, TypeError, "max_chars must be an int; got 2.5"),
                               (10, ValueError, "max_chars=10 is below the .* characters of "
                                                "the first standard-library source file")):
        with pytest.raises(error, match=phrase):
            corpus.default_corpus(bad)


def test_check_grad_names_a_bad_impl():
    p = fastbptt.init_params(3, 2, 3, seed=0, dtype=np.float64)
    x = np.array([0, 1, 2])
    with pytest.raises(TypeError, match="impl must be a function like fastbptt.bptt .*got str"):
        fastbptt.check_grad(x, x, p, impl="bptt")
    with pytest.raises(TypeError, match=r"impl must return what fastbptt.bptt returns "
                                        r"\(gradients in .grads\); got tuple"):
        fastbptt.check_grad(x, x, p, impl=lambda *a, **k: (0, 0))
    layer = fastbptt.Layer(p.U, p.W, p.b)
    with pytest.raises(TypeError, match=r"impl must return \(out, back\)"):
        fastbptt.check_layer_grad(x, layer, np.ones((3, 2)), impl=lambda *a, **k: 3)


def test_the_references_building_blocks_take_names_and_refuse_nonsense():
    a = np.array([-1.0, 2.0])
    np.testing.assert_array_equal(reference.activate(a, "tanh"), np.tanh(a))
    np.testing.assert_array_equal(reference.derivative(a, "relu"), [0.0, 1.0])
    loss, e = reference.output_error(np.array([1.0, 2.0]), np.array([0.0, 1.0]), False, "mse")
    assert loss == 1.0 and np.array_equal(e, [1.0, 1.0])
    assert reference.output_error(a, 1, True, "softmax_ce")[0] == \
        reference.output_error(a, 1, True, 0)[0]
    with pytest.raises(ValueError, match="activation must be one of tanh, sigmoid, relu, "
                                         "identity or its code 0 ... 3; got 'foo'"):
        reference.activate(a, "foo")
    with pytest.raises(ValueError, match="activation must be .*got 7"):
        reference.derivative(a, 7)
    with pytest.raises(ValueError, match="loss must be 'softmax_ce' or 'mse' .*got 'bad'"):
        reference.output_error(a, 1, True, "bad")
    for truncate, stride in ((-1, 1), (2, 0), (0, 1), (2, 3)):
        with pytest.raises(ValueError, match="needs 1 <= stride <= truncate"):
            reference.window_start(3, truncate, stride)
    assert reference.windows(4, 3, 1) == {0: [0, 1, 2], 1: [3]}


def test_messages_say_the_value_and_a_fix_that_applies():
    p64 = fastbptt.init_params(5, 4, 3, seed=0, dtype=np.float64)
    x = np.zeros((2, 3, 5), np.longdouble)
    x[1, 2, 4] = np.longdouble("1e400")
    with pytest.raises(ValueError, match=r"overflows float64, the params' dtype \(1e\+400 at "
                                         r"index \(1, 2, 4\)\); pass values within "
                                         r"\+-1.798e\+308, or check_finite"):
        fastbptt.loss(x, np.zeros((2, 3), int), p64)
    y = np.ones((1, 2, 3))
    y[0, 0, 0], y[0, 1, 1] = -5.0, np.nan
    with pytest.raises(ValueError, match=r"non-negative weights; got -5.0 at index \(0, 0, 0\)"):
        fastbptt.loss(np.array([[1, 2]]), y, p64, check_finite=False)
    for x, y in (([], []), ([[]], [[]])):
        assert fastbptt.loss(x, y, p64) == 0.0


def test_sizes_names_paths_and_numbers_beyond_floats_are_named(tmp_path):
    """Each of these failed inside (NumPy's sqrt of a 2**64 size, str.startswith of an int
    name, bytes joined with str, an OverflowError of float()) or read wrongly (a generator
    of paths came back empty; an int path opened that file descriptor and closed it)."""
    from fastbptt import corpus, gradcheck
    from fastbptt.params import LeafError, from_leaves, leaf_shapes
    from fastbptt.sampling import sample_chunks
    from fastbptt.train import TrainOptions
    (tmp_path / "a.txt").write_text("hello there")
    calls = [
        (lambda: fastbptt.init_params(3, 2**64, 3), ValueError,
         "more than memory can hold"),
        (lambda: leaf_shapes("a", 3, 2), TypeError, "input_size must be an int; got str"),
        (lambda: fastbptt.init_params(*[np.int64(2**32)] * 3), ValueError,   # wrapped
         "make 55,340,232,229,718,589,440 parameters, more than memory can hold"),
        (lambda: leaf_shapes(2, 3, 2, cell="foo"), ValueError, "unknown cell 'foo'"),
        (lambda: from_leaves({1: P.U}), LeafError, "unknown name 1"),
        (lambda: from_leaves(None), TypeError, "named must be a dict of arrays by name"),
        (lambda: corpus.read_files([1]), TypeError, "paths must be file paths"),
        (lambda: corpus.read_files(None), TypeError, "paths must be a file path or a list"),
        (lambda: corpus.read_files([]), ValueError, "paths names no file"),
        (lambda: corpus.read_files(str(tmp_path / "a.txt")).split("0.5"), TypeError,
         "val_fraction must be a number; got str"),
        (lambda: fastbptt.sample(P, Codec.from_text("abcde"), chars=3, temperature=10**400),
         ValueError, "got an int of 401 digits"),
        (lambda: fastbptt.sample(P, Codec.from_text("abcde"), chars=3, temperature=10**5000),
         ValueError, "got an int of 5001 digits"),        # beyond str()'s 4,300 digits
        (lambda: TrainOptions(lr=10**400).check(), ValueError,
         "--lr must be a finite number above 0; got an int of 401 digits"),
        (lambda: TrainOptions(hidden=-10**400).check(), ValueError,
         "--hidden must be an integer of at least 1; got an int of 401 digits"),
        (lambda: sample_chunks(P, Codec.from_text("abcde"), chars=3, chunk="a"), TypeError,
         "chunk must be an int"),
        (lambda: gradcheck.check_grad(np.zeros((1, 3), int), np.zeros((1, 3), int), P,
                                      eps=10**400), ValueError,
         "eps must be a finite number above 0 .* got an int of 401 digits"),
    ]
    for call, error, words in calls:
        with pytest.raises(error, match=words):
            call()
    # NumPy's int32 wrapped around in G H: an LSTM's W was (-1894967296, 600000000)
    assert leaf_shapes(*np.int32([10, 600_000_000, 5]), cell="lstm")["layers.0.0.W"] == \
        (2_400_000_000, 600_000_000)
    path = str(tmp_path / "a.txt")
    assert corpus.read_files(os.fsencode(path)).text == "hello there"
    both = corpus.read_files(p for p in (path, tmp_path / "a.txt"))
    assert both.text == "hello there" * 2 and both.description.startswith("a.txt, a.txt: ")


def test_numbers_in_messages_read_as_numbers():
    """NumPy's scalars in a range's message read as the numbers they are ("got 0", not
    "got np.int64(0)"), and a size beyond a float as its leading digits."""
    from fastbptt._preflight import _size
    from fastbptt.train import TrainOptions
    with pytest.raises(ValueError, match=r"--hidden must be an integer of at least 1; got 0$"):
        TrainOptions(hidden=np.int64(0)).check()
    with pytest.raises(ValueError, match=r"--lr must be a finite number above 0; got inf$"):
        TrainOptions(lr=np.float64("inf")).check()
    assert _size(2**40 * (10**16 - 1)) == "9.99e15 TB"
    assert _size(2**40 * 10**400) == "1.00e400 TB"
