"""The one registry of implementations that ``fastbptt bench`` and both suites time.

Each `Peer` has a name, the workloads it runs, an availability check per workload (PyTorch
and JAX are optional installs) that imports its library only when called, and a factory ``make(workload, x, y, params) ->
Call``. A `Call` runs forward + loss + every gradient and returns ``(loss, grads)``: the
gradients flat in `stacks.flatten`'s order (for W1 ... W5 ``(dU, dW, dV)``), in
fastbptt's orientation (U is weight_ih (G·H, in), W weight_hh (G·H, H), V (C, H·D)),
fully computed, as NumPy-convertible arrays. For the layer workload (S3) the "loss" is
the layer's output h and the last gradient is dx. Its ``note`` says which variant was
chosen, if any.

`set_threads` gives every implementation the same thread count.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .workloads import GROUPS, WORKLOADS

__all__ = ["Call", "Peer", "PEERS", "set_threads", "get_threads", "as_numpy"]

_THREADS = {"n": 1}


@dataclass
class Call:
    """A prepared implementation: ``call()`` returns ``(loss, (dU, dW, dV))``."""

    fn: Callable[[], tuple]
    note: str = ""

    def __call__(self):
        return self.fn()


def _available(workload) -> Optional[str]:
    return None


def _no_threads(n: int) -> None:
    return None


@dataclass(frozen=True)
class Peer:
    """One implementation; ``unavailable(workload)`` returns the reason it cannot run that
    workload, or None."""

    name: str
    slug: str                                  # for test ids and JSON keys
    make: Callable[..., Call]
    workloads: tuple = ()                      # timed by default
    on_request: tuple = ()                     # timed only when asked (slow)
    unavailable: Callable[[], Optional[str]] = _available
    set_threads: Callable[[int], None] = field(default=_no_threads)

    def runs(self, workload_name, requested=False):
        return workload_name in self.workloads or (requested and workload_name in self.on_request)


def _bptt_call(module_name):
    """A factory timing ``<module>.bptt``: the package's kernels or its NumPy reference."""
    def make(workload, x, y, params):
        import importlib

        bptt = importlib.import_module(module_name).bptt
        options = workload.options()

        def run():
            result = bptt(x, y, params, **options)
            return result.loss, tuple(result.grads[:3])

        return Call(run)

    return make


_make_reference = _bptt_call("fastbptt.reference")
_make_documents_model = _bptt_call("fastbptt")


def _make_fastbptt(workload, x, y, params):
    if workload.documents_model:
        return _make_documents_model(workload, x, y, params)
    from .fastbptt_stack import make
    return make(workload, x, y, params)


def _make_peer(package):
    """A factory for PyTorch or JAX: `<package>_peer` runs W1 ... W5, `<package>_stack`
    the others."""
    def make(workload, x, y, params):
        import importlib

        family = "peer" if workload.documents_model else "stack"
        module = importlib.import_module(f"{__package__}.{package}_{family}")
        return module.make(workload, x, y, params, threads=get_threads())

    return make


def _torch_unavailable(workload):
    from .torch_peer import unavailable
    return unavailable()


def _jax_unavailable(workload):
    from .jax_peer import unavailable
    return unavailable(get_threads())


def _torch_threads(n):
    from .torch_peer import set_threads
    set_threads(n)


def _jax_threads(n):
    from .jax_peer import set_threads
    set_threads(n)


# full BPTT in float32: what PyTorch and JAX run (W1 and W4 are windows, W1 float64)
_FRAMEWORKS = ("W2", "W3", "W5") + GROUPS["S"] + GROUPS["G"]

PEERS = {p.name: p for p in [
    Peer("fastbptt", "fastbptt", _make_fastbptt, workloads=tuple(WORKLOADS)),
    Peer("documents' loop", "reference", _make_reference, workloads=("W1",),
         on_request=("W3", "W4")),
    Peer("PyTorch", "torch", _make_peer("torch"), workloads=_FRAMEWORKS,
         unavailable=_torch_unavailable, set_threads=_torch_threads),
    Peer("JAX", "jax", _make_peer("jax"), workloads=_FRAMEWORKS,
         unavailable=_jax_unavailable, set_threads=_jax_threads),
]}


def set_threads(n):
    """Use n threads everywhere: NumPy's and SciPy's BLAS, fastbptt, PyTorch, and JAX.

    JAX fixes its thread pool when it starts, so call this before the first JAX peer
    is made; `jax_peer` says so if it was started with another count.
    """
    from threadpoolctl import threadpool_limits

    import fastbptt

    if not 1 <= n <= (os.cpu_count() or 1):
        raise ValueError(f"threads must lie in [1, {os.cpu_count()}]; got {n}")
    _THREADS["n"] = n
    threadpool_limits(n, user_api="blas")       # NumPy's BLAS too (the documents' loop)
    fastbptt.set_num_threads(n)
    for peer in PEERS.values():
        peer.set_threads(n)


def get_threads():
    return _THREADS["n"]


def as_numpy(outcome):
    """``(loss, grads)`` of a Call's result as float64 NumPy arrays (the loss a 0-d one,
    or the layer's output h)."""
    loss, grads = outcome
    return (np.asarray(loss, dtype=np.float64),
            tuple(np.asarray(g, dtype=np.float64) for g in grads))
