"""A caller's ``np.seterr(all="raise")`` (or ``np.errstate``) does not break the NumPy-side
code on an underflow, whose result (0, or a subnormal) is the right one: sampling, the
clipping, the optimisers and the reference."""
import numpy as np
import pytest

import fastbptt
from fastbptt.text import Codec

X, Y = np.array([[0, 1, 2, 3]]), np.array([[1, 2, 3, -1]])


def params(dtype=np.float64, **options):
    return fastbptt.init_params(5, 4, 5, dtype=dtype, seed=0, **options)


def big_logits(p):
    return p._replace(V=p.V * 1e4)


def tiny(grads):
    return type(grads)(*(np.full_like(g, 1e-30) for g in grads))


CASES = {
    "sample at a tiny temperature": lambda: fastbptt.sample(
        params(np.float32), Codec.from_text("abcde"), prime="ab", chars=5, temperature=1e-300),
    "sample of large logits": lambda: fastbptt.sample(
        big_logits(params(np.float32)), Codec.from_text("abcde"), prime="ab", chars=5,
        temperature=0.01),
    "clip_grads of tiny gradients": lambda: fastbptt.clip_grads(
        tiny(fastbptt.grad(X, Y, params(np.float32))), max_norm=1.0),
    "clip_grads scaling to a tiny norm": lambda: fastbptt.clip_grads(
        fastbptt.grad(X, Y, params(np.float32)), max_norm=1e-40),
    "Adagrad on tiny gradients": lambda: fastbptt.Adagrad(lr=0.1).step(
        params(np.float32), tiny(fastbptt.grad(X, Y, params(np.float32)))),
    "the reference's softmax of large logits": lambda: fastbptt.reference.value_and_grad(
        X, Y, big_logits(params())),
    "the reference's saturated sigmoid": lambda: fastbptt.reference.bptt(
        X, Y, params()._replace(U=params().U * 1e4), activation="sigmoid"),
    "the reference's saturated LSTM gates": lambda: fastbptt.reference.bptt(
        X, Y, big_logits(params(cell="lstm"))),
}


def _finite(result):
    """Every number of a result (a float, arrays, NamedTuples of them, a tuple) finite."""
    if result is None:
        return True
    if isinstance(result, (tuple, list)):
        return all(_finite(r) for r in result)
    return bool(np.all(np.isfinite(result)))


@pytest.mark.parametrize("case", CASES)
def test_underflow_is_not_an_error(case):
    with np.errstate(all="raise"):
        result = CASES[case]()
    if isinstance(result, str):                     # a sample of 5 of the text's characters
        assert len(result) == 5 and set(result) <= set("abcde"), result
    else:
        assert _finite(result)


def test_the_norm_of_gradients_whose_squares_underflow():
    """Gradients of 1e-30 in float32: their squares are 0 in float32, and clip_grads gave
    their norm as 0; it is sqrt(n) 1e-30."""
    grads = tiny(fastbptt.grad(X, Y, params(np.float32)))
    n = sum(g.size for g in grads)
    want = np.sqrt(n) * 1e-30
    assert fastbptt.clip_grads(grads, max_norm=1.0) == pytest.approx(want, rel=1e-6, abs=0)
