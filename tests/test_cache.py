"""A read-only install: Numba's cache falls back to NUMBA_CACHE_DIR, or to compiling in
memory with one warning, and never breaks import or calls. Each NUMBA_OPT level keeps a
cache of its own, kernels load from the cache without Numba's registries, and a kernel's
index is saved under a lock that no load or other save holds meanwhile."""
import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fastbptt
from fastbptt._kernels import _jit
from fastbptt._kernels.checks import all_finite

SCRIPT = """
import importlib.util, os, sys
# load the copy, not the installed package (an editable install's finder would win)
root = os.path.join(os.environ["FASTBPTT_COPY"], "fastbptt")
spec = importlib.util.spec_from_file_location(
    "fastbptt", os.path.join(root, "__init__.py"), submodule_search_locations=[root])
fastbptt = sys.modules["fastbptt"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fastbptt)
assert fastbptt.__file__.startswith(root)
import numpy as np
params = fastbptt.init_params(5, 4, 3, dtype=np.float64, seed=0)
x = np.arange(12) % 5
print(fastbptt.loss(x, x % 3, params), fastbptt.grad(x, x % 3, params).W.sum())
"""


@pytest.fixture(scope="module")
def read_only_install(tmp_path_factory):
    """A copy of the package in which no __pycache__ folder can be created."""
    root = tmp_path_factory.mktemp("install")
    shutil.copytree(Path(fastbptt.__file__).parent, root / "fastbptt",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for folder in [root / "fastbptt", *(p for p in (root / "fastbptt").rglob("*") if p.is_dir())]:
        (folder / "__pycache__").write_text("a file where Numba wants a folder")
    return root


def run(install, **env):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "XDG_"))}
    environ.update(FASTBPTT_COPY=str(install), HOME="/dev/null", **env)
    return subprocess.run([sys.executable, "-c", SCRIPT], env=environ, capture_output=True,
                          text=True, timeout=600)


def test_no_writable_cache_compiles_in_memory_with_one_warning(read_only_install):
    done = run(read_only_install, NUMBA_CACHE_DIR="/dev/null/numba-cache")
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("CacheUnavailableWarning") == 1, done.stderr
    assert "NUMBA_CACHE_DIR" in done.stderr
    loss, total = map(float, done.stdout.split())
    assert loss > 0 and abs(total) < 1e6


def test_numba_cache_dir_serves_a_read_only_install(read_only_install, tmp_path):
    done = run(read_only_install, NUMBA_CACHE_DIR=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "CacheUnavailableWarning" not in done.stderr
    assert any(tmp_path.rglob("*.nbi")), "nothing was cached in NUMBA_CACHE_DIR"


LOADED = """
import numpy as np
from fastbptt._kernels.checks import all_finite
all_finite(np.ones(3))
print(sum(all_finite.stats.cache_hits.values()), sum(all_finite.stats.cache_misses.values()))
"""


def test_a_cache_built_at_another_numba_opt_is_compiled_again(tmp_path):
    """Code compiled under NUMBA_OPT=0 is slower: a later process at the default level
    compiles its own instead of loading it, and each level's cache stays beside the other
    (a process at 0 again loads its own)."""
    def hits_and_misses(**env):
        environ = {k: v for k, v in os.environ.items() if k != "NUMBA_OPT"}
        environ.update(NUMBA_CACHE_DIR=str(tmp_path), **env)
        done = subprocess.run([sys.executable, "-c", LOADED], env=environ,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return tuple(map(int, done.stdout.split()))
    assert hits_and_misses(NUMBA_OPT="0") == (0, 1)
    assert hits_and_misses() == (0, 1)
    assert hits_and_misses() == (1, 0)
    assert hits_and_misses(NUMBA_OPT="0") == (1, 0)
    assert hits_and_misses() == (1, 0)


def test_the_warning_is_public_to_filter_it():
    import fastbptt
    from fastbptt._kernels import _jit

    assert fastbptt.CacheUnavailableWarning is _jit.CacheUnavailableWarning
    assert issubclass(fastbptt.CacheUnavailableWarning, RuntimeWarning)


FIRST_CALLS = """
import json, sys
import numpy as np
import fastbptt
REGISTRIES = "numba.np.polynomial.polynomial_core"   # imported by Numba's registries alone
COMPILING = ("numba.np.arraymath", "numba.core.inline_closurecall")   # and by a compile
x = np.arange(12) % 5
out = {"imported": [name for name in COMPILING if name in sys.modules]}
for dtype in sys.argv[1:]:
    params = fastbptt.init_params(5, 4, 3, dtype=np.dtype(dtype), seed=0)
    out[dtype] = fastbptt.grad(x, x % 3, params).W.tobytes().hex()
    out[dtype + " registries"] = REGISTRIES in sys.modules
    out[dtype + " compiling"] = [name for name in COMPILING if name in sys.modules]
    out[dtype + " scipy.linalg"] = "scipy.linalg" in sys.modules
    out[dtype + " arrayobj"] = "numba.np.arrayobj" in sys.modules
    out[dtype + " blas"] = getattr(sys.modules.get(COMPILING[0]), "_HAVE_BLAS", None)
print(json.dumps(out))
"""


def test_kernels_loaded_from_the_cache_need_no_registries_and_compiles_still_work(tmp_path):
    """A process whose kernels all come from the cache does not import Numba's typing and
    lowering registries, nor its array modules and inliner (``import fastbptt`` never
    does; no kernel keeps a reference to ``numba.np.arrayobj``'s environments, which a
    cache load would rebuild by importing it: `_kernels.alloc`); a kernel it compiles
    after such loads (float32 here, calling callees of the same names) still gets them,
    Numba finds SciPy's BLAS without ``scipy.linalg`` imported, and every result is the
    same."""
    def first_calls(*dtypes):
        environ = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
        environ.pop("FASTBPTT_CACHE", None)
        done = subprocess.run([sys.executable, "-c", FIRST_CALLS, *dtypes], env=environ,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    compiled = first_calls("float64")
    assert compiled["imported"] == []
    assert compiled["float64 registries"]
    assert compiled["float64 compiling"] == ["numba.np.arraymath", "numba.core.inline_closurecall"]
    assert compiled["float64 blas"] is True and not compiled["float64 scipy.linalg"]
    loaded = first_calls("float64", "float32")
    assert not loaded["float64 registries"] and loaded["float64 compiling"] == []
    assert not loaded["float64 arrayobj"]
    assert loaded["float32 registries"]
    assert loaded["float32 blas"] is True and not loaded["float32 scipy.linalg"]
    assert loaded["float64"] == compiled["float64"]
    x = np.arange(12) % 5
    here = fastbptt.grad(x, x % 3, fastbptt.init_params(5, 4, 3, dtype=np.float32, seed=0))
    assert loaded["float32"] == here.W.tobytes().hex()


def locks(path):
    """Which locks another open file of ``path`` can take now: (exclusive, shared)."""
    taken = []
    for kind in (fcntl.LOCK_EX, fcntl.LOCK_SH):
        fd = os.open(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            taken.append(True)
        except BlockingIOError:
            taken.append(False)
        finally:
            os.close(fd)
    return tuple(taken)


def test_a_save_holds_the_index_lock_alone_and_loads_share_it(monkeypatch):
    """While Numba saves a kernel's overload (index, then data file), no other save or
    load can lock its index; loads lock it shared, so that loads go on together."""
    cache = all_finite._cache
    assert isinstance(cache, _jit._KernelCache)
    path = cache._cache_file._index_path + ".lock"
    seen = {}
    monkeypatch.setattr(cache, "_save_overload",
                        lambda sig, data: seen.setdefault("save", locks(path)))
    monkeypatch.setattr(cache, "_load_overload",
                        lambda sig, context: seen.setdefault("load", locks(path)))
    cache.save_overload(None, None)
    cache.load_overload(None, all_finite.targetctx)
    assert seen == {"save": (False, False), "load": (False, True)}
    assert locks(path) == (True, True)
