"""An always-inlined overload of the kernels (`_overload.inline_overload`) is typed and
inlined as Numba's ``overload(func, inline="always")`` would, without its implementation
being compiled on its own: a kernel's compile compiles the kernel alone."""
import numba
import numpy as np
import pytest
from numba import types
from numba.core import event

from fastbptt._kernels import mathfuncs
from fastbptt._kernels._overload import inline_overload


class _Compiles(event.Listener):
    """The Python functions whose compiles start while it listens."""

    def __init__(self):
        self.functions = []

    def on_start(self, ev):
        self.functions.append(ev.data["dispatcher"].py_func)

    def on_end(self, ev):
        pass


def _compiled_while(call):
    listener = _Compiles()
    with event.install_listener("numba:compile", listener):
        result = call()
    return result, listener.functions


def scaled(x):
    raise NotImplementedError("compiled code only")


def _scaled_float(x):
    return x * 2.0


def _scaled_int(x):
    return x * 3


@inline_overload(scaled)
def _scaled(x):
    if isinstance(x, types.Float):
        return _scaled_float
    if isinstance(x, types.Integer):
        return _scaled_int
    return None


def misspelt(x):
    raise NotImplementedError("compiled code only")


@inline_overload(misspelt)
def _misspelt(x):
    return lambda x: x + undefined_name   # noqa: F821


def test_each_type_gets_its_implementation_and_only_the_kernel_compiles():
    @numba.njit(cache=False)
    def kernel(a, n):
        return scaled(a[0]), scaled(n), scaled(np.float32(a[1]))

    (f, i, f32), compiled = _compiled_while(lambda: kernel(np.array([1.5, 2.0]), 4))
    assert (f, i, f32) == (3.0, 12, 4.0)
    assert isinstance(i, int) and isinstance(f, float)
    assert kernel.py_func in compiled
    assert _scaled_float not in compiled and _scaled_int not in compiled, compiled


def test_the_kernels_inlined_overloads_compile_nothing_of_their_own():
    """The activations and exp of the Elman kernels and the softmax, for both dtypes."""
    @numba.njit(cache=False)
    def kernel(x, shift):
        return (mathfuncs.tanh_elman(x) + mathfuncs.sigmoid_elman(x)
                + mathfuncs.exp_shifted(x, shift) + mathfuncs.tanh(x))

    for dtype in (np.float32, np.float64):
        value, compiled = _compiled_while(lambda: kernel(dtype(-0.5), 0.25))
        expected = (np.tanh(-0.5) + 1 / (1 + np.exp(0.5)) + np.exp(-0.75) + np.tanh(-0.5))
        assert value == pytest.approx(expected, rel=1e-5)
        names = [f.__qualname__ for f in compiled]
        assert not [n for n in names if "<lambda>" in n], names


def test_an_implementations_typing_error_still_stops_the_compile():
    @numba.njit(cache=False)
    def kernel(x):
        return misspelt(x)

    with pytest.raises(numba.core.errors.TypingError, match="undefined_name"):
        kernel(1.0)


def test_no_implementation_for_a_type_is_a_typing_error():
    @numba.njit(cache=False)
    def kernel(x):
        return scaled(x)

    with pytest.raises(numba.core.errors.TypingError):
        kernel("text")
