"""JAX (XLA, CPU) on W1 ... W5 (one Elman layer): ``jit(value_and_grad(loss))``.

This module also starts JAX for `jax_stack`, with the thread count the bench asks for.

The loss gathers Uᵀ's rows for the token ids, runs ``lax.scan`` over time, projects with
V and sums the log_softmax cross-entropy; a call blocks until the gradients are ready.

Threads. JAX sizes its CPU thread pool once, when it starts. For n threads on a machine
with more cores, the bench sets ``XLA_FLAGS`` (only if the user has not) to the flag of
JAX's issue #743 for one thread, and starts JAX with the process's CPU affinity narrowed
to n CPUs, restoring it right after: with JAX 0.10 the flag alone still lets a matrix
product use every core (process CPU time twice the wall time on 2 cores), the affinity
does not. (That issue's second flag, ``intra_op_parallelism_threads=1``, is
TensorFlow's; XLA ignores a flag written without its ``--``, and fails on it with one.)
"""
from __future__ import annotations

import os
import sys
import warnings
from contextlib import contextmanager

import numpy as np

from .peers import Call

__all__ = ["unavailable", "set_threads", "make", "start", "pool", "XLA_ONE_THREAD"]

XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false"
_STATE = {"threads": None, "started_with": None}


def set_threads(n):
    """Record n; before JAX starts, set XLA_FLAGS for n = 1 unless the user set them."""
    _STATE["threads"] = n
    if sys.modules.get("jax") is None and n == 1 and "XLA_FLAGS" not in os.environ:
        os.environ["XLA_FLAGS"] = XLA_ONE_THREAD


@contextmanager
def _affinity(n):
    """The calling thread (and threads it starts) on n of its CPUs, restored on exit."""
    if not hasattr(os, "sched_getaffinity"):
        yield
        return
    cpus = os.sched_getaffinity(0)
    if n >= len(cpus):
        yield
        return
    os.sched_setaffinity(0, sorted(cpus)[:n])
    try:
        yield
    finally:
        os.sched_setaffinity(0, cpus)


def start(threads):
    """Import JAX and start its CPU backend with `threads` threads (once per process).

    A JAX imported before the bench's first call runs on threads the bench does not know:
    every call then warns, as a call asking for another count than the first does."""
    if sys.modules.get("jax") is not None and _STATE["started_with"] is None:
        _STATE["started_with"] = "outside the bench"     # started elsewhere: threads unknown
    if _STATE["started_with"] is None:
        set_threads(threads)
        with _affinity(threads):
            import jax
            jax.devices("cpu")                   # creates the thread pool now
        _STATE["started_with"] = threads
    import jax
    if _STATE["started_with"] != threads:
        began = _STATE["started_with"]
        began = f"with {began} thread(s)" if isinstance(began, int) else \
            "outside the bench, on threads it does not know,"
        warnings.warn(f"JAX started {began} and cannot change to {threads} in this process",
                      RuntimeWarning, stacklevel=3)
    return jax


def unavailable(threads=1):
    try:
        start(threads)
    except Exception as error:                   # ImportError, or a broken install
        return (f"not installed (pip install 'fastbptt[jax]'; "
                f"{error.__class__.__name__}: {error})")
    return None


def make(workload, x, y, params, threads=1):
    jax = start(threads)
    import jax.numpy as jnp
    from jax import lax

    if workload.truncate is not None:
        raise ValueError("the JAX peer computes full BPTT only")
    if workload.dtype != "float32":
        raise ValueError("the JAX peer runs float32 (JAX's default) only")
    f = {"tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid, "relu": jax.nn.relu,
         "identity": lambda a: a}[workload.activation]

    def loss(weights, ids, targets):
        U, W, V = weights
        inputs = jnp.swapaxes(U.T[ids], 0, 1)                         # (T, B, H) gather

        def step(h, a):
            h = f(a + h @ W.T)
            return h, h

        h0 = jnp.zeros((ids.shape[0], W.shape[0]), U.dtype)
        _, hs = lax.scan(step, h0, inputs)                            # (T, B, H)
        log_p = jax.nn.log_softmax(hs @ V.T, axis=-1)
        picked = jnp.take_along_axis(log_p, targets.T[..., None], axis=-1)
        return -picked.sum()

    value_and_grad = jax.jit(jax.value_and_grad(loss))
    weights = tuple(jnp.asarray(np.asarray(p, np.float32)) for p in params[:3])
    ids = jnp.asarray(np.atleast_2d(x).astype(np.int32))
    targets = jnp.asarray(np.atleast_2d(y).astype(np.int32))

    def run():
        value, grads = value_and_grad(weights, ids, targets)
        jax.block_until_ready(grads)
        return float(value), grads

    return Call(run, f"jit(value_and_grad) of lax.scan, XLA on {pool()}")


def pool():
    """JAX's thread pool, as the notes say it."""
    started = _STATE["started_with"]
    return f"{started} thread(s)" if isinstance(started, int) else f"threads set {started}"
