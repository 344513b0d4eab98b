"""Numba's inliner, made cheaper for the kernels' many inlined helpers: loaded by
`_jit._Compiler` at a process's first compile, since `numba.core.inline_closurecall`
brings in much of Numba's array typing (about 0.1 s of an import that only loads kernels
from the disk cache)."""
import copy

from numba.core import bytecode, inline_closurecall, ir

# A function inlined into a kernel (``jit(inline="always")``) goes through Numba's untyped
# passes, from its bytecode, at every call site it is inlined at (`InlineWorker`): the
# vector helpers are inlined dozens of times, and those passes took about a seventh of a
# first call's compile. A function's IR after them is the same each time, so it is kept
# (`UNTYPED`, for the process) and copied for each site, with an identity of its own, so
# that each site's variables are named apart, as Numba's own names them.
#
# Numba's inliner then copies the callee's IR twice, one block at a time, and each block's
# copy came with a copy of its own of the callee's scope, every variable of the callee in
# it: about as long again as those passes. Within one inlining, `BLOCK_COPIES` gives the
# blocks of one copy one copy of their scope, as a copy of the whole IR at once would.
# The second copy (`InlineWorker.inline_ir`'s "unmutated copy" of the callee, which it
# returns and both of Numba's callers discard) is not made: at every inlining, typed ones
# too, that was half of the copying.
UNTYPED = {}


class _BlockCopies:
    """The ``copy`` module, as `inline_closurecall` sees it while a kernel compiles. Within
    an inlining (``made`` not None), the copy of a block that this inlining made is that
    block itself; and within an inlining of `KeptInlineWorker.inline_function`
    (``scopes`` not None), a block's deep copy shares the copy of its scope with the other
    blocks of the same scope. Numba's inliner deep-copies blocks and nothing else."""

    def __init__(self):
        self.scopes = None          # {id(a scope): its copy}, within an inlining
        self.made = None            # {id(a block's copy): the copy}, within an inlining

    def deepcopy(self, x, memo=None):
        if memo is not None or not isinstance(x, ir.Block):
            return copy.deepcopy(x, memo)
        if self.made is not None and self.made.get(id(x)) is x:
            return x
        if self.scopes is not None:
            scope = x.scope
            if id(scope) not in self.scopes:
                self.scopes[id(scope)] = copy.deepcopy(scope)
            memo = {id(scope): self.scopes[id(scope)]}
        made = copy.deepcopy(x, memo)
        if self.made is not None:
            self.made[id(made)] = made
        return made

    def __getattr__(self, name):
        return getattr(copy, name)


BLOCK_COPIES = _BlockCopies()


class KeptInlineWorker(inline_closurecall.InlineWorker):
    """Numba's InlineWorker, with the IR of a function it inlines kept."""

    def inline_function(self, caller_ir, block, i, function, arg_typs=None):
        if self.flags is None:                      # a worker that cannot run the passes
            return super().inline_function(caller_ir, block, i, function, arg_typs)
        self.flags.enable_ssa = False               # as Numba's run_untyped_passes sets it
        key = (function, tuple(sorted((k, repr(v)) for k, v in self.flags.values().items())))
        kept = UNTYPED.get(key)
        if kept is None:
            kept = UNTYPED[key] = self.run_untyped_passes(function)
        callee_ir = kept.copy()                     # inline_ir copies its blocks in turn
        callee_ir.func_id = bytecode.FunctionIdentity.from_function(function)
        BLOCK_COPIES.scopes = {}
        try:
            return self.inline_ir(caller_ir, block, i, callee_ir,
                                  function.__code__.co_freevars, arg_typs=arg_typs)
        finally:
            BLOCK_COPIES.scopes = None

    def inline_ir(self, caller_ir, block, i, callee_ir, callee_freevars, arg_typs=None):
        """Numba's, without the copy of the callee's IR as it was before the inlining that
        Numba's returns first and its callers discard: None in its place."""
        outer, BLOCK_COPIES.made = BLOCK_COPIES.made, {}
        try:
            result = super().inline_ir(caller_ir, block, i, callee_ir, callee_freevars,
                                       arg_typs=arg_typs)
        finally:
            BLOCK_COPIES.made = outer
        return (None,) + tuple(result[1:])
