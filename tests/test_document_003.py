"""Document 003's RNN2 (sigmoid, softmax, no biases, a 10-step window) against fastbptt.

The class below is the document's code, transcribed as written (constructor order u, v, w;
``states`` has len(x) + 1 rows so that ``states[-1]`` is the zero state h_{-1}). The seed text
is cut in the middle of the inner loop's last line; its standard completion
``ds = self._w.T.dot(ds) * st * (1 - st)`` and the return are the only lines added.
Its ``dis = o - y`` is dL/do for one-hot rows, which is what it is fed here.
"""
import numpy as np
import pytest

import fastbptt
from fastbptt import reference

T, L, H, C = 25, 6, 5, 6      # T longer than the 10-step window
RTOL = 1e-10


class RNN1:
    def __init__(self, u, v, w):
        self._u, self._v, self._w = np.asarray(u), np.asarray(v), np.asarray(w)
        self._states = None

    def activate(self, x):
        return x

    def transform(self, x):
        return x

    def run(self, x):
        output = []
        x = np.atleast_2d(x)
        self._states = np.zeros([len(x) + 1, self._u.shape[0]])
        for t, xt in enumerate(x):
            self._states[t] = self.activate(
                self._u.dot(xt) + self._w.dot(self._states[t - 1])
            )
            output.append(self.transform(
                self._v.dot(self._states[t]))
            )
        return np.array(output)


class RNN2(RNN1):
    def activate(self, x):
        return 1 / (1 + np.exp(-x))

    def transform(self, x):
        safe_exp = np.exp(x - np.max(x))
        return safe_exp / np.sum(safe_exp)

    def bptt(self, x, y):
        x, y, n = np.asarray(x), np.asarray(y), len(y)
        o = self.run(x)
        dis = o - y
        dv = dis.T.dot(self._states[:-1])
        du = np.zeros_like(self._u)
        dw = np.zeros_like(self._w)
        for t in range(n - 1, -1, -1):
            st = self._states[t]
            ds = self._v.T.dot(dis[t]) * st * (1 - st)
            for bptt_step in range(t, max(-1, t - 10), -1):
                du += np.outer(ds, x[bptt_step])
                dw += np.outer(ds, self._states[bptt_step - 1])
                st = self._states[bptt_step - 1]
                ds = self._w.T.dot(ds) * st * (1 - st)    # cut in the seed: completed
        return du, dv, dw


def close(actual, expected, rtol=RTOL):
    """Equal up to rtol times the largest entry of expected."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    scale = np.abs(expected).max()
    assert scale > 0
    return np.abs(actual - expected).max() <= rtol * scale


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(3)
    # Large enough weights that steps 10 and more back still carry a visible gradient
    U = rng.normal(0, 1.5, (H, L))
    W = rng.normal(0, 2.5, (H, H))
    V = rng.normal(0, 1.5, (C, H))
    x_ids = rng.integers(0, L, T)
    y_ids = rng.integers(0, C, T)
    x = np.eye(L)[x_ids]
    y = np.eye(C)[y_ids]
    du, dv, dw = RNN2(U, V, W).bptt(x, y)
    return dict(params=(U, W, V), x=x, y=y, x_ids=x_ids, y_ids=y_ids, expected=(du, dw, dv))


def test_document_forward_matches_fastbptt(case):
    U, W, V = case["params"]
    rnn = RNN2(U, V, W)
    o = rnn.run(case["x"])
    h, p = fastbptt.forward(case["x_ids"], case["params"], activation="sigmoid")
    assert close(h, rnn._states[:-1])
    assert close(p, o)
    assert not rnn._states[-1].any()


@pytest.mark.parametrize("x_kind", ["onehot", "ids"])
@pytest.mark.parametrize("y_kind", ["onehot", "ids"])
@pytest.mark.parametrize("impl", [fastbptt, reference], ids=["kernels", "reference"])
def test_grad_matches_document(case, x_kind, y_kind, impl):
    x = case["x"] if x_kind == "onehot" else case["x_ids"]
    y = case["y"] if y_kind == "onehot" else case["y_ids"]
    grads = impl.grad(x, y, case["params"], activation="sigmoid", truncate=10)
    assert isinstance(grads, tuple) and len(grads) == 3
    for name, got, want in zip("UWV", grads, case["expected"]):
        assert got.dtype == np.float64
        assert close(got, want), name


@pytest.mark.parametrize("truncate", [None, 9, 11])
def test_other_windows_do_not_match(case, truncate):
    """The comparison above can tell a window of 10 from its neighbours."""
    dU, dW, _ = fastbptt.grad(case["x_ids"], case["y_ids"], case["params"],
                              activation="sigmoid", truncate=truncate)
    du, dw, _ = case["expected"]
    assert not close(dW, dw, rtol=1e3 * RTOL)
    assert not close(dU, du, rtol=1e3 * RTOL)
