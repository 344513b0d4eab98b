"""Timing in one process: medians of repeated calls, this process's gemm peak, the machine.

`measure` records wall time and process CPU time of every call, so a run that used more
cores than it was given shows up as ``cores`` above 1; `measure_turns` does the same for
several calls timed in turns, which a machine whose speed drifts slows alike.
"""
from __future__ import annotations

import gc
import os
import platform
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Timing", "measure", "measure_turns", "gemm_call", "gemm_peak", "machine_info",
           "openblas_warnings", "busy_cpus", "ENVIRONMENT"]

# environment variables that change the figures, reported with every run
ENVIRONMENT = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
               "OMP_NUM_THREADS", "XLA_FLAGS", "NUMBA_CACHE_DIR", "NUMBA_THREADING_LAYER",
               "NUMBA_NUM_THREADS", "FASTBPTT_CACHE", "MALLOC_MMAP_THRESHOLD_",
               "MALLOC_TRIM_THRESHOLD_")


@dataclass
class Timing:
    """Seconds per call of the timed calls (after the warm-up)."""

    times: list = field(default_factory=list)
    cpu_times: list = field(default_factory=list)

    @property
    def median(self):
        return statistics.median(self.times)

    @property
    def cores(self):
        """Process CPU time over wall time: about the number of busy cores."""
        return sum(self.cpu_times) / sum(self.times)

    def as_dict(self):
        return {"median_s": self.median, "calls": len(self.times), "cores": self.cores,
                "times_s": self.times}


def measure(fn, repeat=50, budget=2.0, warmup=1):
    """Time `fn` after `warmup` untimed calls: up to `repeat` calls, fewer if they would
    take more than `budget` seconds (never fewer than 3, or `repeat` if smaller).

    Garbage collection is off while timing, as in `timeit`.
    """
    for _ in range(warmup):
        fn()
    timing = Timing()
    calls = repeat
    enabled = gc.isenabled()
    gc.disable()
    try:
        while len(timing.times) < calls:
            _timed_call(fn, timing)
            if len(timing.times) == 1:
                calls = _calls(timing.times[0], repeat, budget)
    finally:
        if enabled:
            gc.enable()
    return timing


def _calls(first, repeat, budget):
    """How many calls to time when the first took ``first`` seconds: up to ``repeat``,
    fewer where they would take more than ``budget`` seconds, never fewer than 3 (or
    ``repeat`` if smaller)."""
    return max(min(repeat, 3), min(repeat, int(budget / first) if first > 0 else repeat))


def _timed_call(fn, timing):
    cpu, start = time.process_time(), time.perf_counter()
    fn()
    timing.times.append(time.perf_counter() - start)
    timing.cpu_times.append(time.process_time() - cpu)


def measure_turns(calls, repeat=50, budget=2.0, rounds=5, warmup=1, enter=None):
    """{name: Timing} of several calls timed in turns, `calls` a {name: fn}.

    Every fn gets as many timed calls as `measure` would give it (one timed call sizes its
    share: up to `repeat`, fewer where they would take more than `budget` seconds, never
    fewer than 3 or `repeat` if smaller). The shares run in `rounds` rounds; in each round
    every fn in turn (the order rotating from round to round) makes `warmup` untimed
    calls, which bring its data back into the caches the others used, then its part of
    the share back to back; in the first round, which follows the sizing calls, only the fns
    of ``enter`` make them. A machine whose speed drifts during the run (other tenants on
    the host, clock changes) then slows every implementation alike, and from the second
    round on each is timed with its data in cache, as in a training loop.

    ``enter``, a {name: fn} for some of the names, is called untimed before each of that
    name's turns, e.g. to set the thread count it runs with; each such turn then starts
    with its warm-up calls, the first round's too (a 2-thread BLAS call just before
    leaves a worker spinning on the second core for a while, which would slow a
    2-thread call timed right after it).

    Garbage collection is off while timing, as in `timeit`.
    """
    names = list(calls)
    enter = enter or {}

    def turn(name):
        if name in enter:
            enter[name]()

    timings = {name: Timing() for name in names}
    enabled = gc.isenabled()
    gc.disable()
    try:
        wanted = {}
        for name in names:
            turn(name)
            for _ in range(warmup):
                calls[name]()
            _timed_call(calls[name], timings[name])
            wanted[name] = _calls(timings[name].times[0], repeat, budget)
        count = max(1, min(rounds, max(wanted.values())))
        for r in range(count):
            for name in names[r % len(names):] + names[:r % len(names)]:
                share = -(-wanted[name] * (r + 1) // count)
                if len(timings[name].times) >= share:
                    continue
                turn(name)
                for _ in range(warmup if r or name in enter else 0):
                    calls[name]()
                while len(timings[name].times) < share:
                    _timed_call(calls[name], timings[name])
    finally:
        if enabled:
            gc.enable()
    return timings


def gemm_call(dtype="float32", n=1024):
    """(fn, flops): one n×n×n gemm from SciPy's BLAS, the one Numba's matrix products call
    (Fortran-ordered operands, so that nothing is copied)."""
    from scipy.linalg import blas

    gemm = blas.sgemm if np.dtype(dtype) == np.float32 else blas.dgemm
    rng = np.random.default_rng(0)
    a = np.asfortranarray(rng.standard_normal((n, n)), dtype=dtype)
    b = np.asfortranarray(rng.standard_normal((n, n)), dtype=dtype)
    return (lambda: gemm(1.0, a, b)), 2 * n ** 3


def gemm_peak(dtype="float32", threads=1, n=1024, repeat=10):
    """GF/s of an n×n×n gemm from SciPy's BLAS (the one Numba's matrix products call),
    limited to `threads` threads: the peak the kernels' GF/s are compared with."""
    from threadpoolctl import threadpool_limits

    fn, flops = gemm_call(dtype, n)
    with threadpool_limits(threads, user_api="blas"):
        timing = measure(fn, repeat=repeat, budget=5.0, warmup=2)
    return flops / timing.median / 1e9


def busy_cpus(seconds=0.5):
    """CPUs kept busy by other processes while this one sleeps `seconds` (Linux), or None."""
    def sample():
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values), values[3] + values[4]           # total, idle + iowait

    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    elapsed = total1 - total0
    return (os.cpu_count() or 1) * (elapsed - (idle1 - idle0)) / elapsed if elapsed else None


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return platform.processor() or platform.machine(), []
    model = next((ln.split(":", 1)[1].strip() for ln in lines
                  if ln.startswith("model name")), platform.machine())
    flags = next((ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags")), [])
    return model, flags


def _version(package):
    from importlib import metadata
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def blas_libraries():
    """threadpoolctl's view of NumPy's and SciPy's BLAS: {"numpy": {...}, "scipy": {...}}."""
    import scipy.linalg.cython_blas  # noqa: F401  (loads SciPy's BLAS)
    from threadpoolctl import threadpool_info

    found = {}
    for lib in threadpool_info():
        if lib.get("user_api") != "blas":
            continue
        path = lib.get("filepath", "")
        for owner in ("numpy", "scipy"):
            if f"{os.sep}{owner}." in path or f"{os.sep}{owner}{os.sep}" in path:
                found.setdefault(owner, {k: lib.get(k) for k in (
                    "internal_api", "version", "architecture", "num_threads",
                    "threading_layer", "filepath")})
    return found


def machine_info():
    """CPU, versions, BLAS kernels and the environment variables that change the figures."""
    model, flags = _cpu_model()
    simd = [f for f in ("avx512f", "avx2", "fma") if f in flags]
    return {
        "cpu": model,
        "cpu_flags": simd,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in (
            "fastbptt", "numpy", "numba", "llvmlite", "scipy", "threadpoolctl", "torch",
            "jax", "jaxlib")},
        "blas": blas_libraries(),
        "environment": {name: os.environ.get(name) for name in ENVIRONMENT},
    }


def openblas_warnings():
    """Warnings for environment variables that slow OpenBLAS below what users get."""
    found = [f"{name}={os.environ[name]}" for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
             if name in os.environ]
    if not found:
        return []
    return [f"warning: {' and '.join(found)} set: OpenBLAS then runs other kernels than this "
            "CPU's own (OPENBLAS_CORETYPE=Haswell halves sgemm on AVX-512 CPUs); unset them "
            "in the benchmark command: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ..."]
