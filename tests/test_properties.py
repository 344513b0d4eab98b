"""Property tests with hypothesis (profile "ci" of conftest.py: derandomized, 60 examples).

- Random valid calls (B 0..6, T 0..12, L/C 1..6, H 1..20, ids or dense x and y, every
  activation, loss and truncation, h0 and lengths or not, float32/float64) agree with the
  reference.
- Random invalid calls (one thing of a valid call changed: a shape, a dtype, an id, an
  option, a params key) raise TypeError or ValueError from validation, never anything else.
"""
import numpy as np
import pytest
from hypothesis import assume, given, note
from hypothesis import strategies as st

import fastbptt
from fastbptt import reference
from conftest import ACTIVATIONS, LOSSES, TOLERANCE, assert_agree, make_problem, \
    relative_error

ENTRIES = ["grad", "value_and_grad", "bptt", "forward", "loss", "reference"]
FORWARD_OPTIONS = {"activation", "h0", "lengths", "check_finite"}
LOSS_OPTIONS = FORWARD_OPTIONS | {"loss"}


@st.composite
def valid_calls(draw, **fixed):
    """(x, y, params, options) of a random valid call.

    ``fixed`` pins any of activation, loss, truncate (then stride is 1), the flags of
    `make_problem` (bias, x_ids, y_ids, with_h0, with_lengths, batch), and ``steps=True``
    for at least one sequence of at least one step.
    """
    def pick(name, strategy):
        return fixed[name] if name in fixed else draw(strategy)

    dtype = draw(st.sampled_from([np.float64, np.float32]))
    least = 1 if fixed.get("steps") else 0
    # B up to 6: narrow (< 4) and BLAS batches; H up to 20: several vector registers
    B, T = draw(st.integers(least, 6)), draw(st.integers(least, 12))
    L, H, C = draw(st.integers(1, 6)), draw(st.integers(1, 20)), draw(st.integers(1, 6))
    truncate = pick("truncate", st.none() | st.integers(1, 6))
    stride = 1 if truncate is None or "truncate" in fixed else draw(st.integers(1, truncate))
    flags = {k: pick(k, st.booleans())
             for k in ("bias", "x_ids", "y_ids", "with_h0", "with_lengths")}
    batch = B != 1 or pick("batch", st.booleans())       # B = 1 may be one sequence
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x, y, params, options = make_problem(rng, B=B, T=T, L=L, H=H, C=C, dtype=dtype,
                                         batch=batch, **flags)
    options.update(truncate=truncate, stride=stride,
                   activation=pick("activation", st.sampled_from(ACTIVATIONS)),
                   loss=pick("loss", st.sampled_from(LOSSES)))
    return x, y, params, options


def in_float64(x, y, params, options):
    """The same call with every float array in float64 (ids unchanged)."""
    def up(a):
        return a if a is None or a.dtype.kind in "iu" else a.astype(np.float64)
    options = dict(options, **{k: up(options[k]) for k in ("h0",) if k in options})
    return up(x), up(y), type(params)(*(up(a) for a in params)), options


def fields(result):
    """{name: value} of a BPTTResult with Params gradients (absent biases left out)."""
    out = {"loss": np.float64(result.loss), "h_final": result.h_final, "dh0": result.dh0}
    out.update((k, v) for k, v in result.grads._asdict().items() if v is not None)
    return out


def assert_float32_agrees(got, ref32, ref64):
    """float32 kernels against the reference run in float64 on the same values.

    Within 1e-4 of each array's largest entry (the loss: relative, or absolute below 1),
    or, where the sum behind an entry cancels so much that float32 itself cannot give
    1e-4 (an H = 1 dW of 2e-4 summed from terms of 1e-1 loses a factor 400), no worse
    than 4 times the reference's own float32 error.
    """
    assert type(got.loss) is float
    want, naive = fields(ref64), fields(ref32)
    assert fields(got).keys() == want.keys()
    for name, g in fields(got).items():
        if name != "loss":
            assert g.dtype == np.float32 and g.shape == want[name].shape, name
        scale = max(1.0, abs(want[name])) if name == "loss" else None
        error = relative_error(g, want[name]) if scale is None else abs(g - want[name]) / scale
        noise = (relative_error(naive[name], want[name]) if scale is None
                 else abs(naive[name] - want[name]) / scale)
        assert error <= max(TOLERANCE[np.float32], 4 * noise), (name, error, noise)


def call(entry, x, y, params, options):
    """Call ``entry`` with the options it takes."""
    if entry == "forward":
        return fastbptt.forward(x, params, **{k: v for k, v in options.items()
                                              if k in FORWARD_OPTIONS})
    if entry == "loss":
        return fastbptt.loss(x, y, params, **{k: v for k, v in options.items()
                                              if k in LOSS_OPTIONS})
    fn = reference.bptt if entry == "reference" else getattr(fastbptt, entry)
    return fn(x, y, params, **options)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@given(data=st.data())
def test_valid_calls_agree_with_reference(activation, data):
    x, y, params, options = data.draw(valid_calls(activation=activation), label="call")
    dtype = params.U.dtype.type
    got = fastbptt.bptt(x, y, params, **options)
    if dtype == np.float64:
        assert_agree(got, reference.bptt(x, y, params, **options), dtype)
    else:
        x64, y64, params64, options64 = in_float64(x, y, params, options)
        assert_float32_agrees(got, reference.bptt(x, y, params, **options),
                              reference.bptt(x64, y64, params64, **options64))

    value, grads = fastbptt.value_and_grad(x, y, params, **options)
    assert value == got.loss
    assert all(np.array_equal(g, w) for g, w in zip(grads, got.grads) if w is not None)
    loss = call("loss", x, y, params, options)          # the loss does not depend on truncation
    assert type(loss) is float
    assert abs(loss - got.loss) <= TOLERANCE[dtype] * max(1.0, abs(got.loss))

    h, p = call("forward", x, y, params, options)       # the same states as bptt's
    B, T, H = (1,) * (h.ndim == 2) + h.shape
    h, p = h.reshape(B, T, H), p.reshape(B, T, params.sizes[2])
    h0 = np.reshape(options.get("h0", np.zeros((B, H), dtype)), (B, H))
    lengths = np.broadcast_to(options.get("lengths", T), (B,))
    for b, n in enumerate(lengths):
        last = h[b, n - 1] if n else h0[b]
        assert np.array_equal(last, np.reshape(got.h_final, (B, H))[b])
        np.testing.assert_allclose(p[b, :n].sum(axis=-1), 1, rtol=10 * TOLERANCE[dtype])
        assert not h[b, n:].any() and not p[b, n:].any()


# Invalid calls --------------------------------------------------------------------------

def _layout(x, y, options):
    """(x holds ids, x is one sequence, y holds ids, real steps as indices into x)."""
    ids = x.dtype.kind in "iu"
    single = x.ndim == (1 if ids else 2)
    B, T = (1, x.shape[0]) if single else x.shape[:2]
    lengths = np.broadcast_to(options.get("lengths", T), (B,))
    steps = [(t,) if single else (b, t) for b in range(B) for t in range(int(lengths[b]))]
    return ids, single, y.dtype.kind in "iu", steps


def _with(array, index, value):
    out = np.array(array)
    out[index] = value
    return out


def _objects(array):
    return np.asarray(array).astype(object)


NONFINITE = st.sampled_from([np.nan, np.inf, -np.inf])
BAD_KIND = st.sampled_from(["complex", "bool", "object", "str"])


def _bad_kind(array, kind):
    array = np.asarray(array)
    return {"complex": lambda: array + 0j, "bool": lambda: array > 0,
            "object": lambda: _objects(array), "str": lambda: array.astype(str)}[kind]()


def mutations(x, y, params, options):
    """{name: (scope, mutate(draw) -> (x, y, params, options))} of what applies here.

    scope: "all" entry points, "y" (not forward) or "train" (takes truncate and stride).
    """
    ids, single, y_ids, steps = _layout(x, y, options)
    L, H, C = params.sizes
    dtype = params.U.dtype
    B = 1 if single else x.shape[0]
    T = x.shape[0] if single else x.shape[1]
    out = {}

    def add(name, scope, fn):
        out[name] = (scope, fn)

    def opt(**changes):
        return lambda draw: (x, y, params, dict(options, **{k: v(draw) if callable(v) else v
                                                             for k, v in changes.items()}))

    if ids and steps:
        add("x id out of range", "all", lambda d: (
            _with(x, d(st.sampled_from(steps)), d(st.sampled_from([L, L + 9, -1, -10**6]))),
            y, params, options))
    if not ids and steps:
        add("x non-finite", "all", lambda d: (
            _with(x, d(st.sampled_from(steps)) + (d(st.integers(0, L - 1)),), d(NONFINITE)),
            y, params, options))
    if y_ids and steps:
        add("y id out of range", "y", lambda d: (
            x, _with(y, d(st.sampled_from(steps)), d(st.sampled_from([C, C + 5, -2, -99]))),
            params, options))
    if not y_ids and steps:
        add("y non-finite", "y", lambda d: (
            x, _with(y, d(st.sampled_from(steps)) + (d(st.integers(0, C - 1)),), d(NONFINITE)),
            params, options))
        if options["loss"] == "softmax_ce":
            add("y negative", "y", lambda d: (
                x, _with(y, d(st.sampled_from(steps)) + (d(st.integers(0, C - 1)),),
                         -d(st.floats(1e-6, 1e6))), params, options))
    if options.get("h0") is not None and options["h0"].size:
        add("h0 non-finite", "all", lambda d: (x, y, params, dict(options, h0=_with(
            options["h0"], d(st.sampled_from(list(np.ndindex(options["h0"].shape)))),
            d(NONFINITE)))))
    present = [k for k in params._fields if getattr(params, k) is not None]

    def params_nonfinite(d):
        name = d(st.sampled_from(present))
        value = getattr(params, name)
        index = d(st.sampled_from(list(np.ndindex(value.shape))))
        return x, y, params._replace(**{name: _with(value, index, d(NONFINITE))}), options
    add("params non-finite", "all", params_nonfinite)

    wrong_shapes = {"W": [(H, H + 1), (H + 1, H + 1), (H,)], "V": [(C, H + 1), (C * H,)],
                    "b": [(H + 1,), (H, 1)], "c": [(C + 1,), ()], "U": [(H,), (H + 1, L),
                                                                           (H, L, 1)]}
    if not ids:
        wrong_shapes["U"].append((H, L + 1))

    def params_shape(d):
        name = d(st.sampled_from(sorted(wrong_shapes)))
        return x, y, params._replace(**{name: np.zeros(d(st.sampled_from(wrong_shapes[name])),
                                                       dtype)}), options
    add("params shape", "all", params_shape)

    def params_dtype(d):
        name = d(st.sampled_from(present))
        value = getattr(params, name)
        new = d(st.sampled_from([np.float32 if dtype == np.float64 else np.float64, np.int64,
                                 np.float16, np.complex128, bool, object]))
        if new == np.float16:
            return x, y, type(params)(*(None if v is None else v.astype(new)
                                        for v in params)), options
        return x, y, params._replace(**{name: value.astype(new)}), options
    add("params dtype", "all", params_dtype)

    def params_structure(d):
        kind = d(st.sampled_from(["missing key", "extra key", "four items", "not a structure",
                                  "None entry"]))
        entries = {k: getattr(params, k) for k in present}
        if kind == "missing key":
            entries.pop(d(st.sampled_from(["U", "W", "V"])))
            return x, y, entries, options
        if kind == "extra key":
            return x, y, dict(entries, **{d(st.sampled_from(["h0", "bias", "u", "X"])):
                                          params.U}), options
        if kind == "four items":
            return x, y, tuple(params)[:4], options
        if kind == "None entry":
            return x, y, params._replace(**{d(st.sampled_from(["U", "W", "V"])): None}), options
        return x, y, d(st.sampled_from(["params", 3, None, params.U])), options
    add("params structure", "all", params_structure)

    add("x kind", "all", lambda d: (_bad_kind(x, d(BAD_KIND)), y, params, options))
    add("x is None", "all", lambda d: (None, y, params, options))
    add("y kind", "y", lambda d: (x, _bad_kind(y, d(BAD_KIND)), params, options))
    add("h0 kind", "all", lambda d: (x, y, params, dict(options, h0=_bad_kind(
        np.zeros((H,) if single else (B, H)), d(st.sampled_from(["complex", "bool", "str"]))))))

    lead = (T,) if single else (B, T)
    y_tail = () if y_ids else (C,)
    y_shapes = [lead[:-1] + (T + 1,) + y_tail]
    if T:
        y_shapes.append(lead[:-1] + (T - 1,) + y_tail)
    if not single:
        y_shapes.append((B + 1, T) + y_tail)
    if not y_ids:
        y_shapes += [lead + (C + 1,), lead]
    add("y shape", "y", lambda d: (x, np.zeros(d(st.sampled_from(y_shapes)), y.dtype),
                                   params, options))
    if not ids:
        add("x features", "all", lambda d: (np.zeros(x.shape[:-1] + (L + 1,), x.dtype), y,
                                            params, options))
    if not single:
        add("x extra axis", "all", lambda d: (x[None], y, params, options))
    x_longer = list(x.shape)
    x_longer[0 if single else 1] += 1
    add("x longer than y", "y", lambda d: (np.zeros(x_longer, x.dtype), y, params,
                                           {k: v for k, v in options.items() if k != "lengths"}))
    h0_shapes = [(H + 1,) if single else (B, H + 1), (1, H) if single else (H,)]
    add("h0 shape", "all", lambda d: (x, y, params, dict(
        options, h0=np.zeros(d(st.sampled_from(h0_shapes)), dtype))))

    n = () if single else (B,)
    bad_lengths = [np.zeros((2,) if single else (B + 1,), int), np.zeros((1,) + n, int)[None],
                   np.zeros(n, bool)]
    if single or B:
        bad_lengths += [np.full(n, -1), np.full(n, T + 1), np.full(n, float(T))]
    add("lengths", "all", lambda d: (x, y, params, dict(
        options, lengths=d(st.sampled_from(bad_lengths)))))

    add("truncate", "train", opt(truncate=lambda d: d(st.sampled_from(
        [0, -1, -100, 2.5, "3", True, np.float64(4.0)]))))
    add("stride", "train", opt(
        truncate=options["truncate"] or 3,
        stride=lambda d: d(st.sampled_from([0, -2, (options["truncate"] or 3) + 1, 1.0, None]))))
    if options["truncate"] is None:
        add("stride without truncate", "train", opt(stride=lambda d: d(st.integers(2, 10))))
    text = st.text(max_size=10)
    add("activation", "all", opt(activation=lambda d: d(
        text.filter(lambda s: s not in ACTIVATIONS) | st.sampled_from([None, 0, np.tanh]))))
    add("loss", "y", opt(loss=lambda d: d(
        text.filter(lambda s: s not in LOSSES) | st.sampled_from([None, 1, "MSE"]))))
    add("check_finite", "all", opt(check_finite=lambda d: d(st.sampled_from(
        ["yes", 1, None, 0.0]))))
    return out


SCOPES = {"all": ENTRIES, "y": [e for e in ENTRIES if e != "forward"],
          "train": ["grad", "value_and_grad", "bptt", "reference"]}


# Every mutation, with what its valid call must have for it to apply.
MUTATIONS = {
    "x id out of range": dict(x_ids=True, steps=True),
    "x non-finite": dict(x_ids=False, steps=True),
    "y id out of range": dict(y_ids=True, steps=True),
    "y non-finite": dict(y_ids=False, steps=True),
    "y negative": dict(y_ids=False, loss="softmax_ce", steps=True),
    "h0 non-finite": dict(with_h0=True, steps=True),
    "params non-finite": {}, "params shape": {}, "params dtype": {}, "params structure": {},
    "x kind": {}, "x is None": {}, "y kind": {}, "h0 kind": {}, "y shape": {},
    "x features": dict(x_ids=False),
    "x extra axis": dict(batch=True),
    "x longer than y": {}, "h0 shape": {}, "lengths": {}, "truncate": {}, "stride": {},
    "stride without truncate": dict(truncate=None),
    "activation": {}, "loss": {}, "check_finite": {},
}


@st.composite
def invalid_calls(draw, name):
    """(entry, x, y, params, options): a valid call with the mutation ``name`` applied."""
    x, y, params, options = draw(valid_calls(**MUTATIONS[name]))
    table = mutations(x, y, params, options)
    assume(name in table)
    scope, mutate = table[name]
    entry = draw(st.sampled_from(SCOPES[scope]))
    return (entry,) + mutate(draw)


def test_every_mutation_is_listed():
    """MUTATIONS names exactly what `mutations` offers over two complementary layouts."""
    names = set()
    for x_ids, truncate in [(True, None), (False, 3)]:
        x, y, params, options = make_problem(np.random.default_rng(0), x_ids=x_ids,
                                             y_ids=not x_ids, with_h0=True)
        options.update(truncate=truncate, stride=1, loss="softmax_ce")
        names |= set(mutations(x, y, params, options))
    assert names == set(MUTATIONS)


@pytest.mark.parametrize("name", MUTATIONS)
@given(data=st.data())
def test_invalid_calls_raise_type_or_value_errors(name, data):
    entry, x, y, params, options = data.draw(invalid_calls(name), label="call")
    note(f"mutation {name!r} on {entry}")
    with pytest.raises((TypeError, ValueError)) as info:
        call(entry, x, y, params, options)
    assert not type(info.value).__module__.startswith("numba"), info.value
    # raised by validation, not by a kernel or by NumPy further down
    assert info.traceback[-1].path.name in ("_inputs.py", "_params_check.py", "params.py"), \
        info.traceback[-1]
    assert len(str(info.value)) > 25, info.value
