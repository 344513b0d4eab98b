"""check_grad's and check_layer_grad's own option, the finite-difference step: refused
before anything is computed unless it is a finite number above 0."""
import numpy as np
import pytest

import fastbptt

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
