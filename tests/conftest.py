"""Shared fixtures: small random problems for every combination of options."""
import signal
import warnings
import zlib

import numpy as np
import pytest
from hypothesis import settings

import fastbptt

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci")

# Hypothesis imports this module only to report a failing example, and its import warns
# (mypy_extensions.TypedDict is deprecated): with warnings as errors, that warning would
# replace the report of the failure by an INTERNALERROR. Import it now, quietly.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    try:
        import hypothesis.extra._patching  # noqa: F401
    except ImportError:
        pass

# The commands leave a signal ignored where they were started so (nohup, a background
# job of a script): the tests that signal them need the default, whichever way the
# suite itself was started.
for _name in ("SIGHUP", "SIGTERM"):
    if hasattr(signal, _name) and signal.getsignal(getattr(signal, _name)) is signal.SIG_IGN:
        signal.signal(getattr(signal, _name), signal.SIG_DFL)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ACTIVATIONS = ["tanh", "sigmoid", "relu", "identity"]
LOSSES = ["softmax_ce", "mse"]
# (truncate, stride) for every family of SPEC.md §3, plus strides between 1 and k
# and windows longer than the sequences.
TRUNCATIONS = [
    (None, 1),      # full BPTT
    (1, 1),         # each output reaches its own step only
    (3, 1),         # per-output window
    (4, 4),         # chunks (min-char-rnn)
    (5, 2),         # Williams & Peng BPTT(5; 2)
    (4, 3),
    (40, 1),        # window longer than T: full BPTT
    (40, 40),       # one chunk longer than T: full BPTT
    (17, 5),        # k >= T = 17 with 1 < s < k: lo(t) still cuts late blocks
]


def truncation_id(option):
    k, s = option
    return "full" if k is None else f"k{k}s{s}"


def make_problem(rng, *, B=3, T=6, L=5, H=7, C=3, dtype=np.float64, bias=True,
                 x_ids=True, y_ids=True, with_h0=False, with_lengths=False, batch=True,
                 scale=1.5, no_loss=True):
    """(x, y, params, options) for a random problem; batch=False gives one sequence."""
    params = fastbptt.init_params(L, H, C, bias=bias, dtype=dtype, seed=rng)
    params = fastbptt.Params(*(None if v is None else (v * scale).astype(dtype)
                               for v in params))
    if x_ids:
        x = rng.integers(0, L, size=(B, T))
    else:
        x = rng.normal(size=(B, T, L)).astype(dtype)
    if y_ids:
        y = rng.integers(-1 if no_loss else 0, C, size=(B, T))
    else:
        y = rng.uniform(0, 1, size=(B, T, C)).astype(dtype)
        if T:
            y[:, T // 2] = 0        # an all-zero row adds no loss (softmax_ce)
    options = {}
    if with_h0:
        options["h0"] = rng.normal(size=(B, H)).astype(dtype)
    if with_lengths:
        options["lengths"] = rng.integers(0, T + 1, size=B)
        if B > 1:
            options["lengths"][0] = T
    if not batch:
        x, y = x[0], y[0]
        if with_h0:
            options["h0"] = options["h0"][0]
        options.pop("lengths", None)
    return x, y, params, options


@pytest.fixture
def rng(request):
    """A generator seeded from the test's id, so each case has its own fixed data."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)


TOLERANCE = {np.float64: 1e-10, np.float32: 1e-4}


def relative_error(actual, expected):
    """max |actual - expected| over the largest |expected| (the max |actual| if that is 0)."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    scale = np.abs(expected).max(initial=0.0)
    if scale == 0.0:
        return float(np.abs(actual).max(initial=0.0))
    return float(np.abs(actual - expected).max() / scale)


def assert_agree(got, want, dtype):
    """Every field of two BPTTResults agrees to the dtype's tolerance."""
    tol = TOLERANCE[dtype]
    assert isinstance(got.loss, float)
    assert abs(got.loss - want.loss) <= tol * max(1.0, abs(want.loss))
    assert type(got.grads) is type(want.grads)
    for name, g, w in zip(want.grads._fields, got.grads, want.grads):
        if w is None:
            assert g is None, name
            continue
        assert g.dtype == dtype and g.shape == w.shape, name
        assert relative_error(g, w) <= tol, (name, relative_error(g, w))
    for name in ("h_final", "dh0"):
        g, w = getattr(got, name), getattr(want, name)
        assert g.dtype == dtype and g.shape == w.shape, name
        assert relative_error(g, w) <= tol, (name, relative_error(g, w))


@pytest.fixture(params=["narrow", "blas"])
def kernel_path(request, monkeypatch):
    """Run the test on each kernel path, whatever its batch sizes: "narrow" (time-major
    states, vector code, `fastbptt._kernels.narrow`) or "blas" (feature-major states,
    a BLAS product per step). Which one a call takes otherwise depends on B and W's size
    (`fastbptt._stack._narrow`)."""
    use_kernel_path(monkeypatch, request.param)
    return request.param


def use_kernel_path(monkeypatch, path):
    """Calls take kernel path ``path``, "narrow" or "blas" (`kernel_path`), until
    ``monkeypatch`` undoes it."""
    from fastbptt import _stack
    if path == "narrow":
        monkeypatch.setattr(_stack, "NARROW", 10**9)
        monkeypatch.setattr(_stack, "FEW_STEPS", {})
    else:
        monkeypatch.setattr(_stack, "NARROW", 0)
        monkeypatch.setattr(_stack, "NARROW_MOST", -1)

