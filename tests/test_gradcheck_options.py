"""check_grad's and check_layer_grad's own option, the finite-difference step: refused
before anything is computed unless it is a finite number above 0; an option the check
does not take is named as the check's own; and the layer check of a call with no steps or
no sequences."""
import inspect

import numpy as np
import pytest

import fastbptt
from fastbptt._inputs import HEAD_OPTIONS, LAYER_FORWARD_OPTIONS, LAYER_OPTIONS

P = fastbptt.init_params(3, 4, 3, dtype=np.float64, seed=0)
X, Y = np.array([[0, 1, 2]]), np.array([[1, 2, 0]])


def layer_check(eps):
    (layer,), = fastbptt.Model(((fastbptt.Layer(P.U, P.W, P.b),),)).layers
    return fastbptt.check_layer_grad(X, layer, np.ones((1, 3, 4)), eps=eps)


@pytest.mark.parametrize("check", [lambda eps: fastbptt.check_grad(X, Y, P, eps=eps),
                                   layer_check], ids=["check_grad", "check_layer_grad"])
@pytest.mark.parametrize("eps,error,message", [
    (0, ValueError, "eps must be a finite number above 0"),
    (-1e-6, ValueError, "eps must be a finite number above 0"),
    (float("nan"), ValueError, "eps must be a finite number above 0"),
    (float("inf"), ValueError, "eps must be a finite number above 0"),
    ("a", TypeError, "eps must be a number"),
    (True, TypeError, "eps must be a number"),
])
def test_bad_steps_are_refused(monkeypatch, check, eps, error, message):
    def tripwire(*args, **kwargs):
        raise AssertionError("computed before eps was checked")
    monkeypatch.setattr(fastbptt.gradcheck, "prepare", tripwire)
    monkeypatch.setattr(fastbptt.gradcheck, "prepare_layer", tripwire)
    with pytest.raises(error, match=message):
        check(eps)


def test_a_good_step_is_taken():
    errors = fastbptt.check_grad(X, Y, P, eps=1e-6)
    assert all(e < 1e-6 for e in errors.values()), errors


CALLS = {
    "check_grad": lambda **o: fastbptt.check_grad(X, Y, P, **o),
    "check_layer_grad": lambda **o: fastbptt.check_layer_grad(X, fastbptt.Layer(P.U, P.W, P.b),
                                                              np.ones((1, 3, 4)), **o),
    "grad": lambda **o: fastbptt.grad(X, Y, P, **o),
    "value_and_grad": lambda **o: fastbptt.value_and_grad(X, Y, P, **o),
    "reference.bptt": lambda **o: fastbptt.reference.bptt(X, Y, P, **o),
    "reference.grad": lambda **o: fastbptt.reference.grad(X, Y, P, **o),
    "reference.value_and_grad": lambda **o: fastbptt.reference.value_and_grad(X, Y, P, **o),
    "reference.layer_vjp": lambda **o: fastbptt.reference.layer_vjp(
        X, fastbptt.Layer(P.U, P.W), **o),
    "reference.layer_forward": lambda **o: fastbptt.reference.layer_forward(
        X, fastbptt.Layer(P.U, P.W), **o),
}


@pytest.mark.parametrize("name", CALLS)
def test_an_unknown_option_is_named_as_the_callers(name):
    caller = name.split(".")[-1]
    with pytest.raises(TypeError, match=rf"^{caller}\(\) got an unexpected keyword argument "
                                        r"'truncat'; its options are activation, c0, cell, "):
        CALLS[name](truncat=3)


@pytest.mark.parametrize("known, function", [
    (HEAD_OPTIONS, fastbptt.bptt),
    (LAYER_OPTIONS, fastbptt.layer.vjp),
    (LAYER_FORWARD_OPTIONS, fastbptt.layer.forward)])
def test_the_known_options_are_the_entry_points_keywords(known, function):
    keywords = {name for name, p in inspect.signature(function).parameters.items()
                if p.kind is p.KEYWORD_ONLY}
    assert known == keywords


@pytest.mark.parametrize("name", ["truncate", "stride"])
def test_the_reference_layer_forward_refuses_what_the_kernels_forward_does(name):
    for forward in (fastbptt.layer.forward, fastbptt.reference.layer_forward):
        with pytest.raises(TypeError, match=rf"forward\(\) got an unexpected keyword "
                                            rf"argument '{name}'"):
            forward(X, fastbptt.Layer(P.U, P.W), **{name: 2})


@pytest.mark.parametrize("shape", [(1, 0), (0, 3)], ids=["no steps", "no sequences"])
def test_the_layer_check_of_an_empty_call(shape):
    x = np.zeros(shape, np.int64)
    dh = np.zeros(shape + (4,))
    errors = fastbptt.check_layer_grad(x, fastbptt.Layer(P.U, P.W, P.b), dh,
                                       h0=np.ones((shape[0], 4)))
    assert errors == {"U": 0.0, "W": 0.0, "b": 0.0, "h0": 0.0}
