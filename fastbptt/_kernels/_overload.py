"""The kernels' overloads: `inline_overload`, Numba's ``overload(func, inline="always")``
less a compile whose code is never used, and `called_overload`, Numba's ``overload``.
Neither builds a C-callable wrapper (`_jit`).

To type a call of an always-inlined overload, Numba compiles the implementation on its
own in full (typing, lowering, LLVM's optimisation and machine code: the implementation
dispatcher's ``get_call_template``), only so that a ``numba.literally`` in it can ask for
literal arguments; it then types the implementation again from its IR, inlines that, and
never runs the compiled code. The kernels' implementations ask for no literal argument,
so here that step folds the arguments' types and compiles nothing. Typing and inlining
are Numba's own, so the kernels' code is the same. A first call of W2 compiled six such
implementations, each as long as a small kernel (0.13 to 0.30 s here, where the call
compiles in about 20 s).
"""
from numba.core import types
from numba.core.extending import overload
from numba.core.typing.templates import (infer, infer_global, make_concrete_template,
                                         make_overload_template)


# Numba's own options for an overload's implementation (``extending.overload``), and no
# C-callable wrapper, as for every kernel (`_jit`)
JIT_OPTIONS = {"no_cpython_wrapper": True, "nopython": True, "no_cfunc_wrapper": True}


def _fold_only(dispatcher, args, kws):
    """A dispatcher's ``get_call_template``, without its compile: a template of no
    signature and the folded argument types, which are all that the overload's template
    reads of it."""
    pysig, args = dispatcher.fold_argument_types(args, kws)
    name = f"CallTemplate({dispatcher.py_func.__name__})"
    return make_concrete_template(name, key=name, signatures=[]), pysig, args, {}


def _uncompiled(jitter):
    """A jit decorator like `jitter`, whose dispatchers compile nothing to be typed."""
    def with_options(**options):
        decorate = jitter(**options)

        def build(pyfunc):
            dispatcher = decorate(pyfunc)
            dispatcher.get_call_template = _fold_only.__get__(dispatcher)
            return dispatcher
        return build
    return with_options


def called_overload(func):
    """``numba.extending.overload(func)`` for a kernel's stub `func`, whose implementations
    are compiled, and called, without a C-callable wrapper."""
    return overload(func, jit_options=JIT_OPTIONS)


def inline_overload(func):
    """``numba.extending.overload(func, inline="always")`` for a kernel's stub `func`,
    whose implementations Numba types and inlines without compiling them on their own."""
    def register(typing):
        base = make_overload_template(func, typing, JIT_OPTIONS, True, "always")
        template = type(base.__name__, (base,), {
            "_get_jit_decorator": lambda self: _uncompiled(base._get_jit_decorator(self))})
        infer(template)
        infer_global(func, types.Function(template))
        return typing
    return register
