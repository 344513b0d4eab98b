"""The kernels' compiles run at LLVM optimisation level 2 and leave Numba's own setting
(NUMBA_OPT) as they found it, also when a compile fails; a kernel that asks for it has
its loops vectorized 512 bits wide; a function inlined at several sites goes through
Numba's untyped passes once, each site inlining a copy of its own, made once; the flags
of a compile hash and compare as Numba's own, more directly; error messages read as Numba's
own, marked up without colorama's streams."""
import copy

import llvmlite.binding as ll
import numpy as np
import pytest
from numba import njit
from numba.core import config, errors, event, inline_closurecall, ir
from numba.core.compiler import Flags
from numba.core.targetconfig import TargetConfig

from fastbptt._kernels import _inlining, _jit
from fastbptt._kernels._jit import OPT_LEVEL, PREFER_VECTOR_WIDTH, jit


class _Levels(event.Listener):
    """The level in force when each compiler pass of a compile starts."""

    def __init__(self):
        self.seen = set()

    def on_start(self, ev):
        self.seen.add(int(config.OPT))

    def on_end(self, ev):
        pass


def _levels_of_a_compile(**options):
    """Compile a new kernel (a new dispatcher, no cache); the levels its passes saw."""
    @jit(cache=False, **options)
    def kernel(x):
        return x + 1.0

    listener = _Levels()
    with event.install_listener("numba:run_pass", listener):
        assert kernel(1.0) == 2.0
    return listener.seen


def test_compiles_at_level_2_and_restores_numbas_level(monkeypatch):
    monkeypatch.setattr(config, "OPT", type(config.OPT)(3))      # Numba's default
    before = config.OPT
    assert _levels_of_a_compile() == {OPT_LEVEL}
    assert config.OPT is before


def test_a_kernel_may_ask_for_level_3(monkeypatch):
    monkeypatch.setattr(config, "OPT", type(config.OPT)(3))
    assert _levels_of_a_compile(opt=3) == {3}
    assert _levels_of_a_compile(opt=1) == {1}


@pytest.mark.parametrize("level", [0, 1])
def test_a_lower_level_the_user_set_is_kept(monkeypatch, level):
    monkeypatch.setattr(config, "OPT", type(config.OPT)(level))
    assert _levels_of_a_compile() == {level}
    assert int(config.OPT) == level


def test_opt_max_is_kept(monkeypatch):
    monkeypatch.setattr(config, "OPT", type(config.OPT)("max"))
    assert _levels_of_a_compile() == {3}
    assert config.OPT.is_opt_max


def test_level_restored_after_a_failed_compile():
    before = config.OPT

    @jit(cache=False)
    def broken(x):
        return x.no_such_attribute

    with pytest.raises(Exception, match="no_such_attribute"):
        broken(np.zeros(3))
    assert config.OPT is before


def _sum_kernel(**options):
    """A new kernel (no cache) whose loop LLVM vectorizes, compiled for float32."""
    @jit(cache=False, **options)
    def scale(v):
        for i in range(v.shape[0]):
            v[i] = v[i] * np.float32(3) + np.float32(1)

    v = np.ones(64, np.float32)
    scale(v)
    assert np.all(v == 4)
    return scale


def test_a_wide_kernel_asks_llvm_for_512_bit_vectors():
    wide, plain = _sum_kernel(wide=True), _sum_kernel()
    assert PREFER_VECTOR_WIDTH in next(iter(wide.inspect_llvm().values()))
    assert PREFER_VECTOR_WIDTH not in next(iter(plain.inspect_llvm().values()))


@pytest.mark.skipif(not ll.get_host_cpu_features().get("avx512f", False),
                    reason="the host has no 512-bit vector registers")
def test_a_wide_kernels_loop_runs_on_512_bit_registers():
    asm = next(iter(_sum_kernel(wide=True).inspect_asm().values()))
    assert "zmm" in asm


def test_an_inlined_functions_ir_is_made_once_and_each_site_has_its_own_copy(monkeypatch):
    """Sites of one inlined function, of three types, in two kernels: Numba's untyped
    passes run on it once for all of them (they ran at every site), and each site's
    result has its own type and value."""
    @jit(inline="always", cache=False)
    def twice(a):
        doubled = a + a
        return doubled

    @jit(cache=False)
    def first(n, x, v):
        return twice(n), twice(x), twice(v)

    @jit(cache=False)
    def second(x, n):
        return twice(x) - twice(n)

    runs = []
    real = inline_closurecall.InlineWorker.run_untyped_passes

    def counted(self, func, enable_ssa=False):
        runs.append(func)
        return real(self, func, enable_ssa)
    monkeypatch.setattr(inline_closurecall.InlineWorker, "run_untyped_passes", counted)
    n, x, v = first(3, 2.5, np.arange(3.0))
    assert (n, x) == (6, 5.0) and isinstance(n, int) and v.tolist() == [0.0, 2.0, 4.0]
    assert second(1.5, 1) == 1.0
    assert runs.count(twice.py_func) == 1, runs
    assert any(key[0] is twice.py_func for key in _inlining.UNTYPED)
    assert inline_closurecall.InlineWorker is not _inlining.KeptInlineWorker    # put back
    assert inline_closurecall.copy is copy and _inlining.BLOCK_COPIES.scopes is None


def test_an_inlined_function_is_copied_once_for_its_site(monkeypatch):
    """Numba's inliner copied a callee's blocks twice, the second copy only to return it
    to callers that discard it: each block is now copied once for the site."""
    @jit(inline="always", cache=False)
    def branchy(a):
        if a > 0:
            return a * 2.0
        return -a

    @jit(cache=False)
    def kernel(x):
        return branchy(x)

    copied = []
    real = copy.deepcopy

    def counted(x, memo=None):
        if isinstance(x, ir.Block):
            copied.append(x)
        return real(x, memo)
    monkeypatch.setattr(copy, "deepcopy", counted)
    assert kernel(-1.5) == 1.5 and kernel(2.0) == 4.0
    kept = next(ir_ for key, ir_ in _inlining.UNTYPED.items() if key[0] is branchy.py_func)
    assert len(kept.blocks) > 1
    assert len(copied) == len(kept.blocks), (len(copied), len(kept.blocks))
    assert _inlining.BLOCK_COPIES.made is None


def _flag_sets():
    """Flags of several kinds: none set, options set to their defaults, and to others."""
    plain, defaults, other, other_too = Flags(), Flags(), Flags(), Flags()
    defaults.nrt = False
    defaults.boundscheck = None
    other.nrt = True
    other_too.nrt = True
    other_too.fastmath = {"contract"}
    return [plain, defaults, other, other_too, other.copy()]


class _Methods(event.Listener):
    """The flags' hash and equality in force when each compiler pass starts."""

    def __init__(self):
        self.seen = set()

    def on_start(self, ev):
        self.seen.add((TargetConfig.__hash__, TargetConfig.__eq__))

    def on_end(self, ev):
        pass


def test_flags_hash_and_compare_as_numbas_during_a_compile_and_after():
    numbas = TargetConfig.__hash__, TargetConfig.__eq__
    listener = _Methods()
    with event.install_listener("numba:run_pass", listener):
        _levels_of_a_compile()
    assert listener.seen == {(_jit._flags_hash, _jit._flags_eq)}
    assert (TargetConfig.__hash__, TargetConfig.__eq__) == numbas      # put back
    flags = _flag_sets()
    for a in flags:
        assert _jit._flags_hash(a) == numbas[0](a)
        for b in flags + [object()]:
            assert _jit._flags_eq(a, b) is numbas[1](a, b), (a, b)
    assert numbas[1](flags[0], flags[1]) and not numbas[1](flags[0], flags[2])
    assert numbas[1](flags[2], flags[4]) and not numbas[1](flags[2], flags[3])


@pytest.mark.skipif(not hasattr(errors, "HighlightColorScheme"), reason="needs colorama")
@pytest.mark.parametrize("theme", sorted(getattr(errors, "themes", {})))
def test_error_markup_gives_numbas_text_without_colorama_streams(monkeypatch, theme):
    numbas = errors.HighlightColorScheme(errors.themes[theme])
    monkeypatch.setattr(errors, "_termcolor_inst", numbas)
    quiet = _jit._quiet_markup()
    assert type(quiet) is not errors.HighlightColorScheme
    names = ("code", "errmsg", "filename", "indicate", "highlight", "reset")
    expected = [getattr(numbas, name)("a 'message'\n") for name in names]
    plain = numbas._markup("plain", None, None)
    monkeypatch.setattr(errors, "init", None)       # colorama's streams are not touched
    assert [getattr(quiet, name)("a 'message'\n") for name in names] == expected
    assert quiet._markup("plain", None, None) == plain


def test_a_failed_compile_says_what_numba_says_and_restores_the_markup():
    def f(x):
        return x.no_such_attribute

    before = errors.termcolor()
    messages = []
    for compile_ in (njit, jit(cache=False)):
        with pytest.raises(errors.TypingError) as error:
            compile_(f)(np.ones(2))
        messages.append(str(error.value))
    assert messages[0] == messages[1]
    assert "no_such_attribute" in messages[1]
    assert errors.termcolor() is before
