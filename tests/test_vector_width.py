"""The vector kernels' width follows the CPU features Numba compiles for
(`fastbptt._kernels.simd.vector_bytes`): 64 bytes with AVX-512, 32 without. On a machine
with AVX-512, the vector kernels' tests run once more in a process that compiles without
it, so that there both widths are tested."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numba.core.codegen import get_host_cpu_features

from fastbptt._kernels.simd import VECTOR_BYTES, vector_bytes

AVX512 = ("avx512", "avx10", "evex512")


def test_width_follows_the_features():
    assert vector_bytes("+sse2,+avx,+avx2,+fma,+avx512f,+avx512bw,+avx512vl") == 64
    assert vector_bytes("+sse2,+avx,+avx2,+fma,-avx512f,-avx512bw,-avx512vl") == 32
    assert vector_bytes("+neon,+fp-armv8") == 32
    assert vector_bytes("") == 32
    assert VECTOR_BYTES == vector_bytes()


def without_avx512(features):
    """LLVM's feature string ``features`` with every AVX-512 feature turned off."""
    return ",".join("-" + f[1:] if f[1:].startswith(AVX512) else f
                    for f in features.split(",") if f)


def test_without_avx512_turns_off_only_avx512():
    assert without_avx512("+avx2,+avx512f,-avx512vnni,+evex512,+fma") == \
        "+avx2,-avx512f,-avx512vnni,-evex512,+fma"


@pytest.mark.skipif(VECTOR_BYTES != 64, reason="no AVX-512 here: the suite's own run "
                    "compiles the 32-byte kernels")
def test_vector_kernels_compiled_without_avx512(tmp_path):
    environ = dict(os.environ, NUMBA_CPU_FEATURES=without_avx512(get_host_cpu_features()),
                   NUMBA_CACHE_DIR=str(tmp_path))
    tests = Path(__file__).parent
    width = subprocess.run(
        [sys.executable, "-c", "from fastbptt._kernels.simd import VECTOR_BYTES as v; print(v)"],
        env=environ, capture_output=True, text=True, timeout=120)
    assert width.stdout.strip() == "32", width.stderr
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(tests / "test_vector_kernels.py")],
        cwd=tests.parent, env=environ, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
