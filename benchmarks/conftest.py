"""pytest-benchmark suites: ``pytest benchmarks/ --benchmark-only`` to time,
``pytest benchmarks/ --benchmark-disable`` to run each benchmark once as a test.

Not collected by a plain ``pytest`` (pyproject's testpaths is ``tests``). Every
implementation runs on one thread, set before any peer's library is imported (JAX fixes
its thread pool when it starts). Measure with ``env -u OPENBLAS_CORETYPE -u
OPENBLAS_L2_SIZE pytest benchmarks/ --benchmark-only`` where those are set. Timing runs
run again with glibc's malloc thresholds fixed, and with garbage collection off, as
``fastbptt bench`` does.
"""
import os
import subprocess
import sys

import pytest

from fastbptt.bench.allocator import steady_environment
from fastbptt.bench.peers import set_threads
from fastbptt.bench.timing import blas_libraries, machine_info as bench_machine_info
from fastbptt.bench.timing import openblas_warnings


def pytest_configure(config):
    _steady_malloc(config)
    # Garbage collection off while timing, as `fastbptt bench` and timeit have it (it
    # would fall on the peers that make the most Python objects, the autograd loops)
    config.option.benchmark_disable_gc = True
    # A peer that disagrees with fastbptt fails before it is timed; pytest-benchmark then
    # warns that the fixture went unused, which warnings-as-errors would turn into an error.
    config.addinivalue_line(
        "filterwarnings",
        "ignore:Benchmark fixture was not used:pytest_benchmark.logger.PytestBenchmarkWarning")


def _steady_malloc(config):
    """Where this run times (not --benchmark-disable) and came from a command line, run it
    again with glibc's malloc thresholds fixed high, as `fastbptt bench` does
    (`fastbptt.bench.allocator`: PyTorch's G1 took 90 ms a call without, 74 ms with);
    thresholds the user set are kept."""
    if config.getoption("benchmark_disable", False) or config.option.collectonly:
        return
    if tuple(config.invocation_params.args) != tuple(sys.argv[1:]):
        return                                      # pytest.main() called from Python
    environ = steady_environment()
    if environ is None:
        return
    from fastbptt.cli import _interpreter_flags
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *_interpreter_flags(subprocess), "-m", "pytest",
                               *sys.argv[1:]], environ)


def pytest_addoption(parser):
    parser.addoption("--bench-reference", action="store_true", default=False,
                     help="also time the documents' loop on W3 and W4 (one call each, slow)")


def pytest_report_header(config):
    blas = blas_libraries()
    kernels = ", ".join(f"{owner}'s {b['internal_api']} {b['architecture']}"
                        for owner, b in blas.items())
    return [f"BLAS kernels (threadpoolctl): {kernels}"] + openblas_warnings()


def pytest_benchmark_update_machine_info(config, machine_info):
    """CPU, versions, BLAS kernels and environment in saved results (--benchmark-save)."""
    machine_info["fastbptt_bench"] = bench_machine_info()


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """One thread for every implementation, before any of them is imported."""
    set_threads(1)
