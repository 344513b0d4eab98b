"""Data-parallel training on a Dask cluster (SPEC.md §9); needs ``pip install
'fastbptt[distributed]'``.

::

    from fastbptt.distributed import Workers
    from fastbptt.train import TrainOptions, Trainer

    if __name__ == "__main__":    # a local cluster's workers start by importing this file
        with Workers.local(2) as workers:              # or Workers.connect("tcp://host:8786")
            trainer = Trainer(TrainOptions(batch=64), ids, codec, placement=workers.place)
            for _ in range(100):
                trainer.train_step()

The run's B cursors are cut into contiguous blocks, one per worker
(`fastbptt._cursors.CursorBlock`), each held on its worker as a Dask actor with its rows of
the text (sent once, when the block is placed), its cursors' carried states and a copy of
the model. A step sends the model to every worker as one flat buffer and gets back each
block's loss and gradient, also one flat buffer; the gradients are added in worker order,
and the trainer clips them and applies the update once, in this process. On a local
cluster both buffers are in shared memory (`Mapping`) and a step's message, a few bytes,
goes over a Unix-domain socket to each worker (`fastbptt._step_socket`), not through
Dask: a Dask request and reply to two workers costs about 3 ms, a fifth of a step. Carried states
stay on their workers; they travel only when a checkpoint is written (every cursor's
state is in it, so a run resumes on any number of workers, or none).

A worker that leaves the cluster (its process killed, its machine gone) makes the step
or the checkpoint that needed it raise `fastbptt._cursors.BlockLost`; ``fastbptt train``
then places the run again, from its last checkpoint, on the workers there are, waiting up
to ``FASTBPTT_WORKER_WAIT`` seconds (60) for at least one.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import mmap
import os
import re
import shutil
import signal
import sys
import threading
import time

import numpy as np

try:
    import dask
    import distributed as _dask
    from distributed.diagnostics.plugin import WorkerPlugin
except ImportError:
    raise ModuleNotFoundError("fastbptt.distributed needs Dask: pip install "
                              "'fastbptt[distributed]'") from None

from . import __version__
from ._cursors import BlockLost, CursorBlock, block_args, merge_states, split_rows
from ._params_check import check_model
from ._run_saves import NothingToSave
from ._shm_claims import claim, claimed, release
from ._signals import Interrupted
from ._step_socket import Closed, Listener, connect, serve
from ._threads import ensure_default_threads
from .checkpoint import running
from .params import from_leaves, leaves

__all__ = ["Workers", "DaskBlocks", "EXTRA"]

EXTRA = "pip install 'fastbptt[distributed]'"
POLL = 1.0              # seconds between checks that the workers of a step are still there
GRACE = 10.0            # seconds a step may go on after a signal before it is given up on
ALIGN = 64              # bytes: where each array starts in a flat buffer


def _silence():
    """No log lines from Dask in this process (a command says what happened itself)."""
    for name in ["distributed", *logging.root.manager.loggerDict]:
        if name == "distributed" or name.startswith("distributed."):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def _worker_wait():
    """FASTBPTT_WORKER_WAIT: seconds to wait for workers (60), or ValueError."""
    text = os.environ.get("FASTBPTT_WORKER_WAIT", "60")
    try:
        wait = float(text)
    except ValueError:
        wait = math.nan
    if not 0 <= wait < math.inf:
        raise ValueError(f"FASTBPTT_WORKER_WAIT must be a finite number of seconds, 0 or "
                         f"more; got {text!r}")
    return wait


class Layout:
    """Where each array of a model sits in one flat buffer, each starting on a 64-byte
    boundary (the padding is zeros): a model or its gradient crosses the network as one
    buffer, and a worker's model is views of its own aligned buffer."""

    def __init__(self, params):
        named = leaves(params)
        self.dtype = next(iter(named.values())).dtype
        unit = ALIGN // self.dtype.itemsize
        self.slots, offset = [], 0
        for name, a in named.items():
            self.slots.append((name, a.shape, offset))
            offset += -(-a.size // unit) * unit
        self.size = offset

    def empty(self):
        """A zero buffer whose first entry is 64-byte aligned."""
        extra = ALIGN // self.dtype.itemsize
        raw = np.zeros(self.size + extra, self.dtype)
        start = (-raw.ctypes.data % ALIGN) // self.dtype.itemsize
        return raw[start:start + self.size]

    def pack(self, params, out=None):
        """``params`` (or gradients in their structure) copied into one buffer."""
        out = self.empty() if out is None else out
        for (name, shape, offset), a in zip(self.slots, leaves(params).values()):
            out[offset:offset + a.size] = a.reshape(-1)
        return out

    def views(self, flat):
        """The structure whose arrays are views of ``flat``."""
        return from_leaves({name: flat[offset:offset + math.prod(shape)].reshape(shape)
                            for name, shape, offset in self.slots})


class Mapping:
    """The buffers of a local cluster's run, shared by its processes through one file in
    /dev/shm (memory, not disk): part 0 the model, part i + 1 worker i's gradient, each a
    `Layout` buffer starting on a page. The training process writes the model there before
    each step and reads the gradients after it, so a step's messages carry no arrays.
    The file is removed once every worker has mapped it (`remove`); the mappings live on.
    Where a process is killed outright before that, the next mapping removes the file."""

    FOLDER = "/dev/shm"

    def __init__(self, layout, parts, path, create=False):
        self.layout, self.parts, self.path = layout, parts, path
        unit = mmap.PAGESIZE
        self.stride = -(-layout.size * layout.dtype.itemsize // unit) * unit
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        self._claim = claim(os.dup(fd)) if create else None     # until `remove`
        try:
            if create:
                os.ftruncate(fd, self.stride * parts)
                # The pages now, or ENOSPC: in a sparse file, the first write past a full
                # /dev/shm would kill the process that makes it (SIGBUS).
                if hasattr(os, "posix_fallocate"):
                    os.posix_fallocate(fd, 0, self.stride * parts)
            self.map = mmap.mmap(fd, self.stride * parts)
        except BaseException:
            release(self._claim)
            raise
        finally:
            os.close(fd)

    @classmethod
    def create(cls, layout, workers):
        """A new mapping for ``workers`` workers, or None where /dev/shm cannot hold it."""
        _remove_stale(cls.FOLDER)
        path = os.path.join(cls.FOLDER, f"fastbptt-{os.getpid()}-{time.monotonic_ns()}")
        try:
            mapping = cls(layout, workers + 1, path, create=True)
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                os.unlink(path)
            return None
        return mapping

    def part(self, i):
        return np.frombuffer(self.map, self.layout.dtype, self.layout.size, i * self.stride)

    def remove(self):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        release(self._claim)
        self._claim = None

    def where(self):
        """What a worker maps the same file from, ``Mapping(*where)``: plain data, so that
        a task's arguments, which the scheduler keeps in its log, hold no mapping."""
        return self.layout, self.parts, self.path


_YOUNG = 60                  # seconds


def _remove_stale(folder):
    """Remove what runs no longer running left in ``folder`` (/dev/shm): a mapping
    (``fastbptt-PID-N``) or a socket's folder (``fastbptt-PID-XXXX``) outlives a process
    killed outright (SIGKILL, the OOM killer) before it removed them. Only this user's,
    none that a process still claims (`fastbptt._shm_claims`: a PID in another PID
    namespace is not seen running), and none changed in the last `_YOUNG` seconds (one
    just made is claimed a moment after it is made)."""
    try:
        entries = os.listdir(folder)
    except OSError:
        return
    for entry in entries:
        match = re.fullmatch(r"fastbptt-(\d+)-\w+", entry)
        path = os.path.join(folder, entry)
        try:
            if not match or running(int(match[1])):
                continue
            made = os.lstat(path)
            if made.st_uid != os.getuid() or time.time() - made.st_mtime < _YOUNG \
                    or claimed(path):
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except OSError:
            pass


class _Block:
    """A worker's block of cursors (the Dask actor): a `CursorBlock` computing with views of
    one flat buffer that each step's model is copied into, or, on this machine, of the
    model's part of a `Mapping`, whose gradient part it writes. There its steps come over
    a socket (`fastbptt._step_socket`), served on a thread of its own."""

    def __init__(self, version, ids, rows, segment, recipe, layout, flat, carried, step,
                 shared=None):
        if version != __version__:
            raise RuntimeError(f"this worker has fastbptt {__version__}, the run fastbptt "
                               f"{version}; install the same version everywhere")
        self.layout = layout
        self.lock = threading.Lock()        # a step and a state request, one at a time
        if shared is None:
            self.flat, self.out = layout.empty(), None
            np.copyto(self.flat, flat)
        else:
            where, index, path = shared
            mapping = Mapping(*where)
            self.flat, self.out = mapping.part(0), mapping.part(index + 1)
        self.block = CursorBlock(ids, rows, segment, recipe, layout.views(self.flat),
                                 carried, step)
        if shared is not None:
            serve(connect(path, index), self._message, name=f'steps-{index}')

    def _message(self, method, *args):
        return getattr(self, method)(*args)

    def warm(self):
        """Compile the kernels (or load Numba's cache) before the run's clock starts."""
        self.block.warm_up()
        return True

    def compute(self, step, flat=None):
        """The block's step: its gradient returned, or, shared, written to the mapping."""
        with self.lock:
            if flat is not None:
                np.copyto(self.flat, flat)
            loss, grads, chars, seconds = self.block.compute(step, self.block.params)
            if self.out is None:
                return loss, self.layout.pack(grads), chars, seconds
            self.layout.pack(grads, self.out)
            return loss, None, chars, seconds

    def state(self, step):
        with self.lock:
            return self.block.state(step)


class _IgnoreInterrupts(WorkerPlugin):
    """A local cluster's workers ignore SIGINT, SIGHUP and SIGTERM, which a terminal, GNU
    timeout or a service manager send to the whole process group: the run itself handles
    them (it saves its checkpoint, which needs the workers' carried states), then closes
    the cluster, whose nannies stop the workers through a queue (and SIGKILL)."""

    name = "fastbptt-ignore-interrupts"

    def setup(self, worker):
        for name in ("SIGINT", "SIGHUP", "SIGTERM"):
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), signal.SIG_IGN)


_GROUP_SIGNALS = [getattr(signal, name) for name in ("SIGINT", "SIGHUP", "SIGTERM")
                  if hasattr(signal, name)]


@contextlib.contextmanager
def _blocked(signals):
    """``signals`` blocked in this thread for the block, which gets any of them sent
    meanwhile when it unblocks them, on the way out. Threads started inside keep the
    blocked mask, and a process inherits its spawner's: so a local cluster started with
    `_GROUP_SIGNALS` blocked has workers that never see them, even before
    `_IgnoreInterrupts` runs in them (a Ctrl-C to the group during start-up printed each
    worker's KeyboardInterrupt traceback)."""
    if not (hasattr(signal, "pthread_sigmask") and signals):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _start_resource_tracker():
    """multiprocessing's resource tracker, which the workers' start needs, started with
    SIGHUP blocked, so that it outlives a hang-up sent to the process group as the run
    does (it ignores SIGINT and SIGTERM itself; killed, it is started again, with a
    traceback per resource it forgot)."""
    from multiprocessing import resource_tracker

    with _blocked([signal.SIGHUP] if hasattr(signal, "SIGHUP") else []):
        resource_tracker.ensure_running()


async def _result(future):
    return await future


def _quietly(task):
    """A done callback that takes a task's outcome, so that asyncio does not log it."""
    if not task.cancelled():
        task.exception()


def _ignore(unraisable):
    """An unraisablehook that prints nothing."""


class DaskBlocks:
    """The blocks of a run on a cluster's workers, in worker order (`Workers.place`)."""

    def __init__(self, client, addresses, rows, layout, mapping=None):
        self.client, self.addresses, self.rows, self.layout = client, addresses, rows, layout
        self.futures, self.actors, self.mapping = [], [], mapping
        # the signal the command holds back (`Workers.stopped`), and since when this
        # object has seen it: a step that answers finishes (and is saved), one that
        # waits GRACE seconds more for a worker that does not answer is given up on
        self.stopped, self._seen = (lambda: None), None
        self.listener = None if mapping is None else Listener(len(addresses))
        self._out = layout.empty() if mapping is None else mapping.part(0)
        self._sum = layout.empty()

    def warm_up(self):
        """Nothing: each worker warms its block up when it is placed (`Workers.place`)."""

    async def _alive(self):
        """The addresses of the cluster's workers now, as the scheduler knows them."""
        try:
            return (await self.client.scheduler.identity())["workers"]
        except OSError as error:
            raise NothingToSave(f"lost the connection to the Dask scheduler "
                                f"({error})") from None

    def _given_up(self):
        """The held signal's number once a step has waited GRACE seconds past it, else
        None."""
        signum = self.stopped()
        if signum is None:
            return None
        now = time.monotonic()
        self._seen = now if self._seen is None else self._seen
        return signum if now - self._seen >= GRACE else None

    async def _gather(self, calls):
        tasks = [asyncio.ensure_future(_result(call)) for call in calls]
        try:
            while True:
                done, pending = await asyncio.wait(tasks, timeout=POLL)
                for address, task in zip(self.addresses, tasks):
                    if task in done and isinstance(task.exception(), OSError):
                        raise BlockLost(address)          # its connection failed
                if not pending:
                    return [t.result() for t in tasks]
                if self._given_up() is not None:        # raised as Interrupted by `call`,
                    return None                         # outside the client's event loop
                alive = await self._alive()
                for address, task in zip(self.addresses, tasks):
                    if not task.done() and address not in alive:
                        raise BlockLost(address)
        finally:
            for task in tasks:
                task.cancel()

    def call(self, method, *args):
        """The results of ``method(*args)`` of every block, in block order; `BlockLost`
        when a worker that holds a block is no longer in the cluster."""
        calls = []
        for address, actor in zip(self.addresses, self.actors):
            try:
                calls.append(getattr(actor, method)(*args))
            except RuntimeError:            # Dask knows already: "Worker holding Actor was lost"
                raise BlockLost(address) from None
        results = self.client.sync(self._gather, calls)
        if results is None:
            raise Interrupted(self._given_up())
        return results

    def _check(self):
        """`BlockLost` if a worker that holds a block has left the cluster; `Interrupted`
        once a signal has waited GRACE seconds for the step."""
        signum = self._given_up()
        if signum is not None:
            raise Interrupted(signum)
        alive = self.client.sync(self._alive)
        for address in self.addresses:
            if address not in alive:
                raise BlockLost(address)

    def gradients(self, step, params):
        flat = self.layout.pack(params, self._out)
        if self.mapping is None:
            results = self.call("compute", step, flat)
        else:
            try:
                replies = self.listener.call(("compute", step), POLL, self._check)
            except Closed as closed:
                raise BlockLost(self.addresses[closed.index]) from None
            results = [(loss, self.mapping.part(i + 1), n, s)
                       for i, (loss, _, n, s) in enumerate(replies)]
        return self._combine(results)

    def _combine(self, results):
        """`combine` of the blocks' flat gradients: added in block order as whole buffers
        (the same sums, entry by entry), into a buffer this object keeps for the next
        step's."""
        loss, total, chars, seconds = results[0]
        if len(results) == 1:
            np.copyto(self._sum, total)
        else:
            np.add(total, results[1][1], out=self._sum)
        for i, (more_loss, more, n, more_seconds) in enumerate(results[1:]):
            loss += more_loss
            chars += n
            seconds = max(seconds, more_seconds)
            if i:
                self._sum += more
        return loss, self.layout.views(self._sum), chars, seconds

    def state(self, step):
        return merge_states(self.call("state", step))

    def close(self):
        """Release the actors: their workers drop them."""
        for future in self.futures:
            future.release()
        self.futures, self.actors = [], []
        if self.mapping is not None:
            self.mapping.remove()
            self.listener.close()


def _closed(client):
    """Whether ``client`` was closed (by its user, or by the Workers that made it)."""
    return getattr(client, "status", None) in ("closing", "closed")


def _count(name, value, unit="worker"):
    """A count of ``unit``s (workers, cursors): a positive int (not a bool), else
    TypeError or ValueError."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be a whole number of {unit}s; got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be at least 1 {unit}; got {value}")
    return int(value)


_TLS_FILES = ("distributed.comm.tls.ca-file", "distributed.comm.tls.client.cert",
              "distributed.comm.tls.client.key")


def _unusable(address):
    """Why Dask could not connect to ``address`` where it would say so in words of its
    own internals (a missing ssl_context, a file not found without its name), or None.
    A TLS setting that holds a certificate's text (Dask takes PEM text too) is never
    quoted: it may be a private key."""
    scheme = address.split("://", 1)[0].lower() if "://" in address else "tcp"
    if scheme == "inproc":
        return (f"{address} is an address inside one process; give the scheduler's "
                f"tcp:// (or tls://) address")
    if scheme == "tls":
        settings = {name: dask.config.get(name, None) for name in _TLS_FILES}
        for name, value in settings.items():
            if isinstance(value, str) and "\n" not in value and not os.path.isfile(value):
                return f"Dask's TLS setting {name} names {value!r}, which is not a file"
        unset = [name for name in _TLS_FILES[:2] if not settings[name]]
        if unset:
            return (f"{address}: tls:// needs Dask's TLS settings: the CA's certificate and "
                    f"this process's certificate and key (DASK_DISTRIBUTED__COMM__TLS__CA_FILE, "
                    f"..._CLIENT__CERT and ..._CLIENT__KEY; the README's TLS paragraph); "
                    f"{' and '.join(unset)} {'is' if len(unset) == 1 else 'are'} not set")
    return None


def _restore_environ(before, started):
    """Put back the variables that starting a local cluster set or changed in this
    process's environment (those changed since are left as they are)."""
    for name, value in started.items():
        if before.get(name) != value and os.environ.get(name) == value:
            if name in before:
                os.environ[name] = before[name]
            else:
                del os.environ[name]


def _seconds(timeout):
    """``timeout`` in seconds, more than 0: a number, or a str of Dask's such as "30s";
    else TypeError or ValueError (Dask would word them as a failed connection)."""
    from dask.utils import parse_timedelta

    if isinstance(timeout, (bool, np.bool_)) or \
            not isinstance(timeout, (int, float, np.integer, np.floating, str)):
        raise TypeError(f"timeout must be a number of seconds (or a str such as '30s'); got "
                        f"{type(timeout).__name__}")
    try:
        seconds = parse_timedelta(timeout)
    except (ValueError, KeyError, TypeError):
        seconds = None
    if seconds is None or not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"timeout must be a number of seconds more than 0 (or a str such as "
                         f"'30s'); got {timeout!r}")
    return seconds


class _NotAScheduler(ConnectionError):
    """The address given as a scheduler's is another Dask server's: a worker's, say."""


def _handshake(address, seconds):
    """Connect to ``address`` and do Dask's handshake within ``seconds`` (Dask's own
    timeout covers the connection, not the handshake: a Client of a port that accepts and
    never answers, a scheduler's dashboard say, waits for ever), then ask the server what
    it is. OSError, in the words of Dask's own for a connection that timed out, if none
    was made in time or no answer came; `_NotAScheduler` for a worker's or a nanny's
    address (Dask's Client said that ``Worker.identity()`` takes no ``n_workers``); other
    failures are left to the Client, which words them."""
    from distributed.comm import connect
    from distributed.security import Security

    done, outcome = threading.Event(), []

    async def probe():
        args = Security().get_connection_args("client")
        comm = await asyncio.wait_for(connect(address, timeout=seconds, **args), seconds)
        try:
            await comm.write({"op": "identity", "reply": True})
            identity = await asyncio.wait_for(comm.read(), seconds)
        finally:
            await comm.close()
        kind = identity.get("type") if isinstance(identity, dict) else None
        if kind in ("Worker", "Nanny"):
            of = identity.get("scheduler")
            raise _NotAScheduler(
                f"{address} is a Dask {kind.lower()}'s address, not a scheduler's" +
                (f"; its scheduler is at {of}: give that" if isinstance(of, str) else
                 "; give its scheduler's, which `dask worker` was started with"))

    def run():
        try:
            asyncio.run(probe())
        except _NotAScheduler as error:
            outcome.append(error)
        except asyncio.TimeoutError:
            outcome.append(OSError(f"Timed out trying to connect to {address}"))
        except OSError as error:        # refused until the time was up, say
            if "Timed out trying to connect" in str(error):
                outcome.append(error)
        except Exception:               # bad TLS settings...: the Client words them
            pass
        finally:
            done.set()

    threading.Thread(target=run, name="fastbptt-handshake", daemon=True).start()
    if not done.wait(seconds + 5):
        raise OSError(f"Timed out trying to connect to {address}")
    if outcome:
        raise outcome[0]


class Workers:
    """The workers of a Dask cluster that a run places its cursors on (``place``, a
    `fastbptt.train.Trainer` placement): at most ``want`` of them (all, for None), at most
    one per cursor."""

    def __init__(self, client, *, cluster=None, want=None, shared=False):
        if not isinstance(client, _dask.Client):
            raise TypeError(f"client must be a dask.distributed.Client; got "
                            f"{type(client).__name__}")
        if _closed(client):
            raise ValueError("client is closed; give an open dask.distributed.Client")
        if want is not None:
            want = _count("want", want)
        self.client, self.cluster, self.want = client, cluster, want
        self._owner = True                 # `close` closes the client (not a `limited` view)
        # a local cluster's: this process's environment before it and once it ran, since
        # Dask sets its workers' settings (OPENBLAS_NUM_THREADS=1, ...) here and leaves them
        self._environ = None
        self.refused = set()               # workers that could not hold a block (version)
        self.notes = []                    # what a placement says: the workers left out
        self.shared = shared               # the workers share this machine's memory
        self.placed = 0                    # workers the last placement used
        # the signal a command received and holds back (None: none), which ends a wait
        # for workers: a run that waits for them has no step in hand to finish
        self.stopped = lambda: None

    def _still_waiting(self):
        """`Interrupted` when the command received a signal (`stopped`)."""
        signum = self.stopped()
        if signum is not None:
            raise Interrupted(signum)

    @classmethod
    def local(cls, n, *, quiet=True):
        """A cluster of ``n`` worker processes of one thread each on this machine, listening
        on 127.0.0.1 only (their HTTP endpoints too, on free ports); ``quiet``: no log lines
        from Dask, here or in the workers.

        Dask sets OPENBLAS_NUM_THREADS=1 (and OMP_, MKL_) in this process's environment for
        the workers it spawns; this process's own thread count is fixed first, so that its
        BLAS keeps the count it had (fastbptt's default, one)."""
        n = _count("n", n)
        ensure_default_threads()
        if quiet:
            _silence()
        # Dask starts workers with MALLOC_TRIM_THRESHOLD_=65536, under which every large
        # array of a step is fresh pages (357 page faults a step for one Elman layer at
        # B = 32, 13% of its time here): these workers keep the C library's default
        environ = {name: value for name, value in
                   dask.config.get("distributed.nanny.pre-spawn-environ").items()
                   if name != "MALLOC_TRIM_THRESHOLD_"}
        # and they neither sample their threads' stacks every 10 ms for the dashboard's
        # profile nor check their event loop every 20 ms: together 0.5 ms of a 14.5 ms
        # step of the default model on two workers here
        _start_resource_tracker()
        cluster, before = None, dict(os.environ)
        try:
            with dask.config.set({"distributed.nanny.pre-spawn-environ": environ,
                                  "distributed.worker.profile.enabled": False,
                                  "distributed.admin.tick.interval": "1s"}), \
                    _blocked(_GROUP_SIGNALS):
                cluster = _dask.LocalCluster(
                    n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                    dashboard_address="127.0.0.1:0", worker_dashboard_address="127.0.0.1:0",
                    silence_logs=logging.CRITICAL if quiet else logging.WARNING)
            client = _dask.Client(cluster, direct_to_workers=True, set_as_default=False)
            client.register_plugin(_IgnoreInterrupts())
            client.wait_for_workers(n, timeout=_worker_wait())
        except BaseException:
            if cluster is not None:
                cluster.close()
            _restore_environ(before, dict(os.environ))
            raise
        workers = cls(client, cluster=cluster, want=n, shared=True)
        workers._environ = (before, dict(os.environ))
        return workers

    @classmethod
    def connect(cls, address, *, want=None, timeout=10, quiet=True):
        """The workers of the cluster whose scheduler is at ``address`` (Dask's security
        settings apply: TLS with ``tls://`` addresses and the configured certificates),
        connecting within ``timeout`` (seconds, or a str of Dask's such as "30s").
        ConnectionError saying why when Dask cannot connect, or when ``address`` is a
        worker's or a nanny's (naming its scheduler); TypeError or ValueError for
        ``want`` or ``timeout``, before connecting. ``quiet``: no log lines from Dask in
        this process."""
        if not isinstance(address, str):   # None would start a default cluster of Dask's
            raise TypeError(f"address must be a scheduler's address, a str such as "
                            f"'tcp://127.0.0.1:8786'; got {type(address).__name__}")
        if want is not None:
            want = _count("want", want)
        seconds = _seconds(timeout)
        failed = _unusable(address)
        if failed is not None:
            raise ConnectionError(failed)
        if quiet:
            _silence()
        hook, sys.unraisablehook = sys.unraisablehook, _ignore
        try:
            try:
                _handshake(address, seconds)
                client = _dask.Client(address, timeout=timeout, direct_to_workers=True,
                                      set_as_default=False)
            except _NotAScheduler as error:
                failed = str(error)
            except Exception as error:      # a refused or timed out connection, bad TLS
                failed = f"{type(error).__name__}: {' '.join(str(error).split())}"
                if isinstance(error, OSError) and "Timed out trying to connect" in failed:
                    within = f"{timeout:g} s" if isinstance(timeout, (int, float)) else \
                        str(timeout)
                    failed = (f"no Dask scheduler answered at {address} within {within}; "
                              f"start one there with `dask scheduler`, and its workers with "
                              f"`dask worker {address}`")
                elif isinstance(error, TypeError) and "UCXConnector" in failed:
                    failed = (f"{address}: this Dask's ucx:// needs the distributed-ucxx "
                              f"package, which is not installed; or give the scheduler's "
                              f"tcp:// address")
            if failed is not None:
                gc.collect()                # a half-made Client complains when collected
        finally:
            sys.unraisablehook = hook
        if failed is not None:
            raise ConnectionError(failed)
        return cls(client, want=want)

    def limited(self, n, *, shared=True):
        """The same cluster's workers, at most ``n`` of them, for another run (closing
        stays with this object); ``shared=False``: buffers in messages even on one machine."""
        view = Workers(self.client, want=n, shared=self.shared and shared)
        view._owner = False
        return view

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Close the client and the local cluster this object made (a `limited` view
        closes nothing: they stay with the object it came from)."""
        if not self._owner:
            return
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()
        if self._environ is not None:
            _restore_environ(*self._environ)
            self._environ = None

    def addresses(self):
        """The workers in the cluster now, sorted, as the scheduler answers; `NothingToSave`
        when it is gone or the client was closed. (Not `Client.scheduler_info()`: it
        returns the client's cached view, which a timer of the client replaces every 2 s
        by one without the workers, at times between the fetch and the read.)"""
        if _closed(self.client):
            raise NothingToSave("the run's Dask client is closed (by its owner, or by Dask "
                                "after it lost the scheduler)")
        try:
            return sorted(self.client.sync(self.client.scheduler.identity)["workers"])
        except (RuntimeError, OSError) as error:
            why = " ".join(str(error).split()) or type(error).__name__
            raise NothingToSave(f"lost the connection to the Dask scheduler ({why})") from None

    def _usable(self):
        """The workers' addresses but those `refused`."""
        return [address for address in self.addresses() if address not in self.refused]

    def _available(self, need, wait):
        """At least ``need`` workers' addresses, waiting up to ``wait`` seconds for them,
        else the ones there are (possibly none)."""
        deadline = time.monotonic() + wait
        while True:
            found = self._usable()
            if len(found) >= need or time.monotonic() > deadline:
                return found
            self._still_waiting()
            time.sleep(0.2)

    def forget(self, address, wait=10.0):
        """Wait (up to ``wait`` seconds) until the scheduler no longer lists the worker at
        ``address``, which was lost, so that the next placement does not choose it."""
        deadline = time.monotonic() + wait
        while address in self.addresses() and time.monotonic() < deadline:
            self._still_waiting()
            time.sleep(0.1)

    def growth(self, batch):
        """How many more workers a new placement would use now."""
        return min(len(self._usable()), batch, self.want or batch) - self.placed

    def place(self, ids, batch, recipe, params, carried, step):
        """`DaskBlocks` of ``batch`` cursors over ``ids``, one contiguous block per worker;
        `NothingToSave` when no worker joins within ``FASTBPTT_WORKER_WAIT`` seconds."""
        if not (isinstance(ids, np.ndarray) and ids.dtype.kind in "iu"):
            raise TypeError(f"ids must be an array of integer token ids; got "
                            f"{getattr(ids, 'dtype', type(ids).__name__)}")
        if ids.size and ids.min() < 0:
            raise ValueError(f"ids must be token ids of 0 or more; got {ids.min()}")
        batch = _count("batch", batch, "cursor")
        check_model(params, check_finite=False)     # as a run in one process checks them
        need = 1 if self.placed else max((self.want or 1) - len(self.refused), 1)
        found = self._available(need, _worker_wait())
        if not found:
            raise NothingToSave(f"no Dask worker is left in the cluster and none joined "
                                f"within {_worker_wait():g} s")
        chosen = found[:min(len(found), batch, self.want or batch)]
        rows = split_rows(batch, len(chosen))
        layout = Layout(params)
        small = np.uint8 if ids.max(initial=0) < 256 else np.int32
        mapping = Mapping.create(layout, len(chosen)) if self.shared else None
        blocks = None
        try:
            blocks = DaskBlocks(self.client, chosen, rows, layout, mapping)
            blocks.stopped = lambda: self.stopped()     # as the command sets it, now or later
            flat = layout.pack(params, blocks._out)
        except BaseException:
            if blocks is not None:
                blocks.close()              # the mapping and the listener's socket
            elif mapping is not None:
                mapping.remove()
            raise
        try:
            for i, (address, r, (part, segment, state)) in enumerate(zip(
                    chosen, rows, block_args(ids, batch, rows, carried))):
                try:
                    sent = self._scatter([part.astype(small), state]
                                         + ([flat] if mapping is None else []), address)
                except (OSError, TimeoutError):
                    raise BlockLost(address) from None
                blocks.futures.append(self.client.submit(
                    _Block, __version__, sent[0], r, segment, recipe, layout,
                    sent[2] if mapping is None else None, sent[1], step,
                    None if mapping is None else (mapping.where(), i, blocks.listener.path),
                    actor=True,
                    workers=[address], allow_other_workers=False, pure=False))
            blocks.actors = self._created(blocks.futures, chosen)
            if mapping is not None:
                mapping.remove()                  # every worker has mapped it
                # (placed actors connect at once: at least 5 POLL, whatever the wait for
                # workers to join, which may be 0)
                blocks.listener.accept(max(_worker_wait(), 5 * POLL), alive=lambda: all(
                    address in self.addresses() for address in chosen))
            blocks.call("warm")
        except (BlockLost, NothingToSave, Interrupted):
            blocks.close()
            raise
        except Exception as error:
            failed = [a for a, f in zip(chosen, blocks.futures) if f.status == "error"]
            blocks.close()
            install = isinstance(error, ImportError) or "fastbptt" in str(error)
            if install and failed and len(self._usable()) > len(failed):
                # a worker without the run's fastbptt (one that joined later, say): the
                # others take the run
                self.refused.update(failed)
                self.notes += [f"the worker {a} was left out ({type(error).__name__}: "
                               f"{error})" for a in failed]
                return self.place(ids, batch, recipe, params, carried, step)
            raise NothingToSave(f"the Dask workers could not hold the run's cursors "
                                f"({type(error).__name__}: {error})"
                                + (f"; they need fastbptt {__version__} installed ({EXTRA})"
                                   if install else "")) from None
        except BaseException:           # Ctrl-C: the shared file and sockets go too
            blocks.close()
            raise
        self.placed = len(chosen)
        return blocks

    def _scatter(self, data, address):
        """Futures of ``data`` sent to the worker at ``address``; TimeoutError after
        5 POLL (Dask's own timeout does not bound a direct send: to a worker that hangs
        without leaving, it waited for good)."""
        async def bounded():
            send = asyncio.ensure_future(self.client.scatter(
                data, workers=[address], direct=True, hash=False, asynchronous=True))
            done, _ = await asyncio.wait([send], timeout=5 * POLL)
            if not done:        # left to end with the connection (not cancelled: the
                send.add_done_callback(_quietly)    # tasks Dask made for it would say so)
                raise TimeoutError(f"the worker {address} did not take its block")
            return send.result()
        return self.client.sync(bounded)

    def _created(self, futures, addresses):
        """The actors of ``futures`` (one per address), once made; `BlockLost` when a
        worker leaves before its actor is."""
        while True:
            try:
                with self.client.as_current():      # the actors call through this client
                    _dask.wait(futures, timeout=POLL)
                    return [f.result() for f in futures]
            except TimeoutError:
                self._still_waiting()
                alive = self.addresses()
                for address, future in zip(addresses, futures):
                    if not future.done() and address not in alive:
                        raise BlockLost(address) from None
