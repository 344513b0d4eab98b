"""Bad arguments raise TypeError/ValueError naming the argument, before any kernel runs.

One table, `BAD_CALLS`, covers every entry point: each case changes one thing of a valid
call and names the exception and the phrases its message must hold (the argument, what
was expected, what was given). Cases run on every entry point that takes the argument
they change: `forward` takes no y, loss, truncate or stride; `loss` no truncate or stride.

A second table, `MODEL_BAD_CALLS`, holds what only stacks and gated cells can get wrong
(SPEC.md §8), on `bptt` and `layer.vjp` (and its ``back``) and the reference's.
"""
import numpy as np
import pytest

import fastbptt
from fastbptt import _stack, api

L, H, C, B, T = 5, 4, 3, 2, 6

_rng = np.random.default_rng(0)
X = _rng.integers(0, L, size=(B, T))                 # token ids (B, T)
Y = _rng.integers(0, C, size=(B, T))                 # class ids (B, T)
YD = _rng.uniform(0, 1, size=(B, T, C))              # float targets (B, T, C)
XD = _rng.normal(size=(B, T, L))                     # dense inputs (B, T, L)
P = fastbptt.init_params(L, H, C, dtype=np.float64, seed=1)

FORWARD_OPTIONS = {"activation", "h0", "lengths", "check_finite"}
LOSS_OPTIONS = FORWARD_OPTIONS | {"loss"}


def put(array, index, value, dtype=None):
    """A copy of ``array`` (cast to ``dtype``) with ``array[index] = value``."""
    out = np.array(array, dtype=dtype)
    out[index] = value
    return out


def objects(array):
    """An object array of the same numbers: numeric-looking but no numeric dtype."""
    return np.asarray(array).astype(object)


def params(**changes):
    return P._replace(**changes)


# (id, change: (x, y, params) -> (x, y, params, options), exception, phrases in its message)
BAD_CALLS = [
    # token ids outside [0, L)
    ("token id = L", lambda x, y, p: (put(x, (1, 2), L), y, p, {}), ValueError,
     ("x token ids must lie in [0, 5)", "L=5 from params U (4, 5)", "got 5 at index (1, 2)")),
    ("negative token id", lambda x, y, p: (put(x, (0, 4), -1), y, p, {}), ValueError,
     ("x token ids must lie in [0, 5)", "got -1 at index (0, 4)")),
    ("huge uint64 token id", lambda x, y, p: (put(x, (1, 0), 2**64 - 1, np.uint64), y, p, {}),
     ValueError, ("x token ids must lie in [0, 5)", "got 18446744073709551615 at index (1, 0)")),
    ("token id of one sequence", lambda x, y, p: (put(x[0], 3, 7), y[0], p, {}), ValueError,
     ("x token ids must lie in [0, 5)", "got 7 at index (3,)")),
    # class ids outside [-1, C)
    ("class id = C", lambda x, y, p: (x, put(y, (1, 1), C), p, {}), ValueError,
     ("y class ids must lie in [-1, 3)", "C=3 from params V (3, 4)", "-1 = no loss",
      "got 3 at index (1, 1)")),
    ("class id below -1", lambda x, y, p: (x, put(y, (0, 0), -2), p, {}), ValueError,
     ("y class ids must lie in [-1, 3)", "got -2 at index (0, 0)")),
    ("class id of mse", lambda x, y, p: (x, put(y, (0, 5), 9), p, {"loss": "mse"}),
     ValueError, ("y class ids must lie in [-1, 3)", "got 9 at index (0, 5)")),
    # float targets: negative (softmax_ce), non-finite, wrong shape
    ("negative soft target", lambda x, y, p: (x, put(YD, (0, 1, 2), -0.5), p, {}), ValueError,
     ("y float targets for softmax_ce must be non-negative", "got -0.5 at index (0, 1, 2)")),
    ("NaN target", lambda x, y, p: (x, put(YD, (1, 2, 0), np.nan), p, {}), ValueError,
     ("y holds a non-finite value (nan at index (1, 2, 0))", "check_finite=False")),
    ("inf target of mse", lambda x, y, p: (x, put(YD, (0, 0, 1), -np.inf), p, {"loss": "mse"}),
     ValueError, ("y holds a non-finite value (-inf at index (0, 0, 1))",)),
    ("1-D float targets of a batch", lambda x, y, p: (x, np.ones(T), p, {}), ValueError,
     ("y as float targets must have shape (2, 6, 3)", "x of shape (2, 6)", "got (6,)")),
    ("1-D float targets of one sequence", lambda x, y, p: (x[0], np.ones(T), p, {}), ValueError,
     ("y as float targets must have shape (6, 3)", "got (6,)",
      "pass class ids as an integer array")),
    ("class ids as floats", lambda x, y, p: (x, y.astype(float), p, {}), ValueError,
     ("y as float targets must have shape (2, 6, 3)", "got (2, 6)",
      "pass class ids as an integer array")),
    ("float targets of C + 1 classes", lambda x, y, p: (x, np.ones((B, T, C + 1)), p, {}),
     ValueError, ("y as float targets must have shape (2, 6, 3)", "params V (3, 4)",
                  "got (2, 6, 4)")),
    ("integer one-hot targets", lambda x, y, p: (x, np.ones((B, T, C), int), p, {}), ValueError,
     ("y as class ids must have shape (2, 6)", "got (2, 6, 3)", "as a float array")),
    # x and y disagree in T or B
    ("y shorter than x", lambda x, y, p: (x, y[:, :-1], p, {}), ValueError,
     ("y as class ids must have shape (2, 6)", "x of shape (2, 6)", "T=6", "got (2, 5)")),
    ("y longer than x", lambda x, y, p: (x, np.zeros((B, T + 1), int), p, {}), ValueError,
     ("y as class ids must have shape (2, 6)", "x of shape (2, 6)", "got (2, 7)")),
    ("y of fewer sequences", lambda x, y, p: (x, y[:1], p, {}), ValueError,
     ("y as class ids must have shape (2, 6)", "B=2 sequences", "got (1, 6)")),
    ("float y of fewer sequences", lambda x, y, p: (x, YD[:1], p, {}), ValueError,
     ("y as float targets must have shape (2, 6, 3)", "x of shape (2, 6)", "got (1, 6, 3)")),
    ("float y shorter than dense x", lambda x, y, p: (XD, YD[:, :-1], p, {}), ValueError,
     ("y as float targets must have shape (2, 6, 3)", "x of shape (2, 6, 5)",
      "got (2, 5, 3)")),
    ("batch y for one sequence", lambda x, y, p: (x[0], y.copy(), p, {}), ValueError,
     ("y as class ids must have shape (6,)", "x of shape (6,) is one sequence", "got (2, 6)")),
    # params whose shapes disagree with each other or with x, y, h0
    ("W of the wrong shape", lambda x, y, p: (x, y, params(W=np.zeros((H, H + 1))), {}),
     ValueError, ("params W must be (4, 4) to match U (4, 5)", "got (4, 5)")),
    ("V of the wrong width", lambda x, y, p: (x, y, params(V=np.zeros((C, H + 1))), {}),
     ValueError, ("params V must be (output_size, 4) to match U (4, 5)", "got (3, 5)")),
    ("b of the wrong shape", lambda x, y, p: (x, y, params(b=np.zeros(H + 1)), {}), ValueError,
     ("params b must have shape (4,)", "U (4, 5)", "got (5,)")),
    ("c of the wrong shape", lambda x, y, p: (x, y, params(c=np.zeros((C, 1))), {}), ValueError,
     ("params c must have shape (3,)", "V (3, 4)", "got (3, 1)")),
    ("1-D U", lambda x, y, p: (x, y, params(U=np.zeros(H)), {}), ValueError,
     ("params U must be 2-D (hidden_size, input_size)", "got shape (4,)")),
    ("U of more hidden units than W", lambda x, y, p: (x, y, params(U=np.zeros((H + 1, L))), {}),
     ValueError, ("params W must be (5, 5) to match U (5, 5)", "got (4, 4)")),
    ("empty V", lambda x, y, p: (x, y, params(V=np.zeros((0, H)), c=None), {}), ValueError,
     ("params sizes must be positive", "V (0, 4)")),
    ("dense x of L + 1 features", lambda x, y, p: (np.ones((B, T, L + 1)), y, p, {}), ValueError,
     ("x of shape (2, 6, 6) has 6 features", "params U is (4, 5), which expects 5")),
    ("token ids as floats", lambda x, y, p: (x.astype(float), y, p, {}), ValueError,
     ("x of shape (2, 6) has 6 features", "params U is (4, 5)",
      "a 2-D float x is one sequence")),
    ("h0 of one sequence for a batch", lambda x, y, p: (x, y, p, {"h0": np.zeros(H)}),
     ValueError, ("h0 must have shape (2, 4)", "params W (4, 4)", "x of shape (2, 6)",
                  "got (4,)")),
    ("h0 of H + 1 units", lambda x, y, p: (x, y, p, {"h0": np.zeros((B, H + 1))}), ValueError,
     ("h0 must have shape (2, 4)", "got (2, 5)")),
    ("batch h0 for one sequence", lambda x, y, p: (x[0], y[0], p, {"h0": np.zeros((1, H))}),
     ValueError, ("h0 must have shape (4,)", "params W (4, 4)", "got (1, 4)")),
    # params dtypes and structure
    ("mixed dtypes", lambda x, y, p: (x, y, params(W=p.W.astype(np.float32)), {}), TypeError,
     ("params must share one dtype", "W float32", "U float64")),
    ("integer params", lambda x, y, p: (x, y, params(U=np.ones((H, L), int)), {}), TypeError,
     ("params U must be float32 or float64", "got int64")),
    ("float16 params", lambda x, y, p: (x, y, fastbptt.Params(*(a.astype(np.float16) for a in p)),
                                        {}),
     TypeError, ("params must be float32 or float64", "got float16")),
    ("complex params", lambda x, y, p: (x, y, params(V=p.V + 0j), {}), TypeError,
     ("params V must hold floats", "got dtype complex128")),
    ("boolean params", lambda x, y, p: (x, y, params(W=p.W > 0), {}), TypeError,
     ("params W must hold floats", "not booleans")),
    ("object params", lambda x, y, p: (x, y, params(U=objects(p.U)), {}), TypeError,
     ("params U must hold floats", "got dtype object")),
    ("string params entry", lambda x, y, p: (x, y, params(b="zeros"), {}), TypeError,
     ("params b must be a numeric array", "got str")),
    ("NaN in params", lambda x, y, p: (x, y, params(U=put(p.U, (2, 3), np.nan)), {}), ValueError,
     ("params U holds a non-finite value (nan at index (2, 3))",)),
    ("inf in params", lambda x, y, p: (x, y, params(c=put(p.c, 1, np.inf)), {}), ValueError,
     ("params c holds a non-finite value (inf at index (1,))",)),
    ("missing dict key", lambda x, y, p: (x, y, {"U": p.U, "W": p.W}, {}), ValueError,
     ("params is missing key(s) 'V'", "got keys ['U', 'W']")),
    ("unknown dict key", lambda x, y, p: (x, y, dict(p._asdict(), bias=p.b), {}), ValueError,
     ("params has unknown key(s) 'bias'", "valid keys are 'U', 'W', 'V', 'b', 'c'")),
    ("V is None", lambda x, y, p: (x, y, params(V=None), {}), ValueError,
     ("params V is None", "U, W and V are required")),
    ("tuple of four", lambda x, y, p: (x, y, tuple(p)[:4], {}), ValueError,
     ("(U, W, V) or (U, W, V, b, c)", "got 4 items")),
    ("unknown params type", lambda x, y, p: (x, y, "weights", {}), TypeError,
     ("params must be a fastbptt.Params", "got str")),
    # truncate and stride
    ("truncate 0", lambda x, y, p: (x, y, p, {"truncate": 0}), ValueError,
     ("truncate must be at least 1", "got 0")),
    ("negative truncate", lambda x, y, p: (x, y, p, {"truncate": -3}), ValueError,
     ("truncate must be at least 1", "got -3")),
    ("stride 0", lambda x, y, p: (x, y, p, {"truncate": 3, "stride": 0}), ValueError,
     ("stride must be at least 1", "got 0")),
    ("stride above truncate", lambda x, y, p: (x, y, p, {"truncate": 3, "stride": 4}),
     ValueError, ("stride must not exceed truncate", "stride=4, truncate=3")),
    ("stride without truncate", lambda x, y, p: (x, y, p, {"stride": 2}), ValueError,
     ("stride=2 needs truncate",)),
    ("float truncate", lambda x, y, p: (x, y, p, {"truncate": 2.5}), TypeError,
     ("truncate must be an int or None", "got float")),
    ("string truncate", lambda x, y, p: (x, y, p, {"truncate": "10"}), TypeError,
     ("truncate must be an int or None", "got str")),
    ("boolean truncate", lambda x, y, p: (x, y, p, {"truncate": True}), TypeError,
     ("truncate must be an int", "got a bool")),
    ("float stride", lambda x, y, p: (x, y, p, {"truncate": 4, "stride": 2.0}), TypeError,
     ("stride must be an int", "got float")),
    # activation, loss, check_finite
    ("unknown activation", lambda x, y, p: (x, y, p, {"activation": "gelu"}), ValueError,
     ("unknown activation 'gelu'", "'tanh', 'sigmoid', 'relu', 'identity'")),
    ("activation in capitals", lambda x, y, p: (x, y, p, {"activation": "Tanh"}), ValueError,
     ("unknown activation 'Tanh'", "'tanh', 'sigmoid', 'relu', 'identity'")),
    ("activation not a string", lambda x, y, p: (x, y, p, {"activation": np.tanh}), TypeError,
     ("activation must be a string", "'tanh', 'sigmoid', 'relu', 'identity'", "got <ufunc")),
    ("unknown loss", lambda x, y, p: (x, y, p, {"loss": "hinge"}), ValueError,
     ("unknown loss 'hinge'", "'softmax_ce', 'mse'")),
    ("loss as a code", lambda x, y, p: (x, y, p, {"loss": 1}), TypeError,
     ("loss must be a string", "'softmax_ce', 'mse'", "got 1")),
    ("check_finite not a bool", lambda x, y, p: (x, y, p, {"check_finite": "no"}), TypeError,
     ("check_finite must be True or False", "got 'no'")),
    # lengths
    ("negative length", lambda x, y, p: (x, y, p, {"lengths": [-1, 2]}), ValueError,
     ("lengths must lie in [0, T=6]", "x of shape (2, 6)", "from -1 to 2")),
    ("length beyond T", lambda x, y, p: (x, y, p, {"lengths": [2, T + 1]}), ValueError,
     ("lengths must lie in [0, T=6]", "from 2 to 7")),
    ("lengths of the wrong shape", lambda x, y, p: (x, y, p, {"lengths": [2, 3, 4]}),
     ValueError, ("lengths must have shape (2,)", "x, which has shape (2, 6)", "got (3,)")),
    ("2-D lengths", lambda x, y, p: (x, y, p, {"lengths": [[2, 3]]}), ValueError,
     ("lengths must have shape (2,)", "got (1, 2)")),
    ("scalar length of a batch", lambda x, y, p: (x, y, p, {"lengths": 3}), ValueError,
     ("lengths must have shape (2,)", "got ()")),
    ("float lengths", lambda x, y, p: (x, y, p, {"lengths": [2.0, 3.0]}), TypeError,
     ("lengths must hold integers", "got dtype float64")),
    ("boolean lengths", lambda x, y, p: (x, y, p, {"lengths": [True, False]}), TypeError,
     ("lengths must hold integers, not booleans", ".astype(int)")),
    ("string lengths", lambda x, y, p: (x, y, p, {"lengths": "6"}), TypeError,
     ("lengths must be a numeric array", "got str")),
    # kinds of x, y, h0: complex, string, object, bool, None are TypeErrors
    ("complex x", lambda x, y, p: (x + 0j, y, p, {}), TypeError,
     ("x must hold integer token ids or float inputs", "got dtype complex128")),
    ("string x", lambda x, y, p: ("abc", y, p, {}), TypeError,
     ("x must be a numeric array", "got str")),
    ("array of strings x", lambda x, y, p: (x.astype(str), y, p, {}), TypeError,
     ("x must hold integer token ids or float inputs", "got dtype <U")),
    ("object x", lambda x, y, p: (objects(x), y, p, {}), TypeError,
     ("x must hold integer token ids or float inputs", "got dtype object")),
    ("boolean x", lambda x, y, p: (x > 2, y, p, {}), TypeError,
     ("x must hold integer token ids or float inputs, not booleans",
      ".astype(int) or .astype(float)")),
    ("x is None", lambda x, y, p: (None, y, p, {}), TypeError,
     ("x must be a numeric array", "got None")),
    ("ragged x", lambda x, y, p: ([[1, 2], [3]], y, p, {}), ValueError,
     ("x could not be read as an array",)),
    ("3-D token ids", lambda x, y, p: (x[None], y, p, {}), ValueError,
     ("x as token ids must be (T,) or (B, T)", "got shape (1, 2, 6)",
      "dense inputs (B, T, L) must be floats")),
    ("scalar x", lambda x, y, p: (np.int64(3), y, p, {}), ValueError,
     ("x as token ids must be (T,) or (B, T)", "got shape ()")),
    ("1-D float x", lambda x, y, p: (np.ones(T), y, p, {}), ValueError,
     ("x as dense floats must be (T, L) or (B, T, L)", "got shape (6,)",
      "pass token ids as an integer array")),
    ("4-D dense x", lambda x, y, p: (XD[None], y, p, {}), ValueError,
     ("x as dense floats must be (T, L) or (B, T, L)", "got shape (1, 2, 6, 5)")),
    ("NaN in dense x", lambda x, y, p: (put(XD, (1, 3, 4), np.nan), y, p, {}), ValueError,
     ("x holds a non-finite value (nan at index (1, 3, 4))",)),
    ("complex y", lambda x, y, p: (x, y + 0j, p, {}), TypeError,
     ("y must hold integer class ids or float targets", "got dtype complex128")),
    ("string y", lambda x, y, p: (x, "next", p, {}), TypeError,
     ("y must be a numeric array", "got str")),
    ("object y", lambda x, y, p: (x, objects(y), p, {}), TypeError,
     ("y must hold integer class ids or float targets", "got dtype object")),
    ("boolean y", lambda x, y, p: (x, y > 0, p, {}), TypeError,
     ("y must hold integer class ids or float targets, not booleans",)),
    ("complex h0", lambda x, y, p: (x, y, p, {"h0": np.zeros((B, H), complex)}), TypeError,
     ("h0 must hold floats", "got dtype complex128")),
    ("boolean h0", lambda x, y, p: (x, y, p, {"h0": np.zeros((B, H), bool)}), TypeError,
     ("h0 must hold floats, not booleans",)),
    ("string h0", lambda x, y, p: (x, y, p, {"h0": "zeros"}), TypeError,
     ("h0 must be a numeric array", "got str")),
    ("NaN in h0", lambda x, y, p: (x, y, p, {"h0": put(np.zeros((B, H)), (1, 0), np.nan)}),
     ValueError, ("h0 holds a non-finite value (nan at index (1, 0))",)),
    ("inf in h0", lambda x, y, p: (x, y, p, {"h0": np.full((B, H), np.inf)}), ValueError,
     ("h0 holds a non-finite value (inf at index (0, 0))",)),
]

ENTRIES = ["grad", "value_and_grad", "bptt", "forward", "loss", "reference"]


def takes(entry, change):
    """Whether ``entry`` takes everything that ``change`` changes.

    A case is about y when it returns a y other than the one it was given.
    """
    x, y, _, options = change(X, Y, P)
    if entry == "forward":
        return y is Y and set(options) <= FORWARD_OPTIONS
    if entry == "loss":
        return set(options) <= LOSS_OPTIONS
    return True


def call(entry, x, y, params, options):
    if entry == "forward":
        return fastbptt.forward(x, params, **options)
    fn = fastbptt.reference.bptt if entry == "reference" else getattr(fastbptt, entry)
    return fn(x, y, params, **options)


def trip_kernels(monkeypatch):
    """From now on, any kernel call fails the test."""
    def tripwire(*args):
        raise AssertionError("a kernel ran before validation rejected the call")
    for name in ("forward", "forward_narrow", "backward_sweep", "backward_lag_major",
                 "backward_narrow", "narrow_weight_grads", "pack_panels", "backward_narrow_whole",
                 "to_feature_major", "pad_weights", "gather_inputs", "gather_inputs_part",
                 "scatter_ids", "scatter_ids_part", "project_inputs"):
        monkeypatch.setattr(_stack, name, tripwire)
    for name in ("output_backward_tm", "output_backward_fm", "direction_logits",
                 "direction_backward", "row_sums"):
        monkeypatch.setattr(api, name, tripwire)
    monkeypatch.setattr(api, "ERRORS", {kind: tripwire for kind in api.ERRORS})


@pytest.fixture
def no_kernels(monkeypatch):
    """Any kernel call fails the test: validation must reject the call before one runs."""
    trip_kernels(monkeypatch)


@pytest.mark.parametrize(
    "entry,change,error,phrases",
    [pytest.param(entry, *case[1:], id=f"{entry}-{case[0]}")
     for case in BAD_CALLS for entry in ENTRIES if takes(entry, case[1])])
def test_bad_input_raises_a_clear_error(no_kernels, entry, change, error, phrases):
    x, y, params, options = change(X, Y, P)
    with pytest.raises(error) as info:
        call(entry, x, y, params, options)
    message = str(info.value)
    for phrase in phrases:
        assert phrase in message, (phrase, message)


def test_every_entry_point_sees_most_cases():
    """The applicability filter leaves each entry point the cases it can take."""
    counts = {entry: sum(takes(entry, case[1]) for case in BAD_CALLS) for entry in ENTRIES}
    assert counts["grad"] == counts["reference"] == len(BAD_CALLS)
    assert counts["forward"] >= 50 and counts["loss"] >= 75, counts


def test_messages_do_not_depend_on_the_entry_point():
    for _, change, error, _ in BAD_CALLS:
        x, y, params, options = change(X, Y, P)
        messages = set()
        for entry in ENTRIES:
            if takes(entry, change):
                with pytest.raises(error) as info:
                    call(entry, x, y, params, options)
                messages.add(str(info.value))
        assert len(messages) == 1, messages


def test_padding_ids_are_not_range_checked():
    """Steps past a sequence's length may hold anything: they are never read."""
    x, y = X.copy(), Y.copy()
    x[1, 3:], y[1, 3:] = 10**6, -50
    fastbptt.grad(x, y, P, lengths=[T, 3])
    with pytest.raises(ValueError, match=r"x token ids .* got 1000000 at index \(1, 3\)"):
        fastbptt.grad(x, y, P, lengths=[T, 4])


def test_padding_values_are_not_checked_for_finiteness():
    x, y = XD.copy(), YD.copy()
    x[0, 4:], y[0, 4:] = np.nan, -np.inf
    clean_x, clean_y = np.where(np.isfinite(x), x, 0), np.where(np.isfinite(y), y, 0)
    got = fastbptt.bptt(x, y, P, lengths=[4, T])
    want = fastbptt.bptt(clean_x, clean_y, P, lengths=[4, T])
    assert got.loss == want.loss
    assert all(np.array_equal(g, w) for g, w in zip(got.grads, want.grads))
    with pytest.raises(ValueError, match=r"x holds a non-finite value \(nan at index \(0, 4, 0\)"):
        fastbptt.grad(x, y, P, lengths=[5, T])


def test_big_truncate_and_stride_are_full_bptt():
    """Windows longer than any sequence cut nothing, however large the numbers."""
    full = fastbptt.bptt(X, Y, P)
    for truncate, stride in [(10**20, 1), (10**20, 3), (10**20, 10**20), (2**63, 2**63),
                             (T + 2, 3), (T, T)]:
        for impl in (fastbptt, fastbptt.reference):
            cut = impl.bptt(X, Y, P, truncate=truncate, stride=stride)
            assert abs(cut.loss - full.loss) <= 1e-12 * full.loss
            for g, w in zip(cut.grads, full.grads):
                np.testing.assert_allclose(g, w, rtol=0, atol=1e-12 * np.abs(w).max())


def test_every_truncation_that_cuts_nothing_is_full_bptt_and_no_other():
    """lo(t) = 0 for all t < T exactly when ((T - 1) // s + 1) s <= k: such a call is
    full BPTT wherever full BPTT is the only choice (a reverse direction, windows on a
    stack), and a call that cuts is refused there."""
    from fastbptt.reference import window_start

    rng = np.random.default_rng(0)
    model = fastbptt.init_params(3, 4, 2, num_layers=2, bidirectional=True,
                                 dtype=np.float64, seed=0)
    layer = fastbptt.Layer(model.layers[0][0].U, model.layers[0][0].W)
    for n in range(1, 9):
        x = rng.normal(size=(2, n, 3))
        y = rng.integers(0, 2, (2, n))
        full = fastbptt.bptt(x, y, model)
        dh = np.ones((2, n, 4))
        back = fastbptt.layer.vjp(x, layer, reverse=True)[1](dh).grads.W
        for k in range(1, n + 3):
            for s in range(1, k + 1):
                nothing = all(window_start(t, k, s) == 0 for t in range(n))
                if not nothing:
                    with pytest.raises(ValueError, match="not supported"):
                        fastbptt.bptt(x, y, model, truncate=k, stride=s)
                    with pytest.raises(ValueError, match="not supported with reverse=True"):
                        fastbptt.layer.vjp(x, layer, reverse=True, truncate=k, stride=s)
                    continue
                cut = fastbptt.bptt(x, y, model, truncate=k, stride=s)
                assert cut.loss == full.loss
                assert all(np.array_equal(a, b) for a, b in zip(
                    fastbptt.params.leaves(cut.grads).values(),
                    fastbptt.params.leaves(full.grads).values()))
                got = fastbptt.layer.vjp(x, layer, reverse=True, truncate=k, stride=s)[1](dh)
                assert np.array_equal(got.grads.W, back)


def test_check_finite_false_skips_the_scan():
    """Without the scan a NaN weight is not an error: it shows in the results instead."""
    bad = params(W=np.where(np.eye(H, dtype=bool), np.nan, P.W))
    with pytest.raises(ValueError, match="params W holds a non-finite value"):
        fastbptt.grad(X, Y, bad)
    result = fastbptt.bptt(X, Y, bad, check_finite=False)
    assert np.isnan(result.loss) and np.isnan(result.grads.W).any()


# Stacks and gated cells: a 2-layer bidirectional LSTM, a 2-layer Elman stack, one GRU layer.
LSTM2 = fastbptt.init_params(L, H, C, cell="lstm", num_layers=2, bidirectional=True,
                             dtype=np.float64, seed=1)
ELMAN2 = fastbptt.init_params(L, H, C, num_layers=2, dtype=np.float64, seed=1)
GRU = fastbptt.init_params(L, H, C, cell="gru", dtype=np.float64, seed=1)
GRU_LAYER = GRU.layers[0][0]


def layer_at(model, l, d, **changes):
    """``model`` with ``changes`` to the layer of layers[l][d]."""
    rows = [list(row) for row in model.layers]
    rows[l][d] = rows[l][d]._replace(**changes)
    return model._replace(layers=tuple(map(tuple, rows)))


def layers(model):
    return fastbptt.Model(model.layers)


def bptt_call(params, **options):
    return "bptt", (X, Y, params), options


def vjp_call(params, x=XD, **options):
    return "vjp", (x, params), options


def back_call(params, *upstream, **options):
    return "back", (XD, params, upstream), options


# (id, call: "bptt" (x, y, params) or "vjp" (x, params) with options, or "back": vjp's
#  then back(*upstream); the exception; phrases in its message)
MODEL_BAD_CALLS = [
    # layers whose sizes do not chain: the layer, its direction, both shapes
    ("reverse layer 1 reads one direction",
     bptt_call(layer_at(LSTM2, 1, 1, U=np.zeros((4 * H, H)))), ValueError,
     ("params layers[1][1] U must be (16, 8)", "to read both directions of layer 0",
      "H=4 x 2 directions", "got (16, 4)")),
    ("layer 1 of the wrong input width", bptt_call(layer_at(ELMAN2, 1, 0, U=np.zeros((H, L)))),
     ValueError, ("params layers[1][0] U must be (4, 4) to read the outputs of layer 0 (H=4)",
                  "got (4, 5)")),
    ("layers that do not chain, layer API",
     vjp_call(layers(layer_at(ELMAN2, 1, 0, U=np.zeros((H, H + 1))))), ValueError,
     ("params layers[1][0] U must be (4, 4) to read the outputs of layer 0", "got (4, 5)")),
    # states of the wrong stack layout
    ("h0 of one layer for a stack", bptt_call(LSTM2, h0=np.zeros((B, H))), ValueError,
     ("h0 must have shape (4, 2, 4)", "4 = layers x directions",
      "H=4 from params layers[0][0] W (16, 4)", "B=2 from x of shape (2, 6)", "got (2, 4)")),
    ("h0 of one direction for a bidirectional stack", bptt_call(LSTM2, h0=np.zeros((2, B, H))),
     ValueError, ("h0 must have shape (4, 2, 4)", "got (2, 2, 4)")),
    ("c0 of one direction", bptt_call(LSTM2, c0=np.zeros((2, B, H))), ValueError,
     ("c0 must have shape (4, 2, 4)", "4 = layers x directions", "got (2, 2, 4)")),
    ("h0 of one sequence for a batch, layer API", vjp_call(layers(LSTM2), h0=np.zeros((4, H))),
     ValueError, ("h0 must have shape (4, 2, 4)", "x of shape (2, 6, 5)", "got (4, 4)")),
    # the head against the top layer
    ("V of one direction's width", bptt_call(LSTM2._replace(V=np.zeros((C, H)))), ValueError,
     ("params V must be (output_size, 8) with output_size >= 1 to read the top layer's "
      "outputs", "H=4 x 2 directions", "got (3, 4)")),
    ("V of no rows", bptt_call(LSTM2._replace(V=np.zeros((0, 2 * H)), c=None)), ValueError,
     ("params V must be (output_size, 8) with output_size >= 1", "got (0, 8)")),
    # c0 for a cell without one
    ("c0 for a GRU", bptt_call(GRU, c0=np.zeros((1, B, H))), ValueError,
     ("c0 is the LSTM's cell state; the gru cell has none", "pass c0=None")),
    ("c0 for an Elman stack", bptt_call(ELMAN2, c0=np.zeros((2, B, H))), ValueError,
     ("c0 is the LSTM's cell state; the elman cell has none",)),
    ("c0 for a GRU layer", vjp_call(GRU_LAYER, c0=np.zeros((B, H))), ValueError,
     ("c0 is the LSTM's cell state; the gru cell has none",)),
    # W's rows, the GRU's second bias
    ("W of 2 H rows", vjp_call(fastbptt.Layer(np.zeros((2 * H, L)), np.zeros((2 * H, H)))),
     ValueError, ("params W must have 1, 3 or 4 times as many rows as columns",
                  "(Elman, GRU, LSTM", "got (8, 4)")),
    ("W of 2 H rows in a stack",
     bptt_call(fastbptt.Model(((fastbptt.Layer(np.zeros((2 * H, L)), np.zeros((2 * H, H))),),),
                              GRU.V, GRU.c)), ValueError,
     ("params layers[0][0] W must have 1, 3 or 4 times as many rows as columns",
      "got (8, 4)")),
    ("GRU layer with b but no bh", vjp_call(GRU_LAYER._replace(bh=None)), ValueError,
     ("params bh is missing", "a GRU with biases needs the hidden-side bias bh (12,)",
      "PyTorch's bias_hh")),
    ("GRU stack with b but no bh", bptt_call(layer_at(GRU, 0, 0, bh=None)), ValueError,
     ("params layers[0][0] bh is missing", "bh (12,)")),
    ("bh for an LSTM layer", vjp_call(LSTM2.layers[0][0]._replace(bh=np.zeros(4 * H))),
     ValueError, ("params bh is for a GRU only", "one bias b = bias_ih + bias_hh")),
    # an Elman activation for a gated cell
    ("relu for an LSTM", bptt_call(LSTM2, activation="relu"), ValueError,
     ("activation='relu' applies to the Elman cell only", "the LSTM cell has its own gates")),
    ("sigmoid for a GRU layer", vjp_call(GRU_LAYER, activation="sigmoid"), ValueError,
     ("activation='sigmoid' applies to the Elman cell only", "the GRU cell has its own gates")),
    # truncations a stack or a reverse direction cannot take
    ("windows on a stack", bptt_call(ELMAN2, truncate=3, stride=1), ValueError,
     ("truncate=3 with stride=1 (a window per output) is not supported on a stack of 2 "
      "layers", "pass stride=truncate")),
    ("strides on a stack, layer API", vjp_call(layers(ELMAN2), truncate=3, stride=2),
     ValueError, ("truncate=3 with stride=2 (a window per output) is not supported on a "
                  "stack of 2 layers",)),
    ("chunks on a bidirectional stack", bptt_call(LSTM2, truncate=2, stride=2), ValueError,
     ("truncate=2 is not supported with bidirectional layers", "pass truncate=None")),
    ("truncation of a reverse layer", vjp_call(GRU_LAYER, reverse=True, truncate=2, stride=2),
     ValueError, ("truncate=2 is not supported with reverse=True", "pass truncate=None")),
    ("reverse=True for a stack", vjp_call(layers(ELMAN2), reverse=True), ValueError,
     ("reverse=True is for one layer", "a stack's directions come from its params")),
    # a cell that disagrees with the shapes
    ("cell='gru' for LSTM params", bptt_call(LSTM2, cell="gru"), ValueError,
     ("cell='gru' but params layers[0][0] W (16, 4) is that of a LSTM cell",
      "pass cell='lstm' or None")),
    ("cell='elman' for a GRU layer", vjp_call(GRU_LAYER, cell="elman"), ValueError,
     ("cell='elman' but params W (12, 4) is that of a GRU cell", "pass cell='gru' or None")),
    ("unknown cell", bptt_call(LSTM2, cell="rnn"), ValueError,
     ("unknown cell 'rnn'", "'elman', 'gru', 'lstm'")),
    # back's upstream gradients
    ("dh of the wrong shape", back_call(layers(LSTM2), np.zeros((B, T, H))), ValueError,
     ("dh must have shape (2, 6, 8), that of out.h", "got (2, 6, 4)")),
    ("complex dh", back_call(layers(LSTM2), np.zeros((B, T, 2 * H), complex)), TypeError,
     ("dh must hold floats", "got dtype complex128")),
    ("integer dh", back_call(layers(LSTM2), np.zeros((B, T, 2 * H), int)), TypeError,
     ("dh must hold floats", "got dtype int64; cast with .astype(np.float64)")),
    ("NaN in dh", back_call(layers(LSTM2), put(np.zeros((B, T, 2 * H)), (1, 2, 5), np.nan)),
     ValueError, ("dh holds a non-finite value (nan at index (1, 2, 5))",
                  "check_finite=False")),
    ("dh_final of one layer", back_call(layers(LSTM2), np.zeros((B, T, 2 * H)),
                                        np.zeros((B, H))), ValueError,
     ("dh_final must have shape (4, 2, 4), that of out.h_final", "got (2, 4)")),
    ("dc_final of the wrong width", back_call(layers(LSTM2), np.zeros((B, T, 2 * H)), None,
                                              np.zeros((4, B, H + 1))), ValueError,
     ("dc_final must have shape (4, 2, 4), that of out.c_final", "got (4, 2, 5)")),
    ("dc_final for a GRU", back_call(GRU_LAYER, np.zeros((B, T, H)), None, np.zeros((B, H))),
     ValueError, ("dc_final is the LSTM's cell-state gradient; the gru cell has no cell state",
                  "pass dc_final=None")),
    # non-finite states and upstream gradients of the LSTM's cell, and of the final states
    ("NaN in c0", bptt_call(LSTM2, c0=put(np.zeros((4, B, H)), (1, 0, 2), np.nan)),
     ValueError, ("c0 holds a non-finite value (nan at index (1, 0, 2))",)),
    ("inf in a layer's c0", vjp_call(LSTM2.layers[0][0], c0=np.full((B, H), np.inf)),
     ValueError, ("c0 holds a non-finite value (inf at index (0, 0))",)),
    ("NaN in dh_final", back_call(layers(LSTM2), np.zeros((B, T, 2 * H)),
                                  put(np.zeros((4, B, H)), (2, 1, 0), np.nan)), ValueError,
     ("dh_final holds a non-finite value (nan at index (2, 1, 0))", "check_finite=False")),
    ("inf in dc_final", back_call(layers(LSTM2), np.zeros((B, T, 2 * H)), None,
                                  put(np.zeros((4, B, H)), (3, 0, 1), -np.inf)), ValueError,
     ("dc_final holds a non-finite value (-inf at index (3, 0, 1))", "check_finite=False")),
]


def test_check_finite_false_lets_non_finite_states_and_upstream_gradients_through():
    """The scan of c0, dh_final and dc_final is the one check_finite turns off: the
    values then show in the results."""
    c0 = put(np.zeros((4, B, H)), (1, 0, 2), np.nan)
    assert np.isnan(fastbptt.bptt(X, Y, LSTM2, c0=c0, check_finite=False).loss)
    out, back = fastbptt.layer.vjp(XD, layers(LSTM2), check_finite=False)
    nan = put(np.zeros((4, B, H)), (2, 1, 0), np.nan)
    zeros = np.zeros((B, T, 2 * H))
    for upstream in ((zeros, nan), (zeros, None, nan)):
        grads = back(*upstream).grads
        assert np.isnan(grads.layers[1][0].W).any()


@pytest.mark.parametrize("reference", [False, True], ids=["kernels", "reference"])
@pytest.mark.parametrize("call,error,phrases",
                         [pytest.param(*case[1:], id=case[0]) for case in MODEL_BAD_CALLS])
def test_bad_stack_or_cell_raises_a_clear_error(monkeypatch, reference, call, error, phrases):
    """Before any kernel runs (for ``back``: any kernel after its forward pass)."""
    kind, args, options = call
    bptt = fastbptt.reference.bptt if reference else fastbptt.bptt
    vjp = fastbptt.reference.layer_vjp if reference else fastbptt.layer.vjp
    if kind == "back":
        x, params, upstream = args
        back = vjp(x, params, **options)[1]
    trip_kernels(monkeypatch)
    with pytest.raises(error) as info:
        if kind == "bptt":
            bptt(*args, **options)
        elif kind == "vjp":
            vjp(*args, **options)
        else:
            back(*upstream)
    message = str(info.value)
    for phrase in phrases:
        assert phrase in message, (phrase, message)


@pytest.mark.parametrize("cell", ["elman", "gru", "lstm"])
@pytest.mark.parametrize("num_layers", [0, -1])
def test_init_params_needs_a_layer(cell, num_layers):
    with pytest.raises(ValueError, match=rf"num_layers must be at least 1; got {num_layers}"):
        fastbptt.init_params(L, H, C, cell=cell, num_layers=num_layers)


def test_the_model_calls_are_valid_but_for_their_change():
    """The stacks and layers of `MODEL_BAD_CALLS` run, and so do their ``back``s: each
    case fails for what it changes."""
    for params in (LSTM2, ELMAN2, GRU):
        fastbptt.bptt(X, Y, params, h0=np.zeros((len(params.layers) * len(params.layers[0]),
                                                 B, H)))
        out, back = fastbptt.layer.vjp(XD, layers(params))
        back(np.zeros(out.h.shape), np.zeros(out.h_final.shape),
             np.zeros(out.h_final.shape) if params is LSTM2 else None)
    fastbptt.bptt(X, Y, ELMAN2, truncate=3, stride=3)
    fastbptt.layer.vjp(XD, GRU_LAYER, truncate=3, stride=2)
    out, back = fastbptt.layer.vjp(XD, GRU_LAYER, reverse=True)
    back(np.zeros(out.h.shape), np.zeros((B, H)))


def test_sizes_beyond_the_blas_integers_are_refused_before_any_copy():
    """The BLAS takes 32-bit sizes: B T above 2^31 - 1 steps would be cut short silently
    in the products over all steps, and B (T + 1), the leading dimension of a step's
    states, would wrap (2^16 sequences of 2^15 - 1 steps). A view of one id stands for
    17 GB of them here."""
    for T in (2**15 + 1, 2**15 - 1):
        many = np.lib.stride_tricks.as_strided(np.zeros(1, np.int64), shape=(2**16, T),
                                               strides=(0, 0))
        message = (r"B·\(T\+1\) \(sequences times steps, and the initial state\) is "
                   f"{2**16 * (T + 1):,}, beyond the 2,147,483,647")
        with pytest.raises(ValueError, match=message):
            fastbptt.grad(many, many, P)
        with pytest.raises(ValueError, match=message):
            fastbptt.layer.forward(many, fastbptt.Layer(P.U, P.W))
