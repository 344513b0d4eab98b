"""fastbptt.jax against the same layers written as a ``lax.scan``, under ``jit``, in
float64 (x64) and float32."""
import collections
import functools
import os
import subprocess
import sys
import threading
import typing

import numpy as np
import pytest

from fastbptt.bench import jax_peer

# JAX started as the bench starts it (one thread), so that the bench's tests can share it
if jax_peer.unavailable(1):
    pytest.skip(f"JAX: {jax_peer.unavailable(1)}",
                allow_module_level=True)
jax = jax_peer.start(1)
import jax.numpy as jnp                                                   # noqa: E402

import fastbptt                                                           # noqa: E402
import fastbptt.jax as fj                                                 # noqa: E402

GATES = {"elman": 1, "gru": 3, "lstm": 4}
TOLERANCE = 1e-10
B, T, L, H = 3, 7, 4, 5
LENGTHS = np.array([7, 2, 5])


@pytest.fixture(autouse=True)
def x64():
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", before)


def step(cell, p, a, h, c, activation):
    """One step from the input projection a = U x_t + b (GRU: + b_i)."""
    if cell == "elman":
        f = {"tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid, "relu": jax.nn.relu,
             "identity": lambda v: v}[activation]
        return f(a + h @ p.W.T), c
    if cell == "lstm":
        i, f, g, o = jnp.split(a + h @ p.W.T, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        return jax.nn.sigmoid(o) * jnp.tanh(c), c
    gh = h @ p.W.T + (0 if p.bh is None else p.bh)
    (ar, az, an), (hr, hz, hn) = jnp.split(a, 3, axis=-1), jnp.split(gh, 3, axis=-1)
    r, z = jax.nn.sigmoid(ar + hr), jax.nn.sigmoid(az + hz)
    n = jnp.tanh(an + r * hn)
    return (1 - z) * n + z * h, c


def reference(cell, p, x, h0=None, c0=None, lengths=None, reverse=False, chunk=None,
              activation="tanh"):
    """The layer as a lax.scan over steps (batched x only)."""
    Bx, Tx = x.shape[:2]
    lengths = jnp.full(Bx, Tx) if lengths is None else lengths
    a = p.U.T[x] if jnp.issubdtype(x.dtype, jnp.integer) else x @ p.U.T
    a = a + (0 if p.b is None else p.b)
    t = jnp.arange(Tx)
    real = t[None] < lengths[:, None]                                    # (B, T)
    order = jnp.where(real, lengths[:, None] - 1 - t[None], t[None]) if reverse else \
        jnp.broadcast_to(t, (Bx, Tx))
    a = jnp.take_along_axis(a, order[..., None], 1)
    zeros = jnp.zeros((Bx, p.W.shape[1]), p.W.dtype)
    h0 = zeros if h0 is None else h0
    c0 = zeros if c0 is None else c0

    def body(carry, inputs):
        h, c = carry
        a_t, s, mask = inputs
        if chunk:
            h, c = (jnp.where(s % chunk == 0, jax.lax.stop_gradient(v), v) for v in (h, c))
        hn, cn = step(cell, p, a_t, h, c, activation)
        hn, cn = jnp.where(mask[:, None], hn, h), jnp.where(mask[:, None], cn, c)
        return (hn, cn), jnp.where(mask[:, None], hn, 0)

    (hf, cf), hs = jax.lax.scan(body, (h0, c0), (a.transpose(1, 0, 2), t, real.T))
    hs = jnp.take_along_axis(hs.transpose(1, 0, 2), order[..., None], 1)
    return (hs, hf, cf) if cell == "lstm" else (hs, hf)


def draw(cell, rng, dtype=np.float64, bias=True):
    G = GATES[cell]
    U, W = rng.normal(size=(G * H, L)), rng.normal(size=(G * H, H)) * 0.6
    b = rng.normal(size=G * H) if bias else None
    bh = rng.normal(size=G * H) if bias and cell == "gru" else None
    return fastbptt.Layer(*(None if v is None else jnp.asarray(v, dtype) for v in (U, W, b, bh)))


def layer_fn(cell):
    return {"elman": fj.rnn, "gru": fj.gru, "lstm": fj.lstm}[cell]


def loss_of(outputs):
    """A loss that uses every output."""
    return sum(jnp.sum(jnp.sin(o) * jnp.linspace(-1, 1, o.size).reshape(o.shape))
               for o in outputs)


def both(cell, p, x, states, options, scan_options=None):
    """jit(value_and_grad) of fastbptt.jax's layer and of the reference."""
    fn = layer_fn(cell)
    ours = jax.jit(jax.value_and_grad(lambda p, x, s: loss_of(fn(p, x, *s, **options)),
                                      argnums=(0, 1, 2), allow_int=True))
    ref = jax.jit(jax.value_and_grad(
        lambda p, x, s: loss_of(reference(cell, p, x, *s, **(scan_options or options))),
        argnums=(0, 1, 2), allow_int=True))
    return ours(p, x, states), ref(p, x, states)


def assert_close(got, want, tolerance=TOLERANCE):
    got, want = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        if a.dtype == jax.dtypes.float0:
            continue
        assert a.shape == b.shape and a.dtype == b.dtype
        scale = float(jnp.abs(b).max()) or 1.0
        assert float(jnp.abs(a - b).max()) / scale <= tolerance


CASES = {
    "dense-forward": dict(ids=False, bias=True, h0=True, options=dict(lengths=LENGTHS)),
    "ids-reverse": dict(ids=True, bias=True, h0=True,
                        options=dict(lengths=LENGTHS, reverse=True)),
    # truncate=k, stride=k: the scan with the carried states' gradient stopped at every
    # chunk start
    "nobias-chunks": dict(ids=False, bias=False, h0=False, options=dict(truncate=3, stride=3),
                          scan_options=dict(chunk=3)),
    # a truncation that cuts nothing in T steps is full BPTT, in reverse too, as
    # fastbptt.layer takes it
    "reverse-uncut": dict(ids=False, bias=True, h0=True,
                          options=dict(lengths=LENGTHS, reverse=True, truncate=T),
                          scan_options=dict(lengths=LENGTHS, reverse=True)),
}


@pytest.mark.parametrize("cell", GATES)
@pytest.mark.parametrize("case", CASES)
def test_matches_scan(cell, case):
    c = CASES[case]
    rng = np.random.default_rng(0)
    p = draw(cell, rng, bias=c["bias"])
    x = jnp.asarray(rng.integers(0, L, (B, T)) if c["ids"] else rng.normal(size=(B, T, L)))
    states = tuple(jnp.asarray(rng.normal(size=(B, H)))
                   for _ in range((1 + (cell == "lstm")) * c["h0"]))
    got, want = both(cell, p, x, states, c["options"], c.get("scan_options"))
    assert_close(got, want)


@pytest.mark.parametrize("cell", GATES)
def test_one_sequence_and_dict_params(cell):
    """x (T, L) is the batch of one; params as a dict get gradients as a dict."""
    rng = np.random.default_rng(1)
    p = draw(cell, rng)
    p = {"U": p.U, "W": p.W, "b": p.b} if cell != "gru" else p._asdict()
    x = jnp.asarray(rng.normal(size=(T, L)))
    fn = layer_fn(cell)
    one = jax.jit(jax.grad(lambda p, x: loss_of(fn(p, x)), argnums=(0, 1)))(p, x)
    batch = jax.grad(lambda p, x: loss_of(o[0] for o in fn(p, x[None])), argnums=(0, 1))(p, x)
    assert set(one[0]) == set(p)
    assert_close(one, batch, 1e-14)


@pytest.mark.parametrize("cell", GATES)
@pytest.mark.parametrize("ids", [False, True])
def test_time_major_is_the_batch_first_layer_transposed(cell, ids):
    """x (T, B, ...) and h (T, B, H) with time_major=True; values and gradients (of the
    params, x, h0 and c0) are those of the batch-first call."""
    rng = np.random.default_rng(12)
    p = draw(cell, rng)
    x = rng.integers(0, L, (B, T)) if ids else rng.normal(size=(B, T, L))
    states = tuple(jnp.asarray(rng.normal(size=(B, H))) for _ in range(1 + (cell == "lstm")))
    fn = layer_fn(cell)

    def step_of(time_major):
        def loss(p, x, s):
            h, *finals = fn(p, x, *s, lengths=LENGTHS, time_major=time_major)
            return loss_of([h if time_major else jnp.swapaxes(h, 0, 1), *finals])
        return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), allow_int=True))

    (value, (dp, dx, ds)) = step_of(True)(p, jnp.asarray(np.swapaxes(x, 0, 1)), states)
    (want, (dp_want, dx_want, ds_want)) = step_of(False)(p, jnp.asarray(x), states)
    assert_close((value, dp, ds), (want, dp_want, ds_want), 1e-14)
    if not ids:
        assert_close(dx, jnp.swapaxes(dx_want, 0, 1), 1e-14)
    h, final = fn(p, jnp.asarray(np.swapaxes(x, 0, 1)), *states, time_major=True)[:2]
    assert h.shape == (T, B, H) and final.shape == (B, H)
    with pytest.raises(ValueError, match=r"lengths must hold integers, shape \(3,\)"):
        fn(p, jnp.asarray(np.swapaxes(x, 0, 1)), lengths=jnp.zeros(T, int), time_major=True)
    with pytest.raises(ValueError, match=r"h0 must have shape \(3, 5\)"):
        fn(p, jnp.asarray(np.swapaxes(x, 0, 1)), jnp.zeros((T, H)), time_major=True)
    with pytest.raises(TypeError, match="time_major must be True or False"):
        fn(p, jnp.asarray(x), time_major="yes")


@pytest.mark.parametrize("activation", ["sigmoid", "relu"])
def test_activations(activation):
    rng = np.random.default_rng(2)
    p = draw("elman", rng)
    x = jnp.asarray(rng.normal(size=(B, T, L)))
    got, want = both("elman", p, x, (), dict(activation=activation))
    assert_close(got, want)


def test_float32():
    jax.config.update("jax_enable_x64", False)
    rng = np.random.default_rng(4)
    p = draw("elman", rng, np.float32)
    x = jnp.asarray(rng.normal(size=(B, T, L)), jnp.float32)
    got, want = both("elman", p, x, (), {})
    assert got[0].dtype == jnp.float32
    assert_close(got, want, 1e-5)


def test_vmap_and_no_differentiation():
    rng = np.random.default_rng(5)
    p = draw("elman", rng)
    xs = jnp.asarray(rng.normal(size=(2, B, T, L)))
    h, h_final = jax.vmap(lambda x: fj.rnn(p, x))(xs)
    assert_close((h[1], h_final[1]), reference("elman", p, xs[1]))


def time_loops(monkeypatch):
    """A list that gets an entry for every time loop a layer's forward pass runs."""
    from fastbptt import _stack

    runs = []
    for name in ("forward", "forward_narrow"):
        kernel = getattr(_stack, name)
        monkeypatch.setattr(_stack, name, lambda *a, k=kernel: runs.append(1) or k(*a))
    return runs


def test_kept_states_or_the_forward_pass_again(monkeypatch):
    """The backward rule uses the forward rule's kept ``back``, which stays at hand until
    another is taken or another forward pass runs; where it is gone (taken before
    another, pushed out) it runs the forward pass again, with the same gradients."""
    from fastbptt.jax import _kept

    runs = time_loops(monkeypatch)
    rng = np.random.default_rng(8)
    p = draw("elman", rng)
    x = jnp.asarray(rng.normal(size=(B, T, L)))
    dh = jnp.asarray(rng.normal(size=(B, T, H)))
    _kept.clear()
    _, pullback = jax.vjp(lambda p: fj.rnn(p, x)[0], p)
    assert len(_kept._kept) == 1
    kept = pullback(dh)
    assert len(_kept._kept) == 0
    assert_close(pullback(dh), kept, 0)            # at hand still
    assert len(runs) == 1
    _, other = jax.vjp(lambda p: fj.rnn(p, 2 * x)[0], p)
    other(dh)
    again = pullback(dh)                           # taken before another: run again
    assert_close(again, kept, 0)
    assert len(runs) == 3
    for _ in range(_kept.LIMIT + 3):
        jax.vjp(lambda p: fj.rnn(p, x)[0], p)
    assert len(_kept._kept) == _kept.LIMIT


@pytest.mark.parametrize("cell", GATES)
def test_the_store_grows_to_the_forward_passes_a_program_keeps(cell, monkeypatch):
    """A scan of 40 calls (time chunks, the state carried) takes their ``back`` in
    reverse after all 40 forward passes: the first step finds the last 16 and runs the 24
    older forward passes again; the store then keeps 40, and the next steps run each
    chunk's forward pass once, with the gradients of the whole sequence in one call.
    Under ``jax.checkpoint`` no backward pass asks for the first pass's forward passes
    (each chunk's runs again, as any op's would), and the store does not grow."""
    from fastbptt.jax import _kept

    runs = time_loops(monkeypatch)
    rng = np.random.default_rng(8)
    p, fn = draw(cell, rng), layer_fn(cell)
    chunks = jnp.asarray(rng.integers(0, L, (40, B, 2)))

    def loss(p, remat):
        def body(carry, x):
            h, *c = carry
            outs = fn(p, x, h, *c)
            return outs[1:], jnp.sum(jnp.sin(outs[0]))

        zeros = jnp.zeros((B, H))
        carry, parts = jax.lax.scan(jax.checkpoint(body) if remat else body,
                                    (zeros,) * (2 if cell == "lstm" else 1), chunks)
        return parts.sum() + jnp.sum(jnp.cos(carry[0]))

    def whole(p):
        outs = fn(p, jnp.concatenate(list(chunks), axis=1))
        return jnp.sum(jnp.sin(outs[0])) + jnp.sum(jnp.cos(outs[1]))

    want = jax.grad(whole)(p)
    step = jax.jit(jax.grad(loss), static_argnums=1)
    _kept.clear()
    for remat, first, then in ((True, 80, 80), (False, 64, 40)):
        runs.clear()
        assert_close(step(p, remat), want)
        assert len(runs) == first and _kept._limit == (16 if remat else 40)
        for _ in range(2):
            runs.clear()
            assert_close(step(p, remat), want)
            assert len(runs) == then
    _kept.clear()


def test_a_jacobian_runs_the_forward_pass_once(monkeypatch):
    """``jax.jacrev`` runs the backward callback once per row of the Jacobian, with one
    key: each row finds the forward pass that the first took (each ran it again)."""
    runs = time_loops(monkeypatch)
    rng = np.random.default_rng(10)
    p = draw("lstm", rng)
    x = jnp.asarray(rng.normal(size=(B, T, L)))
    got = jax.jacrev(lambda p: fj.lstm(p, x)[1])(p)
    assert len(runs) == 1
    assert_close(got, jax.jacrev(lambda p: reference("lstm", p, x)[1])(p))
    # two threads at once, whose rows interleave: each finds its own (they ran the
    # forward pass again for most rows while one entry stayed at hand for all threads)
    jacobian = jax.jit(jax.jacrev(lambda p, x: fj.lstm(p, x)[1]))
    inputs = [x, 2 * x]
    want = [jacobian(p, v) for v in inputs]
    runs.clear()
    got = [None] * 2

    def work(i):
        got[i] = [jacobian(p, inputs[i]) for _ in range(3)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(runs) == 6
    for i in range(2):
        for g in got[i]:
            assert_close(g, want[i], 0)


def test_a_vmap_of_jacobians_runs_each_forward_pass_once(monkeypatch):
    """Under ``vmap`` the backward callback gets every row at once and takes each key's
    rows together: a ``vmap`` of 4 ``jacrev`` ran 46 forward passes for 4 (the rows came
    key after key, and each took the entry the one before had at hand). Rows that vary
    in params, x, h0, c0 or lengths (the others broadcast) equal the scan's, nested
    ``vmap`` too."""
    runs = time_loops(monkeypatch)
    rng = np.random.default_rng(21)
    p = draw("lstm", rng)
    xs = jnp.asarray(rng.normal(size=(4, B, T, L)))
    jacobians = jax.vmap(jax.jacrev(lambda p, x: fj.lstm(p, x)[1]), in_axes=(None, 0))
    for call in (jacobians, jax.jit(jacobians)):
        runs.clear()
        got = call(p, xs)
        assert len(runs) == 4
        assert_close(got, jax.vmap(jax.jacrev(lambda p, x: reference("lstm", p, x)[1]),
                                   in_axes=(None, 0))(p, xs))
    ps = jax.tree_util.tree_map(lambda v: jnp.stack([v, 0.5 * v]), p)
    h0, c0 = (jnp.asarray(rng.normal(size=(2, B, H))) for _ in range(2))
    ids = jnp.asarray(rng.integers(0, L, (2, B, T)))
    lengths = jnp.asarray([[7, 2, 5], [3, 7, 1]])

    def grads(layer):
        def loss(p, x, h0, c0, lengths):
            return loss_of(layer(p, x, h0, c0, lengths=lengths))
        inner = jax.vmap(jax.grad(loss, argnums=(0, 2, 3)), in_axes=(0, 0, None, 0, 0))
        return jax.vmap(inner, in_axes=(None, None, 0, None, None))

    ours = grads(fj.lstm)(ps, ids, h0, c0, lengths)
    assert_close(ours, grads(functools.partial(reference, "lstm"))(ps, ids, h0, c0, lengths))


def test_the_store_holds_at_most_its_budget(monkeypatch):
    from fastbptt.jax import _kept

    rng = np.random.default_rng(9)
    p = draw("lstm", rng)
    x = jnp.asarray(rng.normal(size=(B, T, L)))
    _kept.clear()
    jax.vjp(lambda p: fj.lstm(p, x)[0], p)
    one = _kept._bytes
    assert one > 0
    monkeypatch.setattr(_kept, "_BUDGET", 3 * one + one // 2)
    for _ in range(5):
        jax.vjp(lambda p: fj.lstm(p, x)[0], p)
    assert len(_kept._kept) == 3 and _kept._bytes == 3 * one
    _kept.clear()
    assert _kept._bytes == 0 and not _kept._kept


@pytest.mark.parametrize("cell", GATES)
def test_nan_propagates(cell):
    rng = np.random.default_rng(6)
    p = draw(cell, rng)
    x = jnp.asarray(rng.normal(size=(B, T, L))).at[1, 3, 0].set(jnp.nan)
    h = layer_fn(cell)(p, x)[0]
    assert bool(jnp.isnan(h[1, 3:]).all()) and not bool(jnp.isnan(h[jnp.array([0, 2])]).any())
    g = jax.grad(lambda p: layer_fn(cell)(p, x)[0].sum())(p)
    assert bool(jnp.isnan(g.W).any())


@pytest.mark.parametrize("k, s", [(jnp.int32(3), 1), (np.array(3), 1), (3, jnp.asarray(3)),
                                  (np.array(3), np.array(3))],
                         ids=["jax-k", "numpy-0d-k", "jax-s", "numpy-0d-both"])
def test_truncation_given_as_integer_scalar_arrays(k, s):
    """As a config or np.load gives them: read as the Python ints they hold, under jit
    too (the options are hashed)."""
    p = draw("elman", np.random.default_rng(8))
    x = jnp.asarray(np.random.default_rng(9).normal(size=(B, T, L)))

    def loss(p, k, s):
        return (fj.rnn(p, x, truncate=k, stride=s)[0] ** 2).sum()
    want = jax.grad(loss)(p, 3, int(s))
    for got in (jax.grad(loss)(p, k, s), jax.jit(jax.grad(lambda p: loss(p, k, s)))(p)):
        for a, b in zip(got, want):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_refusals_while_tracing():
    p = draw("elman", np.random.default_rng(7))
    x = jnp.zeros((B, T, L))
    with pytest.raises(ValueError, match="LSTM cell needs U"):
        fj.lstm(p, x)
    with pytest.raises(ValueError, match="reverse direction"):
        fj.rnn(p, x, reverse=True, truncate=3)
    with pytest.raises(ValueError, match="reverse direction"):      # T - 1 steps: it cuts
        fj.rnn(p, x, reverse=True, truncate=T - 1)
    with pytest.raises(ValueError, match="reverse direction"):      # T steps of (T, B, L)
        fj.rnn(p, jnp.zeros((T, B * T, L)), reverse=True, truncate=T - 1, time_major=True)
    fj.rnn(p, jnp.zeros((T, B * T, L)), reverse=True, truncate=T, time_major=True)
    with pytest.raises(ValueError, match="stride must not exceed"):
        fj.rnn(p, x, truncate=2, stride=3)
    with pytest.raises(ValueError, match="L=4"):
        fj.rnn(p, jnp.zeros((B, T, L + 1)))
    with pytest.raises(ValueError, match="h0 must have shape"):
        fj.rnn(p, x, jnp.zeros((B + 1, H)))
    with pytest.raises(ValueError, match="lengths"):
        fj.rnn(p, x, lengths=jnp.zeros(B + 1, int))
    with pytest.raises(TypeError, match="must all be float32 or all float64"):
        fj.rnn(p._replace(b=p.b.astype(jnp.float32)), x)
    with pytest.raises(TypeError, match="one layer"):
        fj.rnn([p, p], x)


@pytest.mark.parametrize("cell", GATES)
def test_unreadable_arguments_are_named(cell):
    """What JAX cannot read as an array (a string, an object array, a None among numbers,
    a ragged list) is named, as by the NumPy API, not left to jnp.asarray's message."""
    p = draw(cell, np.random.default_rng(7))
    x = jnp.zeros((B, T, L))
    objects = np.array([object()] * B)
    for kwargs, name, got in [
            (dict(x="abc"), "x", "str"), (dict(x=np.array(["a"], object)), "x", "dtype object"),
            (dict(x=[[1, 2], [3]]), "x", "list"),
            (dict(h0="a"), "h0", "str"), (dict(h0=objects), "h0", "dtype object"),
            (dict(c0=objects), "c0", "dtype object"),
            (dict(lengths="ab"), "lengths", "str"), (dict(lengths=[None, 1, 2]), "lengths",
                                                     "list")]:
        if name == "c0" and cell != "lstm":
            continue
        kwargs = dict(dict(x=x), **kwargs)
        what = {"x": "token ids or dense floats", "h0": "an array of floats",
                "c0": "an array of floats", "lengths": "an array of integers"}[name]
        with pytest.raises(TypeError, match=rf"^{name} must be {what}; got {got}$"):
            layer_fn(cell)(p, kwargs.pop("x"), **kwargs)


def zeros(*shape):
    return np.zeros(shape)          # made JAX arrays in the tests, under their x64 setting


# (cell, params, exception, a distinctive part of the message): refused while tracing with
# fastbptt.layer's own messages, never inside the host callback (a JaxRuntimeError)
BAD_PARAMS = {
    "b-shape": ("lstm", {"U": zeros(4 * H, L), "W": zeros(4 * H, H), "b": zeros(3)},
                ValueError, r"params b must have shape \(20,\) to match params W \(20, 5\); "
                            r"got \(3,\)"),
    "b-2d": ("elman", {"U": zeros(H, L), "W": zeros(H, H), "b": zeros(1, H)},
             ValueError, r"params b must have shape \(5,\) .* got \(1, 5\)"),
    "bh-lstm": ("lstm", {"U": zeros(4 * H, L), "W": zeros(4 * H, H), "b": zeros(4 * H),
                         "bh": zeros(4 * H)}, ValueError, "params bh is for a GRU only"),
    "bh-elman": ("elman", fastbptt.Layer(zeros(H, L), zeros(H, H), None, zeros(H)),
                 ValueError, "params bh is for a GRU only"),
    "gru-b-without-bh": ("gru", {"U": zeros(3 * H, L), "W": zeros(3 * H, H), "b": zeros(3 * H)},
                         ValueError, r"params bh is missing: .* bh \(15,\)"),
    "gru-bh-shape": ("gru", (zeros(3 * H, L), zeros(3 * H, H), zeros(3 * H), zeros(H)),
                     ValueError, r"params bh must have shape \(15,\) .* got \(5,\)"),
    "unknown-key": ("lstm", {"U": zeros(4 * H, L), "W": zeros(4 * H, H), "Z": zeros(4 * H)},
                    ValueError, r"unknown key\(s\) 'Z'"),
    "nested": ("lstm", {"U": zeros(4 * H, L), "W": zeros(4 * H, H), "b": {"x": zeros(4 * H)}},
               TypeError, "params b must be an array, not a dict"),
    "nested-list": ("elman", (zeros(H, L), zeros(H, H), [zeros(H)]),
                    TypeError, "params b must be an array, not a list"),
    "tuple-of-5": ("elman", (zeros(H, L), zeros(H, H), zeros(H), zeros(H), zeros(H)),
                   ValueError, "got 5 items"),
    "W-0d": ("lstm", {"U": zeros(4 * H, L), "W": np.float64(1)},
             ValueError, r"params W must be 2-D .* got shape \(\)"),
    "hidden-size-0": ("elman", {"U": zeros(0, L), "W": zeros(0, 0)},
                      ValueError, r"hidden_size >= 1; got shape \(0, 0\)"),
    "U-rows": ("gru", {"U": zeros(H, L), "W": zeros(3 * H, H)},
               ValueError, r"params U must be \(15, input_size\) to match params W \(15, 5\)"),
    "other-cell": ("lstm", {"U": zeros(H, L), "W": zeros(H, H)},
                   ValueError, r"LSTM cell needs .* an Elman cell \(fastbptt.jax.rnn\)"),
    "with-head": ("elman", {"U": zeros(H, L), "W": zeros(H, H), "V": zeros(2, H)},
                  TypeError, "no output layer"),
    "stack": ("elman", fastbptt.Model(((fastbptt.Layer(zeros(H, L), zeros(H, H)),),)),
              TypeError, "got a stack of layers"),
}


@pytest.mark.parametrize("how", ["eager", "jit", "jit-grad"])
@pytest.mark.parametrize("case", BAD_PARAMS)
def test_params_refused_while_tracing(case, how):
    cell, params, error, match = BAD_PARAMS[case]
    params = jax.tree_util.tree_map(jnp.asarray, params)
    fn = layer_fn(cell)
    call = {"eager": fn,
            "jit": jax.jit(fn),
            "jit-grad": jax.jit(jax.grad(lambda p, x: fn(p, x)[0].sum()))}[how]
    with pytest.raises(error, match=match):
        call(params, jnp.zeros((B, T, L)))


@pytest.mark.parametrize("case", ["b-shape", "bh-lstm", "gru-b-without-bh", "unknown-key",
                                  "W-0d", "hidden-size-0", "U-rows"])
def test_params_refused_as_by_the_numpy_api(case):
    """The same params, as NumPy arrays, get the same message from fastbptt.layer.vjp."""
    cell, params, error, _ = BAD_PARAMS[case]
    x = np.zeros((B, T, L))
    with pytest.raises(error) as numpy_api:
        fastbptt.layer.vjp(x, params, cell=cell)
    with pytest.raises(error) as jax_api:
        layer_fn(cell)(jax.tree_util.tree_map(jnp.asarray, params), jnp.asarray(x))
    assert str(jax_api.value) == str(numpy_api.value)


def test_params_checked_once_per_trace(monkeypatch):
    """Valid calls under jit pay for the checks only when JAX traces them."""
    from fastbptt.jax import _layer

    calls = []
    check = _layer.check_layers
    monkeypatch.setattr(_layer, "check_layers", lambda *a, **k: calls.append(1) or check(*a, **k))
    rng = np.random.default_rng(9)
    p = draw("gru", rng)
    step = jax.jit(jax.value_and_grad(lambda p, x: fj.gru(p, x)[0].sum()))
    for _ in range(3):
        jax.block_until_ready(step(p, jnp.asarray(rng.normal(size=(B, T, L)))))
    assert len(calls) == 1


class Named(typing.NamedTuple):
    U: jax.Array
    W: jax.Array
    b: jax.Array


class WFirst(typing.NamedTuple):
    W: jax.Array
    U: jax.Array
    b: jax.Array
    bh: typing.Optional[jax.Array] = None


@pytest.mark.parametrize("cell", GATES)
def test_gradients_come_back_in_any_pytree_of_the_entries(cell):
    """A NamedTuple of the user's, an OrderedDict (leaves in its own order, not sorted)
    and a tuple get the gradients a dict gets, in their own structure."""
    p = draw(cell, np.random.default_rng(4))
    x = jnp.asarray(np.random.default_rng(5).normal(size=(B, T, L)))
    fn = layer_fn(cell)

    def grad(params):
        return jax.jit(jax.grad(lambda q: loss_of(fn(q, x))))(params)
    want = grad({"U": p.U, "W": p.W, "b": p.b, **({"bh": p.bh} if cell == "gru" else {})})
    kinds = [collections.OrderedDict([(k, want_k) for k, want_k in reversed(
        [("U", p.U), ("W", p.W), ("b", p.b)] + ([("bh", p.bh)] if cell == "gru" else []))])]
    if cell != "gru":
        kinds += [Named(p.U, p.W, p.b), (p.U, p.W, p.b)]
    for params in kinds:
        got = grad(params)
        assert type(got) is type(params)
        names = list(got.keys()) if isinstance(got, dict) else ["U", "W", "b"]
        values = list(got.values()) if isinstance(got, dict) else list(got)
        for name, value in zip(names, values):
            np.testing.assert_array_equal(value, want[name])
    # a NamedTuple is read by its field names: W declared before U is still W
    swapped = WFirst(W=p.W, U=p.U, b=p.b, bh=p.bh)
    got = grad(swapped)
    assert type(got) is WFirst
    for name in want:
        np.testing.assert_array_equal(getattr(got, name), want[name])


def test_values_are_checked_where_they_are_known():
    """Outside jit the token ids and lengths are checked before the callback, by the
    NumPy API's rules (padding steps are not read), also while the params are traced (grad,
    value_and_grad, vjp); under jit they cannot be."""
    p = draw("lstm", np.random.default_rng(6))
    with pytest.raises(ValueError, match=r"x token ids must lie in \[0, 4\)"):
        fj.lstm(p, jnp.array([[0, 1, 4]]))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]"):
        fj.lstm(p, jnp.array([[0, 1, 2], [3, 2, 1]]), lengths=[4, 2])
    h, _, _ = fj.lstm(p, jnp.array([[0, 1, 9]]), lengths=[2])         # 9: padding
    assert h.shape == (1, 3, H) and float(jnp.abs(h[0, 2]).max()) == 0
    with pytest.raises(TypeError, match="x must be token ids or dense floats; got None"):
        fj.rnn(draw("elman", np.random.default_rng(7)), None)
    for params_traced in (jax.grad, jax.value_and_grad, lambda f: lambda p: jax.vjp(f, p)):
        def loss(params, x, lengths=None):
            return fj.lstm(params, x, lengths=lengths)[0].sum()
        with pytest.raises(ValueError, match=r"x token ids must lie in \[0, 4\)"):
            params_traced(lambda q: loss(q, jnp.array([[0, 1, 4]])))(p)
        with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]"):
            params_traced(lambda q: loss(q, jnp.array([[0, 1, 2]]), jnp.array([4])))(p)
    a = fj.gru(draw("gru", np.random.default_rng(8)), jnp.array([[0, 1, 2]]), reverse=np.True_)
    b = fj.gru(draw("gru", np.random.default_rng(8)), jnp.array([[0, 1, 2]]), reverse=True)
    assert_close(a, b, 0)


def test_host_values_are_checked_before_jax_narrows_them():
    """Without x64, JAX makes int64 host arrays int32 by wrapping (2**32 + 1 becomes 1):
    token ids and lengths given as NumPy arrays or lists are checked as given."""
    jax.config.update("jax_enable_x64", False)
    rng = np.random.default_rng(12)
    p = draw("elman", rng, np.float32)
    for ids in (np.array([[2**32 + 1, 0, 3]]), [[2**32 + 1, 0, 3]],
                np.array([[2**32 + 1, 0, 3]], np.uint64)):
        with pytest.raises(ValueError, match=r"x token ids must lie in \[0, 4\) .*; got 4294967297 at"):
            fj.rnn(p, ids)
    x = rng.normal(size=(2, 3, L)).astype(np.float32)
    for lengths in (np.array([2**32 + 2, 1]), [2**32 + 2, 1]):
        with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]"):
            fj.rnn(p, x, lengths=lengths)
    h, _ = fj.rnn(p, x, lengths=np.array([2, 1]))                     # in range: runs
    assert h.shape == (2, 3, H) and float(jnp.abs(h[1, 1:]).max()) == 0


def test_lengths_take_the_layer_apis_forms():
    """[T] for one sequence and [] for none, as `fastbptt.layer` takes them."""
    rng = np.random.default_rng(13)
    p = draw("elman", rng)
    x = rng.normal(size=(T, L))
    h, h_final = fj.rnn(p, x, lengths=[4])
    want = fastbptt.layer.forward(x, p, lengths=4)
    assert_close((h, h_final), (want.h, want.h_final), 0)
    h, h_final = fj.rnn(p, np.zeros((0, T, L)), lengths=[])
    assert h.shape == (0, T, H) and h_final.shape == (0, H)


def test_second_derivatives_are_refused_in_a_sentence():
    p = draw("lstm", np.random.default_rng(9))
    x = jnp.asarray(np.random.default_rng(10).normal(size=(2, 3, L)))
    message = "fastbptt.jax computes first derivatives only"
    with pytest.raises(NotImplementedError, match=message):
        jax.hessian(lambda x: fj.lstm(p, x)[0].sum())(x)
    with pytest.raises(NotImplementedError, match=message):
        jax.grad(lambda q: jnp.sum(jax.grad(lambda q: fj.lstm(q, x)[0].sum())(q).U ** 2))(p)


@pytest.mark.parametrize("jit", [False, True])
def test_an_inner_gradient_behind_stop_gradient_is_a_first_derivative(jit):
    """An adversarial input from the gradient of the loss, behind ``stop_gradient``
    inside the function differentiated (FGSM), needs first derivatives only: its
    gradient equals the one with that input computed outside. It was refused as a
    second derivative; a second derivative still is, under ``jit`` too."""
    rng = np.random.default_rng(13)
    p = draw("lstm", rng)
    x = jnp.asarray(rng.normal(size=(B, T, L)))

    def loss(p, x):
        return jnp.sum(jnp.sin(fj.lstm(p, x)[0]))

    def adversarial(p):
        gx = jax.lax.stop_gradient(jax.grad(loss, argnums=1)(p, x))
        return loss(p, x + 0.1 * jnp.sign(gx))

    step = jax.jit(jax.grad(adversarial)) if jit else jax.grad(adversarial)
    moved = x + 0.1 * jnp.sign(jax.grad(loss, argnums=1)(p, x))
    assert_close(step(p), jax.grad(loss)(p, moved))
    penalty = jax.grad(lambda q: jnp.sum(jax.grad(loss)(q, x).W ** 2))
    with pytest.raises(NotImplementedError, match="computes first derivatives only"):
        (jax.jit(penalty) if jit else penalty)(p)


@pytest.mark.parametrize("cell", ["elman", "gru", "lstm"])
@pytest.mark.parametrize("jit", [False, True])
def test_the_value_of_an_inner_vjp_is_differentiated_as_the_layer(cell, jit):
    """The value of a ``jax.vjp`` or ``jax.value_and_grad`` inside the function
    differentiated (its gradient used behind ``stop_gradient``, or not at all) has the
    layer's gradient: every input's, h0 and c0 included, equal to the scan's. It was
    refused as a second derivative."""
    rng = np.random.default_rng(17)
    p, fn = draw(cell, rng), layer_fn(cell)
    x = jnp.asarray(rng.normal(size=(B, T, L)))
    states = tuple(jnp.asarray(rng.normal(size=(B, H)))
                   for _ in range(2 if cell == "lstm" else 1))

    def inner(layer):
        def value(p, x, s):
            v, pullback = jax.vjp(lambda p, x, s: loss_of(layer(p, x, *s)), p, x, s)
            return v
        def logged(p, x, s):
            v, g = jax.value_and_grad(lambda p: loss_of(layer(p, x, *s)))(p)
            return 2 * v + 0 * jax.lax.stop_gradient(jnp.sum(g.W))
        return value, logged

    ref = functools.partial(reference, cell)
    for ours, want in zip(inner(fn), inner(ref)):
        grad = jax.grad(ours, argnums=(0, 1, 2))
        got = (jax.jit(grad) if jit else grad)(p, x, states)
        assert_close(got, jax.grad(want, argnums=(0, 1, 2))(p, x, states))
        # with a vmap inside: each row's call
        batched = jax.grad(lambda p, xs: jnp.sum(jax.vmap(ours, (None, 0, None))(p, xs, states)),
                           argnums=(0, 1))
        xs = jnp.stack([x, -x])
        got = (jax.jit(batched) if jit else batched)(p, xs)
        assert_close(got, jax.grad(lambda p, xs: jnp.sum(
            jax.vmap(want, (None, 0, None))(p, xs, states)), argnums=(0, 1))(p, xs))
    forward = inner(fn)[0]
    with pytest.raises(NotImplementedError, match="computes first derivatives only, in "
                                                  r"reverse mode .* forward mode"):
        jax.jvp(lambda x: forward(p, x, states), (x,), (x,))


def test_an_inner_gradient_behind_stop_gradient_under_vmap_is_a_first_derivative():
    """FGSM of each row of a ``vmap`` inside the function differentiated: equal to the
    scan's. It was refused as a second derivative."""
    rng = np.random.default_rng(19)
    p = draw("gru", rng)
    xs = jnp.asarray(rng.normal(size=(2, B, T, L)))

    def adversarial(layer):
        def loss(p, x):
            return jnp.sum(jnp.sin(layer(p, x)[0]))
        def one(p, x):
            gx = jax.lax.stop_gradient(jax.grad(loss, argnums=1)(p, x))
            return loss(p, x + 0.1 * jnp.sign(gx))
        return jax.grad(lambda p: jnp.sum(jax.vmap(one, (None, 0))(p, xs)))

    assert_close(adversarial(fj.gru)(p), adversarial(functools.partial(reference, "gru"))(p))


def test_reverse_mode_jacobians_and_forward_mode_refused():
    """jacrev equals the scan's jacobian; JAX refuses forward mode of a custom_vjp, in its
    words (the README quotes them)."""
    p = draw("gru", np.random.default_rng(11))
    x = jnp.asarray(np.random.default_rng(12).normal(size=(2, 3, L)))
    got = jax.jacrev(lambda x: fj.gru(p, x)[1])(x)
    want = jax.jacrev(lambda x: reference("gru", p, x)[1])(x)
    assert got.shape == (2, H, 2, 3, L)
    assert_close(got, want)
    for forward in (lambda f: jax.jvp(f, (x,), (x,)), lambda f: jax.jacfwd(f)(x)):
        with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
            forward(lambda x: fj.gru(p, x)[0].sum())


SHARD_MAP = """
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, jax.numpy as jnp, numpy as np
import fastbptt.jax as fj
from jax.sharding import Mesh, PartitionSpec as P
jax.config.update("jax_enable_x64", True)
mesh = Mesh(np.array(jax.devices()), ("d",))
r = np.random.default_rng(0)
p = {"U": r.normal(size=(16, 3)), "W": r.normal(size=(16, 4)) * 0.5, "b": r.normal(size=16)}
p = {k: jnp.asarray(v) for k, v in p.items()}
ids, x = jnp.asarray(r.integers(0, 3, (4, 6))), jnp.asarray(r.normal(size=(4, 6, 3)))
h0 = jnp.asarray(r.normal(size=(4, 4)))
def loss(p, x, h0):
    h, hf, cf = fj.lstm(p, x, h0)
    return jnp.sum(h ** 2) + jnp.sum(hf) + jnp.sum(cf ** 3)
def inner(p, x, h0):                    # the value of a value_and_grad inside
    v, g = jax.value_and_grad(loss)(p, x, h0)
    return v + 0 * jax.lax.stop_gradient(jnp.sum(g["W"]))
worst = 0.0
for check, fn in ((True, loss), (False, loss), (True, inner), (False, inner)):
    whole = jax.shard_map(lambda p, x, h0: jax.lax.psum(fn(p, x, h0), "d"), mesh=mesh,
                          in_specs=(P(), P("d"), P("d")), out_specs=P(), check_vma=check)
    for inputs in (ids, x):
        args = (0, 2) if inputs is ids else (0, 1, 2)
        want = jax.grad(loss, argnums=args)(p, inputs, h0)
        got = jax.jit(jax.grad(whole, argnums=args))(p, inputs, h0)
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            worst = max(worst, float(jnp.abs(a - b).max() / jnp.abs(b).max()))
print(worst)
"""


def test_shard_map_sums_the_devices_gradients():
    """In jax.shard_map over two host devices, with check_vma on and off, the gradients
    of the sum of the shards' losses are those of the whole batch's loss: a replicated
    parameter's is the sum over devices (not one device's, counted twice); also where
    the loss is the value of a value_and_grad inside the function differentiated."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", SHARD_MAP], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert float(done.stdout.strip().splitlines()[-1]) <= TOLERANCE


def test_eager_calls_of_shapes_seen_before_compile_nothing_again():
    """Outside jit, the bridge kept 256 callbacks; beyond that many shapes a call made a
    new one, and JAX, which keys its executables on the callback, compiled and kept
    another (1.5 MB) every time: memory grew every epoch of a loop over 300 shapes."""
    import logging
    p = draw("elman", np.random.default_rng(13), np.float32)
    shapes = [(1 + i % 20, 1 + i // 20) for i in range(260)]
    for B, T_ in shapes:
        jax.block_until_ready(fj.rnn(p, np.ones((B, T_, L), np.float32))[0])
    messages = []

    class Record(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())
    handler = Record(level=logging.DEBUG)
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles():
            for B, T_ in shapes[:3]:
                jax.block_until_ready(fj.rnn(p, np.ones((B, T_, L), np.float32))[0])
    finally:
        logger.removeHandler(handler)
    assert not [m for m in messages if "pure_callback" in m], messages[:5]


def test_host_values_are_checked_under_jit_too():
    """Host ids and lengths closed over (or static) inside jit are known values: checked
    while tracing, before jnp.asarray narrows them (2**32 + 1 to 1 without x64)."""
    jax.config.update("jax_enable_x64", False)
    rng = np.random.default_rng(14)
    p = draw("elman", rng, np.float32)
    with pytest.raises(ValueError, match=r"x token ids must lie in \[0, 4\) .*; got 4294967297"):
        jax.jit(lambda p: fj.rnn(p, np.array([[2**32 + 1, 0, 3]]))[0])(p)
    x = rng.normal(size=(2, 3, L)).astype(np.float32)
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]"):
        jax.jit(lambda p: fj.rnn(p, x, lengths=np.array([2**32 + 2, 1]))[0])(p)
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]"):     # x traced
        jax.jit(lambda p, x, n: fj.rnn(p, x, lengths=n)[0], static_argnums=2)(p, x, (4, 1))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]"):     # time-major
        jax.jit(lambda x: fj.rnn(p, x, lengths=[4, 1], time_major=True)[0])(x.swapaxes(0, 1))
    with pytest.raises(ValueError, match=r"x token ids must lie in \[0, 4\) .*; got "
                                         r"4294967297, which JAX holds as another id"):
        jax.jit(lambda p, n: fj.rnn(p, np.array([[2**32 + 1, 0, 3]]), lengths=n)[0])(
            p, jnp.array([3]))                                   # lengths traced
    jax.jit(lambda p, n: fj.rnn(p, np.array([[1, 0, 3]]), lengths=n)[0])(p, jnp.array([3]))
    h = jax.jit(lambda p, x: fj.rnn(p, x, lengths=np.array([2, 1]))[0])(p, x)  # in range
    assert h.shape == (2, 3, H) and float(jnp.abs(h[1, 1:]).max()) == 0


def test_options_traced_by_jit_say_to_make_them_static():
    """jax.jit traces keyword arguments too: reverse, time_major, truncate and stride
    then arrive as tracers, and the error says how to keep them Python values."""
    rng = np.random.default_rng(15)
    p = draw("lstm", rng)
    x = jnp.asarray(rng.normal(size=(B, T, L)))
    for name, value in (("reverse", True), ("time_major", False), ("truncate", 3),
                        ("stride", 1)):
        with pytest.raises(TypeError, match=rf"^{name} is a traced value .* static_argnames=\('{name}',\)"):
            jax.jit(fj.lstm)(p, x, **{name: value})
        jax.jit(fj.lstm, static_argnames=(name,))(p, x, **{name: value})     # static: runs


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_makes_keys_of_its_own():
    """A fork copied the nonce of the kept states' keys: parent and child gave the same
    keys, and a child's backward pass could take its own states for another's inputs.
    (Run in a process of its own: JAX warns of a fork in a process that runs it.)"""
    code = (
        "import os, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "from fastbptt.jax import _kept\n"
        "_kept.keep('parent')\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.write(w, repr((_kept.keep('child').tolist(), len(_kept._kept))).encode())\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "child, held = eval(os.read(r, 1000))\n"
        "print(child[:2] != _kept.keep('parent').tolist()[:2], held)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["True", "1"], run.stdout
