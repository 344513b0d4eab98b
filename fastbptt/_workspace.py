"""Scratch arrays reused from call to call, one set per thread.

A training loop calls `grad` with the same shapes again and again; allocating the
kernels' (H, T B) buffers afresh each time costs page faults and cold caches. Each
thread keeps its buffers, grown to the largest call it has made, and hands out views.
"""
from __future__ import annotations

import math
import threading

import numpy as np

_ALIGN = 64


class Workspace(threading.local):
    def __init__(self):
        self._buffers = {}

    def get(self, name, shape, dtype):
        """An uninitialised array of ``shape`` and ``dtype``, reusing the buffer ``name``."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        raw = self._buffers.get(name)
        if raw is None or raw.nbytes < nbytes + _ALIGN:
            raw = np.empty(nbytes + _ALIGN, np.uint8)
            self._buffers[name] = raw
        start = -raw.ctypes.data % _ALIGN
        return raw[start:start + nbytes].view(dtype).reshape(shape)

    def clear(self):
        self._buffers.clear()


workspace = Workspace()


def clear_workspace():
    """Release the scratch memory that this thread's calls keep for reuse."""
    workspace.clear()
