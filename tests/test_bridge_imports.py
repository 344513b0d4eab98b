"""``import fastbptt`` imports neither PyTorch nor JAX; a bridge whose framework is missing
says in one line which extra to install. Each check runs in a fresh interpreter."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get(
        "PYTHONPATH")])))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)


def test_import_fastbptt_imports_no_framework():
    r = python("import sys, fastbptt, fastbptt.layer, fastbptt.bench.workloads\n"
               "print(sorted(m for m in ('torch', 'jax', 'jaxlib') if m in sys.modules))")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.parametrize("bridge, framework, extra", [("torch", "torch", "torch"),
                                                      ("jax", "jax", "jax")])
def test_missing_framework_names_the_extra(bridge, framework, extra):
    r = python(f"import sys\nsys.modules[{framework!r}] = None\n"
               f"try:\n    import fastbptt.{bridge}\n"
               f"except ImportError as e:\n    print(e)\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith(f"pip install 'fastbptt[{extra}]'")
    assert len(r.stdout.strip().splitlines()) == 1
