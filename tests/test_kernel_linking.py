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
    k = _kernels(cache=False)
    a = np.linspace(-1.0, 1.0, 12).reshape(4, 3)
    total, want_out = k["expected"](a)
    k["large"](a, np.empty((3, 4))), k["small"](a)
    large, small = _library(k["large"]), _library(k["small"])
    assert large.own_size() > small.own_size() > 0
    monkeypatch.setattr(_linking, "LATE_SIZE", (large.own_size() + small.own_size()) // 2)
    out = np.empty((3, 4))
    assert np.isclose(k["caller"](a, out), total, rtol=1e-13, atol=0)
    assert np.allclose(out, want_out, rtol=1e-13, atol=0)
    caller = _library(k["caller"])
    assert isinstance(caller, _linking.KernelLibrary)
    assert caller._late == [large]
    assert small in caller._linking_libraries and large not in caller._linking_libraries
    name = k["large"].overloads[k["large"].signatures[0]].fndesc.mangled_name
    assert any(fn.name == name and not fn.is_declaration                   # defined in it
               for fn in caller._final_module.functions)
    assert JITCPUCodegen._library_class is JITCodeLibrary                   # put back


RUN = """
import sys
from fastbptt._kernels import _linking
a = np.linspace(-1.0, 1.0, 12).reshape(4, 3)
want, want_out = expected(a)
out = np.empty((3, 4))
if sys.argv[1] == "large":
    kernel, got, want = large, large(a, out), large.py_func(a, want_out.copy())
else:                   # large linked late where it is compiled here, not loaded
    large(a, np.empty((3, 4))), small(a)
    sizes = [_linking._own_size(k.overloads[k.signatures[0]].library) for k in (large, small)]
    _linking.LATE_SIZE = max(1, sum(sizes) // 2)
    kernel, got = caller, caller(a, out)
assert np.isclose(got, want, rtol=1e-13, atol=0), (got, want)
assert np.allclose(out, want_out, rtol=1e-13, atol=0)
(cres,) = kernel.overloads.values()
print(repr((sum(kernel.stats.cache_hits.values()), sum(kernel.stats.cache_misses.values()),
            [lib.name for lib in getattr(cres.library, "_late", [])],
            [lib.name for lib in getattr(cres.library, "_linking_libraries", [])])))
"""


def test_kernels_run_from_the_cache_in_a_new_process(tmp_path):
    """With an empty cache, a new process compiles `caller`, linking `large` late, and
    caches it; the next process loads it and computes the same. With another, a process
    caches `large` alone; the next compiles `caller`, linking the cached `large` before
    optimising, as Numba does."""
    script = tmp_path / "linked.py"
    script.write_text(KERNELS.replace("CACHE", "True") + RUN)

    def run(kernel, cache):
        env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / cache))
        done = subprocess.run([sys.executable, str(script), kernel], env=env,
                              capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return ast.literal_eval(done.stdout.strip())

    hits, misses, late, early = run("caller", "one")
    assert (hits, misses, late) == (0, 1, ["large"]) and "small" in early
    hits, misses, _, _ = run("caller", "one")
    assert (hits, misses) == (1, 0)                             # loaded, and right
    hits, misses, _, _ = run("large", "two")
    assert (hits, misses) == (0, 1)                             # compiled, and cached
    hits, misses, late, early = run("caller", "two")
    assert (hits, misses) == (0, 1) and "large" in early and "large" not in late


def test_a_library_not_compiled_here_has_no_size_of_its_own():
    assert _linking._own_size(JITCodeLibrary.__new__(JITCodeLibrary)) == 0
