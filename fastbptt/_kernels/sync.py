"""A barrier between the threads that share one time loop (`narrow_units`).

Two or more kernel calls, one per thread, each own a range of the hidden units and
meet after every step, since the next step's product reads every unit of this one.
A step takes tens of microseconds to a few milliseconds, and a barrier of Python's
`threading` costs 50 to 90 us a step here; this one costs about 1 us. It lives in
``sync`` (int64, one 64-byte line per party, then the abort word): party p stores its
count of steps done at ``sync[p * LINE]`` with release order and waits until every
other party's count reaches its own, reading with acquire order, so that what a party
wrote before its store is visible to the others after their load. A waiting thread
spins with ``pause`` for a while, then yields its core at each look (another program
may need it). The abort word, set by the thread that runs the parties when one of
them fails (`_threads.run_parties`), makes every wait return False, and the kernels
then return at once instead of waiting forever.
"""
import os
import platform

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._jit import jit

LINE = 8            # int64 words of one party's cache line
SPINS = 4096        # pauses before a waiting thread starts yielding its core
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")
_POSIX = os.name == "posix"


def words(parties):
    """The length of a ``sync`` array for ``parties`` threads."""
    return (parties + 1) * LINE


def abort(sync, parties):
    """Set the abort word: every `meet` of this run returns False from now on."""
    sync[parties * LINE] = 1


@intrinsic
def _load_acquire(typingctx, array, i):
    sig = types.int64(array, types.intp)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.load_atomic(builder.gep(data, [args[1]]), "acquire", 8)

    return sig, codegen


@intrinsic
def _store_release(typingctx, array, i, value):
    sig = types.void(array, types.intp, types.int64)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        builder.store_atomic(args[2], builder.gep(data, [args[1]]), "release", 8)
        return context.get_dummy_value()

    return sig, codegen


def _call(name, returns, available):
    """An intrinsic that calls the external function ``name`` (no arguments) where
    ``available``, and does nothing elsewhere."""
    def codegen(context, builder, signature, args):
        if available:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(returns, []),
                                                name)
            builder.call(fn, [])
        return context.get_dummy_value()

    def call(typingctx):
        return types.void(), codegen

    call.__name__ = call.__qualname__ = "call_" + name.replace(".", "_")
    return intrinsic(call)


# the hint to the core that it is spinning (elsewhere the loop spins without it), and
# giving the core to another thread (elsewhere a waiting thread keeps spinning)
_pause = _call("llvm.x86.sse2.pause", ir.VoidType(), _X86)
_yield_core = _call("sched_yield", ir.IntType(32), _POSIX)


@jit(inline="always")
def meet(sync, party, parties, count):
    """Party ``party`` has done ``count`` steps; return once every party has, True, or
    False when the run was aborted."""
    _store_release(sync, party * LINE, count)
    aborted = parties * LINE
    for other in range(parties):
        spins = 0
        while _load_acquire(sync, other * LINE) < count:
            if _load_acquire(sync, aborted) != 0:
                return False
            spins += 1
            if spins < SPINS:
                _pause()
            else:
                _yield_core()
    return True
