"""What a new process pays, each in a fresh subprocess: compile time from an empty
Numba cache (one cell and dtype per case) and a warm start (import + first call)."""
import pytest

from fastbptt.bench import startup

COLD = sorted(startup.COLD_CASES.items())


@pytest.mark.parametrize("spec", [spec for _, spec in COLD],
                         ids=[f"{cell}-{dtype}" for (cell, dtype), _ in COLD])
def test_cold_compile(benchmark, spec):
    """First call of the cell and dtype's workload (`startup.COLD_CASES`) with an empty
    NUMBA_CACHE_DIR."""
    benchmark.group = "startup: cold compile"
    report = benchmark.pedantic(startup.cold_start, args=((spec,),), rounds=1, iterations=1)
    benchmark.extra_info.update(report)


@pytest.mark.parametrize("cell", sorted(startup.WARM_CASES))
def test_warm_start(benchmark, cell):
    """A fresh process with a warm Numba cache: import fastbptt + the cell's first call."""
    spec = (startup.WARM_CASES[cell],)
    startup.run_child(startup.WARM_CHILD, spec)          # warms the cache
    benchmark.group = "startup: warm"
    report = benchmark.pedantic(startup.run_child, args=(startup.WARM_CHILD, spec), rounds=3,
                                iterations=1)
    benchmark.extra_info.update(report)
