"""What a new process pays, each in a fresh subprocess: compile time from an empty
Numba cache (one dtype per case) and a warm start (import + first W2 call)."""
import pytest

from fastbptt.bench import startup


@pytest.mark.parametrize("name", ["W2", "W1"], ids=["float32", "float64"])
def test_cold_compile(benchmark, name):
    """First call of W2 (float32) or W1 (float64) with an empty NUMBA_CACHE_DIR."""
    benchmark.group = "startup: cold compile"
    report = benchmark.pedantic(startup.cold_start, args=((name,),), rounds=1, iterations=1)
    benchmark.extra_info.update(report)


def test_warm_start(benchmark):
    """A fresh process with a warm Numba cache: import fastbptt + first W2 call."""
    startup.run_child(startup.WARM_CHILD)                # warms the cache
    benchmark.group = "startup: warm"
    report = benchmark.pedantic(startup.run_child, args=(startup.WARM_CHILD,), rounds=3,
                                iterations=1)
    benchmark.extra_info.update(report)
