"""The one place that sets Numba options for every kernel.

- ``cache``: compiled code is stored on disk (in ``__pycache__`` beside this package, or
  under ``NUMBA_CACHE_DIR``); set ``FASTBPTT_CACHE=0`` to turn it off. Where Numba finds
  no writable place for it (a read-only install and no usable ``NUMBA_CACHE_DIR``), the
  kernels compile in memory instead, with one warning per process.
- ``nogil``: callers' threads run kernels in parallel.
- ``fastmath``: only flags that keep NaN and inf meaningful (no ``nnan``/``ninf``), so an
  exploding gradient stays visible instead of being optimised away.
- ``error_model="numpy"``: division follows IEEE rules instead of raising, as in NumPy.
- ``no_cfunc_wrapper``: no C-callable wrapper, which Numba builds for every compile so
  that a kernel can be passed to another as a first-class function value; no kernel is.
  It took about 15 ms of a small kernel's 100 ms compile (its lowering and machine code).
- LLVM's optimisation level 2 (``OPT_LEVEL``) for these kernels' own compiles, where
  Numba's default is 3 (`_Compiler`): their hot loops are vectorized by hand or plainly
  vectorizable, and level 3 made a first call compile 10 to 20% longer for the same speed
  (W1 ... W5, S1 ... S3, G1 ... G5 timed in turns in one process). A kernel that runs
  faster at level 3 says so (``jit(opt=3)``). A lower ``NUMBA_OPT`` the user sets, or
  ``NUMBA_OPT=max``, is left as it is.
- ``wide``: LLVM's loop vectorizer takes vectors of 512 bits for this kernel's loops
  (`PREFER_VECTOR_WIDTH`), where it would take 256 on Intel's AVX-512 cores.

Numba checks a cached kernel against its own source file only, but the drivers inline
the cells' step math and the vector code of other files. So the cache of every kernel
in this folder is keyed on the contents of all of its files (`_STAMP`): an edit anywhere
here recompiles whatever was cached, instead of loading stale code. The key also holds
``NUMBA_OPT``, whose lower levels give slower code, and each level keeps files of its own.
"""
import hashlib
import os
import threading
import warnings
from contextlib import contextmanager

from numba import njit
from numba.core import caching, config, errors
from numba.core.codegen import JITCPUCodegen
from numba.core.compiler import Compiler
from numba.core.compiler_machinery import register_pass
from numba.core.dispatcher import OmittedArg
from numba.core.lowering import Lower
from numba.core.registry import CPUDispatcher
from numba.core.runtime import nrt
from numba.core.targetconfig import TargetConfig
from numba.core.typed_passes import NativeLowering
from numba.core.types import Omitted

from .. import CacheUnavailableWarning
from ._linking import KernelLibrary

try:
    import fcntl
except ImportError:             # not POSIX: no locks, and no compile helper
    fcntl = None

CACHE = os.environ.get("FASTBPTT_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")
_FOLDER = os.path.dirname(os.path.abspath(__file__))


def _folder_stamp():
    """A hash of every source file of the kernels (this folder and below)."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(_FOLDER):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                with open(os.path.join(root, name), "rb") as f:
                    digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()


_STAMP = _folder_stamp()


def _opt_level():
    return "max" if getattr(config.OPT, "is_opt_max", False) else int(config.OPT)


class _Stamped:
    """A Numba cache locator for the kernels of this folder, stamped with `_STAMP`."""

    def get_source_stamp(self):
        """`_STAMP` and NUMBA_OPT: code compiled at a lower level the user set (a cache
        built under NUMBA_OPT=0 ran W3 6x slower) is not loaded at another, nor the
        reverse."""
        return f"{_STAMP}:opt={_opt_level()}"

    def get_disambiguator(self):
        """Each NUMBA_OPT level's cache in files of its own (``kernel-LINE-opt2.py311.nbi``),
        so that a process at another level neither loads nor replaces them."""
        return f"{super().get_disambiguator()}-opt{_opt_level()}"

    @classmethod
    def from_function(cls, py_func, py_file):
        if not os.path.abspath(py_file).startswith(_FOLDER + os.sep):
            return None
        return super().from_function(py_func, py_file)


# the same places as Numba's own locators, in Numba's order of preference
_LOCATORS = [type(f"Stamped{base.__name__}", (_Stamped, base), {})
             for base in (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator,
                          caching.UserWideCacheLocator)]
if not any(issubclass(c, _Stamped) for c in caching.CacheImpl._locator_classes):
    caching.CacheImpl._locator_classes[:0] = _LOCATORS
FASTMATH = frozenset({"contract", "nsz"})


class _KernelCache(caching.FunctionCache):
    """Numba's disk cache of one kernel, whose loads skip Numba's registries.

    Before every load, Numba refreshes its target context: it imports and installs the
    typing and lowering registries of all its implementations (NumPy's, typed
    containers', random generators', jitclasses' and more), about 60 modules, which only
    a compile reads. Object code loaded from the cache needs the runtime's (NRT's)
    symbols alone. So a process whose kernels all come from the cache never imports
    those registries (the first call of a warm start took 0.17 s against 0.29 for the
    LSTM, G1, and 0.10 against 0.24 for Elman, W2), and any compile still refreshes them
    first, as Numba's compiler does.
    """

    def load_overload(self, sig, target_context):
        nrt.rtsys.initialize(target_context)
        with self._guard_against_spurious_io_errors(), self._locked(shared=True):
            return self._load_overload(sig, target_context)

    def save_overload(self, sig, data):
        """Numba's save, under a lock of this kernel's index that no other process's save
        or load holds meanwhile.

        Numba's save reads the kernel's index, adds the new signature under the first
        free data file's name, writes the index and then the data file. Two processes
        saving two signatures of one kernel at once (a compile helper,
        `fastbptt._compile_ahead`, or Dask's workers on one machine) could both take the
        same name: one entry was lost, and the index could then name, for one signature,
        the other's code, which a load runs without checking its types. A load in
        between could also read an index entry whose data file was still the one of an
        earlier index."""
        with self._guard_against_spurious_io_errors():
            if self._enabled:
                self._impl.locator.ensure_cache_path()
            with self._locked(shared=False):
                self._save_overload(sig, data)

    @contextmanager
    def _locked(self, shared):
        """An flock of ``<index>.lock`` beside the index, or none where it cannot be made
        (a read-only cache, which no process saves to, or a system without flock)."""
        try:
            fd = None if fcntl is None else os.open(
                self._cache_file._index_path + ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        except OSError:
            fd = None
        if fd is None:
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)                        # releases the lock


_warned = []


def _without_cache(func, options, error):
    if not _warned:
        _warned.append(True)
        warnings.warn(
            f"fastbptt: Numba cannot cache compiled kernels ({error}); they will be compiled "
            "in every new process. Set NUMBA_CACHE_DIR to a writable folder to keep them.",
            CacheUnavailableWarning, stacklevel=4)
    return njit(**dict(options, cache=False))(func)


OPT_LEVEL = 2

# LLVM's loop vectorizer takes the width of its vectors from the function's
# "prefer-vector-width", which on Intel's AVX-512 cores is 256 bits unless the function
# says otherwise (a tuning for the clock speeds of older cores): the loops of the gates'
# sigmoid and tanh, and of the softmax, then ran 8 float32 lanes to an instruction, not
# 16. On an Intel Xeon with AVX-512, a float32 sigmoid took 0.55 against 0.93 ns a value
# and tanh 0.79 against 1.51 ns; the softmax kernel 0.66 to 0.70 of its time, the LSTM's
# forward pass (G1) 0.95 to 0.98. Kernels of long elementwise loops ask for it
# (``jit(wide=True)``); every kernel at once made G1's first call compile 1.2 to 1.7 s
# longer (of 19 to 21 s), and no other kernel measurably faster. `simd`'s vector code is
# as wide as `simd.VECTOR_BYTES` whatever this says; machines without 512-bit registers
# keep to theirs.
PREFER_VECTOR_WIDTH = '"prefer-vector-width"="512"'


class _WideLower(Lower):
    """Numba's lowering, with `PREFER_VECTOR_WIDTH` on the function it lowers."""

    def lower_normal_function(self, fndesc):
        super().lower_normal_function(fndesc)
        set.add(self.function.attributes, PREFER_VECTOR_WIDTH)   # llvmlite's add would
        # refuse a string attribute; printed as it is in the function's definition


@register_pass(mutates_CFG=True, analysis_only=False)
class _WideNativeLowering(NativeLowering):
    """Numba's lowering pass, lowering with `_WideLower`."""

    _name = f"{__name__}.wide_native_lowering"

    @property
    def lowering_class(self):
        return _WideLower


# Numba's overload templates keep their implementations by the flags of the compile that
# asked for them (`TargetConfig`), whose hash and equality build a dict of every option,
# each through its property, at each lookup: about 34,000 times, 5% of the Python calls
# of W2's first call. While a kernel compiles, they take the same values more directly:
# the hash, Numba's ``hash(tuple(sorted(self.values())))``, is that of the options' names
# (the dict's keys), and equality compares the options set, or where they differ, each
# option's value or default.
_FLAGS_HASHES = {}


def _option_values(flags):
    values = flags._values
    return {name: values.get(name, option.default) for name, option in flags.options.items()}


def _flags_hash(self):
    cls = type(self)
    if cls not in _FLAGS_HASHES:
        _FLAGS_HASHES[cls] = hash(tuple(sorted(self.options)))
    return _FLAGS_HASHES[cls]


def _flags_eq(self, other):
    if not isinstance(other, TargetConfig):
        return NotImplemented
    if type(self) is type(other) and self._values == other._values:
        return True             # the same options, set to the same values
    return _option_values(self) == _option_values(other)


if hasattr(errors, "HighlightColorScheme"):         # colorama is installed
    class _Markup(errors.HighlightColorScheme):
        """Numba's markup of error messages, the same text without colorama's streams.

        Numba's typing builds error messages for the candidates it rejects as it goes
        (10,400 markups in W1's first call), and its markup wraps and unwraps stdout and
        stderr in colorama's converters for each, which adds nothing to the text: 14 us a
        markup, about 0.15 s of that call."""

        def _markup(self, msg, color=None, style=errors.Style.BRIGHT):
            with errors.reset_terminal() as mu:
                mu += ((color or "") + (style or "") + msg).encode("utf-8")
            return mu.decode("utf-8")

    def _quiet_markup():
        """What `errors.termcolor()` is while a kernel compiles: its markup as `_Markup`
        where it is Numba's own (built from the same theme), else itself."""
        scheme = errors.termcolor()
        if type(scheme) is not errors.HighlightColorScheme:
            return scheme
        quiet = object.__new__(_Markup)
        quiet.__dict__.update(scheme.__dict__)
        return quiet
else:
    def _quiet_markup():
        return errors.termcolor()


class _Compiler(Compiler):
    """Numba's compiler, with LLVM's optimisation level at most ``level`` (`OPT_LEVEL`, or
    what the kernel asks for) while it runs.

    Numba reads ``config.OPT`` (NUMBA_OPT) when it optimises a function's LLVM module, all
    within one compile, and compiles only under its global lock; so the level set here
    holds for this kernel and whatever it compiles on the way (its callees, NumPy
    functions' implementations), and is restored before another compile can begin. So
    do its inliner's worker and copies (`_inlining`, imported at the first compile), the
    flags' hash and equality (`_flags_hash`, `_flags_eq`), the class of the code
    libraries it makes (`_linking.KernelLibrary`) and the markup of error messages
    (`_quiet_markup`).
    """

    level = OPT_LEVEL
    wide = False

    def __init__(self, *args, **kws):
        from .blas import before_compiles

        before_compiles()           # before the refresh of Numba's registries, below
        super().__init__(*args, **kws)

    def define_pipelines(self):
        """Numba's pipelines, lowering with `_WideNativeLowering` where ``wide``."""
        pipelines = super().define_pipelines()
        if self.wide:
            for pm in pipelines:
                pm.passes = [(_WideNativeLowering if p is NativeLowering else p, what)
                             for p, what in pm.passes]
                pm.finalize()
        return pipelines

    def _compile_core(self):
        from . import _inlining
        from numba.core import inline_closurecall

        saved, worker, copies = config.OPT, inline_closurecall.InlineWorker, \
            inline_closurecall.copy
        if saved > self.level and not getattr(saved, "is_opt_max", False):
            config.OPT = type(saved)(self.level)
        # all read where they are used, under the compiler lock that this compile holds
        inline_closurecall.InlineWorker, inline_closurecall.copy = \
            _inlining.KeptInlineWorker, _inlining.BLOCK_COPIES
        flags = TargetConfig.__hash__, TargetConfig.__eq__
        TargetConfig.__hash__, TargetConfig.__eq__ = _flags_hash, _flags_eq
        libraries, JITCPUCodegen._library_class = JITCPUCodegen._library_class, KernelLibrary
        quiet = _quiet_markup()
        markup, errors._termcolor_inst = errors._termcolor_inst, quiet
        try:
            return super()._compile_core()
        finally:
            config.OPT = saved
            inline_closurecall.InlineWorker, inline_closurecall.copy = worker, copies
            TargetConfig.__hash__, TargetConfig.__eq__ = flags
            JITCPUCodegen._library_class = libraries
            errors._termcolor_inst = markup


class _Ahead(threading.local):
    """The calling thread's part in a compile helper (`fastbptt._compile_ahead`): ``job``,
    the validated call that thread runs, while it runs one the helper can run; and that
    module's state of the call's helper."""

    job = None
    helper = None
    tried = False


AHEAD = _Ahead()
BEFORE_COMPILE = []     # `_compile_ahead.before`, once that module is imported


class _Kernel(CPUDispatcher):
    """Numba's dispatcher, which tells the compile helper's hook (`BEFORE_COMPILE`) of
    each compile a call from Python is about to make, while the calling thread runs a
    job (`AHEAD`). Calls of compiled code do not come here (Numba's C dispatcher runs
    them); nor do the kernels a kernel calls, compiled while it compiles."""

    def _compile_for_args(self, *args, **kws):
        if AHEAD.job is not None and BEFORE_COMPILE:
            BEFORE_COMPILE[0](self, args)
        return super()._compile_for_args(*args, **kws)


class _DryKernel(_Kernel):
    """A kernel in a dry run (`dry`): a call records itself and runs nothing."""

    def __call__(self, *args, **kws):
        _DRY[0](self, args, kws)
        return 0


KERNELS = []            # every kernel `jit` built, with a disk cache
_DRY = []               # the dry run's recorder, in the compile helper's process


def dry(record):
    """From now on, a call of a kernel from Python runs nothing and returns 0, after
    ``record(kernel, args, kws)``: the compile helper's process, which runs a call to
    learn what it compiles, and in which nothing else runs."""
    _DRY[:] = [record]
    for kernel in KERNELS:
        kernel.__class__ = _DryKernel


def cached(kernel, types):
    """Whether the disk cache holds ``kernel`` for ``types`` (its index names them): the
    call's compile will be a load."""
    cache = kernel._cache
    try:
        return cache._index_key(types, kernel.targetctx.codegen()) in \
            cache._cache_file._load_index()
    except Exception:                       # noqa: BLE001 (unreadable: a compile, then)
        return False


def call_types(kernel, args):
    """The argument types of a call from Python that Numba compiles (its
    `_compile_for_args`): ``args`` positional, defaults as Numba's ``OmittedArg``."""
    return tuple(Omitted(a.value) if isinstance(a, OmittedArg) else kernel.typeof_pyval(a)
                 for a in args)


def jit(func=None, **overrides):
    """``numba.njit`` with the package's options; usable bare or with overrides,
    ``opt`` for a kernel's own LLVM optimisation level (default `OPT_LEVEL`), and
    ``wide=True`` for 512-bit vectors in its loops (`PREFER_VECTOR_WIDTH`)."""
    level = overrides.pop("opt", OPT_LEVEL)
    wide = overrides.pop("wide", False)
    compiler = _Compiler if level == OPT_LEVEL and not wide else \
        type(f"_Compiler{level}{'Wide' if wide else ''}", (_Compiler,),
             {"level": level, "wide": wide})
    options = dict(cache=CACHE, nogil=True, error_model="numpy", fastmath=set(FASTMATH),
                   no_cfunc_wrapper=True, pipeline_class=compiler)
    options.update(overrides)

    def build(f):
        try:
            kernel = njit(**options)(f)
        except RuntimeError as error:
            if options["cache"] and "cannot cache" in str(error):
                return _without_cache(f, options, error)
            raise
        if type(kernel._cache) is caching.FunctionCache:     # a disk cache, not Numba's null one
            kernel._cache.__class__ = _KernelCache
            if type(kernel) is CPUDispatcher:
                kernel.__class__ = _DryKernel if _DRY else _Kernel
                KERNELS.append(kernel)
        return kernel

    return build if func is None else build(func)
