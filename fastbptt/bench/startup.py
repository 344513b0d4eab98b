"""What a new process pays: warm start, cold compile, and W5's peak memory.

Each measurement runs a fresh ``python -c`` child that reports its own timings as JSON
on its last line of output; the parent adds the child's whole wall time.

- warm start: ``import fastbptt`` and its engine's modules (``fastbptt.bptt``: the package
  loads its names on first use) + the first call of a workload (W2 by default), with
  Numba's cache already warm (the child is run once untimed first to make sure);
  `warm_starts` does it for each cell (`WARM_CASES`).
- cold start: the first call of each workload given (W2 for float32, W1 for float64) in a
  child whose NUMBA_CACHE_DIR is a new empty directory and FASTBPTT_CACHE unset: the
  compile time of each dtype's kernels. `cold_starts` gives each cell and dtype
  (`COLD_CASES`) a child and an empty cache of its own: what a first call of that cell
  and dtype compiles, and nothing else. The child's first call starts its compile helper
  (`fastbptt._compile_ahead`) as any first call does, unless this process's environment
  has FASTBPTT_COMPILE_HELPER=0.
- memory: peak resident set of a child running one W5 call, and how much the call raised
  it over the RSS before it (the kernels already loaded by a W2 call). On Linux the peak is
  the child's VmHWM, restarted through /proc/self/clear_refs just before the call:
  ``ru_maxrss`` (also reported, and used elsewhere) starts from the RSS of the parent that
  spawned the child, hundreds of MB once PyTorch and JAX are loaded in the bench.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

__all__ = ["warm_start", "warm_starts", "cold_start", "cold_starts", "w5_memory", "run_child",
           "workload", "WARM_CHILD", "COLD_CHILD", "WARM_CASES", "COLD_CASES"]

# A workload per cell and dtype: a name of `workloads.WORKLOADS`, or "name:dtype" for that
# workload in another dtype (the G workloads are float32).
COLD_CASES = {("elman", "float32"): "W2", ("elman", "float64"): "W1",
              ("lstm", "float32"): "G1", ("lstm", "float64"): "G1:float64",
              ("gru", "float32"): "G2", ("gru", "float64"): "G2:float64"}
WARM_CASES = {"elman": "W2", "lstm": "G1", "gru": "G2"}


def workload(spec):
    """The workload a case names: "W2", or "G1:float64" for G1 in float64."""
    from .workloads import WORKLOADS

    name, _, dtype = spec.partition(":")
    w = WORKLOADS[name]
    return w._replace(dtype=dtype) if dtype else w


WARM_CHILD = """
import json, sys, time
start = time.perf_counter()
import fastbptt
fastbptt.bptt
imported = time.perf_counter()
from fastbptt.bench.startup import workload
from fastbptt.bench.workloads import make_data
w = workload(sys.argv[1] if len(sys.argv) > 1 else "W2")
x, y, params = make_data(w)
before = time.perf_counter()
fastbptt.bptt(x, y, params, **w.options())
done = time.perf_counter()
print(json.dumps({"import_s": imported - start, "first_call_s": done - before,
                  "import_and_first_call_s": imported - start + done - before}))
"""

COLD_CHILD = """
import json, sys, time
start = time.perf_counter()
import fastbptt
fastbptt.bptt
from fastbptt.bench.startup import workload
from fastbptt.bench.workloads import make_data
result = {"import_s": time.perf_counter() - start}
for spec in sys.argv[1:]:
    w = workload(spec)
    x, y, params = make_data(w)
    before = time.perf_counter()
    fastbptt.bptt(x, y, params, **w.options())
    result[f"first_{w.name}_{w.dtype}_s"] = time.perf_counter() - before
print(json.dumps(result))
"""

MEMORY_CHILD = """
import json, resource
import fastbptt
from fastbptt.bench.workloads import WORKLOADS, make_data

def status(key):                      # VmRSS or VmHWM in MB (Linux), else None
    try:
        with open("/proc/self/status") as f:
            line = next(ln for ln in f if ln.startswith(key + ":"))
    except (OSError, StopIteration):
        return None
    return int(line.split()[1]) / 1024

small, big = WORKLOADS["W2"], WORKLOADS["W5"]
fastbptt.bptt(*make_data(small), **small.options())      # loads the float32 kernels
x, y, params = make_data(big)
before, peak_so_far = status("VmRSS"), status("VmHWM")
try:                                  # restart the high-water mark at the current RSS
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    reset = True
except OSError:
    reset = False
fastbptt.bptt(x, y, params, **big.options())
call_peak = status("VmHWM") if reset else None
maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({
    "peak_rss_mb": maxrss if call_peak is None else max(peak_so_far, call_peak),
    "ru_maxrss_mb": maxrss, "rss_before_call_mb": before, "call_peak_rss_mb": call_peak,
    "growth_during_call_mb": None if None in (call_peak, before) else call_peak - before}))
"""


def run_child(code, args=(), env=None, timeout=600):
    """Run ``python -c code *args``; its JSON report plus ``wall_s``, the child's lifetime.

    The child imports the same fastbptt as this process (its folder goes first on
    PYTHONPATH), with `env` (default: this process's environment).
    """
    env = dict(os.environ if env is None else env)
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, timeout=timeout,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"benchmark child failed ({done.returncode}):\n{done.stderr}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    report["wall_s"] = wall
    return report


def warm_start(repeat=3, prime=True, workload="W2"):
    """Median over `repeat` fresh processes of import + first call of `workload` (warm
    Numba cache)."""
    if prime:
        run_child(WARM_CHILD, (workload,))
    runs = [run_child(WARM_CHILD, (workload,)) for _ in range(repeat)]
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def warm_starts(cases=WARM_CASES, repeat=3):
    """`warm_start` of each cell's workload: {cell: its medians, and "workload"}."""
    return {cell: dict(warm_start(repeat, workload=spec), workload=spec)
            for cell, spec in cases.items()}


def cold_env(cache_dir):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    env.pop("FASTBPTT_CACHE", None)
    return env


def cold_start(workloads=("W2", "W1")):
    """First call of each workload, in order, in one process with an empty Numba cache."""
    cache_dir = tempfile.mkdtemp(prefix="fastbptt-cold-")
    try:
        return run_child(COLD_CHILD, workloads, env=cold_env(cache_dir))
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def cold_starts(cases=COLD_CASES):
    """The first call of each cell and dtype, each in its own process with its own empty
    Numba cache: {"cell dtype": {"workload", "first_call_s", "import_s", "wall_s"}}."""
    out = {}
    for (cell, dtype), spec in cases.items():
        report = cold_start((spec,))
        first = next(v for k, v in report.items() if k.startswith("first_"))
        out[f"{cell} {dtype}"] = {"workload": spec, "first_call_s": first,
                                  "import_s": report["import_s"], "wall_s": report["wall_s"]}
    return out


def w5_memory():
    """Peak resident memory of a process running one W5 call (warm cache), and (Linux)
    the call's own high-water mark over the RSS before it."""
    run_child(WARM_CHILD)                 # no compiling in the measured process
    return run_child(MEMORY_CHILD)
