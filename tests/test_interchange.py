"""from_torch and to_torch: round trips, real PyTorch modules, and the errors."""
import re
import subprocess
import sys
from typing import NamedTuple

import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from fastbptt.params import leaves
from fastbptt.params import CELLS

L, H, C, B, T = 3, 2, 4, 2, 5
SHAPES = [(1, False), (1, True), (2, False), (3, True)]
TOLERANCE = 1e-12


def model(cell, layers, bidirectional, bias=True, seed=0):
    p = fastbptt.init_params(L, H, C, cell=cell, num_layers=layers, bidirectional=bidirectional,
                             bias=bias, dtype=np.float64, seed=seed)
    if isinstance(p, fastbptt.Params):
        return fastbptt.Model(((fastbptt.Layer(p.U, p.W, p.b),),), p.V, p.c)
    return p


def outputs(params, x, cell):
    """The reference's top states and final states of ``params`` (head ignored)."""
    out = reference.layer_forward(x, fastbptt.Model(params.layers), cell=cell)
    return out.h, out.h_final, out.c_final


def close(a, b):
    for u, v in zip(a, b):
        if u is None or v is None:
            assert u is None and v is None
        else:
            np.testing.assert_allclose(u, v, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("layers,bidirectional", SHAPES)
@pytest.mark.parametrize("cell", CELLS)
def test_round_trip_is_the_same_function(cell, layers, bidirectional, bias):
    m = model(cell, layers, bidirectional, bias)
    rnn, head = fastbptt.to_torch(m)
    back = fastbptt.from_torch(rnn, head)
    x = np.random.default_rng(1).normal(size=(B, T, L))
    close(outputs(back, x, cell), outputs(m, x, cell))
    np.testing.assert_array_equal(back.V, m.V)
    if bias:
        np.testing.assert_array_equal(back.c, m.c)
        assert not any(v.any() for k, v in rnn.items() if k.startswith("bias_hh")) or cell == "gru"
    else:
        assert back.c is None and not any(k.startswith("bias") for k in rnn)
    if cell == "gru":        # GRU: the same tensors
        assert leaves(back).keys() == leaves(m).keys()
        for name, value in leaves(m).items():
            np.testing.assert_array_equal(leaves(back)[name], value)


@pytest.mark.parametrize("layers,bidirectional", SHAPES)
@pytest.mark.parametrize("cell", CELLS)
def test_torch_module_round_trip(cell, layers, bidirectional):
    """A real module's weights give the module's outputs; to_torch loads back into it."""
    torch = pytest.importorskip("torch")
    kind = {"elman": torch.nn.RNN, "gru": torch.nn.GRU, "lstm": torch.nn.LSTM}[cell]
    torch.manual_seed(0)
    rnn = kind(L, H, num_layers=layers, bidirectional=bidirectional, batch_first=True).double()
    head = torch.nn.Linear(H * (2 if bidirectional else 1), C).double()
    m = fastbptt.from_torch(rnn.state_dict(), head.state_dict())
    assert m.cell == cell and m.num_layers == layers and m.directions == (2 if bidirectional else 1)
    np.testing.assert_array_equal(m.V, head.weight.detach().numpy())
    x = np.random.default_rng(2).normal(size=(B, T, L))
    out, state = rnn(torch.from_numpy(x))
    h_n, c_n = state if cell == "lstm" else (state, None)
    want = (out.detach().numpy(), h_n.detach().numpy(),
            None if c_n is None else c_n.detach().numpy())
    close(outputs(m, x, cell), want)
    rnn_sd, head_sd = fastbptt.to_torch(m)
    again = kind(L, H, num_layers=layers, bidirectional=bidirectional, batch_first=True).double()
    again.load_state_dict({k: torch.from_numpy(v) for k, v in rnn_sd.items()})
    np.testing.assert_allclose(again(torch.from_numpy(x))[0].detach().numpy(), want[0],
                               rtol=0, atol=TOLERANCE)
    assert head_sd.keys() == {"weight", "bias"}


def test_accepts_params_layer_and_dicts():
    p = fastbptt.init_params(L, H, C, dtype=np.float32, seed=3)
    rnn, head = fastbptt.to_torch(p)
    assert sorted(rnn) == ["bias_hh_l0", "bias_ih_l0", "weight_hh_l0", "weight_ih_l0"]
    assert rnn["weight_ih_l0"] is not p.U and rnn["weight_ih_l0"].dtype == np.float32
    np.testing.assert_array_equal(rnn["bias_ih_l0"], p.b)
    assert not rnn["bias_hh_l0"].any() and head["weight"].shape == (C, H)
    layer_sd, none = fastbptt.to_torch(fastbptt.Layer(p.U, p.W))
    assert none is None and sorted(layer_sd) == ["weight_hh_l0", "weight_ih_l0"]
    assert fastbptt.to_torch({"U": p.U, "W": p.W})[1] is None
    assert fastbptt.to_torch(dict(p._asdict()))[1].keys() == {"weight", "bias"}
    gru = model("gru", 1, False)
    assert fastbptt.to_torch({"layers": gru.layers})[1] is None


def test_tuples_and_namedtuples_of_your_own_convert_as_grad_reads_them():
    p = fastbptt.init_params(L, H, C, dtype=np.float64, seed=3)
    want_rnn, want_head = fastbptt.to_torch(p)

    class Mine(NamedTuple):                       # W declared before U: read by name
        W: np.ndarray
        U: np.ndarray
        V: np.ndarray
        b: np.ndarray
        c: np.ndarray

    for value in (tuple(p), list(p), Mine(W=p.W, U=p.U, V=p.V, b=p.b, c=p.c)):
        rnn, head = fastbptt.to_torch(value)
        assert rnn.keys() == want_rnn.keys() and head.keys() == want_head.keys()
        for k in rnn:
            np.testing.assert_array_equal(rnn[k], want_rnn[k])
    layer, none = fastbptt.to_torch((p.U, p.W))
    assert none is None and sorted(layer) == ["weight_hh_l0", "weight_ih_l0"]
    rnn, none = fastbptt.to_torch((p.U, p.W, p.b))
    assert none is None and np.array_equal(rnn["bias_ih_l0"], p.b)


def test_big_endian_arrays_are_read_as_their_float_type():
    sd = {k: v.astype(v.dtype.newbyteorder(">")) for k, v in _state("lstm", 2, 2).items()}
    m = fastbptt.from_torch(sd, {"weight": np.ones((C, 2 * H), ">f8")})
    assert m.layers[0][0].U.dtype == np.float64 and m.layers[0][0].U.dtype.isnative
    np.testing.assert_array_equal(fastbptt.to_torch(m)[0]["weight_hh_l1_reverse"],
                                  sd["weight_hh_l1_reverse"])


def test_tensors_and_dtype():
    torch = pytest.importorskip("torch")
    rnn = torch.nn.LSTM(L, H, num_layers=2, bias=False)        # float32
    m = fastbptt.from_torch(rnn)                               # a module works too
    assert m.layers[1][0].U.dtype == np.float32 and m.layers[0][0].b is None
    m64 = fastbptt.from_torch(rnn.state_dict(), dtype=np.float64)
    assert m64.layers[0][0].W.dtype == np.float64 and m64.V is None


def test_summed_bias_and_gru_biases():
    rng = np.random.default_rng(4)
    bi, bh = rng.normal(size=H), rng.normal(size=H)
    sd = {"weight_ih_l0": rng.normal(size=(H, L)), "weight_hh_l0": rng.normal(size=(H, H)),
          "bias_ih_l0": bi, "bias_hh_l0": bh}
    np.testing.assert_array_equal(fastbptt.from_torch(sd).layers[0][0].b, bi + bh)
    gru = {"weight_ih_l0": rng.normal(size=(3 * H, L)), "weight_hh_l0": rng.normal(size=(3 * H, H)),
           "bias_ih_l0": rng.normal(size=3 * H), "bias_hh_l0": rng.normal(size=3 * H)}
    layer = fastbptt.from_torch(gru).layers[0][0]
    assert layer.b is not gru["bias_ih_l0"]
    np.testing.assert_array_equal(layer.bh, gru["bias_hh_l0"])
    mixed = fastbptt.Model(((fastbptt.Layer(gru["weight_ih_l0"], gru["weight_hh_l0"], None,
                                            gru["bias_hh_l0"]),),))
    rnn, _ = fastbptt.to_torch(mixed)
    assert not rnn["bias_ih_l0"].any()
    np.testing.assert_array_equal(rnn["bias_hh_l0"], gru["bias_hh_l0"])


def _state(cell="elman", layers=1, D=1):
    return fastbptt.to_torch(fastbptt.Model(model(cell, layers, D == 2).layers))[0]


@pytest.mark.parametrize("change,message", [
    (lambda sd: sd.pop("weight_hh_l1"), "missing weight_hh_l1"),
    (lambda sd: sd.pop("bias_ih_l0_reverse"), "missing bias_ih_l0_reverse"),
    (lambda sd: sd.update(weight_xx_l0=np.zeros(2)), "unknown key"),
    (lambda sd: sd.update(weight_ih_l00=sd["weight_ih_l0"]), "unknown key.*weight_ih_l00"),
    (lambda sd: sd.update(bias_hh_l01_reverse=sd["bias_hh_l1_reverse"]), "unknown key"),
    (lambda sd: sd.update(weight_hr_l0=np.zeros((1, 2))), "proj_size"),
    (lambda sd: sd.update(weight_hh_l1=np.zeros((2, 2))), r"weight_hh_l1 must have shape \(8, 2\)"),
    (lambda sd: sd.update(weight_ih_l1=np.zeros((8, 2))), r"weight_ih_l1 must have shape \(8, 4\)"),
    (lambda sd: sd.update(bias_hh_l0=np.zeros(7)), r"bias_hh_l0 must have shape \(8,\)"),
    (lambda sd: sd.update(weight_hh_l0=np.zeros((5, 2))), "G = 1, 3 or 4"),
    (lambda sd: sd.clear(), "empty"),
])
def test_bad_state_dicts(change, message):
    sd = _state("lstm", 2, 2)
    change(sd)
    with pytest.raises(ValueError, match=message):
        fastbptt.from_torch(sd)


def test_a_mistyped_layer_number_is_reported_not_enumerated():
    """A key of layer 9999999999 makes the dict one of 10^10 layers, all but three of them
    missing: the message names the first few without building every expected key (run
    in a process of 3 GB of address space, so that a regression fails rather than take
    the machine's memory)."""
    limit = 3 << 30
    code = (                # the limit set by the child (a preexec_fn forks a JAX process)
        "import resource\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
        "import fastbptt\n"
        "m = fastbptt.init_params(3, 2, 3, cell='lstm', num_layers=2, bidirectional=True, "
        "seed=0)\n"
        "sd = fastbptt.to_torch(m)[0]\n"
        "sd['weight_hh_l9999999999'] = sd['weight_hh_l0']\n"
        "try:\n"
        "    fastbptt.from_torch(sd)\n"
        "except ValueError as e:\n"
        "    print(e)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert re.fullmatch(r"the RNN state dict is missing bias_hh_l2, bias_hh_l2_reverse, .*, "
                        r"weight_ih_l2_reverse and 79999999975 more \(it has 10000000000 "
                        r"layer\(s\), 2 direction\(s\), with biases\)\n", run.stdout), run.stdout


def test_bad_heads_and_kinds():
    sd = _state()
    with pytest.raises(ValueError, match=r"nn.Linear's: .* got keys \['extra', 'weight'\]$"):
        fastbptt.from_torch(sd, {"weight": np.zeros((C, H)), "extra": np.zeros(1)})
    with pytest.raises(ValueError, match=r"got keys \['fc.bias', 'fc.weight'\]: pass the "
                                         r"Linear's own, e.g. \{k\[3:\]: v for k, v in "
                                         r"sd.items\(\) if k.startswith\('fc.'\)\}"):
        fastbptt.from_torch(sd, {"fc.weight": np.zeros((C, H)), "fc.bias": np.zeros(C)})
    with pytest.raises(ValueError, match=r"head_state_dict \(an nn.Linear over the top layer's "
                                         r"2 outputs\) weight must have shape \(4, 2\)"):
        fastbptt.from_torch(sd, {"weight": np.zeros((C, 3))})
    with pytest.raises(ValueError, match=r"head_state_dict .* bias must have shape \(4,\)"):
        fastbptt.from_torch(sd, {"weight": np.zeros((C, H)), "bias": np.zeros(3)})
    with pytest.raises(ValueError, match=r"head_state_dict weight must be \(output_size, 2\)"
                                         r".*got shape \(\)"):
        fastbptt.from_torch(sd, {"weight": np.float64(1.0)})
    with pytest.raises(ValueError, match=r"head_state_dict weight must be \(output_size, 2\) "
                                         r"with output_size >= 1.*got shape \(0, 2\)"):
        fastbptt.from_torch(sd, {"weight": np.zeros((0, H))})
    with pytest.raises(ValueError, match=r"weight_ih_l0 must be \(2, input_size\) with "
                                         r"input_size >= 1; got shape \(2, 0\)"):
        fastbptt.from_torch({**sd, "weight_ih_l0": np.zeros((H, 0))})
    with pytest.raises(ValueError, match=r"got shape \(\)"):
        fastbptt.from_torch({**sd, "weight_ih_l0": np.float64(1.0)})
    with pytest.raises(TypeError, match="state dict"):
        fastbptt.from_torch([("weight_ih_l0", np.zeros((2, 3)))])
    with pytest.raises(TypeError, match=r"the state dicts hold float32 \(weight_ih_l0\); "
                                        r"float64 \(weight_hh_l0, bias_ih_l0, bias_hh_l0\); "
                                        r"pass dtype"):
        fastbptt.from_torch({**sd, "weight_ih_l0": sd["weight_ih_l0"].astype(np.float32)})
    with pytest.raises(TypeError, match="must hold floats"):
        fastbptt.from_torch({**sd, "weight_ih_l0": np.zeros((2, 3), int)})
    with pytest.raises(TypeError, match="Params, Layer or Model"):
        fastbptt.to_torch(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="a head bias c but no V"):
        fastbptt.to_torch(fastbptt.Model(model("gru", 1, False).layers, None, np.zeros(C)))
    with pytest.raises(ValueError, match="W"):
        fastbptt.to_torch(fastbptt.Layer(np.zeros((2, 3)), np.zeros((3, 3))))


def test_torch_dtypes_bfloat16_and_prefixed_keys():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(L, H, num_layers=2, bidirectional=True)
    want = fastbptt.from_torch(lstm.state_dict(), dtype=np.float64)
    got = fastbptt.from_torch(lstm.state_dict(), dtype=torch.float64)    # torch's dtype
    for a, b in zip(leaves(got).values(), leaves(want).values()):
        np.testing.assert_array_equal(a, b)
    low = {k: v.bfloat16() for k, v in lstm.state_dict().items()}
    with pytest.raises(TypeError, match="hold bfloat16; pass dtype=np.float32"):
        fastbptt.from_torch(low)
    exact = fastbptt.from_torch(low, dtype=np.float32)     # bfloat16 -> float32 is exact
    np.testing.assert_array_equal(exact.layers[1][1].W,
                                  low["weight_hh_l1_reverse"].float().numpy())
    with pytest.raises(TypeError, match="dtype must be float32 or float64; got 'nonsense'"):
        fastbptt.from_torch(lstm.state_dict(), dtype="nonsense")
    with pytest.raises(TypeError, match="dtype must be float32 or float64; got int32"):
        fastbptt.from_torch(lstm.state_dict(), dtype=torch.int32)
    for prefix in ("rnn.", "module."):
        with pytest.raises(ValueError, match=f"every key of the RNN state dict starts with "
                                             f"'{prefix}'.*k\\[{len(prefix)}:\\]"):
            fastbptt.from_torch({prefix + k: v for k, v in lstm.state_dict().items()})
    # a parent module's whole state dict: the RNN's and its head's keys
    parent = {**{"rnn." + k: v for k, v in lstm.state_dict().items()},
              "fc.weight": torch.zeros(2, 4), "fc.bias": torch.zeros(2)}
    with pytest.raises(ValueError, match=r"the RNN's keys carry the prefix 'rnn.' .*"
                                         r"k\[4:\].*and a head Linear's as head_state_dict"):
        fastbptt.from_torch(parent)
    projected = torch.nn.LSTM(3, 4, proj_size=2).state_dict()
    with pytest.raises(ValueError, match="weight_hr_l.* proj_size > 0"):
        fastbptt.from_torch({"m." + k: v for k, v in projected.items()})
    # weights on the meta device have no values (torch's NotImplementedError came out)
    with pytest.raises(TypeError, match=r"rnn_state_dict\['weight_ih_l0'\] is a tensor on the "
                                        r"'meta' device, which holds no values"):
        fastbptt.from_torch(torch.nn.GRU(3, 4, device="meta").state_dict())


def test_import_does_not_import_torch():
    code = ("import sys, fastbptt; fastbptt.from_torch, fastbptt.to_torch; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
