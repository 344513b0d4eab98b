"""Thread control for the kernels.

The kernels' parallel work is in their matrix products, which run in the BLAS that
the kernels call: SciPy's OpenBLAS (a library separate from NumPy's), and, for narrow
batches of 8 sequences a thread or more, in slices of the batch that run at once on
threads of this module's pool (`run_slices`), while the call's products run on one BLAS
thread (`one_blas_thread`). `set_num_threads` sets that library's thread count (and Numba's),
leaving NumPy's own BLAS alone.

The default is one thread, set on the first call (or the first `get_num_threads`) unless
`set_num_threads` was called or OPENBLAS_NUM_THREADS / OMP_NUM_THREADS are in the
environment. OpenBLAS's worker threads wait for a free core: when another thread of the
program (a data loader, a second training thread) keeps the other cores busy, a
multi-threaded product of a small recurrent step waits a scheduler time slice, and a W1
call measured 124 ms instead of 0.96 ms. More threads pay off for large H and B only:
ask for them.
"""
from __future__ import annotations

import operator
import os
import threading

import numba
import numpy as np

from ._kernels.blas import cython_blas
from ._kernels.sync import abort, words

__all__ = ["set_num_threads", "get_num_threads", "blas_info"]

DEFAULT_THREADS = 1
MAX_THREADS = os.cpu_count() or 1
_ENV_SETTINGS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
_configured = []
_in_use = [None]        # the count this module set or found; None: not yet known


_BLAS = []            # the controller `_scipy_blas` found (a scan takes about a millisecond)


def _scipy_blas():
    """threadpoolctl's controller for the BLAS that scipy.linalg.cython_blas uses, or None."""
    if _BLAS:
        return _BLAS[0]
    from threadpoolctl import ThreadpoolController

    cython_blas()    # loads the library

    controller = ThreadpoolController()
    scipy_dir = os.sep + "scipy"
    found = next((lib for lib in controller.lib_controllers
                  if lib.user_api == "blas" and scipy_dir in lib.filepath), None)
    _BLAS.append(found)
    return found


def set_num_threads(n):
    """Use ``n`` threads: in the kernels' matrix products (SciPy's OpenBLAS), and for the
    slices of a batch (or of a product's rows) that fastbptt runs at once on threads of
    its own (README, "Threads"). TypeError for what is not an int, ValueError outside
    [1, the CPU count].

    Results are bitwise reproducible at a fixed thread count; they may differ in the
    last bits between thread counts, as BLAS splits its sums differently.
    """
    try:
        if isinstance(n, bool):
            raise TypeError
        n = operator.index(n)               # an int, or NumPy's integers
    except TypeError:
        raise TypeError(f"n must be an int; got {type(n).__name__}") from None
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(f"n must lie in [1, {MAX_THREADS}] (the CPU count); got {n}")
    lib = _scipy_blas()
    with _default_lock:         # not undone by a first call's default applied meanwhile
        _configured[:] = [n]
        _in_use[0] = n
        with _inside[2]:
            if _inside[0]:          # calls of other threads run on one BLAS thread: n is the
                _inside[1] = n      # count the last of them restores, so that it holds after
            elif lib is not None:
                lib.set_num_threads(n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


_default_lock = threading.Lock()


def ensure_default_threads():
    """Apply the one-thread default once, unless the user chose a thread count.

    Calls of several threads may come here first at once: the others wait until the
    count is known and applied (`_in_use` is read right after), and `_configured` is
    marked only then, so that none of them reads None or runs before the default."""
    if _configured:
        return
    with _default_lock:
        if _configured:
            return
        if not any(name in os.environ for name in _ENV_SETTINGS):
            lib = _scipy_blas()
            if lib is not None:
                lib.set_num_threads(DEFAULT_THREADS)
            _in_use[0] = DEFAULT_THREADS
        else:
            _in_use[0] = _library_threads()
        _configured.append(None)


def threads_in_use():
    """The thread count of the kernels' matrix products as this module last set or read
    it: a cheap read for choosing a kernel path (`get_num_threads` asks the library)."""
    ensure_default_threads()
    return _in_use[0]


def get_num_threads():
    """The thread count of the kernels' matrix products, before the first call as after it.

    The one-thread default is applied here if no call has applied it yet, so the count
    reported is the one calls will use, not the library's count before the default.
    """
    ensure_default_threads()
    with _inside[2]:
        if _inside[0]:          # while other threads' calls run on one BLAS thread
            return _inside[1]
    return _library_threads()


def _library_threads():
    lib = _scipy_blas()
    return lib.get_num_threads() if lib is not None else numba.get_num_threads()


def blas_info():
    """threadpoolctl's description of the BLAS the kernels call (dict), or {}."""
    lib = _scipy_blas()
    return {} if lib is None else lib.info()


_pool = []
_pool_lock = threading.Lock()


class _Pool:
    """Daemon threads that run what `submit` queues, each returning a Future.

    Not concurrent.futures' ThreadPoolExecutor: the interpreter's exit hook shuts every
    such pool down as soon as the main thread returns, before Python waits for the
    program's other (non-daemon) threads, so that their calls in slices raised
    RuntimeError ('cannot schedule new futures after shutdown'). These threads serve
    until the process ends."""

    def __init__(self, n):
        import queue
        self._queue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"fastbptt_{i}",
                                          daemon=True) for i in range(n)]
        for thread in self._threads:
            thread.start()

    def _work(self):
        while True:
            future, fn, args = self._queue.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args)
            except BaseException as error:          # handed to the caller's result()
                future.set_exception(error)
            else:
                future.set_result(result)
            del future, fn, args

    def submit(self, fn, *args):
        from concurrent.futures import Future
        future = Future()
        self._queue.put((future, fn, args))
        return future


def _the_pool():
    """The threads that run slices and parties besides the caller's own."""
    if not _pool:
        with _pool_lock:
            if not _pool:
                _pool.append(_Pool(MAX_THREADS))
    return _pool[0]


def run_slices(fn, bounds, *args):
    """fn(*args, bounds[i], bounds[i + 1]) for every slice, the first in this thread and
    the others at the same time in a pool's threads (kernels release the GIL; callers
    hold `one_blas_thread`); returns when all are done, raising the first error."""
    if len(bounds) == 2:
        fn(*args, bounds[0], bounds[1])
        return
    futures = [_the_pool().submit(fn, *args, bounds[i], bounds[i + 1])
               for i in range(1, len(bounds) - 1)]
    try:
        fn(*args, bounds[0], bounds[1])
    finally:
        for future in futures:
            future.result()


_parties_lock = threading.Lock()


def run_parties(fn, parts, *args):
    """fn(*args, sync, p, n, *parts[p]) for the n = len(parts) parties of one time loop
    (`_kernels.narrow_units`), the first in this thread and the others at the same time
    in the pool's threads; returns when all are done, raising the first error. ``sync``
    is the parties' barrier (`_kernels.sync`); a party that fails sets its abort word,
    so that the others stop waiting for it. One run at a time: runs from several
    threads at once, each waiting in the pool's queue for a party that waits in turn,
    could wait forever."""
    n = len(parts)
    sync = np.zeros(words(n), np.int64)

    def party(p):
        try:
            fn(*args, sync, p, n, *parts[p])
        except BaseException:
            abort(sync, n)
            raise

    with _parties_lock:
        futures = [_the_pool().submit(party, p) for p in range(1, n)]
        try:
            party(0)
        finally:
            for future in futures:
                future.result()


_local = []


def _local_threads():
    """OpenBLAS's ``openblas_set_num_threads_local(n)`` (0.3.27 and later; returns the
    count before) in the library the kernels call, or None. The count that
    `set_num_threads` sets is ignored when set from threads other than the one that set
    it up; this one is obeyed from any thread."""
    if not _local:
        setter = None
        lib = _scipy_blas()
        if lib is not None and lib.internal_api == "openblas":
            import ctypes
            try:
                setter = ctypes.CDLL(lib.filepath).openblas_set_num_threads_local
                setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
            except (OSError, AttributeError):
                setter = None
        _local.append(setter)
    return _local[0]


def can_slice():
    """Whether a call can run slices of its batch at once: only where its own thread and
    the slices' threads can run their products on one BLAS thread (`one_blas_thread`)."""
    return _local_threads() is not None


_inside = [0, None, threading.Lock()]   # calls inside `one_blas_thread`, the count before


def _after_fork_in_child():
    """A process forked from this one has none of its threads: not the pool's (a slice
    queued to them would wait forever), nor those inside `one_blas_thread` (whose count
    before is restored here) or holding a lock."""
    global _parties_lock, _default_lock, _pool_lock
    _pool.clear()
    _pool_lock = threading.Lock()
    _parties_lock = threading.Lock()
    _default_lock = threading.Lock()
    if _inside[0] and _local and _local[0] is not None:
        _local[0](_inside[1])
    _inside[:] = [0, None, threading.Lock()]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class one_blas_thread:
    """A context in which products run on one BLAS thread: a call that runs its own
    slices at once (`run_slices`) keeps OpenBLAS's worker threads, which spin on a core
    for a while after each product, off the cores those slices need (W5 on two threads:
    38 ms a call with them spinning, 26 ms without), and computes the same bits from
    whichever thread it is made. The count it sets holds for every thread of the
    process (OpenBLAS keeps one), so contexts entered by several threads at once share
    it: the first sets it, the last restores it. Needs `can_slice`."""

    def __enter__(self):
        with _inside[2]:
            if _inside[0] == 0:
                _inside[1] = _local_threads()(1)
            _inside[0] += 1

    def __exit__(self, *exc):
        with _inside[2]:
            _inside[0] -= 1
            if _inside[0] == 0:
                _local_threads()(_inside[1])
