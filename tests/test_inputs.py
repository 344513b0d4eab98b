"""Bad arguments raise TypeError/ValueError naming the argument, before any kernel runs."""
import numpy as np
import pytest

import fastbptt

L, H, C, B, T = 5, 4, 3, 2, 6


@pytest.fixture
def problem():
    rng = np.random.default_rng(0)
    params = fastbptt.init_params(L, H, C, dtype=np.float64, seed=1)
    return rng.integers(0, L, size=(B, T)), rng.integers(0, C, size=(B, T)), params


def replace(params, **changes):
    return params._replace(**changes)


BAD_CALLS = [
    # (description, change to (x, y, params, options), exception, phrase in the message)
    ("token id too large", lambda x, y, p: (x + L, y, p, {}), ValueError, "x token ids"),
    ("negative token id", lambda x, y, p: (x - 1, y, p, {}), ValueError, "[0, 5)"),
    ("class id too large", lambda x, y, p: (x, y + C, p, {}), ValueError, "y class ids"),
    ("class id below -1", lambda x, y, p: (x, y - 2, p, {}), ValueError, "[-1, 3)"),
    ("complex x", lambda x, y, p: (x + 0j, y, p, {}), TypeError, "x must hold integers or floats"),
    ("string x", lambda x, y, p: ("abc", y, p, {}), TypeError, "x must be a numeric array"),
    ("boolean x", lambda x, y, p: (x > 2, y, p, {}), TypeError, "not booleans"),
    ("3-D ids", lambda x, y, p: (x[None], y, p, {}), ValueError, "(T,) or (B, T)"),
    ("dense x with wrong features", lambda x, y, p: (np.ones((B, T, L + 1)), y, p, {}),
     ValueError, "6 features"),
    ("1-D float x", lambda x, y, p: (np.ones(T), y, p, {}), ValueError, "integer array"),
    ("y shorter than x", lambda x, y, p: (x, y[:, :-1], p, {}), ValueError, "y as class ids"),
    ("float y without classes axis", lambda x, y, p: (x, y.astype(float), p, {}), ValueError,
     "pass class ids as an integer array"),
    ("negative soft target", lambda x, y, p: (x, -np.ones((B, T, C)), p, {}), ValueError,
     "non-negative"),
    ("NaN target", lambda x, y, p: (x, np.full((B, T, C), np.nan), p, {}), ValueError,
     "y holds a non-finite value"),
    ("W of the wrong shape", lambda x, y, p: (x, y, replace(p, W=np.zeros((H, H + 1))), {}),
     ValueError, "params W must be (4, 4)"),
    ("V of the wrong width", lambda x, y, p: (x, y, replace(p, V=np.zeros((C, H + 1))), {}),
     ValueError, "params V must be (output_size, 4)"),
    ("b of the wrong shape", lambda x, y, p: (x, y, replace(p, b=np.zeros(H + 1)), {}),
     ValueError, "params b must have shape (4,)"),
    ("mixed dtypes", lambda x, y, p: (x, y, replace(p, W=p.W.astype(np.float32)), {}),
     TypeError, "share one dtype"),
    ("integer params", lambda x, y, p: (x, y, replace(p, U=np.ones((H, L), int)), {}),
     TypeError, "float32 or float64"),
    ("NaN in params", lambda x, y, p: (x, y, replace(p, U=p.U * np.nan), {}), ValueError,
     "params U holds a non-finite value"),
    ("missing dict key", lambda x, y, p: (x, y, {"U": p.U, "W": p.W}, {}), ValueError,
     "missing key(s) 'V'"),
    ("unknown params type", lambda x, y, p: (x, y, "weights", {}), TypeError,
     "params must be a fastbptt.Params"),
    ("truncate 0", lambda x, y, p: (x, y, p, {"truncate": 0}), ValueError,
     "truncate must be at least 1"),
    ("stride 0", lambda x, y, p: (x, y, p, {"truncate": 3, "stride": 0}), ValueError,
     "stride must be at least 1"),
    ("stride above truncate", lambda x, y, p: (x, y, p, {"truncate": 3, "stride": 4}),
     ValueError, "stride must not exceed truncate"),
    ("stride without truncate", lambda x, y, p: (x, y, p, {"stride": 2}), ValueError,
     "needs truncate"),
    ("float truncate", lambda x, y, p: (x, y, p, {"truncate": 2.5}), TypeError,
     "truncate must be an int"),
    ("unknown activation", lambda x, y, p: (x, y, p, {"activation": "gelu"}), ValueError,
     "'tanh', 'sigmoid', 'relu', 'identity'"),
    ("unknown loss", lambda x, y, p: (x, y, p, {"loss": "hinge"}), ValueError,
     "'softmax_ce', 'mse'"),
    ("negative length", lambda x, y, p: (x, y, p, {"lengths": [-1, 2]}), ValueError,
     "lengths must lie in [0, T=6]"),
    ("length beyond T", lambda x, y, p: (x, y, p, {"lengths": [2, T + 1]}), ValueError,
     "lengths must lie in [0, T=6]"),
    ("lengths of the wrong shape", lambda x, y, p: (x, y, p, {"lengths": [2, 3, 4]}),
     ValueError, "lengths must have shape (2,)"),
    ("float lengths", lambda x, y, p: (x, y, p, {"lengths": [2.0, 3.0]}), TypeError,
     "lengths must hold integers"),
    ("h0 of the wrong shape", lambda x, y, p: (x, y, p, {"h0": np.zeros(H)}), ValueError,
     "h0 must have shape (2, 4)"),
    ("NaN in h0", lambda x, y, p: (x, y, p, {"h0": np.full((B, H), np.nan)}), ValueError,
     "h0 holds a non-finite value"),
]


@pytest.mark.parametrize("change,error,phrase", [case[1:] for case in BAD_CALLS],
                         ids=[case[0] for case in BAD_CALLS])
@pytest.mark.parametrize("entry", ["grad", "value_and_grad", "bptt", "reference"])
def test_bad_input_raises_a_clear_error(problem, entry, change, error, phrase):
    x, y, params, options = change(*problem)
    fn = fastbptt.reference.bptt if entry == "reference" else getattr(fastbptt, entry)
    with pytest.raises(error) as info:
        fn(x, y, params, **options)
    assert phrase in str(info.value)


def test_padding_ids_are_not_range_checked(problem):
    """Steps past a sequence's length may hold anything: they are never read."""
    x, y, params = problem
    x, y = x.copy(), y.copy()
    x[1, 3:], y[1, 3:] = 10**6, -50
    fastbptt.grad(x, y, params, lengths=[T, 3])
    with pytest.raises(ValueError, match="x token ids"):
        fastbptt.grad(x, y, params, lengths=[T, 4])


def test_forward_and_loss_validate_too(problem):
    x, y, params = problem
    with pytest.raises(ValueError, match="x token ids"):
        fastbptt.forward(x + L, params)
    with pytest.raises(ValueError, match="y class ids"):
        fastbptt.loss(x, y + C, params)
    with pytest.raises(ValueError, match="unknown activation"):
        fastbptt.forward(x, params, activation="softplus")


def test_check_finite_false_skips_the_scan(problem):
    """Without the scan a NaN weight is not an error: it shows in the results instead."""
    x, y, params = problem
    bad = replace(params, W=np.where(np.eye(H, dtype=bool), np.nan, params.W))
    with pytest.raises(ValueError, match="params W holds a non-finite value"):
        fastbptt.grad(x, y, bad)
    result = fastbptt.bptt(x, y, bad, check_finite=False)
    assert np.isnan(result.loss) and np.isnan(result.grads.W).any()
    with pytest.raises(TypeError, match="check_finite must be True or False"):
        fastbptt.grad(x, y, params, check_finite="no")
