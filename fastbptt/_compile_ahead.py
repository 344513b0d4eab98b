"""A second process that compiles a first call's last kernels while the call compiles its
first ones.

A first call with an empty cache compiles its kernels one after another, each as the
call reaches it, for seconds each; Numba compiles under a lock of its own, one kernel at a
time in a process. On a machine with a second core, the call's first compile starts a
helper: a new Python process, given the validated call (`Problem`). The helper runs the
call dry (`_kernels._jit.dry`: its kernels run nothing and record the types they were
called with), which lists the kernels the call compiles in the order it reaches them,
and compiles them from the last to the first into the disk cache, while the call
compiles from the first. The two tell each other what they take through pipes:

- before each compile of its own, the call sends its key (``T key``); the helper skips
  the keys it has been sent;
- the helper sends ``S key`` as it starts a compile and ``D key`` when it is done (saved,
  or failed); a call that reaches a key the helper has started waits for it, then loads
  the kernel from the cache (Numba's dispatcher looks there first), or compiles it if it
  is not there.

They meet in the middle; when the call is done, the helper is stopped. Nothing the call
computes depends on the helper: a kernel comes either from its own compile or from the
cache, saved under a lock (`_jit._KernelCache`), and the helper's code is the same code.
The helper starts only where the kernels have a disk cache, on a POSIX system with two
CPUs or more available to this process; ``FASTBPTT_COMPILE_HELPER=0`` turns it off.
"""
from __future__ import annotations

import atexit
import copy
import hashlib
import inspect
import os
import pickle
import select
import subprocess
import sys
import threading
import time

import numpy as np

from ._kernels import _jit

ENV = "FASTBPTT_COMPILE_HELPER"
WAIT_S = 120.0          # the longest a call waits for one kernel the helper is compiling
LIFETIME_S = 600.0      # a helper ends itself after this long, whatever it is doing
# The helper reads its job first (the call's write does not wait on its imports), then
# loads the call's own copy of the package, wherever it is, and serves.
_CHILD = """
import importlib.util, os, sys
def read(n):
    parts = []
    while n:
        chunk = os.read(0, n)
        if not chunk:
            sys.exit(0)
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)
payload = read(int.from_bytes(read(8), "little"))
root = sys.argv[1]
spec = importlib.util.spec_from_file_location(
    "fastbptt", os.path.join(root, "__init__.py"), submodule_search_locations=[root])
sys.modules["fastbptt"] = module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from fastbptt._compile_ahead import serve
serve(payload)
"""
_live = []              # the helpers started and not known to have ended
_lock = threading.Lock()
STATS = {"helpers": 0, "waited": 0, "from helper": 0}


def _off():
    return os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off")


def _cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def key(kernel, types):
    """One compile's name in the messages: the kernel and its argument types."""
    f = kernel.py_func
    text = f"{f.__module__}.{f.__qualname__}{types}"
    return hashlib.sha1(text.encode()).hexdigest()[:20].encode()


def begin(problem, job="solve", helper=None, start=True):
    """Mark the calling thread as running ``problem``'s ``job`` until `end`: "solve"
    (`api._solve`) or "vjp" (`layer.vjp` and its ``back``). A compile in it may start a
    helper (unless not ``start``), or go on with ``helper``, one an earlier part of the
    job kept. Returns what `end` takes: a job inside another is the outer's."""
    state = _jit.AHEAD
    outer = state.job
    if outer is None:
        state.job = (job, problem)
        state.helper, state.tried = helper, helper is not None or not start
    return outer


def end(outer, keep=False):
    """The end of `begin`'s part of a job: its helper, if one started, is stopped, or with
    ``keep`` returned, for a later part of the job (a ``back``) to go on with."""
    if outer is not None:
        return None
    state = _jit.AHEAD
    helper, state.job, state.helper, state.tried = state.helper, None, None, False
    if helper is not None and not keep:
        helper.stop()
        return None
    return helper


def before(kernel, args):
    """`_jit._Kernel`'s hook: ``kernel`` is about to compile for ``args`` in a thread that
    runs a job. Start the job's helper at its first compile (not at a load from the
    cache), then take the compile from it or wait for the helper's."""
    state = _jit.AHEAD
    if state.helper is None and state.tried:
        return
    types = _jit.call_types(kernel, args)
    if state.helper is None:
        if _jit.cached(kernel, types):      # a load from the cache: no helper for that
            return
        state.tried = True
        if _off() or _jit.fcntl is None or _cpus() < 2 or not sys.executable:
            return
        state.helper = _Helper.start(state.job)
        if state.helper is None:
            return
    state.helper.before(key(kernel, types))


class _Helper:
    """The call's side of one helper process."""

    def __init__(self, process):
        self.process = process
        self.started, self.done = set(), set()
        self.ended = False                  # its output closed: it exited or failed
        self._partial = b""

    @classmethod
    def start(cls, job):
        """A helper for ``job`` ((kind, problem)), or None where none can be started."""
        kind, problem = job
        problem = copy.copy(problem)
        problem.rebuild = None              # the caller's structure: the helper needs none
        try:
            payload = pickle.dumps((kind, problem), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:                   # noqa: BLE001 (anything that cannot cross)
            return None
        root = os.path.dirname(os.path.abspath(__file__))
        env = dict(os.environ)
        env[ENV] = "0"                      # the helper starts no helper of its own
        with _lock:                         # one helper at a time: an earlier one (kept
            earlier = list(_live)           # for a back not called yet) gives way
        for helper in earlier:
            helper.stop()
        try:
            process = subprocess.Popen([sys.executable, "-c", _CHILD, root], env=env,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, close_fds=True)
        except OSError:
            return None
        helper = cls(process)
        with _lock:
            _live.append(helper)
        try:
            process.stdin.write(len(payload).to_bytes(8, "little") + payload)
            process.stdin.flush()
        except OSError:
            helper.stop()
            return None
        os.set_blocking(process.stdout.fileno(), False)
        STATS["helpers"] += 1
        return helper

    def before(self, k):
        self._read(0.0)
        if k in self.done:
            STATS["from helper"] += 1
            return
        if k in self.started:
            STATS["waited"] += 1
            deadline = time.monotonic() + WAIT_S
            while k not in self.done and not self.ended:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._read(left)
            if k in self.done:
                STATS["from helper"] += 1
            return
        if not self.ended:
            try:
                self.process.stdin.write(b"T " + k + b"\n")
                self.process.stdin.flush()
            except (OSError, ValueError):   # it ended, or was stopped from another thread
                self.ended = True

    def _read(self, timeout):
        """Take in what the helper has sent, waiting up to ``timeout`` s for something."""
        if self.ended:
            return
        try:
            fd = self.process.stdout.fileno()
            if not select.select([fd], [], [], timeout)[0]:
                return
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        except (OSError, ValueError):       # stopped meanwhile, from another thread
            self.ended = True
            return
        if not chunk:
            self.ended = True
            return
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        for line in lines:
            kind, _, k = line.partition(b" ")
            (self.started if kind == b"S" else self.done).add(k)

    def stop(self):
        """End the helper (whatever it compiles now is of no more use) and its pipes. A
        kill leaves the cache whole: its files are replaced whole, under a lock the
        system releases."""
        try:
            self.process.kill()
            self.process.wait()
        except OSError:
            pass
        self._close()
        _reap()

    def _close(self):
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        self.ended = True


def _reap():
    """Close the pipes of the helpers that have ended (a helper kept for a ``back`` that
    was never called ends when it has compiled its list) and forget them."""
    with _lock:
        ended = [h for h in _live if h.process.poll() is not None]
        _live[:] = [h for h in _live if h not in ended]
    for helper in ended:
        helper._close()


@atexit.register
def _stop_all():
    with _lock:
        helpers = list(_live)
    for helper in helpers:
        helper.stop()


def _forget():
    """In a forked process: no helpers of its own, and a lock no other thread holds."""
    global _lock
    _lock = threading.Lock()
    _live.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


_jit.BEFORE_COMPILE[:] = [before]


# The helper's own side.

def _positional(kernel, args, kws):
    """``args`` and ``kws`` as Numba's dispatcher passes a call to its compile: every
    parameter by position, a default as an ``OmittedArg``."""
    params = inspect.signature(kernel.py_func).parameters.values()
    bound = inspect.signature(kernel.py_func).bind(*args, **kws).arguments
    return tuple(bound[p.name] if p.name in bound else _jit.OmittedArg(p.default)
                 for p in params)


def _dry_run(job, problem):
    """The kernels ``job`` compiles for ``problem``, in the order it reaches them:
    [(key, kernel, types)]."""
    order, seen = [], set()

    def record(kernel, args, kws):
        types = _jit.call_types(kernel, _positional(kernel, args, kws))
        k = key(kernel, types)
        with _lock:
            if k not in seen:
                seen.add(k)
                order.append((k, kernel, types))

    from . import api, layer
    _jit.dry(record)
    try:
        if job == "solve":
            api._solve(problem)
        else:
            out, back = layer.run_vjp(problem, False)
            back(np.zeros(out.h.shape, problem.dtype))
    except Exception:                       # noqa: BLE001 (what ran is what is listed)
        pass
    return order


def serve(payload):
    """The helper process, given its job: list the job's compiles, compile them last
    first."""
    timer = threading.Timer(LIFETIME_S, os._exit, (0,))
    timer.daemon = True
    timer.start()
    fd_in, out = sys.stdin.fileno(), sys.stdout.buffer
    order = _dry_run(*pickle.loads(payload))
    os.set_blocking(fd_in, False)
    taken, partial = set(), b""
    for k, kernel, types in reversed(order):
        try:
            chunk = os.read(fd_in, 65536)
            if not chunk:
                return                      # the call is done
            *lines, partial = (partial + chunk).split(b"\n")
            taken.update(line[2:] for line in lines)
        except BlockingIOError:
            pass
        if k in taken:
            continue
        try:
            out.write(b"S " + k + b"\n")
            out.flush()
            try:
                kernel.compile(types)
            except Exception:               # noqa: BLE001 (the call compiles it itself)
                pass
            out.write(b"D " + k + b"\n")
            out.flush()
        except OSError:
            return
