"""Calls from several Python threads at once, and the thread-count setting."""
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import fastbptt
from fastbptt._threads import (MAX_THREADS, _library_threads, can_slice, one_blas_thread,
                               threads_in_use)


def problems(n):
    rng = np.random.default_rng(11)
    out = []
    for i in range(n):
        B = (1, 3, 8, 16)[i % 4]
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


SLICES = "needs two CPUs and OpenBLAS's per-thread count (0.3.27: SciPy 1.13 or later)"


@pytest.mark.skipif(not can_slice() or MAX_THREADS < 2, reason=SLICES)
def test_a_count_set_while_another_threads_call_runs_in_slices_holds_after_it():
    """A call that runs in slices holds the BLAS at one thread (`one_blas_thread`) and
    restores the count when it ends: a `set_num_threads` made meanwhile is what it
    restores, not the count before, and `get_num_threads` reports it all along."""
    before = fastbptt.get_num_threads()
    try:
        fastbptt.set_num_threads(2)
        with one_blas_thread():                 # another thread's call, in its slices
            assert _library_threads() == 1
            fastbptt.set_num_threads(1)
            assert fastbptt.get_num_threads() == 1 and _library_threads() == 1
        assert fastbptt.get_num_threads() == 1 == _library_threads() == threads_in_use()
        with one_blas_thread():
            fastbptt.set_num_threads(2)
            assert fastbptt.get_num_threads() == 2 and _library_threads() == 1
        assert fastbptt.get_num_threads() == 2 == _library_threads() == threads_in_use()
    finally:
        fastbptt.set_num_threads(before)


FORKED = """
import os, sys
import numpy as np
import fastbptt
fastbptt.set_num_threads(2)
rng = np.random.default_rng(0)
params = fastbptt.init_params(9, 40, 6, seed=3)
x, y = rng.integers(0, 9, (16, 20)), rng.integers(0, 6, (16, 20))
want = fastbptt.bptt(x, y, params)          # 16 sequences on 2 threads: two slices of 8
pid = os.fork()
if pid == 0:
    got = fastbptt.bptt(x, y, params)
    same = got.loss == want.loss and all(np.array_equal(a, b)
                                         for a, b in zip(got.grads, want.grads))
    os._exit(0 if same and fastbptt.get_num_threads() == 2 else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.skipif(not hasattr(os, "fork") or not can_slice() or MAX_THREADS < 2,
                    reason="needs os.fork, 2 CPUs and OpenBLAS's per-thread count")
def test_a_forked_child_runs_calls_in_slices_as_its_parent_did():
    """The pool's threads are not in a forked child: its first call in slices queued them
    work that nothing ran, and waited forever."""
    assert _the_pool_threads_split(16)
    done = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stderr


def _the_pool_threads_split(B):
    """Whether a batch of B runs in slices on 2 threads (so that the child uses the pool)."""
    from fastbptt._stack import split
    from fastbptt._inputs import prepare
    params = fastbptt.init_params(9, 40, 6, seed=3)
    x = np.zeros((B, 20), np.int64)
    before = fastbptt.get_num_threads()
    try:
        fastbptt.set_num_threads(2)
        return bool(split(prepare(x, x % 6, params)))
    finally:
        fastbptt.set_num_threads(before)


@pytest.mark.parametrize("B,H,threads,narrow", [
    (1, 1024, 2, True),        # a few sequences: always the narrow kernels
    (3, 128, 2, True),
    (4, 512, 1, True),         # whole rows: one pass over a 1 MB W per step
    (4, 2048, 1, True),        # 16 MB per step too (a BLAS product packed W every step)
    (7, 2048, 1, True),        # three passes
    (8, 2048, 1, True),        # panels, whatever W's size
    (32, 1024, 1, True),
    (128, 128, 1, True),
    (512, 128, 1, True),
    (513, 128, 1, True),       # panels beat a BLAS product per step beyond 512 too
    (4096, 128, 1, True),
    (4097, 128, 1, False),     # more than NARROW_MOST: BLAS
    (128, 128, 2, True),       # two threads, two slices of 64
    (130, 128, 2, True),       # two threads, two slices of 64 and 66
    (4096, 128, 2, True),
    (4097, 128, 2, False),     # more than NARROW_MOST on two threads too: BLAS
    (8, 128, 2, True),         # two threads, too few to slice: one thread's loop
    (15, 2048, 2, True),
    (16, 128, 2, True),        # two threads, two slices of 8
])
def test_kernel_path_follows_batch_size_W_size_and_threads(B, H, threads, narrow):
    from fastbptt import _stack
    from fastbptt._inputs import prepare

    if threads > 1 and (MAX_THREADS < 2 or not can_slice()):
        pytest.skip(SLICES)
    params = fastbptt.Params(np.zeros((H, 3), np.float32), np.zeros((H, H), np.float32),
                             np.zeros((2, H), np.float32))
    problem = prepare(np.zeros((B, 5), np.int64), np.zeros((B, 5), np.int64), params)
    fastbptt.set_num_threads(threads)
    try:
        assert _stack._narrow(problem) is narrow
    finally:
        fastbptt.set_num_threads(1)


@pytest.mark.parametrize("B,H,cell,dtype,panels", [
    (3, 1024, "lstm", np.float32, False),       # fewer than NARROW: whole rows
    (4, 128, "lstm", np.float32, True),         # a gated cell from NARROW
    (8, 64, "elman", np.float32, True),         # any cell from PANELS
    (7, 512, "elman", np.float32, False),       # Elman: 1 MB, whole rows
    (5, 724, "elman", np.float32, False),       # 2,096,704 bytes, one row short of 2 MB
    (5, 725, "elman", np.float32, True),
    (7, 512, "elman", np.float64, True),        # 2 MB
    (4, 1024, "elman", np.float64, False),      # 8 MB, one group of 4: whole rows
    (4, 2048, "elman", np.float32, True),       # 16 MB
])
def test_which_narrow_batches_walk_panels(B, H, cell, dtype, panels):
    from fastbptt import _stack
    G = fastbptt.params.CELLS[cell]
    assert _stack.walks_panels(B, np.empty((G * H, H), dtype)) is panels


@pytest.mark.parametrize("B,threads,bounds", [
    (3, 2, (0, 3)), (15, 2, (0, 15)), (16, 2, (0, 8, 16)), (19, 2, (0, 8, 19)),
    (32, 2, (0, 16, 32)), (32, 1, (0, 32)),
])
def test_narrow_batches_split_into_slices_of_whole_groups(B, threads, bounds):
    from fastbptt import _stack
    if threads > fastbptt._threads.MAX_THREADS:
        pytest.skip("needs two CPUs")
    fastbptt.set_num_threads(threads)
    try:
        assert _stack.batch_slices(B) == bounds
    finally:
        fastbptt.set_num_threads(1)


@pytest.mark.parametrize("cell,layers,bidirectional,dense", [
    ("elman", 1, False, False), ("lstm", 1, False, False), ("gru", 1, False, False),
    ("lstm", 2, True, False), ("gru", 2, False, True), ("elman", 2, True, True),
])
@pytest.mark.parametrize("B", [16, 19])
def test_slices_on_two_threads_give_the_one_thread_results(cell, layers, bidirectional,
                                                           dense, B):
    """Each sequence goes through the same register blocks in a slice as in the whole
    batch, and the matrix products over all steps are cut into slices of rows, so the
    states agree to the last bit; what those products sum (the loss, the weights'
    gradients, dh0, dx) may be grouped otherwise by BLAS."""
    if MAX_THREADS < 2 or not can_slice():
        pytest.skip(SLICES)
    rng = np.random.default_rng(5)
    params = fastbptt.init_params(9, 40, 6, cell=cell, num_layers=layers,
                                  bidirectional=bidirectional, seed=3)
    x = rng.normal(size=(B, 30, 9)).astype(np.float32) if dense else rng.integers(0, 9, (B, 30))
    y = rng.integers(0, 6, (B, 30))
    lengths = rng.integers(1, 31, B)
    S = layers * (2 if bidirectional else 1)
    stacked = not (cell == "elman" and S == 1)
    h0 = rng.normal(size=(S, B, 40) if stacked else (B, 40)).astype(np.float32)
    layer = fastbptt.init_params(9, 40, 6, cell=cell, seed=4).layers[0][0] \
        if cell != "elman" else fastbptt.Layer(*fastbptt.init_params(9, 40, 6, seed=4)[:2], None)
    xd = rng.normal(size=(B, 30, 9)).astype(np.float32)
    dh = rng.normal(size=(B, 30, 40)).astype(np.float32)

    def run():
        r = fastbptt.bptt(x, y, params, lengths=lengths, h0=h0)
        out, back = fastbptt.layer.vjp(xd, layer, lengths=lengths, cell=cell)
        return r, out, back(dh)

    one = run()
    fastbptt.set_num_threads(2)
    try:
        two = run()
    finally:
        fastbptt.set_num_threads(1)
    np.testing.assert_array_equal(one[0].h_final, two[0].h_final)
    np.testing.assert_array_equal(one[1].h, two[1].h)
    assert abs(one[0].loss - two[0].loss) <= 1e-6 * abs(one[0].loss)
    pairs = [(f"bptt {k}", a, b) for (k, a), b in zip(
        fastbptt.params.leaves(one[0].grads).items(),
        fastbptt.params.leaves(two[0].grads).values())]
    pairs += [("dh0", one[0].dh0, two[0].dh0), ("layer dx", one[2].dx, two[2].dx)]
    pairs += [(f"layer {k}", a, b) for (k, a), b in zip(
        fastbptt.params.leaves(one[2].grads).items(),
        fastbptt.params.leaves(two[2].grads).values())]
    for name, a, b in pairs:
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("cell,H,B,slices", [
    ("lstm", 512, 8, (0, 4, 8)),      # 4 MB: slices of 4
    ("gru", 512, 13, (0, 4, 13)),     # 3 MB
    ("lstm", 384, 8, (0, 8)),         # 2.4 MB: one thread
    ("lstm", 512, 7, (0, 7)),         # fewer than 4 a thread
    ("elman", 1024, 8, (0, 8)),       # Elman: slices of 8
])
def test_gated_batches_with_a_large_W_split_into_slices_of_4(cell, H, B, slices):
    from fastbptt import _stack
    from fastbptt._inputs import prepare

    if MAX_THREADS < 2 or not can_slice():
        pytest.skip(SLICES)
    params = fastbptt.init_params(3, H, 2, cell=cell, seed=0)
    x = np.zeros((B, 5), np.int64)
    fastbptt.set_num_threads(2)
    try:
        problem = prepare(x, x % 2, params)
        assert _stack._narrow(problem) is True
        assert problem.slices == slices and problem.units is None
    finally:
        fastbptt.set_num_threads(1)


@pytest.mark.parametrize("cell", ["lstm", "gru"])
@pytest.mark.parametrize("B", [9, 12])
def test_slices_of_4_give_the_one_thread_states(monkeypatch, cell, B):
    """A gated cell's slices of 4 sequences go through the groups of 4 of one thread's
    panels: the same states, bit for bit; the gradients to the rounding of products
    that BLAS may group otherwise."""
    from fastbptt import _stack

    if MAX_THREADS < 2 or not can_slice():
        pytest.skip(SLICES)
    monkeypatch.setattr(_stack, "GATED_SLICES_BYTES", 0)
    rng = np.random.default_rng(8)
    params = fastbptt.init_params(9, 40, 6, cell=cell, seed=3)
    x, y = rng.integers(0, 9, (B, 30)), rng.integers(0, 6, (B, 30))
    lengths = rng.integers(1, 31, B)
    one = fastbptt.bptt(x, y, params, lengths=lengths)
    fastbptt.set_num_threads(2)
    try:
        from fastbptt._inputs import prepare
        problem = prepare(x, y, params, lengths=lengths)
        _stack._narrow(problem)
        assert problem.slices == (0, 4, B)
        two = fastbptt.bptt(x, y, params, lengths=lengths)
    finally:
        fastbptt.set_num_threads(1)
    np.testing.assert_array_equal(one.h_final, two.h_final)
    if cell == "lstm":
        np.testing.assert_array_equal(one.c_final, two.c_final)
    for (name, a), b in zip(fastbptt.params.leaves(one.grads).items(),
                            fastbptt.params.leaves(two.grads).values()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=name)


def test_without_a_per_thread_blas_count_batches_are_not_cut(monkeypatch):
    """Where the BLAS cannot run one thread's products on one thread alone, two threads
    take BLAS products per step, as before slices."""
    from fastbptt import _stack
    from fastbptt._inputs import prepare

    if fastbptt._threads.MAX_THREADS < 2:
        pytest.skip("needs two CPUs")
    params = fastbptt.init_params(3, 128, 2, seed=0)
    monkeypatch.setattr(_stack, "can_slice", lambda: False)
    fastbptt.set_num_threads(2)
    try:
        problem = prepare(np.zeros((32, 5), np.int64), np.zeros((32, 5), np.int64), params)
        assert _stack._narrow(problem) is False and problem.slices == (0, 32)
    finally:
        fastbptt.set_num_threads(1)


FIRST_CALLS = """
import sys, threading
from concurrent.futures import ThreadPoolExecutor
import numpy as np, fastbptt
p = fastbptt.init_params(5, 8, 5, dtype=np.float64, seed=0)
x = np.zeros((2, 3), int)
n = 4
start = threading.Barrier(n)
def first_call(i):
    start.wait()
    return fastbptt.grad(x, x, p)
with ThreadPoolExecutor(n) as pool:
    list(pool.map(first_call, range(n)))
print(fastbptt.get_num_threads())
"""


@pytest.mark.parametrize("setting", [None, "1", "2"])
def test_first_calls_of_several_threads_at_once_run(setting):
    """The first calls of a process, from several threads at once, all run: none reads
    the thread count before the first of them has found it (with OPENBLAS_NUM_THREADS
    set, they raised TypeError: '>' between None and int)."""
    if setting == "2" and (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 CPUs")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS",
                                                           "OMP_NUM_THREADS")}
    if setting is not None:
        env["OPENBLAS_NUM_THREADS"] = setting
    for _ in range(3):              # a race: a few processes
        out = subprocess.run([sys.executable, "-c", FIRST_CALLS], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [setting or "1"]


AFTER_MAIN = """
import threading, sys
import numpy as np, fastbptt
fastbptt.set_num_threads(2)
p = fastbptt.init_params(7, 32, 7, seed=0)
x = np.random.default_rng(0).integers(0, 7, (16, 20))
want = fastbptt.grad(x, x, p)                 # in slices, on the pool's threads
def work():
    for _ in range(200):
        got = fastbptt.grad(x, x, p)
        assert all(np.array_equal(a, b) for a, b in zip(got, want) if a is not None)
    print("done", flush=True)
threading.Thread(target=work).start()         # not a daemon: Python waits for it
"""


def test_calls_in_slices_run_in_threads_that_outlive_the_main_thread():
    """Python waits at exit for the threads that are not daemons, but shuts
    concurrent.futures' pools down first: calls in slices from such a thread, after the
    main thread returned, raised RuntimeError ('cannot schedule new futures after
    shutdown')."""
    if not can_slice() or MAX_THREADS < 2:
        pytest.skip("needs 2 CPUs and a per-thread BLAS count")
    out = subprocess.run([sys.executable, "-c", AFTER_MAIN], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split() == ["done"], out.stderr
