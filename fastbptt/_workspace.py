"""Scratch arrays reused from call to call, one set per thread.

A training loop calls `grad` with the same shapes again and again; allocating the
kernels' (H, T B) buffers afresh each time costs page faults and cold caches. Each
thread keeps its buffers, grown to the largest call it has made, and hands out views.
"""
from __future__ import annotations

import math
import sys
import threading

import numpy as np

ALIGN = 64              # bytes: a cache line, and one AVX-512 vector
_MAX_VIEWS = 64         # views remembered for repeat calls (a training loop's few shapes)


class Workspace(threading.local):
    def __init__(self):
        self._buffers = {}
        self._views = {}
        self._objects = {}

    def get(self, name, shape, dtype):
        """An uninitialised array of ``shape`` and ``dtype``, reusing the buffer ``name``.

        A call with the same name, shape and dtype as an earlier one gets the same view
        back, without building it again (a few microseconds, a lot for a small problem).
        """
        key = (name, shape, dtype)
        view = self._views.get(key)
        if view is not None:
            return view
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        raw = self._buffers.get(name)
        if raw is None or raw.nbytes < nbytes + ALIGN:
            raw = np.empty(nbytes + ALIGN, np.uint8)
            self._buffers[name] = raw
            self._views = {k: v for k, v in self._views.items() if k[0] != name}
            self._objects.clear()
        start = -raw.ctypes.data % ALIGN
        view = raw[start:start + nbytes].view(dtype).reshape(shape)
        if len(self._views) >= _MAX_VIEWS:
            self._views.clear()
        self._views[key] = view
        return view

    def get_object(self, key):
        """What `put_object` kept under ``key`` (objects holding views of this thread's
        buffers, reused by calls of the same shape; forgotten when a buffer is replaced),
        or None."""
        return self._objects.get(key)

    def put_object(self, key, value):
        if len(self._objects) >= _MAX_VIEWS:
            self._objects.clear()
        self._objects[key] = value

    def clear(self):
        self._buffers.clear()
        self._views.clear()
        self._objects.clear()


def aligned_empty(shape, dtype):
    """A new uninitialised array whose data starts on an ALIGN-byte boundary."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class Fresh:
    """`Workspace`'s interface for arrays that must outlive the call: each `get` is new."""

    @staticmethod
    def get(name, shape, dtype):
        return aligned_empty(shape, dtype)



workspace = Workspace()
fresh = Fresh()


def clear_workspace():
    """Release the scratch memory that this thread's calls keep for reuse, and the
    forward passes `fastbptt.jax` keeps for backward passes that have not run (if that
    module is loaded: it is not imported here)."""
    workspace.clear()
    kept = sys.modules.get("fastbptt.jax._kept")
    if kept is not None:
        kept.clear()
