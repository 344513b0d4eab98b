"""Calls from several Python threads at once, and the thread-count setting."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fastbptt


def problems(n):
    rng = np.random.default_rng(11)
    out = []
    for i in range(n):
        B = (1, 3, 8)[i % 3]
        params = fastbptt.init_params(7, 33, 5, dtype=(np.float32, np.float64)[i % 2], seed=i)
        x, y = rng.integers(0, 7, size=(B, 40)), rng.integers(-1, 5, size=(B, 40))
        out.append((x, y, params, dict(truncate=(None, 6)[i % 2], stride=1)))
    return out


def run(case):
    x, y, params, options = case
    return fastbptt.bptt(x, y, params, **options)


def assert_identical(a, b):
    assert a.loss == b.loss
    for g, h in zip(a.grads, b.grads):
        assert (g is None and h is None) or np.array_equal(g, h)
    assert np.array_equal(a.h_final, b.h_final) and np.array_equal(a.dh0, b.dh0)


@pytest.mark.parametrize("threads", [1, 2])
def test_concurrent_calls_equal_serial_calls(threads):
    fastbptt.set_num_threads(threads)
    try:
        cases = problems(12)
        serial = [run(c) for c in cases]
        with ThreadPoolExecutor(max_workers=4) as pool:
            for _ in range(3):
                for got, want in zip(pool.map(run, cases * 1), serial):
                    assert_identical(got, want)
    finally:
        fastbptt.set_num_threads(1)


def test_results_are_reproducible_run_to_run():
    case = problems(3)[2]
    assert_identical(run(case), run(case))


@pytest.mark.parametrize("setting,expected", [(None, "1"), ("2", "2")])
def test_one_thread_by_default(setting, expected):
    """Unless asked (or told by OPENBLAS_NUM_THREADS), the kernels' BLAS runs one thread,
    and get_num_threads says so before the first call as after it."""
    import os
    import subprocess
    import sys

    if int(expected) > (os.cpu_count() or 1):
        pytest.skip("needs 2 CPUs")
    script = ("import numpy as np, fastbptt; print(fastbptt.get_num_threads()); "
              "p = fastbptt.init_params(3, 4, 2, seed=0); "
              "fastbptt.grad(np.arange(3), np.arange(3) % 2, p); "
              "print(fastbptt.get_num_threads())")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS",
                                                           "OMP_NUM_THREADS")}
    if setting is not None:
        env["OPENBLAS_NUM_THREADS"] = setting
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [expected, expected]


def test_set_num_threads_round_trips_and_validates():
    before = fastbptt.get_num_threads()
    try:
        fastbptt.set_num_threads(1)
        assert fastbptt.get_num_threads() == 1
    finally:
        fastbptt.set_num_threads(before)
    with pytest.raises(ValueError, match="n must lie in"):
        fastbptt.set_num_threads(0)
    with pytest.raises(TypeError, match="n must be an int"):
        fastbptt.set_num_threads(1.5)


@pytest.mark.parametrize("B,H,threads,narrow", [
    (1, 1024, 2, True),        # a few sequences: always the narrow kernels
    (3, 128, 2, True),
    (32, 128, 1, True),        # 8 passes over a 64 KB W per step
    (32, 512, 1, True),        # 8 MB per step: the limit
    (64, 512, 1, False),
    (16, 1024, 1, False),
    (32, 128, 2, False),       # BLAS on two threads takes every batch of 4 or more
])
def test_kernel_path_follows_batch_size_W_size_and_threads(B, H, threads, narrow):
    from fastbptt import _stack
    from fastbptt._inputs import prepare

    params = fastbptt.Params(np.zeros((H, 3), np.float32), np.zeros((H, H), np.float32),
                             np.zeros((2, H), np.float32))
    problem = prepare(np.zeros((B, 5), np.int64), np.zeros((B, 5), np.int64), params)
    fastbptt.set_num_threads(threads)
    try:
        assert _stack._narrow(problem) is narrow
    finally:
        fastbptt.set_num_threads(1)
