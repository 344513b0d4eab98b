"""Sampling: a state that overflows stops the draw, and every argument of `sample_ids`
is checked before anything runs."""
import numpy as np
import pytest

import fastbptt
from fastbptt.sampling import sample_chunks, sample_ids
from fastbptt.text import Codec


def _blowing_up():
    """A relu Elman model whose state doubles at every step: h overflows float32 in about
    130 steps, and its logits become NaN."""
    p = fastbptt.init_params(5, 4, 5, seed=0)
    return p._replace(W=2 * np.eye(4, dtype=np.float32), U=np.abs(p.U) + 0.1)


@pytest.mark.parametrize("prime", ["", "ab"])
def test_a_state_that_overflows_stops_sampling_with_a_value_error(prime):
    codec = Codec.from_text("abcde")
    with pytest.raises(ValueError, match=r"the model's state overflowed after \d+ prime and "
                                         r"\d+ drawn ids \(an output is NaN or inf\)"):
        fastbptt.sample(_blowing_up(), codec, prime=prime, chars=400, activation="relu",
                        rng=np.random.default_rng(0))
    # before the overflow, the same model draws; ids stay in range
    ids, h, _ = sample_ids(_blowing_up(), [0, 1], 20, activation="relu", rng=0)
    assert ids.min() >= 0 and ids.max() < 5 and np.isfinite(h).all()


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_an_activation_for_a_gated_cell_is_refused_with_or_without_a_prime(cell):
    model = fastbptt.init_params(5, 4, 5, cell=cell, seed=0)
    for prime in ([], [1, 2]):
        with pytest.raises(ValueError, match=r"activation='relu' applies to the Elman cell "
                                             r"only"):
            sample_ids(model, prime, 3, activation="relu", rng=0)


def test_sample_ids_checks_its_states_and_prime():
    gru = fastbptt.init_params(5, 4, 5, cell="gru", num_layers=2, seed=0)
    lstm = fastbptt.init_params(5, 4, 5, cell="lstm", seed=0)
    elman = fastbptt.init_params(5, 4, 5, seed=0)
    cases = [
        (gru, {"h0": np.zeros(8)}, ValueError, r"h0 must have shape \(2, 4\) \(the model's "
                                               r"\(layers, H\)\); got \(8,\)"),
        (elman, {"h0": np.zeros((1, 4))}, ValueError, r"h0 must have shape \(4,\)"),
        (elman, {"h0": np.full(4, np.nan)}, ValueError, r"^h0 holds a non-finite value"),
        (elman, {"h0": np.zeros(4, complex)}, TypeError, "h0 must hold real numbers"),
        (gru, {"c0": np.zeros((2, 4))}, ValueError, "c0 is the LSTM's cell state; the gru"),
        (lstm, {"c0": np.zeros(3)}, ValueError, r"c0 must have shape \(1, 4\)"),
        (elman, {"prime_ids": [7]}, ValueError, r"prime_ids must lie in \[0, 5\); got 7"),
        (elman, {"prime_ids": [-1]}, ValueError, r"prime_ids must lie in \[0, 5\)"),
        (elman, {"prime_ids": [1.7]}, TypeError, "prime_ids must be a 1-D sequence of "
                                                 "integer ids; got 1-D float64"),
        (elman, {"prime_ids": [[1, 2]]}, TypeError, "got 2-D int"),
    ]
    for params, change, error, phrase in cases:
        kwargs = {"prime_ids": [1, 2], **change}
        with pytest.raises(error, match=phrase):
            sample_ids(params, n=3, rng=0, **kwargs)
    ids, h, c = sample_ids(lstm, np.array([1, 2], np.uint8), 3, rng=0,
                           h0=np.zeros((1, 4)), c0=np.ones((1, 4)))
    assert ids.shape == (3,) and h.shape == c.shape == (1, 4)


@pytest.mark.parametrize("cell, layers", [("elman", 1), ("lstm", 2), ("gru", 1)])
def test_a_sample_in_chunks_is_the_sample_drawn_at_once(cell, layers):
    """The chunks join into the characters of one call of `sample_ids` from the same
    generator state: each chunk starts from the state the last one reached."""
    model = fastbptt.init_params(6, 5, 6, cell=cell, num_layers=layers, seed=1)
    codec = Codec.from_text("abcdef")
    pieces = list(sample_chunks(model, codec, prime="ab", chars=23, chunk=5,
                                temperature=0.7, rng=np.random.default_rng(3)))
    assert [len(p) for p in pieces] == [5, 5, 5, 5, 3]
    whole, _, _ = sample_ids(model, codec.encode("ab"), 23, temperature=0.7,
                             rng=np.random.default_rng(3))
    assert "".join(pieces) == codec.decode(whole)
    assert fastbptt.sample(model, codec, prime="ab", chars=23, temperature=0.7,
                           rng=np.random.default_rng(3)) == codec.decode(whole)


def test_sample_chunks_checks_its_arguments_before_it_is_iterated():
    codec, lstm = Codec.from_text("abcde"), fastbptt.init_params(5, 4, 5, cell="lstm", seed=0)
    for options, error in ((dict(chunk=0), "chunk must be an int of at least 1"),
                           (dict(chars=-1), "^chars must be at least 0; got -1$"),
                           (dict(chars=0, temperature=0.0), "temperature must be positive"),
                           (dict(chars=0, activation="relu"), "applies to the Elman cell")):
        with pytest.raises(ValueError, match=error):
            sample_chunks(lstm, codec, **options)
    with pytest.raises(TypeError, match="^chars must be an int, the number of characters to "
                                        "draw; got 1.5$"):
        sample_chunks(lstm, codec, chars=1.5)


@pytest.mark.parametrize("chunk", [5, 7, 1000])
@pytest.mark.parametrize("prime", ["", "ab"])
def test_an_overflow_in_a_later_chunk_is_counted_from_the_start(chunk, prime):
    codec = Codec.from_text("abcde")
    with pytest.raises(ValueError) as whole:
        sample_ids(_blowing_up(), codec.encode(prime), 400, activation="relu", rng=0)
    with pytest.raises(ValueError) as chunked:
        list(sample_chunks(_blowing_up(), codec, prime=prime, chars=400, chunk=chunk,
                           activation="relu", rng=0))
    assert str(chunked.value) == str(whole.value)
    assert f"after {len(prime)} prime and " in str(whole.value)
