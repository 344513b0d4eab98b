"""Timing in one process: medians of repeated calls, this process's gemm peak, the machine.

`measure` records wall time and process CPU time of every call, so a run that used more
cores than it was given shows up as ``cores`` above 1.
"""
from __future__ import annotations

import gc
import os
import platform
import statistics
import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Timing", "measure", "gemm_peak", "machine_info", "openblas_warnings", "busy_cpus",
           "ENVIRONMENT"]

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
            cpu, start = time.process_time(), time.perf_counter()
            fn()
            timing.times.append(time.perf_counter() - start)
            timing.cpu_times.append(time.process_time() - cpu)
            if len(timing.times) == 1:
                calls = max(min(repeat, 3), min(repeat, int(budget / timing.times[0])))
    finally:
        if enabled:
            gc.enable()
    return timing


def gemm_peak(dtype="float32", threads=1, n=1024, repeat=10):
    """GF/s of an n×n×n gemm from SciPy's BLAS (the one Numba's matrix products call),
    limited to `threads` threads: the peak the kernels' GF/s are compared with."""
    from scipy.linalg import blas
    from threadpoolctl import threadpool_limits

    gemm = blas.sgemm if np.dtype(dtype) == np.float32 else blas.dgemm
    rng = np.random.default_rng(0)
    a = np.asfortranarray(rng.standard_normal((n, n)), dtype=dtype)
    b = np.asfortranarray(rng.standard_normal((n, n)), dtype=dtype)
    with threadpool_limits(threads, user_api="blas"):
        timing = measure(lambda: gemm(1.0, a, b), repeat=repeat, budget=5.0, warmup=2)
    return 2 * n ** 3 / timing.median / 1e9


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
