"""`fastbptt bench --jax` starts JAX on the bench's one thread: checking that the extra is
installed imported JAX before the bench had set its threads, so XLA ran on every core
while the report said one thread."""
import importlib.util
import os
import subprocess
import sys

import pytest

import fastbptt

# not imported here: the suite's own JAX tests start JAX on one thread first
pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="needs JAX")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fastbptt.__file__)))

PROGRAM = """
import os, sys
from fastbptt import cli
from fastbptt.bench import bridge_steps, jax_peer

def run(names, **kw):
    print("started", jax_peer._STATE["started_with"], os.environ.get("XLA_FLAGS"))
    return []

bridge_steps.run, bridge_steps.table = run, lambda results, threads: "table"
sys.exit(cli.main(["bench", "--jax"]))
"""


def test_the_jax_bridge_steps_start_jax_on_the_benchs_thread():
    environ = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, (ROOT, environ.get("PYTHONPATH"))))
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=environ, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    from fastbptt.bench.jax_peer import XLA_ONE_THREAD          # imports no JAX
    assert done.stdout.splitlines()[0] == f"started 1 {XLA_ONE_THREAD}", done.stdout


def test_a_broken_jax_install_gets_the_extras_line(tmp_path):
    """Starting JAX for the bench ran outside the check for the extra: an ImportError of a
    JAX that cannot load came out as 'unexpected ImportError'."""
    broken = tmp_path / "jax"
    broken.mkdir()
    (broken / "__init__.py").write_text("raise ImportError('jax requires jaxlib')\n")
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, (str(tmp_path), ROOT, os.environ.get("PYTHONPATH")))))
    done = subprocess.run([sys.executable, "-m", "fastbptt", "bench", "--jax"], env=environ,
                          capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr) == (
        1, "fastbptt bench: --jax: fastbptt.jax needs JAX: pip install 'fastbptt[jax]'\n")


def test_jax_started_outside_the_bench_is_said_once_asked_for_threads():
    """A JAX imported before the bench runs on threads the bench does not know: asking for
    one thread then warns instead of reporting one."""
    program = ("import warnings, jax\n"
               "from fastbptt.bench import jax_peer\n"
               "with warnings.catch_warnings(record=True) as seen:\n"
               "    warnings.simplefilter('always')\n"
               "    jax_peer.start(1)\n"
               "print([str(w.message) for w in seen])\n")
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join(
        filter(None, (ROOT, os.environ.get("PYTHONPATH")))))
    done = subprocess.run([sys.executable, "-c", program], env=environ, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(["JAX started outside the bench, on threads it does "
                                       "not know, and cannot change to 1 in this process"])
