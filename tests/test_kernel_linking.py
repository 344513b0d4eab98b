"""A kernel's large callees are linked into its code after LLVM has optimised it, as the
code they run themselves, and small ones before, as Numba links them; the kernel computes
the same, also loaded from Numba's cache in a new process."""
import ast
import os
import subprocess
import sys

import numpy as np
from numba.core.codegen import JITCodeLibrary, JITCPUCodegen

from fastbptt._kernels import _linking

KERNELS = '''
import numpy as np
from fastbptt._kernels._jit import jit


@jit(cache=CACHE)
def large(a, out):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[j, i] = np.tanh(a[i, j]) * 2.0 + np.exp(-a[i, j]) - a[i, j] ** 3
    total = 0.0
    for j in range(out.shape[0]):
        total += np.sqrt(abs(out[j, 0])) + np.cos(out[j, -1])
    return total


@jit(cache=CACHE)
def small(a):
    return a[0, 0] + 1.0


@jit(cache=CACHE)
def caller(a, out):
    return large(a, out) + small(a)


def expected(a):
    out = np.empty(a.shape[::-1])
    return large.py_func(a, out) + small.py_func(a), out
'''


def _kernels(cache):
    namespace = {}
    exec(compile(KERNELS.replace("CACHE", str(cache)), "<kernels>", "exec"), namespace)
    return namespace


def _library(dispatcher):
    (cres,) = dispatcher.overloads.values()
    return cres.library


def test_a_large_callee_is_linked_after_optimising_and_a_small_one_before(monkeypatch):
    monkeypatch.setattr(_linking, "LATE_SIZE", 150)
    k = _kernels(cache=False)
    a = np.linspace(-1.0, 1.0, 12).reshape(4, 3)
    out = np.empty((3, 4))
    total, want_out = k["expected"](a)
    assert np.isclose(k["caller"](a, out), total, rtol=1e-13, atol=0)
    assert np.allclose(out, want_out, rtol=1e-13, atol=0)
    caller, large, small = (_library(k[name]) for name in ("caller", "large", "small"))
    assert isinstance(caller, _linking.KernelLibrary)
    assert large.own_size() >= 150 > small.own_size() > 0
    assert caller._late == [large]
    assert small in caller._linking_libraries and large not in caller._linking_libraries
    name = k["large"].overloads[k["large"].signatures[0]].fndesc.mangled_name
    assert any(fn.name == name and not fn.is_declaration                   # defined in it
               for fn in caller._final_module.functions)
    assert JITCPUCodegen._library_class is JITCodeLibrary                   # put back


RUN = """
import sys
from fastbptt._kernels import _linking
_linking.LATE_SIZE = 150
a = np.linspace(-1.0, 1.0, 12).reshape(4, 3)
out = np.empty((3, 4))
want, want_out = expected(a)
kernel = large if sys.argv[1] == "large" else caller
got = kernel(a, out)
if kernel is large:
    want = large.py_func(a, want_out.copy())
assert np.isclose(got, want, rtol=1e-13, atol=0), (got, want)
assert np.allclose(out, want_out, rtol=1e-13, atol=0)
(cres,) = kernel.overloads.values()
print(repr((sum(kernel.stats.cache_hits.values()), sum(kernel.stats.cache_misses.values()),
            [lib.name for lib in getattr(cres.library, "_late", [])],
            [lib.name for lib in getattr(cres.library, "_linking_libraries", [])])))
"""


def test_kernels_run_from_the_cache_in_a_new_process_and_link_cached_callees(tmp_path):
    """A new process compiles `large` and caches it; the next compiles `caller`, linking
    the cached `large` before optimising, as Numba does; the last loads `caller`."""
    script = tmp_path / "linked.py"
    script.write_text(KERNELS.replace("CACHE", "True") + RUN)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))

    def run(kernel):
        done = subprocess.run([sys.executable, str(script), kernel], env=env,
                              capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return ast.literal_eval(done.stdout.strip())

    hits, misses, _, _ = run("large")
    assert (hits, misses) == (0, 1)                             # compiled, and cached
    hits, misses, late, early = run("caller")
    assert (hits, misses, late) == (0, 1, []) and {"large", "small"} <= set(early)
    hits, misses, _, _ = run("caller")
    assert (hits, misses) == (1, 0)                             # loaded


def test_a_library_not_compiled_here_has_no_size_of_its_own():
    assert _linking._own_size(JITCodeLibrary.__new__(JITCodeLibrary)) == 0
