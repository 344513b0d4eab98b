"""SciPy's BLAS is bound without importing ``scipy.linalg`` (0.1 to 0.2 s of every start),
and ``scipy.linalg`` still imports whole afterwards. Each check runs in a fresh interpreter."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def python(code):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get(
        "PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_import_fastbptt_leaves_scipy_linalg_unimported():
    assert python("import sys, fastbptt\n"
                  "fastbptt.grad\n"                  # loads the engine
                  "print('numba' in sys.modules, 'scipy.linalg' in sys.modules, "
                  "'scipy.linalg.cython_blas' in sys.modules)") == ["True", "False", "False"]


def test_scipy_linalg_imports_whole_after_fastbptt():
    out = python(
        "import numpy as np, fastbptt\n"
        "from fastbptt._kernels.blas import cython_blas\n"
        "early = cython_blas()\n"
        "import scipy.linalg\n"
        "import scipy.linalg.cython_blas as cb\n"
        "from scipy.linalg import cython_blas as cb2\n"
        "print(scipy.linalg.cython_blas is cb is cb2 is early)\n"
        "print(scipy.linalg.blas.sgemm(1.0, np.eye(2), [[1.0], [2.0]]).ravel().tolist() "
        "== [1.0, 2.0])\n")
    assert out == ["True", "True"]


def test_bound_addresses_are_scipys():
    out = python(
        "import fastbptt, llvmlite.binding as llvm\n"
        "fastbptt.grad\n"
        "from numba.extending import get_cython_function_address as address\n"
        "print(all(llvm.address_of_symbol(f'fastbptt_{n}') == "
        "address('scipy.linalg.cython_blas', n) for n in ('sgemm', 'dgemm')))\n")
    assert out == ["True"]
