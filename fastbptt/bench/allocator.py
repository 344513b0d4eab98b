"""glibc's malloc thresholds for the bench, so that no implementation is timed paying page
faults that a steadier allocator setting removes.

With its default, adaptive thresholds, glibc gives a large freed block back to the OS (an
``munmap``, or trimming the heap's top) and maps fresh pages for the next call's block of
the same size; every page of it then faults on first touch. A library that allocates its
working arrays on every call pays that every call: PyTorch's ``nn.LSTM`` on G1 took 48 ms
a call that way and 35 ms with the thresholds below, on the same machine. How much it
pays also depends on what ran before in the process (the thresholds only rise, after a
larger block is freed), so the figures depended on the order of the workloads.

`steady_environment` gives the variables that fix both thresholds high for the whole
process; `fastbptt bench` run as a program re-executes itself with them when the user set
neither (glibc reads them only at start). fastbptt keeps its scratch arrays from call to
call, so its own figures barely move; the peers', PyTorch's above all, improve: the bench
measures every implementation at its best.
"""
import os
import platform

__all__ = ["VARIABLES", "steady_environment"]

VARIABLES = {"MALLOC_MMAP_THRESHOLD_": str(256 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def steady_environment(environ=None):
    """The environment to re-execute the bench with, or None where there is nothing to
    change: not glibc, or the user set either variable (theirs are kept)."""
    environ = os.environ if environ is None else environ
    if platform.libc_ver()[0] != "glibc" or any(name in environ for name in VARIABLES):
        return None
    return {**environ, **VARIABLES, "FASTBPTT_BENCH_MALLOC": "set"}
