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
