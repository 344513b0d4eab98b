"""The ``back`` functions of forward passes whose backward pass has not run yet.

The forward rule's callback keeps its `fastbptt.layer.vjp` ``back`` here and returns a
key, four uint32 numbers, as a residual; the backward rule's callback takes ``back`` out
by that key. JAX treats both callbacks as pure: it may run one twice, merge two calls with
the same inputs, or leave the backward pass out. None of that can make a gradient wrong:
a key always comes from a forward pass on the very inputs the backward rule saved, and
where its ``back`` is gone (taken already, pushed out, or another process's key: a
forked child draws a nonce of its own) the backward callback runs the forward pass again
from those inputs. At most `LIMIT` are
kept, the oldest pushed out first; each holds that call's states ((T + 1) B H numbers,
more for the gated cells) and the layer's params as the callback received them (a copy
of U and W per entry).
"""
from __future__ import annotations

import itertools
import os
import secrets
import threading
from collections import OrderedDict

import numpy as np

LIMIT = 16
_NONCE = (secrets.randbits(32), secrets.randbits(32))     # this process's keys only
_counter = itertools.count()
_kept = OrderedDict()
_lock = threading.Lock()


def _forked():
    """A forked child's own nonce (a copy of the parent's would give the keys the parent
    gives), and none of the parent's entries."""
    global _NONCE, _lock
    _NONCE = (secrets.randbits(32), secrets.randbits(32))
    _lock = threading.Lock()            # another thread may have held it at the fork
    _kept.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def keep(back):
    """Keep ``back``; return its key as a (4,) uint32 array."""
    n = next(_counter)
    key = (*_NONCE, n >> 32 & 0xFFFFFFFF, n & 0xFFFFFFFF)
    with _lock:
        _kept[key] = back
        while len(_kept) > LIMIT:
            _kept.popitem(last=False)
    return np.array(key, np.uint32)


def take(key):
    """The ``back`` kept under ``key``, removed from the store; None if it is not there."""
    with _lock:
        return _kept.pop(tuple(int(k) for k in np.asarray(key)), None)


def clear():
    with _lock:
        _kept.clear()
