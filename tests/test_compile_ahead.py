"""A first call's compile helper (`fastbptt._compile_ahead`): a second process compiles
the call's last kernels into the disk cache while the call compiles its first. The call
loads what the helper compiled, and its results are the same."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from fastbptt import _compile_ahead
from fastbptt._kernels import _jit
from fastbptt._kernels.checks import all_finite

# One call of `bptt` or of `layer.vjp` and its back: a ragged batch, forward and backward
# kernels. Run here and in a new process.
CALL = """
import numpy as np
import fastbptt

def arrays(kind):
    rng = np.random.default_rng(0)
    p = fastbptt.init_params(7, 24, 7, dtype=np.float64, seed=1)
    x, lengths = rng.integers(0, 7, (5, 9)), [9, 3, 0, 9, 5]
    if kind == "bptt":
        r = fastbptt.bptt(x, x, p, lengths=lengths)
        found = [r.loss, r.grads.U, r.grads.W, r.grads.V, r.grads.b, r.grads.c, r.h_final]
    else:
        out, back = fastbptt.layer.vjp(x, fastbptt.Layer(p.U, p.W, p.b), lengths=lengths)
        g = back(np.linspace(-1, 1, out.h.size).reshape(out.h.shape))
        found = [out.h, out.h_final, g.grads.U, g.grads.W, g.grads.b]
    return [np.asarray(a).tobytes().hex() for a in found]
"""
FIRST_CALL = CALL + """
import json, sys
from fastbptt import _compile_ahead
found = arrays(sys.argv[1])
print(json.dumps({"stats": _compile_ahead.STATS, "arrays": found}))
"""


def call_here(kind):
    scope = {}
    exec(CALL, scope)
    return scope["arrays"](kind)


@pytest.mark.skipif(_compile_ahead._cpus() < 2, reason="the helper starts with two CPUs")
@pytest.mark.parametrize("kind", ["bptt", "vjp"])
def test_a_first_call_loads_the_helpers_kernels_and_gives_the_same_results(kind, tmp_path):
    """In a new process with an empty cache, the first call starts one helper and loads
    kernels it compiled; every array is the same, bit for bit, as this process's."""
    environ = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path), FASTBPTT_COMPILE_HELPER="1")
    environ.pop("FASTBPTT_CACHE", None)
    done = subprocess.run([sys.executable, "-c", FIRST_CALL, kind], env=environ,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["stats"]["helpers"] == 1
    assert report["stats"]["from helper"] >= 1, report["stats"]
    assert report["arrays"] == call_here(kind)


def test_the_helper_starts_only_where_it_is_on_and_there_are_two_cpus(monkeypatch):
    """`before` in a job starts the job's helper at the first compile, unless
    FASTBPTT_COMPILE_HELPER=0, a single CPU is available or the job may not start one,
    and not for a kernel the cache holds (a warm start); once per job."""
    started = []

    def start(cls, job):
        started.append(job)

    monkeypatch.setattr(_compile_ahead._Helper, "start", classmethod(start))

    def first_compiles(setting, cpus, start=True, cached=False):
        monkeypatch.setenv("FASTBPTT_COMPILE_HELPER", setting)
        monkeypatch.setattr(_compile_ahead, "_cpus", lambda: cpus)
        monkeypatch.setattr(_jit, "cached", lambda kernel, types: cached)
        started.clear()
        outer = _compile_ahead.begin("the problem", start=start)
        try:
            for _ in range(2):
                _compile_ahead.before(all_finite, (np.zeros(3),))
        finally:
            _compile_ahead.end(outer)
        return list(started)

    assert first_compiles("1", 2) == [("solve", "the problem")]
    assert first_compiles("0", 2) == []
    assert first_compiles("1", 1) == []
    assert first_compiles("1", 2, start=False) == []        # a back: no x to run again
    assert first_compiles("1", 2, cached=True) == []        # loads from the cache
    assert _jit.AHEAD.job is None


def test_the_cache_is_known_to_hold_what_a_call_loads():
    """`_jit.cached`, which keeps a warm start from starting a helper: true for a kernel
    and types this process has used (compiled here and saved, or loaded), false for
    types it was never called with."""
    all_finite(np.zeros(3))
    assert _jit.cached(all_finite, (_jit.call_types(all_finite, (np.zeros(3),))))
    assert not _jit.cached(all_finite, (_jit.call_types(all_finite, (np.zeros((2, 2)),))))
