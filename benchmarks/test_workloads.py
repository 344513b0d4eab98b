"""Every workload of the registry (W1-W5, S1-S3, G1-G5) for every implementation that runs
it, grouped by workload.

Each case checks the peer's loss and gradients against fastbptt's, warms up (the first
call compiles, traces or loads a cache), then times one call per round.
"""
import functools

import pytest

from fastbptt.bench.agreement import compare
from fastbptt.bench.peers import PEERS
from fastbptt.bench.workloads import WORKLOADS, make_data

CASES = [pytest.param(w, peer.name, id=f"{w}-{peer.slug}")
         for w in WORKLOADS for peer in PEERS.values()
         if peer.runs(w, requested=True)]


@functools.lru_cache(maxsize=None)
def data(name):
    return make_data(WORKLOADS[name])


@functools.lru_cache(maxsize=None)
def fastbptt_outcome(name):
    return PEERS["fastbptt"].make(WORKLOADS[name], *data(name))()


@pytest.mark.parametrize("name, peer_name", CASES)
def test_workload(benchmark, request, name, peer_name):
    workload, peer = WORKLOADS[name], PEERS[peer_name]
    slow = name in peer.on_request
    if slow and not request.config.getoption("--bench-reference"):
        pytest.skip(f"{peer.name} on {name} takes seconds per call: pass --bench-reference")
    reason = peer.unavailable(workload)
    if reason:
        pytest.skip(f"{peer.name}: {reason}")
    call = peer.make(workload, *data(name))
    outcome = call()                                     # warm-up
    if peer.name != "fastbptt":
        agreement = compare(peer.name, workload, outcome, fastbptt_outcome(name))
        assert agreement.ok, agreement.describe()
    benchmark.group = name
    benchmark.extra_info.update(workload=workload.describe(), implementation=peer.name,
                                flops=workload.flops, note=call.note)
    if slow:
        benchmark.pedantic(call, rounds=1, iterations=1)
    else:
        benchmark(call)
