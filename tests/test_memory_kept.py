"""What fastbptt keeps between calls: its own buffers, never the caller's arrays (a
workspace that remembers shapes of calls must not pin their inputs), and nothing of a
thread's scratch in a `back` between its calls."""
import gc
import tracemalloc
import weakref

import numpy as np
import pytest

import fastbptt


def _dead(refs):
    gc.collect()
    return [r() is None for r in refs]


@pytest.mark.parametrize("cell", ["elman", "lstm"])
def test_calls_keep_none_of_the_callers_arrays(cell):
    """Each call below is of a new shape, which the workspace remembers; dropped by the
    caller, the inputs and params must go."""
    rng = np.random.default_rng(0)
    refs = []
    for T, call in enumerate(["grad", "bptt", "loss", "forward", "layer"], start=3):
        model = fastbptt.init_params(4, 5, 3, cell=cell, num_layers=2, dtype=np.float64,
                                     seed=T)
        x = rng.normal(size=(2, T, 4))                    # dense: read in place
        y = rng.integers(0, 3, (2, T))
        h0 = rng.normal(size=(2, 2, 5))
        if call == "layer":
            fastbptt.layer.forward(x, fastbptt.Model(model.layers), h0=h0)
        else:
            getattr(fastbptt, call)(x, *(() if call == "forward" else (y,)), model, h0=h0)
        refs += [weakref.ref(a) for a in (x, h0, model.V, model.layers[1][0].W)]
        del model, x, y, h0
    assert all(_dead(refs))


@pytest.mark.parametrize("cell", ["elman", "gru", "lstm"])
def test_a_kept_back_keeps_none_of_the_callers_inputs(cell):
    """A `back` reads the params when it runs, and copies of the rest: x and h0 dropped
    by the caller must go while it is kept (a dense x in the compute dtype was read in
    place and was kept, beside the copy the backward pass reads)."""
    rng = np.random.default_rng(0)
    model = fastbptt.Model(fastbptt.init_params(4, 5, 3, cell=cell, num_layers=2,
                                                dtype=np.float64, seed=0).layers)
    x, h0 = rng.normal(size=(2, 6, 4)), rng.normal(size=(2, 2, 5))
    out, back = fastbptt.layer.vjp(x, model, h0=h0)
    want = back(np.ones_like(out.h))
    refs = [weakref.ref(x), weakref.ref(h0)]
    del x, h0
    assert all(_dead(refs))
    got = back(np.ones_like(out.h))
    assert all(np.array_equal(a, b) for a, b in zip(fastbptt.params.leaves(got.grads).values(),
                                                    fastbptt.params.leaves(want.grads).values()))
    assert np.array_equal(got.dx, want.dx) and np.array_equal(got.dh0, want.dh0)


@pytest.mark.parametrize("cell", ["elman", "gru"])
def test_a_back_not_yet_called_pins_no_scratch(cell):
    """clear_workspace frees the thread's scratch while a `back` made after a large call
    is kept: the small call's Forward held views of that scratch (the GRU's, even where
    its cell had no use for them) outside those it forgets."""
    rng = np.random.default_rng(0)
    big = fastbptt.init_params(8, 1024, 2, cell="gru", seed=0).layers[0][0]
    small = fastbptt.init_params(8, 4, 2, cell=cell, num_layers=2, seed=0).layers[0][0]
    xs = rng.standard_normal((3, 2, 8)).astype(np.float32)
    xb = rng.standard_normal((256, 2, 8)).astype(np.float32)
    fastbptt.layer.vjp(xs, small)                               # compiled before tracing
    tracemalloc.start()
    try:
        fastbptt.layer.forward(xb, big)
        fastbptt.clear_workspace()
        gc.collect()
        floor = tracemalloc.get_traced_memory()[0]
        fastbptt.layer.forward(xb, big)                         # the scratch grows again
        out, back = fastbptt.layer.vjp(xs, small)
        fastbptt.clear_workspace()
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - floor
    finally:
        tracemalloc.stop()
    assert kept < 5e5, kept             # the big call's GRU scratch is 3 MB


def test_a_back_between_its_calls_pins_no_scratch():
    """clear_workspace frees the thread's scratch even while a `back` that has run is
    kept (it took views of that scratch while it ran)."""
    rng = np.random.default_rng(0)
    model = fastbptt.Model(fastbptt.init_params(8, 64, 8, cell="lstm", seed=0).layers)
    tracemalloc.start()
    try:
        big = rng.integers(0, 8, (64, 300))
        out, back = fastbptt.layer.vjp(big, model)
        back(np.ones_like(out.h))
        del out, back
        fastbptt.clear_workspace()
        gc.collect()
        floor = tracemalloc.get_traced_memory()[0]
        out, back = fastbptt.layer.vjp(big, model)              # the scratch grows again
        back(np.ones_like(out.h))
        del out, back
        small_out, small = fastbptt.layer.vjp(big[:1, :5], model)
        small(np.ones_like(small_out.h))                        # a kept, called back
        fastbptt.clear_workspace()
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - floor
    finally:
        tracemalloc.stop()
    assert kept < 2e6, kept            # the big call's scratch is tens of MB


def test_the_jax_functions_outside_jit_reuse_their_callbacks(monkeypatch):
    """JAX caches an executable per callback, by equality: outside jit, a new callback
    object per call (equal to none before it) compiled and kept a new executable every
    call. The three callbacks here (forward, and the rules' two) are three of them."""
    jax = pytest.importorskip("jax", reason="needs JAX (the jax extra)")
    import jax.numpy as jnp

    from fastbptt import jax as fj

    seen = []
    real = jax.pure_callback

    def spy(fn, *args, **kwargs):
        seen.append(fn)
        return real(fn, *args, **kwargs)

    monkeypatch.setattr(jax, "pure_callback", spy)
    layer = fastbptt.Layer(*(jnp.asarray(a) for a in fastbptt.init_params(5, 4, 5,
                                                                           seed=0)[:2]))
    x = jnp.asarray(np.arange(12).reshape(3, 4) % 5)
    grad = jax.grad(lambda U: fj.rnn(layer._replace(U=U), x)[0].sum())
    for _ in range(3):
        fj.rnn(layer, x)
        grad(layer.U)
    assert len(seen) >= 9 and len(set(seen)) <= 3


def test_clear_workspace_drops_the_forward_passes_jax_kept():
    pytest.importorskip("jax", reason="needs JAX (the jax extra)")
    from fastbptt.jax import _kept

    key = _kept.keep(object())
    fastbptt.clear_workspace()
    assert _kept.take(key) is None


def test_setting_the_thread_count_again_and_again_keeps_nothing():
    from fastbptt import _threads

    before = fastbptt.get_num_threads()
    for n in [1, 2, 1] * 100:
        fastbptt.set_num_threads(min(n, _threads.MAX_THREADS))
    assert len(_threads._configured) == 1
    fastbptt.set_num_threads(before)


def test_a_kept_back_keeps_neither_the_output_nor_a_copy_of_U():
    """A `back` kept the caller's out (its h: B T H D numbers) and, for token ids, the
    forward pass's gather table, a transposed copy of U (98 MB for an LSTM over 50,000
    ids at H 128, against 0.08 MB of states)."""
    rng = np.random.default_rng(0)
    L, H, B, T = 4000, 16, 2, 3
    layer = fastbptt.Layer(rng.normal(size=(4 * H, L)).astype(np.float32),
                           rng.normal(size=(4 * H, H)).astype(np.float32))
    x = rng.integers(0, L, (B, T))
    out, back = fastbptt.layer.vjp(x, layer)
    want = back(np.ones_like(out.h))
    dropped = weakref.ref(out.h)
    del out
    assert all(_dead([dropped]))
    fastbptt.clear_workspace()
    gc.collect()
    tracemalloc.start()
    try:
        kept = [fastbptt.layer.vjp(x, layer)[1] for _ in range(3)]
        fastbptt.clear_workspace()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] / len(kept)
    finally:
        tracemalloc.stop()
    assert held < layer.U.nbytes / 4, held              # U is 1 MB; the states far less
    got = kept[0](np.ones((B, T, H), np.float32))
    assert np.array_equal(got.grads.U, want.grads.U)


def test_a_forward_pass_that_fails_keeps_none_of_the_callers_arrays(monkeypatch):
    """An error inside the forward loop (a Ctrl-C, a MemoryError) left the caller's params
    attached to the workspace's cached pass of that shape."""
    import fastbptt._stack as stack
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 7, (4, 9)), rng.integers(0, 5, (4, 9))
    fastbptt.grad(x, y, fastbptt.init_params(7, 12, 5, seed=0))     # the shape, cached
    params = fastbptt.init_params(7, 12, 5, seed=1)
    ref = weakref.ref(params.V)

    def interrupted(*args):
        raise KeyboardInterrupt
    monkeypatch.setattr(stack, "pad_weights", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fastbptt.grad(x, y, params)
    monkeypatch.undo()
    del params
    assert all(_dead([ref]))


def test_a_back_says_how_many_bytes_it_holds():
    """``back.nbytes``: its states and gates at least ((T + 1) B 5 H numbers for an LSTM,
    the states and four gates), growing with T; 0 for a call with no steps."""
    layer = fastbptt.init_params(5, 16, 5, cell="lstm", seed=0).layers[0][0]
    sizes = []
    for T in (10, 20):
        _, back = fastbptt.layer.vjp(np.zeros((4, T), np.int64), layer)
        assert back.nbytes >= (T + 1) * 4 * 5 * 16 * layer.W.itemsize
        sizes.append(back.nbytes)
    assert sizes[1] > sizes[0]
    assert fastbptt.layer.vjp(np.zeros((4, 0), np.int64), layer)[1].nbytes == 0


def test_the_jax_store_comes_back_down_to_what_a_program_needs(monkeypatch):
    """A program that needed 40 entries kept (a scan of 40 calls, whose backward passes
    come in reverse after all 40 forward passes) keeps its limit while it runs; once a
    whole window of forward passes needed fewer, the limit comes back down to `LIMIT`,
    and entries whose backward pass never comes no longer stay 40 deep. It never came
    down: a program that once needed many kept that many of every later program's
    dropped entries, up to a quarter of the memory."""
    pytest.importorskip("jax", reason="needs JAX (the jax extra)")
    from fastbptt.jax import _kept

    monkeypatch.setattr(_kept, "WINDOW", 64)
    _kept.clear()
    try:
        def scan(chunks=40):
            keys = [_kept.keep(object()) for _ in range(chunks)]
            return sum(_kept.take(k) is not None for k in reversed(keys))

        assert scan() == _kept.LIMIT and _kept._limit == 40       # grew
        for _ in range(30):                                        # 1200 forward passes:
            assert scan() == 40 and _kept._limit == 40             # windows of 320
        for _ in range(2 * 320):                                   # each taken at once
            assert _kept.take(_kept.keep(object())) is not None
        assert _kept._limit == _kept.LIMIT
        for _ in range(100):                                       # never taken
            _kept.keep(object())
        assert len(_kept._kept) == _kept.LIMIT
        assert scan() == _kept.LIMIT and _kept._limit == 40        # grows again
    finally:
        _kept.clear()
