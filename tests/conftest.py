"""Shared fixtures: small random problems for every combination of options."""
import zlib

import numpy as np
import pytest
from hypothesis import settings

import fastbptt

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=60, deadline=None)
settings.load_profile("ci")

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
