"""The ``back`` functions of forward passes whose backward pass has not run yet.

The forward rule's callback keeps its `fastbptt.layer.vjp` ``back`` here and returns a
key, four uint32 numbers, as a residual; the backward rule's callback takes ``back`` out
by that key. JAX treats both callbacks as pure: it may run one twice, merge two calls with
the same inputs, or leave the backward pass out. None of that can make a gradient wrong:
a key always comes from a forward pass on the very inputs the backward rule saved, and
where its ``back`` is gone (taken already and another since, pushed out, or another
process's key: a forked child draws a nonce of its own) the backward callback runs the
forward pass again from those inputs.

How many are kept: `LIMIT` at first, the oldest pushed out first. A program whose
backward passes come for more (a ``lax.scan`` of many calls takes its forward passes'
``back`` in reverse once they have all run) asks for one that was pushed out; the limit
then grows to the number of forward passes kept since that one, up to `MOST`, so that
the program's next steps find them all. Backward passes that never come (a
``jax.checkpoint``'s first forward pass, a dropped pullback) ask for nothing, and leave
the limit where it is. The limit comes back down once a whole `WINDOW` of forward
passes (or 8 times the limit, if more) needed fewer: to the most that a backward pass in
that window found kept since its own, or `LIMIT`; so a program that once needed many
keeps no more than it needs now (entries whose backward pass never comes would stay
until pushed out). Whatever the limit, the entries kept hold at most `budget()`
bytes (a quarter of the machine's memory, or of its container's limit): past it the
oldest are pushed out. Each holds that call's states ((T + 1) B H numbers, more for the
gated cells), W's padded copies and the layer's params as the callback received them (a
copy of U and W).

The entry a thread took last stays at hand until that thread runs the next forward pass
or takes the next entry: a batched backward pass (``jax.jacrev``, a ``vmap`` of a
pullback) runs the rows of one key one after another (`_layer._backward_host_rows`),
and each row finds it, also where several run at once (a device's callbacks of
``jax.shard_map`` run on a thread of its own).
"""
from __future__ import annotations

import os
import secrets
import threading
from collections import OrderedDict

import numpy as np

from .._preflight import memory_limit

LIMIT = 16              # entries kept at first
MOST = 4096             # the most the limit grows to
WINDOW = 4096           # forward passes after which the limit comes down to what they needed
_NONCE = (secrets.randbits(32), secrets.randbits(32))     # this process's keys only
_next = 0               # the counter of the next key
_limit = LIMIT
_window = 0             # the counter that started this window
_needed = 0             # the most entries kept since and with one a backward pass asked for
_kept = OrderedDict()   # key: (back, bytes)
_bytes = 0
_pushed = OrderedDict()  # the counters of keys pushed out and not asked for, up to MOST
_last = OrderedDict()   # thread: (key, back, bytes) of the entry it took last
THREADS = 64            # the most threads whose last entries stay at hand
_lock = threading.Lock()


def budget():
    """The most bytes the entries hold together: a quarter of the machine's memory, or of
    the container's limit where that is lower (4 GiB where neither can be read)."""
    limit = memory_limit()
    return 4 << 30 if limit is None else limit // 4


_BUDGET = budget()


def _forked():
    """A forked child's own nonce (a copy of the parent's would give the keys the parent
    gives), and none of the parent's entries."""
    global _NONCE, _lock
    _NONCE = (secrets.randbits(32), secrets.randbits(32))
    _lock = threading.Lock()            # another thread may have held it at the fork
    _clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def keep(back, nbytes=0):
    """Keep ``back``, which holds ``nbytes`` bytes; return its key as a (4,) uint32
    array."""
    global _next, _bytes, _limit, _window, _needed
    with _lock:
        _drop_last(threading.get_ident())
        n, _next = _next, _next + 1
        if _next - _window >= max(WINDOW, 8 * _limit):
            _limit, _window, _needed = max(LIMIT, _needed), _next, 0
        key = (*_NONCE, n >> 32 & 0xFFFFFFFF, n & 0xFFFFFFFF)
        _kept[key] = (back, nbytes)
        _bytes += nbytes
        while len(_kept) > _limit or _bytes > _BUDGET and len(_kept) > 1:
            old, (_, size) = _kept.popitem(last=False)
            _bytes -= size
            _pushed[old[2] << 32 | old[3]] = None
            if len(_pushed) > MOST:
                _pushed.popitem(last=False)
    return np.array(key, np.uint32)


def take(key):
    """The ``back`` kept under ``key``, removed from the store (the last one each thread
    took stays at hand); None if it is not there (and the limit grown if it was pushed out: see the
    module's note)."""
    global _limit, _needed
    key = tuple(int(k) for k in np.asarray(key))
    with _lock:
        for last in _last.values():
            if last[0] == key:
                return last[1]
        back, size = _kept.pop(key, (None, 0))
        n = key[2] << 32 | key[3]
        if back is not None:
            thread = threading.get_ident()
            _drop_last(thread)
            _last[thread] = (key, back, size)   # its bytes still counted
            while len(_last) > THREADS:
                _drop_last(next(iter(_last)))
            _needed = max(_needed, _next - n)
        elif key[:2] == _NONCE and n in _pushed:
            del _pushed[n]
            _limit = min(MOST, max(_limit, _next - n))
            _needed = max(_needed, min(MOST, _next - n))
        return back


def _drop_last(thread):
    global _bytes
    last = _last.pop(thread, None)
    if last is not None:
        _bytes -= last[2]


def _clear():
    global _bytes, _limit, _window, _needed
    _kept.clear()
    _pushed.clear()
    _last.clear()
    _bytes, _limit, _window, _needed = 0, LIMIT, _next, 0


def clear():
    """Drop every entry, and the limit back to `LIMIT`."""
    with _lock:
        _clear()
