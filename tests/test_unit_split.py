"""Narrow batches on two threads split by hidden units (`_kernels.narrow_units`): the
same bits as split by sequences, chosen where it should be, and a failing thread that
cannot leave the others waiting."""
import numpy as np
import pytest

import fastbptt
from fastbptt import _stack, _threads
from fastbptt._inputs import prepare

two_cpus = pytest.mark.skipif(
    _threads.MAX_THREADS < 2 or not _threads.can_slice(),
    reason="needs two CPUs and OpenBLAS's per-thread count (0.3.27: SciPy 1.13 or later)")


def leaves(value, name=""):
    """(name, array) of every array in a result, in order."""
    if isinstance(value, np.ndarray):
        return [(name, value)]
    if hasattr(value, "_fields"):
        return [leaf for f in value._fields for leaf in leaves(getattr(value, f), f"{name}.{f}")]
    if isinstance(value, (tuple, list)):
        return [leaf for i, v in enumerate(value) for leaf in leaves(v, f"{name}[{i}]")]
    if isinstance(value, float):
        return [(name, np.array(value))]
    return []


def on_two_threads(run, units, monkeypatch):
    """run() on two threads, split by units (any W) or by sequences; and the number of
    unit-split time loops it ran."""
    ran = []
    real = _stack.run_parties

    def counting(fn, parts, *args):
        ran.append(fn.__name__)
        return real(fn, parts, *args)

    monkeypatch.setattr(_stack, "run_parties", counting)
    monkeypatch.setattr(_stack, "UNITS_BYTES", 0 if units else 1 << 62)
    monkeypatch.setattr(_stack, "FEW_UNITS_BYTES", 0 if units else 1 << 62)
    fastbptt.set_num_threads(2)
    try:
        return run(), ran
    finally:
        fastbptt.set_num_threads(1)


MODELS = [("elman", 1, False, False), ("lstm", 1, False, False), ("gru", 1, False, False),
          ("lstm", 2, True, False), ("gru", 2, True, True), ("elman", 2, False, True),
          ("lstm", 1, False, True)]
CUTS = [(None, 1), (4, 4), (5, 2)]      # full, chunks, windows


@two_cpus
@pytest.mark.parametrize("cell,layers,bidirectional,dense,truncate,stride", [
    model + cut for model in MODELS for cut in CUTS
    # (refused: truncation with a reverse direction, windows on stacks)
    if not (cut[0] and model[2] or cut[0] == 5 and model[1] > 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_units_give_the_bits_of_sequence_slices(cell, layers, bidirectional, dense, dtype,
                                                truncate, stride, monkeypatch):
    """Every result of `bptt` and of the layer's forward and backward (dh_final and
    dc_final given) is the same array whichever way two threads split the batch; on one
    layer of token ids the final states also equal one thread's. Windows (5, 2) run
    their backward pass feature-major on one layer: there only the forward pass splits
    by units."""
    rng = np.random.default_rng(7)
    B, T, L, C = 19, 13, 9, 6
    H = 128 if dtype == np.float32 else 64         # two whole panels of units
    params = fastbptt.init_params(L, H, C, cell=cell, num_layers=layers,
                                  bidirectional=bidirectional, dtype=dtype, seed=3)
    x = rng.normal(size=(B, T, L)).astype(dtype) if dense else rng.integers(0, L, (B, T))
    y = rng.integers(0, C, (B, T))
    lengths = rng.integers(1, T + 1, B)
    S = layers * (2 if bidirectional else 1)
    h0 = rng.normal(size=(S, B, H)).astype(dtype)
    c0 = rng.normal(size=(S, B, H)).astype(dtype) if cell == "lstm" else None
    one_layer = fastbptt.init_params(L, H, C, cell=cell, dtype=dtype, seed=4)
    layer = fastbptt.Layer(one_layer.U, one_layer.W, one_layer.b) if cell == "elman" \
        else one_layer.layers[0][0]
    if cell == "elman" and S == 1:                  # a single layer's Params: h0 (B, H)
        h0 = h0[0]
    xd = rng.normal(size=(B, T, L)).astype(dtype)
    dh = rng.normal(size=(B, T, H)).astype(dtype)
    dh_final = rng.normal(size=(B, H)).astype(dtype)
    dc_final = rng.normal(size=(B, H)).astype(dtype) if cell == "lstm" else None
    cut = dict(truncate=truncate, stride=stride) if truncate else {}

    def run():
        r = fastbptt.bptt(x, y, params, lengths=lengths, h0=h0, c0=c0, **cut)
        out, back = fastbptt.layer.vjp(xd, layer, lengths=lengths, cell=cell,
                                       h0=h0.reshape(-1, B, H)[0],
                                       c0=None if c0 is None else c0[0], **cut)
        return r, out, back(dh, dh_final, dc_final)

    by_units, ran = on_two_threads(run, True, monkeypatch)
    by_sequences, none = on_two_threads(run, False, monkeypatch)
    assert none == []
    assert "forward_units" in ran
    assert ("backward_units" in ran) == (truncate != 5)
    units, sequences = leaves(by_units), leaves(by_sequences)
    assert [n for n, _ in units] == [n for n, _ in sequences] and len(units) > 10
    for (name, a), (_, b) in zip(units, sequences):
        np.testing.assert_array_equal(a, b, err_msg=name)
    if not dense and layers == 1:   # (dense inputs' products: slices of rows in BLAS)
        one = run()
        np.testing.assert_array_equal(by_units[0].h_final, one[0].h_final)
        if cell == "lstm":
            np.testing.assert_array_equal(by_units[0].c_final, one[0].c_final)


@two_cpus
@pytest.mark.parametrize("cell,B", [("lstm", 4), ("gru", 7), ("elman", 9), ("lstm", 15),
                                    ("lstm", 1), ("gru", 2), ("elman", 3)])
@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batches_too_small_to_slice_split_by_units_as_one_thread_runs_them(
        cell, B, dense, dtype, monkeypatch):
    """Fewer than two slices' worth of sequences (`narrow.PANELS` a thread) split by units
    on two threads: on token ids the states are one thread's bits, the gradients one
    thread's to the rounding of products that BLAS may group otherwise (as are dense
    inputs' gates, cut into slices of rows). Fewer than NARROW walk W in panels when
    split (whole rows on one thread), whose sums run in another order: their states
    agree to that rounding."""
    rng = np.random.default_rng(11)
    T, L, C = 17, 9, 6
    H = 128 if dtype == np.float32 else 64         # two whole panels of units
    params = fastbptt.init_params(L, H, C, cell=cell, dtype=dtype, seed=5)
    x = rng.normal(size=(B, T, L)).astype(dtype) if dense else rng.integers(0, L, (B, T))
    y = rng.integers(0, C, (B, T))
    lengths = rng.integers(1, T + 1, B)
    h0 = rng.normal(size=(1, B, H)).astype(dtype)
    c0 = rng.normal(size=(1, B, H)).astype(dtype) if cell == "lstm" else None
    if cell == "elman":
        h0 = h0[0]

    def run():
        return fastbptt.bptt(x, y, params, lengths=lengths, h0=h0, c0=c0)

    one = run()
    two, ran = on_two_threads(run, True, monkeypatch)
    assert ran == ["forward_units", "backward_units"]
    tol = 1e-5 if dtype == np.float32 else 1e-12
    if B >= _stack.NARROW and not dense:
        np.testing.assert_array_equal(two.h_final, one.h_final)
        if cell == "lstm":
            np.testing.assert_array_equal(two.c_final, one.c_final)
    got, expected = leaves(two), leaves(one)
    assert [n for n, _ in got] == [n for n, _ in expected] and len(got) > 5
    for (name, a), (_, b) in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=name)


@two_cpus
@pytest.mark.parametrize("B,H,cell,dtype,threads,units", [
    (32, 1024, "lstm", np.float32, 2, ((0, 512, 0, 16), (512, 1024, 16, 32))),
    (19, 1024, "lstm", np.float32, 2, ((0, 512, 0, 8), (512, 1024, 8, 19))),
    (32, 1024, "lstm", np.float32, 1, None),        # one thread: nothing to split
    (32, 512, "lstm", np.float32, 2, None),         # W of 4 MB: by sequences
    (32, 2048, "elman", np.float32, 2, ((0, 1024, 0, 16), (1024, 2048, 16, 32))),
    (32, 1056, "lstm", np.float32, 2, None),        # 528 units a thread: not whole panels
    (32, 1024, "gru", np.float64, 2, ((0, 512, 0, 16), (512, 1024, 16, 32))),
    # too few sequences to slice by 8: units all the same, each thread the start and
    # finish of a slice of 4 (`_stack.GATED_SLICES_BYTES`) or of half the batch
    (12, 1024, "lstm", np.float32, 2, ((0, 512, 0, 4), (512, 1024, 4, 12))),
    (5, 1024, "gru", np.float64, 2, ((0, 512, 0, 2), (512, 1024, 2, 5))),
    (4, 1024, "lstm", np.float32, 2, ((0, 512, 0, 2), (512, 1024, 2, 4))),
    # fewer than NARROW: in panels too, from 4 MB for a gated cell, 16 MB for Elman
    (3, 1024, "lstm", np.float32, 2, ((0, 512, 0, 1), (512, 1024, 1, 3))),
    (1, 512, "lstm", np.float32, 2, ((0, 256, 0, 0), (256, 512, 0, 1))),
    (2, 512, "gru", np.float32, 2, None),           # 3 MB
    (2, 1024, "elman", np.float32, 2, None),        # 4 MB
    (3, 2048, "elman", np.float32, 2, ((0, 1024, 0, 1), (1024, 2048, 1, 3))),
    (7, 2048, "elman", np.float32, 2, ((0, 1024, 0, 3), (1024, 2048, 3, 7))),
    (5, 1024, "elman", np.float32, 2, None),        # panels, but W of 4 MB
    (8, 2048, "elman", np.float32, 2, ((0, 1024, 0, 4), (1024, 2048, 4, 8))),
])
def test_which_batches_split_by_units(B, H, cell, dtype, threads, units):
    if threads > _threads.MAX_THREADS:
        pytest.skip("needs two CPUs")
    params = fastbptt.init_params(3, H, 2, cell=cell, dtype=dtype, seed=0)
    x = np.zeros((B, 5), np.int64)
    fastbptt.set_num_threads(threads)
    try:
        problem = prepare(x, x % 2, params)
        _stack._narrow(problem)
        assert problem.units == units
    finally:
        fastbptt.set_num_threads(1)


@two_cpus
def test_a_failing_party_stops_the_others():
    """A party that raises sets the abort word: the party waiting for it at the next
    step returns instead of waiting forever, and the error reaches the caller."""
    from fastbptt._kernels._jit import jit
    from fastbptt._kernels.sync import meet

    @jit(cache=False)
    def steps(out, sync, party, parties, n):
        for t in range(n):
            out[party] = t
            if not meet(sync, party, parties, t + 1):
                return False
        return True

    out = np.zeros(2, np.int64)

    def fn(sync, party, parties, n):
        if party == 1:
            raise RuntimeError("party 1 failed")
        assert steps(out, sync, party, parties, n) is False

    with pytest.raises(RuntimeError, match="party 1 failed"):
        _threads.run_parties(fn, ((10 ** 6,), (10 ** 6,)))
    assert out[0] == 0                              # it stopped at the first meeting

    def both(sync, party, parties, n):
        assert steps(out, sync, party, parties, n) is True

    _threads.run_parties(both, ((500,), (500,)))
    assert list(out) == [499, 499]
