"""How a kernel's compiled code takes in the kernels it calls.

Numba links the LLVM module of every function a kernel calls into the kernel's own module
before LLVM optimises it, so that small callees can be inlined, and then optimises the
whole: each callee's code, optimised once already in its own compile, is optimised again
in every kernel that calls it. The narrow drivers call the panels' products, the
transpositions and the gated cells' steps, so that about half of the code LLVM optimised
in a first call was such copies (in W2's, 12,700 of 24,400 instructions).

While a kernel compiles, every library Numba makes is a `KernelLibrary` (the kernel's,
its callees', the implementations it calls), which links a callee compiled in this process
whose own function is too large for LLVM to inline (`LATE_SIZE` lines of IR or more)
after its own optimisation, as the code that callee runs itself; smaller callees, and
callees loaded from the cache, are linked before it, as Numba links them. The kernel's
compiled object still holds all of the code it calls, as Numba's cache needs.
"""
import llvmlite.binding as ll
from numba.core.codegen import JITCodeLibrary

# LLVM inlines a call whose cost is below about 225 units at levels 2 and 3, 5 units an
# instruction, with bonuses (vector code, a single block) that at most about triple it: no
# function of 400 lines of LLVM IR (its instructions and blocks' labels) is inlined.
LATE_SIZE = 400


def _own_size(library):
    """Lines of LLVM IR of the largest function that `library` defines itself, optimised
    (not those linked into it); 0 for a library not compiled here as a `KernelLibrary`
    (Numba's own elsewhere, or one loaded from the cache, which holds no IR)."""
    return library.own_size() if isinstance(library, KernelLibrary) else 0


class KernelLibrary(JITCodeLibrary):
    """Numba's library for a kernel's code, linking its large callees after optimising."""

    _late = ()
    _size = None

    def own_size(self):
        """`_own_size` of this library, once it is finalized."""
        if self._size is None:
            self._ensure_finalized()
            self._size = max((str(fn).count("\n") for fn in self._final_module.functions
                              if not fn.is_declaration and fn.linkage == ll.Linkage.external),
                             default=0)
        return self._size

    def finalize(self):
        early, late = [], []
        for library in dict.fromkeys(self._linking_libraries):
            (late if _own_size(library) >= LATE_SIZE else early).append(library)
        for library in late:
            self._reload_init.update(library._reload_init)
        self._linking_libraries, self._late = early, late
        super().finalize()

    def _optimize_final_module(self):
        super()._optimize_final_module()
        for library in self._late:
            self._final_module.link_in(library._get_module_for_linking(), preserve=True)

