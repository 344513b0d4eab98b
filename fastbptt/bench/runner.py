"""``fastbptt bench``: time every workload with fastbptt and each available peer.

Per workload: seeded data, fastbptt warmed up (compiled), each peer made, warmed up and
checked against fastbptt, then fastbptt, the peers that agree and a 1024x1024 gemm of the
workload's dtype (the peak its GF/s are compared with) timed in turns
(`timing.measure_turns`); every call is in this one process, with the same thread count
for every implementation.
"""
from __future__ import annotations

import datetime
import functools
import os
import shlex
import sys
from dataclasses import dataclass, field
from typing import Optional

from . import startup as startup_
from .agreement import Agreement, compare
from .peers import PEERS, get_threads, set_threads
from . import allocator
from .timing import (ENVIRONMENT, Timing, busy_cpus, gemm_call, gemm_peak, machine_info,
                     measure, measure_turns, openblas_warnings)
from .workloads import DEFAULT, WORKLOADS, Workload, make_data

__all__ = ["PeerResult", "WorkloadResult", "BenchReport", "run", "REFERENCE_ON_REQUEST"]

# the workloads --reference adds the documents' loop to (timed once: it is slow)
REFERENCE_ON_REQUEST = PEERS["documents' loop"].on_request

# fastbptt also timed on 1 and 2 threads (large products: a second core should pay off)
SCALED = ("W5", "G4")
GEMM = "gemm"           # the 1024x1024 gemm timed in turns with each workload's calls


@dataclass
class PeerResult:
    status: str                         # "timed", "unavailable", "disagrees" or "failed"
    timing: Optional[Timing] = None
    agreement: Optional[Agreement] = None
    note: str = ""


@dataclass
class WorkloadResult:
    workload: Workload
    threads: int
    fastbptt: Timing
    peak: float                         # gemm GF/s of this dtype at these threads, timed
                                        # in turns with the workload's calls
    peers: dict = field(default_factory=dict)           # peer name -> PeerResult
    scaling: dict = field(default_factory=dict)         # threads -> Timing (SCALED)
    scaling_peak: dict = field(default_factory=dict)    # threads -> sgemm GF/s (SCALED)

    def ratio(self, peer):
        """Peer time over fastbptt time, or None when the peer was not timed."""
        result = self.peers.get(peer)
        if result is None or result.timing is None:
            return None
        return result.timing.median / self.fastbptt.median

    def timing(self, name):
        """fastbptt's or a peer's `Timing`, or None."""
        if name == "fastbptt":
            return self.fastbptt
        return getattr(self.peers.get(name), "timing", None)

    def gflops_of(self, name="fastbptt"):
        timing = self.timing(name)
        return None if timing is None else self.workload.flops / timing.median / 1e9

    @property
    def gflops(self):
        return self.gflops_of("fastbptt")

    @property
    def percent_of_peak(self):
        return 100 * self.gflops / self.peak


@dataclass
class BenchReport:
    results: list
    threads: int
    peak: dict                           # dtype -> GF/s
    machine: dict
    command: str
    date: str
    warnings: list = field(default_factory=list)
    startup: Optional[dict] = None


class _Progress:
    """Progress on stderr (stdout is the report): tqdm's bar when tqdm is installed and
    stderr is a terminal, plain lines otherwise."""

    def __init__(self, total):
        try:
            from tqdm import tqdm
        except ImportError:
            self.bar = None
        else:
            self.bar = tqdm(total=total, unit="step", leave=False, disable=None)

    def step(self, label):
        if self.bar is not None:
            self.bar.set_description(label)

    def done(self):
        if self.bar is not None:
            self.bar.update()

    def write(self, text):
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _busy_warning():
    """A warning when other processes keep CPUs busy (they skew every figure)."""
    busy = busy_cpus()
    if busy is None or busy < 0.25:
        return []
    return [f"warning: other processes kept {busy:.1f} of {os.cpu_count()} CPUs busy at "
            "the start: timings are noisy and multi-thread figures low"]


def _command():
    return "fastbptt " + shlex.join(sys.argv[1:])


def _peers_for(name, with_peers, reference):
    """The peers of workload ``name``: its own where ``with_peers``, and the documents'
    loop where it is timed only on request (W3, W4) and ``reference`` asks for it."""
    for peer in PEERS.values():
        if peer.name == "fastbptt":
            continue
        if with_peers and peer.runs(name):
            yield peer
        elif reference and name in peer.on_request:
            yield peer


def _check_peer(peer, workload, data, expected, progress):
    """(PeerResult, call): make one peer and check it against fastbptt's outcome
    ``expected``; call is None where the peer is not to be timed in turns (unavailable,
    failed, disagreeing, or timed once, which this does)."""
    reason = peer.unavailable(workload)
    if reason:
        progress.write(f"  {workload.name} {peer.name}: skipped, {reason}")
        return PeerResult("unavailable", note=reason), None
    try:
        call = peer.make(workload, *data)
        agreement = compare(peer.name, workload, call(), expected)
    except Exception as error:                                 # a peer's own failure
        note = f"{error.__class__.__name__}: {error}"
        progress.write(f"  {workload.name} {peer.name}: failed, {note}")
        return PeerResult("failed", note=note), None
    progress.write("  " + agreement.describe() + (f" [{call.note}]" if call.note else ""))
    if not agreement.ok:
        return PeerResult("disagrees", agreement=agreement, note=call.note), None
    result = PeerResult("timed", agreement=agreement, note=call.note)
    if workload.name in peer.on_request:                       # slow: one call is enough
        result.timing = measure(call, repeat=1, warmup=0)
        return result, None
    return result, call


def _scaling(result, call, repeat, budget):
    """fastbptt and sgemm on 1 and 2 threads, all four in turns, so that the ratio of the
    two thread counts is measured side by side (the main run's figure on 1 thread came
    from other turns); twice the budget, as the ratio is the figure here. The sgemm ratio
    shows whether a second core was free to use."""
    if (os.cpu_count() or 1) < 2:
        return
    gemm, flops = gemm_call(result.workload.dtype)
    counts = (1, 2)
    calls, enter = {}, {}
    for n in counts:
        calls[n], calls[GEMM, n] = call, gemm
        enter[n] = enter[GEMM, n] = functools.partial(set_threads, n)
    try:
        timings = measure_turns(calls, repeat=repeat, budget=2 * budget, enter=enter)
    finally:
        set_threads(result.threads)
    for n in counts:
        result.scaling[n] = timings[n]
        result.scaling_peak[n] = flops / timings[GEMM, n].median / 1e9


def run(names=DEFAULT, threads=1, repeat=50, budget=2.0, with_peers=True,
        reference=False, startup=False):
    """Measure; returns a `BenchReport` (printing progress and agreement checks)."""
    environment = {name: os.environ.get(name) for name in ENVIRONMENT}
    warnings = openblas_warnings() + _busy_warning()
    for text in warnings:
        print(text, file=sys.stderr, flush=True)
    set_threads(threads)
    workloads = [WORKLOADS[n] for n in names]
    plan = {w.name: list(_peers_for(w.name, with_peers, reference)) for w in workloads}
    progress = _Progress(total=2 + sum(2 + len(p) for p in plan.values()) + 3 * startup)

    progress.step("gemm peak")
    peak = {dtype: gemm_peak(dtype, threads) for dtype in ("float32", "float64")}
    progress.done()
    progress.write(f"gemm peak on {threads} thread(s): sgemm {peak['float32']:.1f} GF/s, "
                   f"dgemm {peak['float64']:.1f} GF/s (1024x1024, SciPy's BLAS)")
    results = []
    for w in workloads:
        progress.step(f"{w.name} fastbptt")
        data = make_data(w)
        call = PEERS["fastbptt"].make(w, *data)
        expected = call()                                      # compiles or loads the cache
        progress.done()
        checked, turns = {}, {"fastbptt": call}
        for peer in plan[w.name]:
            progress.step(f"{w.name} {peer.name} check")
            checked[peer.name], peer_call = _check_peer(peer, w, data, expected, progress)
            if peer_call is not None:
                turns[peer.name] = peer_call
            progress.done()
        progress.step(f"{w.name} timing in turns")
        gemm, flops = gemm_call(w.dtype)
        timings = measure_turns({**turns, GEMM: gemm}, repeat=repeat, budget=budget)
        result = WorkloadResult(w, get_threads(), timings["fastbptt"],
                                flops / timings[GEMM].median / 1e9)
        for name, peer_result in checked.items():
            if name in timings:
                peer_result.timing = timings[name]
            result.peers[name] = peer_result
        progress.write(f"{w.name} ({w.describe()}): fastbptt "
                       f"{result.fastbptt.median * 1e3:.3f} ms" + "".join(
                           f", {name} {timings[name].median * 1e3:.3f} ms"
                           for name in turns if name != "fastbptt")
                       + f"; gemm {result.peak:.1f} GF/s")
        progress.done()
        if w.name in SCALED:
            progress.step(f"{w.name} fastbptt on 1 and 2 threads")
            _scaling(result, call, repeat, budget)
        results.append(result)
    progress.step("versions")
    machine = machine_info()
    for name, before in environment.items():                # say what the bench set itself
        if os.environ.get(name) != before or (name in allocator.VARIABLES and
                                              os.environ.get("FASTBPTT_BENCH_MALLOC") == "set"):
            machine["environment"][name] = f"{os.environ.get(name)} (set by the bench)"
    progress.done()
    startup_result = None
    if startup:
        startup_result = {}
        for key, measure_it in (("warm_starts", startup_.warm_starts),
                                ("cold_starts", startup_.cold_starts),
                                ("w5_memory", startup_.w5_memory)):
            progress.step(key.replace("_", " "))
            startup_result[key] = measure_it()
            progress.done()
    progress.close()
    return BenchReport(results, threads, peak, machine, *stamp(), warnings, startup_result)


def stamp():
    """(the command line, the local date and time) a report carries."""
    return _command(), datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
