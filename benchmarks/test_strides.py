"""BPTT(k; s) over strides on W3's sizes (Elman) and G1's (LSTM), fastbptt alone: stride 1
runs lag-major, 1 < s < k one sweep per group of s outputs, s = k chunks."""
import functools

import pytest

import fastbptt
from fastbptt.bench.workloads import WORKLOADS, make_data

K = 20
STRIDES = (1, 2, 4, 10, 20)


@functools.lru_cache(maxsize=None)
def data(name):
    return make_data(WORKLOADS[name])


@pytest.mark.parametrize("stride", STRIDES)
@pytest.mark.parametrize("name", ["W3", "G1"])
def test_stride(benchmark, name, stride):
    x, y, params = data(name)

    def call():
        return fastbptt.bptt(x, y, params, truncate=K, stride=stride)
    call()                                               # compiles, or loads the cache
    benchmark.group = f"{name} BPTT({K}; s)"
    benchmark.extra_info.update(workload=WORKLOADS[name].describe(), truncate=K,
                                stride=stride)
    benchmark(call)
