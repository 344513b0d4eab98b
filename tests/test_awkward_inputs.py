"""Awkward but valid inputs give exactly the result of the clean form, and are never modified.

Python lists, every integer dtype for ids and lengths, float16/32/64 inputs, strided and
reversed views, Fortran order, big-endian and read-only arrays: for x, y, h0, lengths and
the params. Read-only inputs also compile no second set of kernels.
"""
import importlib
import pkgutil
import re

import numpy as np
import pytest
from numba import types
from numba.core.dispatcher import Dispatcher

import fastbptt
import fastbptt._kernels
from fastbptt import reference
from conftest import make_problem

L, H, C, B, T = 5, 4, 3, 3, 7
DTYPES = [np.float64, np.float32]
TARGETS = ["x", "y", "h0", "lengths", "params"]


def clean_call(dtype, ids, no_loss=True, seed=0):
    """(x, y, params, h0, lengths): C-contiguous, native, writable arrays."""
    rng = np.random.default_rng(seed)
    x, y, params, options = make_problem(rng, B=B, T=T, L=L, H=H, C=C, dtype=dtype,
                                         x_ids=ids, y_ids=ids, with_h0=True,
                                         with_lengths=True, no_loss=no_loss)
    return {"x": x, "y": y, "params": params, "h0": options["h0"],
            "lengths": options["lengths"]}


def strided(a):
    """A view with every other element of a buffer twice as large, holding a's values."""
    big = np.zeros(tuple(2 * n for n in a.shape), a.dtype)
    view = big[tuple(slice(None, None, 2) for _ in a.shape)]
    view[...] = a
    return view


def reversed_view(a):
    """A view with negative strides holding a's values."""
    return np.flip(np.flip(a).copy())


def big_endian(a):
    return a.astype(a.dtype.newbyteorder(">"))


def read_only(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


def everything(a):
    """Big-endian, Fortran-order, strided and read-only at once."""
    out = strided(np.asfortranarray(big_endian(a)))
    out.flags.writeable = False
    return out


# name: (awkward form of an array, the clean array it stands for)
TRANSFORMS = {
    "list": (lambda a: a.tolist(), lambda a: np.asarray(a.tolist())),
    "strided view": (strided, None),
    "negative strides": (reversed_view, None),
    "Fortran order": (np.asfortranarray, None),
    "big-endian": (big_endian, None),
    "read-only": (read_only, None),
    "all at once": (everything, None),
}


def apply(call, targets, fn):
    out = dict(call)
    for name in targets:
        if name == "params":
            out["params"] = type(call["params"])(*(None if a is None else fn(a)
                                                   for a in call["params"]))
        else:
            out[name] = fn(call[name])
    return out


def snapshot(value):
    """Plain data that records an input exactly: contents, dtype, shape, strides, flags."""
    if isinstance(value, np.ndarray):
        return ("ndarray", value.tobytes(), value.dtype.str, value.shape, value.strides,
                value.flags.writeable)
    if isinstance(value, dict):
        return {k: snapshot(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [type(value).__name__] + [snapshot(v) for v in value]
    return value


def run(call, entry="bptt", impl=fastbptt):
    """Call ``entry`` of ``impl`` on ``call``; fails if an input was modified."""
    before = snapshot(call)
    options = {"h0": call["h0"], "lengths": call["lengths"]}
    if entry == "forward":
        result = impl.forward(call["x"], call["params"], **options)
    elif entry == "loss":
        result = impl.loss(call["x"], call["y"], call["params"], **options)
    else:
        result = getattr(impl, entry)(call["x"], call["y"], call["params"], truncate=3,
                                      **options)
    assert snapshot(call) == before, "an input was modified"
    return result


def assert_same(got, want):
    """Exactly equal results: arrays of the same dtype, shape and values, recursively."""
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray) and got.dtype == want.dtype
        assert got.shape == want.shape and np.array_equal(got, want)
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            assert_same(got[k], want[k])
    elif isinstance(want, tuple):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    else:
        assert type(got) is type(want) and got == want


def assert_same_results(awkward, clean):
    for entry in ("bptt", "forward", "loss"):
        assert_same(run(awkward, entry), run(clean, entry))


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("target", TARGETS + ["all"])
@pytest.mark.parametrize("ids", [True, False], ids=["ids", "dense"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_awkward_arrays_give_the_clean_result(dtype, ids, target, transform):
    call = clean_call(dtype, ids)
    make, clean_of = TRANSFORMS[transform]
    targets = TARGETS if target == "all" else [target]
    awkward = apply(call, targets, make)
    clean = apply(call, targets, clean_of) if clean_of else call
    assert_same_results(awkward, clean)


def test_reference_takes_awkward_arrays_too():
    call = clean_call(np.float64, True)
    for make, clean_of in TRANSFORMS.values():
        awkward = apply(call, TARGETS, make)
        clean = apply(call, TARGETS, clean_of) if clean_of else call
        assert_same(run(awkward, impl=reference), run(clean, impl=reference))


@pytest.mark.parametrize("structure", ["Params", "dict", "tuple", "list"])
def test_params_entries_as_lists(structure):
    call = clean_call(np.float64, True)
    lists = [a.tolist() for a in call["params"]]
    wrap = {"Params": lambda v: fastbptt.Params(*v), "tuple": tuple, "list": list,
            "dict": lambda v: dict(zip("UWVbc", v))}[structure]
    got = run(dict(call, params=wrap(lists)))
    want = run(call)
    assert got.loss == want.loss
    grads = got.grads.values() if structure == "dict" else got.grads
    for g, w in zip(grads, want.grads):
        assert_same(g, w)


INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@pytest.mark.parametrize("int_dtype", INT_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("target", ["x", "y", "lengths"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_integer_dtype(dtype, target, int_dtype):
    """Ids and lengths of any integer dtype; unsigned y without the -1 it cannot hold."""
    call = clean_call(dtype, True, no_loss=np.dtype(int_dtype).kind == "i")
    awkward = dict(call, **{target: call[target].astype(int_dtype)})
    assert_same_results(awkward, call)


@pytest.mark.parametrize("in_dtype", [np.float16, np.float32, np.float64],
                         ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("target", ["x", "y", "h0", "all"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_float_inputs_are_converted_to_the_params_dtype(dtype, target, in_dtype):
    call = clean_call(dtype, False)
    targets = ["x", "y", "h0"] if target == "all" else [target]
    rounded = apply(call, targets, lambda a: a.astype(in_dtype))     # values in_dtype holds
    clean = apply(rounded, targets, lambda a: a.astype(dtype))
    assert_same_results(rounded, clean)
    result = run(rounded)
    assert all(g.dtype == dtype for g in result.grads)
    assert result.h_final.dtype == result.dh0.dtype == dtype


def test_one_sequence_of_awkward_arrays():
    call = clean_call(np.float32, True)
    single = {"x": call["x"][0], "y": call["y"][0], "params": call["params"],
              "h0": call["h0"][0], "lengths": call["lengths"][0]}
    for make, clean_of in TRANSFORMS.values():
        targets = ["x", "y", "h0", "params"]
        awkward = apply(single, targets, make)
        clean = apply(single, targets, clean_of) if clean_of else single
        assert_same_results(awkward, clean)


def kernel_dispatchers():
    for info in pkgutil.iter_modules(fastbptt._kernels.__path__):
        module = importlib.import_module(f"fastbptt._kernels.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Dispatcher):
                yield value


def test_read_only_inputs_compile_no_new_kernels():
    """Numba types read-only arrays apart: passing them in would compile a second set of
    kernels (seconds). They are copied instead, so no kernel ever sees one."""
    for ids in (True, False):
        for B1 in (1, B):                       # a batch of one passes ids through in place
            call = clean_call(np.float64, ids)
            call = {k: v[:B1] if k != "params" else v for k, v in call.items()}
            for entry in ("bptt", "forward", "loss"):
                run(apply(call, TARGETS, read_only), entry)
    for dispatcher in kernel_dispatchers():
        for signature in dispatcher.signatures:
            for arg in signature:
                assert not (isinstance(arg, types.Array) and not arg.mutable), \
                    (dispatcher.py_func.__qualname__, signature)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64, np.int8])
def test_padding_class_ids_are_minus_one_whatever_the_dtype(dtype):
    """Unsigned class ids cannot hold -1: the padding the kernels read must still be -1
    (no loss), not 255, an id beyond C."""
    from fastbptt._inputs import prepare

    params = fastbptt.init_params(5, 4, 3, dtype=np.float64, seed=0)
    problem = prepare(np.zeros((2, 4), int), np.ones((2, 4), dtype), params, lengths=[4, 1])
    assert problem.y.dtype == np.int64
    assert problem.y.tolist() == [[1, 1, 1, 1], [1, -1, -1, -1]]


def test_python_ints_beyond_64_bits_are_named_as_such():
    """NumPy keeps a list holding an int beyond int64 and uint64 as Python objects: the
    message says which value, not only that the dtype is object; float lengths are told
    how to cast."""
    params = fastbptt.init_params(5, 4, 3, dtype=np.float64, seed=0)
    for x, y, lengths, name in (([[0, 2**64]], [[0, 1]], None, "x"),
                                ([[0, 1]], [[0, -2**70]], None, "y"),
                                ([[0, 1]], [[0, 1]], [np.int64(1), 2**64], "lengths"),
                                ([[0, 2**64 - 1, -2**63 - 1]], [[0, 1, 1]], None, "x")):
        with pytest.raises(ValueError, match=rf"^{name} holds an integer beyond 64 bits "
                                             r"\((18446744073709551616|"
                                             r"-1180591620717411303424|"
                                             r"-9223372036854775809)\)"):
            fastbptt.loss(x, y, params, lengths=lengths)
    with pytest.raises(TypeError, match=r"lengths must hold integers; got dtype float64; "
                                        r"cast with \.astype\(int\)$"):
        fastbptt.loss([[0, 1]], [[0, 1]], params, lengths=[2.0])
    for x, h0, name, big in (([[0, 1]], [[2**64, 0, 0, 0]], "h0", 2**64),
                             ([[[0.5, 0, 0, 0, 0], [0, 0, 2**70, 0, 0]]], None, "x", 2**70)):
        with pytest.raises(ValueError, match=rf"^{name} holds an integer beyond 64 bits "
                                             rf"\({big}\), which NumPy keeps as a Python "
                                             rf"object; write it as a float "
                                             rf"\({re.escape(repr(float(big)))}\)$"):
            fastbptt.loss(x, [[0, 1]], params, h0=h0)
    with pytest.raises(ValueError, match=r"^h0 holds .* beyond float64's range too: scale "
                                         r"the values into it$"):
        fastbptt.loss([[0, 1]], [[0, 1]], params, h0=[[2**1100, 0, 0, 0]])
    with pytest.raises(TypeError, match=r"^h0 must hold floats; got dtype object"):
        fastbptt.loss([[0, 1]], [[0, 1]], params, h0=[[None, 0, 0, 0]])
