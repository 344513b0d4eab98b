"""No value slips past the checks: overflow in the conversion to the params' dtype, masked
arrays, sampling at extreme temperatures, and Numba's NUMBA_DISABLE_JIT switch."""
import os
import subprocess
import sys

import numpy as np
import pytest

import fastbptt
from fastbptt.text import Codec

L, H, C, B, T = 5, 4, 3, 2, 6
P32 = fastbptt.init_params(L, H, C, dtype=np.float32, seed=1)
P64 = fastbptt.init_params(L, H, C, dtype=np.float64, seed=1)
_rng = np.random.default_rng(0)
X = _rng.integers(0, L, size=(B, T))
Y = _rng.integers(0, C, size=(B, T))
XD = _rng.normal(size=(B, T, L))                     # float64, as NumPy makes them
YD = _rng.uniform(0, 1, size=(B, T, C))
H0 = _rng.normal(size=(B, H))
BIG = 1e39                                           # finite in float64, inf in float32
ENTRIES = ["grad", "loss", "reference"]


def call(entry, x, y, params, **options):
    fn = fastbptt.reference.bptt if entry == "reference" else getattr(fastbptt, entry)
    return fn(x, y, params, **options)


def put(array, index, value):
    out = np.array(array)
    out[index] = value
    return out


# (id, (x, y, options), the message's index)
OVERFLOWS = [
    ("dense x", (put(XD, (1, 3, 4), BIG), Y, {}), "(1, 3, 4)"),
    ("dense x of one sequence", (put(XD[0], (2, 1), -BIG), Y[0], {}), "(2, 1)"),
    ("float targets", (X, put(YD, (0, 5, 2), BIG), {}), "(0, 5, 2)"),
    ("float targets of one sequence", (X[0], put(YD[0], (4, 0), BIG), {}), "(4, 0)"),
    ("h0", (X, Y, {"h0": put(H0, (1, 2), -BIG)}), "(1, 2)"),
    ("h0 of one sequence", (X[0], Y[0], {"h0": put(H0[0], 3, BIG)}), "(3,)"),
]


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("case,index", [pytest.param(c, i, id=n) for n, c, i in OVERFLOWS])
def test_a_value_beyond_float32_is_refused_like_an_inf(entry, case, index):
    x, y, options = case
    name = "h0" if "h0" in options else ("x" if x.dtype.kind == "f" else "y")
    with pytest.raises(ValueError) as info:
        call(entry, x, y, P32, **options)
    message = str(info.value)
    assert message.startswith(f"{name} holds a value that overflows float32"), message
    assert f"at index {index}" in message and "check_finite=False" in message
    call(entry, x, y, P64, **options)                   # float64 params hold it


def test_overflow_checks_the_converted_values_exactly():
    """Values that round to the largest float32 pass; the first that rounds to inf
    (half an ulp above it, 2**103) does not."""
    top = float(np.finfo(np.float32).max)
    halfway = top + 2.0**103
    for fine in (top, np.nextafter(halfway, 0.0), -np.nextafter(halfway, 0.0)):
        fastbptt.grad(put(XD, (0, 0, 0), fine), Y, P32)
    for beyond in (halfway, -halfway):
        with pytest.raises(ValueError, match="overflows float32"):
            fastbptt.grad(put(XD, (0, 0, 0), beyond), Y, P32)


def test_overflow_in_padding_and_without_the_check():
    x = put(XD, (1, 4, 0), BIG)
    clean = put(XD, (1, 4, 0), 0.0)
    got = fastbptt.loss(x, Y, P32, lengths=[T, 4])    # step 4 of sequence 1 is padding
    assert got == fastbptt.loss(clean, Y, P32, lengths=[T, 4])
    out = fastbptt.bptt(x, Y, P32, check_finite=False)  # no scan: the inf shows
    assert not np.isfinite(out.loss) or not np.isfinite(out.grads.U).all()


def test_an_inf_keeps_its_own_message():
    with pytest.raises(ValueError, match=r"x holds a non-finite value \(inf at index"):
        fastbptt.grad(put(XD, (0, 1, 2), np.inf), Y, P32)


def type_error(entry, x, y, params, options):
    """The message of the TypeError that an entry point ("forward" or one of ENTRIES)
    raises for these arguments."""
    with pytest.raises(TypeError) as info:
        if entry == "forward":
            fastbptt.forward(x, params, **options)
        else:
            call(entry, x, y, params, **options)
    return str(info.value)


def masked(array, where=0):
    mask = np.zeros(np.shape(array), bool)
    mask.reshape(-1)[where] = True
    return np.ma.masked_array(array, mask=mask)


MASKED = [
    ("x token ids", lambda: (masked(X), Y, P32, {}), "x"),
    ("x dense", lambda: (masked(XD), Y, P32, {}), "x"),
    ("y class ids", lambda: (X, masked(Y), P32, {}), "y"),
    ("y float targets", lambda: (X, masked(YD), P32, {}), "y"),
    ("h0", lambda: (X, Y, P32, {"h0": masked(H0.astype(np.float32))}), "h0"),
    ("lengths", lambda: (X, Y, P32, {"lengths": masked(np.array([T, 2]))}), "lengths"),
    ("params W", lambda: (X, Y, P32._replace(W=masked(P32.W)), {}), "params W"),
    ("nothing masked", lambda: (X, np.ma.masked_array(Y), P32, {}), "y"),
]


@pytest.mark.parametrize("entry,make,name", [
    pytest.param(entry, m, n, id=f"{entry}-{i}") for i, m, n in MASKED
    for entry in ENTRIES + ["forward"] if not (entry == "forward" and n == "y")])
def test_masked_arrays_are_refused_naming_filled(entry, make, name):
    message = type_error(entry, *make())
    assert message.startswith(f"{name} is a masked array") and ".filled(" in message
    assert ("filled(-1)" in message) == (name == "y")


class NeedsGrad:
    """What a PyTorch tensor with requires_grad=True is to NumPy: an array it may not read."""
    requires_grad = True

    def __init__(self, array):
        self.array = array

    def detach(self):
        return self.array

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("Can't call numpy() on Tensor that requires grad.")


NEEDS_GRAD = [
    ("x", lambda: (NeedsGrad(XD), Y, P32, {})),
    ("h0", lambda: (X, Y, P32, {"h0": NeedsGrad(H0.astype(np.float32))})),
    ("params W", lambda: (X, Y, P32._replace(W=NeedsGrad(P32.W)), {})),
]


@pytest.mark.parametrize("entry,name,make", [
    pytest.param(entry, n, m, id=f"{entry}-{n}") for n, m in NEEDS_GRAD
    for entry in ENTRIES + ["forward"]])
def test_tensors_that_require_grad_are_refused_naming_detach(entry, name, make):
    message = type_error(entry, *make())
    assert message.startswith(f"{name} is a tensor that requires grad") and ".detach()" in message


def test_torch_tensors_that_require_grad_are_refused_and_others_read():
    torch = pytest.importorskip("torch", reason="needs PyTorch (the torch extra)")
    grads = fastbptt.grad(X, Y, P32, h0=torch.from_numpy(H0.astype(np.float32)))
    assert np.array_equal(grads.W, fastbptt.grad(X, Y, P32, h0=H0.astype(np.float32)).W)
    with pytest.raises(TypeError, match=r"^h0 is a tensor that requires grad.*\.detach\(\)"):
        fastbptt.grad(X, Y, P32, h0=torch.zeros(H0.shape, requires_grad=True))


def test_sampling_needs_a_model_that_reads_what_it_draws_and_its_own_codec():
    codec = Codec.from_text("abcdefg")
    wider = fastbptt.init_params(7, 8, 10, seed=0)            # draws 10, reads 7
    with pytest.raises(ValueError, match=r"output size \(V \(10, 8\): 10\) must equal its "
                                         r"input size \(U \(8, 7\): 7\)"):
        fastbptt.sample(wider, codec, prime="a", chars=50, temperature=100,
                        rng=np.random.default_rng(0))
    other = fastbptt.init_params(10, 8, 10, seed=0)
    with pytest.raises(ValueError, match="the model draws from 10 characters, the codec has 7"):
        fastbptt.sample(other, codec, prime="a", chars=5)



def test_sampling_and_init_arguments_of_the_wrong_kind_name_themselves():
    codec = Codec.from_text("abcdefg")
    params = fastbptt.init_params(7, 8, 7, seed=0)
    for kwargs, error, phrase in (
            ({"temperature": "0.8"}, TypeError, "temperature must be a number; got str"),
            ({"prime": None}, TypeError, "prime must be a str; got NoneType"),
            ({"rng": -1}, ValueError, "rng must be None, a non-negative int seed or a numpy "
                                      "Generator; got -1"),
            ({"rng": True}, TypeError, "rng must be None")):
        with pytest.raises(error, match=phrase):
            fastbptt.sample(params, codec, chars=3, **kwargs)
    with pytest.raises(TypeError, match="seed must be None, a non-negative int seed or a numpy "
                                        "Generator; got True"):
        fastbptt.init_params(7, 8, 7, seed=True)


@pytest.mark.parametrize("temperature", [1e-320, 5e-324, 1e-300, 1e-30])
def test_sampling_at_a_tiny_temperature_is_greedy(temperature):
    codec = Codec.from_text("abcdefgh")
    params = fastbptt.init_params(8, 16, 8, seed=3)
    draws = {fastbptt.sample(params, codec, prime="ab", chars=30, temperature=temperature,
                             rng=np.random.default_rng(seed)) for seed in range(4)}
    assert len(draws) == 1 and len(draws.pop()) == 30
    # the first draw is the arg max of the output layer after the prime
    h = fastbptt.forward(codec.encode("ab"), params).h[-1]
    logits = params.V.astype(np.float64) @ h + params.c
    first = fastbptt.sample(params, codec, prime="ab", chars=1, temperature=temperature,
                            rng=np.random.default_rng(9))
    assert first == codec.chars[int(np.argmax(logits))]


def test_sampling_refuses_what_it_cannot_draw():
    codec = Codec.from_text("abc")
    params = fastbptt.init_params(3, 4, 3, seed=0)
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="temperature must be positive"):
            fastbptt.sample(params, codec, chars=3, temperature=bad)
    with pytest.raises(ValueError, match="at least 0; got -1"):
        fastbptt.sample(params, codec, chars=-1)
    with pytest.raises(ValueError, match="diverged cannot be sampled"):
        fastbptt.sample(params._replace(W=np.full((4, 4), np.nan, params.W.dtype)), codec,
                        chars=3)


def test_numba_disable_jit_is_refused_in_one_line_at_import():
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    for code in ("import fastbptt", "from fastbptt import grad"):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 1
        last = out.stderr.strip().splitlines()[-1]
        assert last.startswith("fastbptt.JitDisabledError: fastbptt cannot run with "
                               "NUMBA_DISABLE_JIT=1")
        assert "unset NUMBA_DISABLE_JIT" in last
        assert "NotImplementedError" not in out.stderr and "AttributeError" not in out.stderr
