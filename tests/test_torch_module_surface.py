"""fastbptt.torch's modules as drop-ins where user code treats them as torch.nn's: states
of native modules, attributes set after construction, the constructor's arguments, weights
of mixed dtypes and the torch.func transforms."""
import copy
import warnings

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install "
                                            "'fastbptt[torch]')")
import fastbptt.torch as ft                                               # noqa: E402

CELLS = {"elman": "RNN", "gru": "GRU", "lstm": "LSTM"}


def close(got, want):
    got, want = got.detach(), want.detach()
    return float((got - want).abs().max()) <= 1e-12 * float(want.abs().max())


def native_and_input(name, **options):
    torch.manual_seed(0)
    native = getattr(torch.nn, name)(3, 4, dtype=torch.float64, **options)
    return native, torch.randn(5, 2, 3, dtype=torch.float64)


@pytest.mark.parametrize("name", CELLS.values())
@pytest.mark.parametrize("how", ["class", "setstate"])
def test_a_native_modules_state_runs_in_the_bridge_class(name, how):
    """``m.__class__ = fastbptt.torch.LSTM``, or a pickled native module loaded as the
    bridge's class (its ``__dict__`` given to ``__setstate__``): no truncate or stride in
    that state, so the bridge's defaults hold."""
    native, x = native_and_input(name)
    if how == "class":
        bridge = copy.deepcopy(native)
        bridge.__class__ = getattr(ft, name)
    else:
        bridge = getattr(ft, name).__new__(getattr(ft, name))
        bridge.__setstate__(copy.deepcopy(native).__dict__)
    assert (bridge.truncate, bridge.stride) == (None, 1)
    assert repr(bridge) == repr(native)
    assert close(bridge(x)[0], native(x)[0])


def test_the_nonlinearity_is_the_modules_mode_as_in_torch():
    """nn.RNN computes with ``mode``: set after construction, or the only record of relu
    in an older module's state."""
    native, x = native_and_input("RNN")
    bridge = copy.deepcopy(native)
    bridge.__class__ = ft.RNN
    native.mode = bridge.mode = "RNN_RELU"
    del bridge.nonlinearity
    got = bridge(x)[0]
    assert close(got, native(x)[0]) and close(got, torch.nn.RNN.forward(bridge, x)[0])
    assert not close(got, torch.nn.RNN.forward(native_and_input("RNN")[0], x)[0])  # tanh


@pytest.mark.parametrize("name", CELLS.values())
def test_weights_of_two_dtypes_are_refused_naming_the_odd_one(name):
    bridge = getattr(ft, name)(3, 4, dtype=torch.float64)
    bridge.bias_hh_l0 = torch.nn.Parameter(bridge.bias_hh_l0.detach().float())
    with pytest.raises(TypeError, match=r"bias_hh_l0 is torch.float32 and weight_ih_l0 "
                                        r"torch.float64: the weights must share one dtype"):
        bridge(torch.randn(5, 2, 3, dtype=torch.float64))


@pytest.mark.parametrize("name, options", [
    ("LSTM", {"proj_size": -1}), ("LSTM", {"proj_size": 4}), ("GRU", {"proj_size": 2}),
    ("RNN", {"proj_size": 2}), ("RNN", {"nonlinearity": "gelu"}), ("GRU", {"dropout": 2.0})])
def test_the_constructors_refuse_what_torchs_refuse_with_its_error(name, options):
    with pytest.raises(ValueError) as native:
        getattr(torch.nn, name)(3, 4, **options)
    with pytest.raises(ValueError) as bridge:
        getattr(ft, name)(3, 4, **options)
    assert str(bridge.value) == str(native.value)


@pytest.mark.parametrize("name, args", [
    ("RNN", (3, 4, 2, "relu", False, True, 0.25, True)),
    ("GRU", (3, 4, 2, False, True, 0.25, True, 0)),     # the 8th: proj_size, as in torch
    ("LSTM", (3, 4, 2, False, True, 0.25, True, 0))])
def test_positional_arguments_are_read_as_torch_reads_them(name, args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        native, bridge = getattr(torch.nn, name)(*args), getattr(ft, name)(*args)
    keys = ("input_size", "hidden_size", "num_layers", "bias", "batch_first", "dropout",
            "bidirectional", "proj_size", "mode")
    assert [getattr(bridge, k) for k in keys] == [getattr(native, k) for k in keys]
    assert list(bridge.state_dict()) == list(native.state_dict())


@pytest.mark.parametrize("ids", [False, True], ids=["floats", "token-ids"])
@pytest.mark.parametrize("name", CELLS.values())
def test_torch_func_transforms_are_refused_in_a_sentence(name, ids):
    bridge = getattr(ft, name)(3, 4, dtype=torch.float64)
    x = torch.randint(0, 3, (2, 5)) if ids else torch.randn(2, 5, 3, dtype=torch.float64)
    refused = f"fastbptt.torch.{name} cannot run under the torch.func transforms"
    frozen = copy.deepcopy(bridge).requires_grad_(False)
    with pytest.raises(TypeError, match=refused):
        torch.func.vmap(lambda xi: frozen(xi)[0])(x)
    params = dict(bridge.named_parameters())

    def loss(p):
        return torch.func.functional_call(bridge, p, (x[0],))[0].sum()
    with pytest.raises(TypeError, match=refused):
        torch.func.grad(loss)(params)


# PyTorch's make_dual loads its own decompositions through torch.jit.script, which warns
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("grad", [False, True], ids=["no-grad", "grad"])
@pytest.mark.parametrize("name", CELLS.values())
def test_forward_mode_ad_is_refused_not_dropped(name, grad):
    """A tangent on x, h0 or a weight: without autograd it was read through NumPy and the
    output came back with none (a directional derivative silently missing); with it,
    PyTorch's message asked for a jvp staticmethod."""
    import torch.autograd.forward_ad as fwd

    bridge = getattr(ft, name)(3, 4, dtype=torch.float64).requires_grad_(grad)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    h0 = torch.randn(1, 2, 4, dtype=torch.float64)
    W = bridge.weight_hh_l0.detach().clone()
    refused = rf"^fastbptt\.torch\.{name} has no forward-mode derivative"
    with fwd.dual_level(), torch.set_grad_enabled(grad):
        for call in (lambda: bridge(fwd.make_dual(x, torch.ones_like(x))),
                     lambda: bridge(x, fwd.make_dual(h0, torch.ones_like(h0)) if name != "LSTM"
                                    else (fwd.make_dual(h0, torch.ones_like(h0)), h0)),
                     lambda: torch.func.functional_call(
                         bridge, {"weight_hh_l0": fwd.make_dual(W, torch.ones_like(W))},
                         (x,))):
            with pytest.raises(TypeError, match=refused):
                call()
        bridge(x)                   # no tangent at an open level: runs


@pytest.mark.parametrize("name", CELLS.values())
def test_batched_gradients_are_refused_and_jacobians_run_unvectorized(name):
    bridge = getattr(ft, name)(3, 4, dtype=torch.float64)
    native = getattr(torch.nn, name)(3, 4, dtype=torch.float64)
    native.load_state_dict(bridge.state_dict())
    x = torch.randn(2, 1, 3, dtype=torch.float64)
    refused = rf"^fastbptt\.torch\.{name} cannot take batched gradients"
    out = bridge(x.requires_grad_())[0]
    with pytest.raises(TypeError, match=refused):
        torch.autograd.grad(out, x, torch.eye(out.numel()).reshape(-1, *out.shape),
                            is_grads_batched=True)
    with pytest.raises(TypeError, match=refused):
        torch.autograd.functional.jacobian(lambda v: bridge(v)[0], x, vectorize=True)
    got = torch.autograd.functional.jacobian(lambda v: bridge(v)[0], x)
    want = torch.autograd.functional.jacobian(lambda v: native(v)[0], x)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", [(5, 2, 3), (5, 3)])
def test_quantized_input_is_refused_as_not_floats(shape):
    """It was read as token ids: "Expected input to be 1D or 2D token ids", or NumPy's
    "unsupported ScalarType QUInt8"."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                 # its creation is deprecated
        x = torch.quantize_per_tensor(torch.rand(*shape), 0.1, 0, torch.quint8)
    with pytest.raises(TypeError, match=r"input must hold floats of the weights' dtype, or "
                                        r"integer token ids; got torch.quint8 \(dequantize"):
        ft.LSTM(3, 4)(x)


@pytest.mark.parametrize("name", CELLS.values())
def test_efficient_zero_gradients_are_zeros(name):
    """torch.autograd.grad with an efficient zero tensor (no memory) as a gradient: it
    failed in the backward pass ("Cannot convert a ZeroTensor to numpy")."""
    native, x = native_and_input(name)
    module = getattr(ft, name)(3, 4, dtype=torch.float64)
    module.load_state_dict(native.state_dict())
    grads = []
    for m in (native, module):
        xg = x.clone().requires_grad_(True)
        out, hn = m(xg)
        h = hn[0] if name == "LSTM" else hn
        zero = torch._efficientzerotensor(h.shape, dtype=torch.float64)
        grads.append(torch.autograd.grad((out, h), (xg,), (torch.ones_like(out), zero))[0])
    assert close(grads[1], grads[0])
