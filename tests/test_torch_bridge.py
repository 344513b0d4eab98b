"""fastbptt.torch against PyTorch's own modules: outputs, final states and every gradient
after loading the same state dict, in float64, over the options a user can pick."""
import itertools
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install "
                                            "'fastbptt[torch]')")
import torch.nn.functional as F                                          # noqa: E402
from torch.nn.utils.rnn import pack_padded_sequence                       # noqa: E402

import fastbptt                                                           # noqa: E402
import fastbptt.torch as ft                                               # noqa: E402

CELLS = {"elman": "RNN", "gru": "GRU", "lstm": "LSTM"}
TOLERANCE = 1e-10


def modules(cell, seed=0, **options):
    """(native, bridge) with the same weights, float64."""
    name = CELLS[cell]
    torch.manual_seed(seed)
    native = getattr(torch.nn, name)(dtype=torch.float64, **options)
    bridge = getattr(ft, name)(dtype=torch.float64, **options)
    bridge.load_state_dict(native.state_dict())
    return native, bridge


def relative(a, b):
    scale = float(b.abs().max())
    return float((a - b).abs().max()) / (scale if scale else 1.0)


def leaves(tensors):
    """Tensors of a nested output: PackedSequence data, (h_n, c_n) tuples."""
    for t in tensors:
        if isinstance(t, torch.nn.utils.rnn.PackedSequence):
            yield t.data
        elif isinstance(t, (tuple, list)):
            yield from leaves(t)
        else:
            yield t


def run(module, inputs, states):
    """Outputs of ``module`` and the gradients of a loss that uses every output, with
    respect to the inputs, the initial states and every parameter."""
    for t in inputs + states:
        if t.is_floating_point():
            t.grad = None
    module.zero_grad()
    x = inputs[0]
    if len(inputs) > 1:                      # (padded, lengths): pack, unsorted
        x = pack_padded_sequence(inputs[0], inputs[1], batch_first=module.batch_first,
                                 enforce_sorted=False)
    hx = None if not states else (tuple(states) if len(states) == 2 else states[0])
    output, hidden = module(x, hx)
    outs = list(leaves([output, hidden]))
    weights = [torch.linspace(-1, 1, o.numel(), dtype=o.dtype).reshape(o.shape) for o in outs]
    loss = sum((torch.sin(o) * w).sum() for o, w in zip(outs, weights))
    loss.backward()
    grads = [t.grad for t in inputs[:1] + states] + [p.grad for p in module.parameters()]
    return [o.detach() for o in outs], grads


GRID = list(itertools.product([1, 2], [False, True], [False, True], [True, False],
                              [False, True], [False, True]))


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("layers, bidirectional, batch_first, bias, packed, hx", GRID,
                         ids=["-".join(f"{n}{int(v)}" for n, v in zip(
                             ["l", "bi", "bf", "bias", "packed", "hx"], g)) for g in GRID])
def test_matches_native(cell, layers, bidirectional, batch_first, bias, packed, hx):
    B, T, F_in, H = 4, 6, 5, 3
    native, bridge = modules(cell, input_size=F_in, hidden_size=H, num_layers=layers,
                             bidirectional=bidirectional, batch_first=batch_first, bias=bias)
    rng = np.random.default_rng(1)
    shape = (B, T, F_in) if batch_first else (T, B, F_in)
    inputs = [torch.tensor(rng.normal(size=shape), requires_grad=True)]
    if packed:
        inputs.append(torch.tensor([4, 6, 1, 3]))
    S = layers * (2 if bidirectional else 1)
    states = [torch.tensor(rng.normal(size=(S, B, H)), requires_grad=True)
              for _ in range(2 if cell == "lstm" else 1)] if hx else []
    got, want = run(bridge, inputs, states), run(native, inputs, states)
    for kind, a, b in [("output", *pair) for pair in zip(got[0], want[0])] + \
            [("gradient", *pair) for pair in zip(got[1], want[1])]:
        assert a.shape == b.shape and a.dtype == b.dtype, kind
        assert a.is_contiguous() or not b.is_contiguous(), kind    # contiguous as native
        assert relative(a, b) <= TOLERANCE, (kind, relative(a, b))


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("batch_first", [False, True])
def test_unbatched(cell, batch_first):
    native, bridge = modules(cell, input_size=3, hidden_size=4, num_layers=2,
                             batch_first=batch_first)
    x = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    states = [torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
              for _ in range(2 if cell == "lstm" else 1)]
    got, want = run(bridge, [x], states), run(native, [x], states)
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        assert a.shape == b.shape and relative(a, b) <= TOLERANCE


def test_relu_rnn():
    native, bridge = modules("elman", input_size=3, hidden_size=4, num_layers=2,
                             bidirectional=True, nonlinearity="relu")
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    got, want = run(bridge, [x], []), run(native, [x], [])
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        assert relative(a, b) <= TOLERANCE


@pytest.mark.parametrize("batch", [1, 4, 40])
def test_relu_states_that_overflow_keep_natives_gradients(batch):
    """relu'(+inf) = 1: a state that overflows passes its gradient on, as in PyTorch."""
    native, bridge = modules("elman", input_size=1, hidden_size=1, nonlinearity="relu")
    for module in (native, bridge):
        with torch.no_grad():
            module.weight_ih_l0.fill_(1e200)
            module.weight_hh_l0.fill_(0.5)
            module.bias_ih_l0.fill_(0.0)
            module.bias_hh_l0.fill_(0.0)
    x = torch.ones(2, batch, 1, dtype=torch.float64)
    x[0] = 1e200                                         # h_0 = inf, then h_1 = inf
    grads = []
    for module in (bridge, native):
        xi = x.clone().requires_grad_()
        module.zero_grad()
        module(xi)[0].sum().backward()
        grads.append([xi.grad] + [p.grad for p in module.parameters()])
    assert grads[1][0].isfinite().all() and grads[1][3].isfinite().all()
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, equal_nan=True, rtol=TOLERANCE, atol=0)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.uint16, torch.uint32, torch.uint64,
                                   torch.int16])
def test_an_id_out_of_range_is_named_for_every_integer_dtype(dtype):
    ids = torch.tensor([[1], [200]]).to(dtype)             # (T, B)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, input_size=6\); got 200 "
                                         r"at index \(1, 0\) of input"):
        ft.GRU(6, 4)(ids)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("layout", ["time-major", "batch-first", "packed", "unbatched"])
def test_token_ids_are_one_hot_inputs(cell, layout):
    """Integer input is read as one-hot vectors of input_size features."""
    V, B, T = 6, 3, 5
    native, bridge = modules(cell, input_size=V, hidden_size=4, num_layers=2,
                             batch_first=layout == "batch-first", bidirectional=True)
    ids = torch.randint(0, V, (T,) if layout == "unbatched" else (T, B),
                        generator=torch.Generator().manual_seed(4))
    if layout == "batch-first":
        ids = ids.T
    one_hot = F.one_hot(ids, V).double()
    states = [torch.randn(4, *(() if layout == "unbatched" else (B,)), 4, dtype=torch.float64,
                          requires_grad=True) for _ in range(2 if cell == "lstm" else 1)]
    if layout == "packed":
        lengths = torch.tensor([5, 2, 4])
        got, want = (run(m, [x, lengths], states) for m, x in ((bridge, ids), (native, one_hot)))
    else:
        got, want = run(bridge, [ids], states), run(native, [one_hot], states)
    assert got[1][0] is None
    for a, b in zip(got[0] + got[1][1:], want[0] + want[1][1:]):
        assert a.shape == b.shape and relative(a, b) <= TOLERANCE


@pytest.mark.parametrize("cell", CELLS)
def test_gradcheck(cell):
    _, bridge = modules(cell, input_size=2, hidden_size=2, num_layers=2, bidirectional=True)
    names = [n for n, _ in bridge.named_parameters()]
    x = torch.randn(3, 2, 2, dtype=torch.float64, requires_grad=True)
    states = [torch.randn(4, 2, 2, dtype=torch.float64, requires_grad=True)
              for _ in range(2 if cell == "lstm" else 1)]

    def f(x, *tensors):
        hx = tensors[:len(states)]
        params = dict(zip(names, tensors[len(states):]))
        out, hidden = torch.func.functional_call(
            bridge, params, (x, hx if cell == "lstm" else hx[0]))
        return (out,) + (hidden if cell == "lstm" else (hidden,))

    params = [p.detach().clone().requires_grad_() for p in bridge.parameters()]
    assert torch.autograd.gradcheck(f, (x, *states, *params))


@pytest.mark.parametrize("cell", CELLS)
def test_adam_training_follows_native(cell):
    """20 steps of an embedding, the recurrent module and a linear head, trained with Adam
    on summed cross-entropy: the loss curves agree."""
    V, H, B, T = 7, 6, 3, 8
    curves = []
    for which in (0, 1):
        pair = modules(cell, input_size=5, hidden_size=H, num_layers=2, batch_first=True)
        torch.manual_seed(2)
        embed, head = torch.nn.Embedding(V, 5, dtype=torch.float64), \
            torch.nn.Linear(H, V, dtype=torch.float64)
        model = torch.nn.ModuleList([embed, pair[which], head])
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        data = torch.randint(0, V, (B, T + 1), generator=torch.Generator().manual_seed(3))
        losses = []
        for _ in range(20):
            optimizer.zero_grad()
            out, _ = model[1](embed(data[:, :-1]))
            loss = F.cross_entropy(head(out).reshape(-1, V), data[:, 1:].reshape(-1),
                                   reduction="sum")
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        curves.append(np.array(losses))
    assert curves[0][-1] < curves[0][0]
    np.testing.assert_allclose(curves[1], curves[0], rtol=1e-6)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("packed", [False, True])
def test_dropout_masks_as_native(cell, packed):
    """Training mode with dropout: the same seed zeroes the same entries as PyTorch."""
    native, bridge = modules(cell, input_size=3, hidden_size=4, num_layers=3, dropout=0.5,
                             bidirectional=True)
    x = torch.randn(6, 4, 3, dtype=torch.float64, requires_grad=True)
    inputs = [x, torch.tensor([6, 2, 5, 1])] if packed else [x]
    results = []
    for module in (native, bridge):
        torch.manual_seed(7)
        results.append(run(module.train(), inputs, []))
    for a, b in zip(results[1][0] + results[1][1], results[0][0] + results[0][1]):
        assert relative(a, b) <= TOLERANCE
    with torch.no_grad():                                  # eval: no dropout
        assert relative(bridge.eval()(x)[0], native.eval()(x)[0]) <= TOLERANCE


@pytest.mark.parametrize("layers", [1, 2])
def test_chunked_truncation_is_native_on_detached_chunks(layers):
    """truncate=k, stride=k: gradient never crosses a chunk boundary, which is PyTorch's
    module run chunk by chunk with the carried state detached in between."""
    k, T = 3, 8
    native, bridge = modules("elman", input_size=2, hidden_size=3, num_layers=layers)
    bridge.truncate = bridge.stride = k
    x = torch.randn(T, 2, 2, dtype=torch.float64, requires_grad=True)
    w = torch.randn(T, 2, 3, dtype=torch.float64)
    out, _ = bridge(x)
    (out * w).sum().backward()
    got = [x.grad.clone()] + [p.grad for p in bridge.parameters()]
    x.grad, h, outs = None, None, []
    for start in range(0, T, k):
        o, h = native(x[start:start + k], h)
        h = h.detach()
        outs.append(o)
    (torch.cat(outs) * w).sum().backward()
    want = [x.grad] + [p.grad for p in native.parameters()]
    assert relative(out.detach(), torch.cat(outs).detach()) <= TOLERANCE
    for a, b in zip(got, want):
        assert relative(a, b) <= TOLERANCE


def test_windows_match_the_layer_api():
    """truncate=k, stride=1 passes BPTT(k; 1) on to fastbptt.layer.vjp."""
    _, bridge = modules("elman", input_size=2, hidden_size=3, batch_first=True)
    bridge.truncate = 4
    x = torch.randn(2, 9, 2, dtype=torch.float64, requires_grad=True)
    dh = torch.randn(2, 9, 3, dtype=torch.float64)
    out, _ = bridge(x)
    out.backward(dh)
    p = dict(bridge.named_parameters())
    layer = fastbptt.Layer(p["weight_ih_l0"].detach().numpy(), p["weight_hh_l0"].detach().numpy(),
                           (p["bias_ih_l0"] + p["bias_hh_l0"]).detach().numpy())
    _, back = fastbptt.layer.vjp(x.detach().numpy(), layer, truncate=4, stride=1)
    r = back(dh.numpy())
    np.testing.assert_allclose(x.grad.numpy(), r.dx, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(p["weight_hh_l0"].grad.numpy(), r.grads.W, rtol=1e-12)
    np.testing.assert_allclose(p["bias_hh_l0"].grad.numpy(), r.grads.b, rtol=1e-12)


@pytest.mark.parametrize("cell", CELLS)
def test_nan_propagates_as_in_native(cell):
    native, bridge = modules(cell, input_size=2, hidden_size=3, num_layers=2)
    x = torch.randn(5, 2, 2, dtype=torch.float64)
    x[2, 1, 0] = float("nan")
    x.requires_grad_()
    got, want = run(bridge, [x], []), run(native, [x], [])
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        assert torch.equal(a.isnan(), b.isnan())
        torch.testing.assert_close(a, b, equal_nan=True, rtol=TOLERANCE, atol=1e-14)


def test_float32_close_to_native():
    native, bridge = modules("elman", input_size=4, hidden_size=5, num_layers=2)
    native.float(), bridge.float()
    x = torch.randn(7, 3, 4)
    with torch.no_grad():
        assert relative(bridge(x)[0], native(x)[0]) < 1e-5


def test_biases_get_their_own_gradient_tensors():
    _, bridge = modules("elman", input_size=2, hidden_size=3)
    bridge(torch.randn(4, 2, 2, dtype=torch.float64))[0].sum().backward()
    assert torch.equal(bridge.bias_ih_l0.grad, bridge.bias_hh_l0.grad)
    assert bridge.bias_ih_l0.grad.data_ptr() != bridge.bias_hh_l0.grad.data_ptr()


def test_the_forward_pass_is_freed_by_backward_unless_the_graph_is_retained(monkeypatch):
    """As a native module's saved states: after ``backward`` nothing of the forward pass
    stays with the graph (the loss tensor kept for logging, say), but with
    ``retain_graph=True`` a second backward gives the same gradients."""
    import gc
    import weakref

    from fastbptt.torch import _function

    made = []
    vjp = _function._layer.vjp

    def recording(*args, **kwargs):
        out, back = vjp(*args, **kwargs)
        made.append(weakref.ref(back))
        return out, back

    monkeypatch.setattr(_function._layer, "vjp", recording)
    torch.manual_seed(0)
    module = ft.LSTM(3, 4, dtype=torch.float64)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    loss = module(x)[0].square().sum()
    loss.backward()
    gc.collect()
    assert len(made) == 1 and made[0]() is None          # loss is alive, back is not
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        loss.backward()
    module.zero_grad()
    loss = module(x)[0].square().sum()
    loss.backward(retain_graph=True)
    first = module.weight_hh_l0.grad.clone()
    assert made[1]() is not None
    module.zero_grad()
    loss.backward()
    assert torch.equal(module.weight_hh_l0.grad, first)
    gc.collect()
    assert made[1]() is None


def test_truncate_and_stride_are_kept_as_python_ints():
    module = ft.LSTM(3, 4, truncate=torch.tensor(3), stride=np.int64(2))
    assert type(module.truncate) is int and type(module.stride) is int
    assert module.truncate == 3 and module.stride == 2
    assert "truncate=3, stride=2" in repr(module)


def test_refusals():
    with pytest.raises(NotImplementedError, match="use torch.nn.LSTM"):
        ft.LSTM(4, 8, proj_size=2)
    with pytest.raises(TypeError, match=r"float32 or float64.*\.float\(\)"):
        ft.RNN(2, 3, dtype=torch.float16)(torch.randn(4, 1, 2, dtype=torch.float16))
    with pytest.raises(ValueError, match="runs on the CPU"):
        ft.RNN(2, 3, device="meta")(torch.randn(4, 1, 2, device="meta"))
    for module, grad in itertools.product((ft.RNN, ft.GRU, ft.LSTM), (False, True)):
        with torch.set_grad_enabled(grad), pytest.raises(
                ValueError, match=rf"^fastbptt.torch.{module.__name__} runs on the CPU; got "
                                  r"weight_ih_l0 on meta: move the module"):
            module(2, 3, device="meta")(torch.randn(4, 1, 2))
    with pytest.raises(ValueError, match="reverse direction"):
        ft.RNN(2, 3, bidirectional=True, truncate=4)
    with pytest.raises(ValueError, match="stride=truncate"):
        ft.GRU(2, 3, num_layers=2, truncate=4, stride=2)
    with pytest.raises(ValueError, match="stride must not exceed truncate"):
        ft.RNN(2, 3, truncate=2, stride=3)
    bridge = ft.RNN(2, 3, dtype=torch.float64)
    x = torch.randn(4, 1, 2, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="hx dtype"):
        bridge(x, torch.zeros(1, 1, 3))
    with pytest.raises(RuntimeError, match="input_size"):
        bridge(torch.randn(4, 1, 5, dtype=torch.float64))
    for kind in (torch.bool, torch.complex128):       # neither floats nor token ids
        for shape in ((4, 1, 2), (4, 1)):
            with pytest.raises(TypeError, match=f"floats of the weights' dtype, or integer "
                                                f"token ids; got {kind}"):
                bridge(torch.ones(shape, dtype=kind))
    (g,) = torch.autograd.grad(bridge(x)[0].sum(), x, create_graph=False)
    assert g.shape == x.shape
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(bridge(x)[0].sum(), x, create_graph=True)


@pytest.mark.parametrize("shape", [(1, 1, 2), (1, 4, 1)], ids=["T1", "L1"])
def test_input_gradient_outlives_later_calls(shape):
    """A gradient stays as it was when later calls run (for one sequence of one step, or
    of one feature, the layer API's dx is a view of memory that its next call reuses)."""
    _, bridge = modules("elman", input_size=shape[2], hidden_size=3, batch_first=True)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    bridge(x)[0].sum().backward()
    kept = x.grad.clone()
    bridge(3 * torch.randn(shape, dtype=torch.float64, requires_grad=True))[0].sum().backward()
    assert torch.equal(x.grad, kept)


def test_no_grad_keeps_nothing():
    _, bridge = modules("elman", input_size=2, hidden_size=3)
    with torch.no_grad():
        out, h = bridge(torch.randn(4, 2, 2, dtype=torch.float64))
    assert out.grad_fn is None and h.grad_fn is None


def test_repr_names_truncation():
    assert repr(ft.RNN(2, 3, truncate=5, stride=5)) == "RNN(2, 3, truncate=5, stride=5)"


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("dx", [False, True])
def test_a_weight_changed_before_backward_is_refused_as_native(cell, dx):
    """The backward pass reads the weights the forward pass saw, or raises (an optimizer
    step between forward and backward), where PyTorch's own module does: never gradients
    of neither the old values nor the new."""
    names = [n for n, _ in modules(cell, input_size=3, hidden_size=4)[0].named_parameters()]
    names = [n.replace("l0", layer) for n in names for layer in ("l0", "l1")]
    raised = {}
    for name in names:
        for module in modules(cell, input_size=3, hidden_size=4, num_layers=2,
                              bidirectional=True):
            x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=dx)
            before = module(x)[0].sum()
            with torch.no_grad():
                getattr(module, name).mul_(0.5)
            try:
                before.backward()
                raised.setdefault(name, []).append(False)
            except RuntimeError as error:
                assert "modified by an inplace operation" in str(error)
                raised.setdefault(name, []).append(True)
    assert all(native == bridge for native, bridge in raised.values()), raised
    assert raised["weight_hh_l0"] == [True, True] and raised["bias_hh_l1"] == [False, False]
    assert raised["weight_ih_l0"] == [dx, dx]


@pytest.mark.parametrize("cell", CELLS)
def test_torch_compile_runs_it_between_graphs(cell):
    native, bridge = modules(cell, input_size=3, hidden_size=4)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    compiled = torch.compile(bridge, backend="eager")      # the first call traces
    for module in (native, compiled):
        module(x)[0].square().sum().backward()
    want, got = leaves(native.parameters()), leaves(bridge.parameters())
    assert all(relative(g.grad, w.grad) < TOLERANCE for g, w in zip(got, want))


@pytest.mark.parametrize("hx", [False, True], ids=["no-hx", "hx"])
@pytest.mark.parametrize("ids", [True, False], ids=["ids", "float"])
@pytest.mark.parametrize("packed", [False, True], ids=["tensor", "packed"])
def test_torch_compile_takes_every_input(ids, packed, hx):
    """The forward pass runs whole between the graphs. Traced in part, it failed under
    warnings as errors: Dynamo could not trace the ids' range check (functorch's
    wrapped-tensor test), and the frames it resumed after the kernels read ``.grad`` of
    the non-leaf tensors they held (a given hx, a PackedSequence's output)."""
    native, bridge = modules("lstm", input_size=6, hidden_size=4)
    tokens = torch.randint(0, 6, (5, 2), generator=torch.Generator().manual_seed(0))
    one_hot = F.one_hot(tokens, 6).double()
    x = tokens if ids else one_hot
    if packed:
        x, one_hot = (pack_padded_sequence(v, [5, 3]) for v in (x, one_hot))
    states = [torch.randn(1, 2, 4, dtype=torch.float64, requires_grad=True)
              for _ in range(2)] if hx else []
    compiled = torch.compile(bridge, backend="eager")
    grads = []
    for module, inputs in ((native, one_hot), (compiled, x)):
        out, (h, c) = module(inputs, tuple(states) if hx else None)
        ((out.data if packed else out).square().sum() + h.sum() + c.sum()).backward()
        grads.append([s.grad.clone() for s in states])
        for s in states:
            s.grad = None
    want, got = leaves(native.parameters()), leaves(bridge.parameters())
    assert all(relative(g.grad, w.grad) < TOLERANCE for g, w in zip(got, want))
    assert all(relative(g, w) < TOLERANCE for g, w in zip(*grads[::-1]))
    if ids:
        bad = torch.full((5, 2), 6)
        with pytest.raises(ValueError, match="token ids must lie in"):
            compiled(pack_padded_sequence(bad, [5, 3]) if packed else bad)


@pytest.mark.parametrize("cell", CELLS)
def test_autocast_computes_in_the_weights_dtype(cell):
    name = CELLS[cell]
    torch.manual_seed(0)
    bridge = getattr(ft, name)(3, 4)
    x = torch.randn(5, 2, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = x.to(torch.bfloat16)
        out, _ = bridge(low)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, bridge(low.float())[0], rtol=0, atol=0)


def test_scripting_and_token_id_mistakes_get_clear_errors():
    bridge = ft.LSTM(3, 4)
    with warnings.catch_warnings(), \
            pytest.raises(TypeError, match="cannot be compiled by torch.jit.script"):
        warnings.simplefilter("ignore", DeprecationWarning)     # torch.jit is, in 2.13
        torch.jit.script(torch.nn.Sequential(bridge))
    x = torch.randn(5, 2, 3)
    for grad in (False, True):      # traced, the kernels' outputs would be constants
        with torch.set_grad_enabled(grad), warnings.catch_warnings(), \
                pytest.raises(TypeError, match="cannot be traced by torch.jit.trace"):
            warnings.simplefilter("ignore")
            torch.jit.trace(bridge, (x,))
    with pytest.raises(ValueError, match=r"Expected input to be 1D or 2D token ids \(integer "
                                         r"input, one axis fewer than float features\), got "
                                         r"3D tensor instead"):
        bridge(torch.randint(0, 3, (5, 2, 3)))
    ids = torch.tensor([[0, 1], [3, 0], [2, -1]])           # (T, B): time-major
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, input_size=3\); got 3 "
                                         r"at index \(1, 0\) of input"):
        bridge(ids)
    batch_first = ft.GRU(3, 4, batch_first=True)
    with pytest.raises(ValueError, match=r"got -1 at index \(0, 2\) of input"):
        batch_first(ids.T.contiguous().flip(0))
    packed = pack_padded_sequence(torch.tensor([[0, 5], [1, 2]]), [2, 2])
    with pytest.raises(ValueError, match=r"got 5 at index \(1,\) of input.data"):
        bridge(packed)


@pytest.mark.parametrize("cell", CELLS)
@pytest.mark.parametrize("shape", [(0, 2, 3), (0, 3)])
def test_no_steps_is_refused_as_native(cell, shape):
    native, bridge = modules(cell, input_size=3, hidden_size=4)
    for module in (native, bridge):
        with pytest.raises(RuntimeError, match="Expected sequence length to be larger than 0"):
            module(torch.zeros(shape, dtype=torch.float64))


def test_input_and_hx_of_the_wrong_kind_are_type_errors_naming_them():
    """An LSTM's hx is a pair (h_0, c_0): a tensor of two states stacked, or three
    tensors, is refused (torch.nn.LSTM refuses them too), and so is anything but a tensor
    as input, hx, h_0 or c_0."""
    x, state = torch.randn(5, 2, 3), torch.zeros(1, 2, 4)
    lstm, gru = ft.LSTM(3, 4), ft.GRU(3, 4)
    cases = [(lstm, x, torch.zeros(2, 1, 2, 4), "hx of an LSTM must be a tuple .* got a Tensor"),
             (lstm, x, (state,) * 3, r"hx of an LSTM must be a tuple .* got a tuple of 3"),
             (lstm, x, (state, state.numpy()), "c_0 must be a tensor; got ndarray"),
             (gru, x, (state,), "hx must be a tensor; got tuple"),
             (gru, x.numpy(), None, "input must be a tensor or a PackedSequence; got ndarray")]
    for module, input, hx, message in cases:
        with pytest.raises(TypeError, match=message):
            module(input, hx)
    lstm(x, [state, state])                 # a list of two, as torch.nn.LSTM takes it


@pytest.mark.parametrize("cell", CELLS)
def test_saved_tensor_hooks_that_copy_or_pickle(cell):
    """A pack hook may keep a copy of what is saved (compression, offloading to disk): the
    copy lost the layer's state, and backward failed (or pickling it did)."""
    import io

    def pack(t):
        buffer = io.BytesIO()
        torch.save(t.clone(), buffer)
        return buffer.getvalue()

    def unpack(data):
        return torch.load(io.BytesIO(data), weights_only=False)
    native, bridge = modules(cell, input_size=3, hidden_size=4)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    for module in (native, bridge):
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            out = module(x)[0]
        out.square().sum().backward()
    want, got = leaves(native.parameters()), leaves(bridge.parameters())
    assert all(relative(g.grad, w.grad) < TOLERANCE for g, w in zip(got, want))


def _copying_hooks():
    return torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t)


def _pinning_hooks():
    return torch.autograd.graph.save_on_cpu(pin_memory=True)


@pytest.mark.parametrize("hooks", [_copying_hooks, _pinning_hooks], ids=["clone", "pinned"])
@pytest.mark.parametrize("cell", CELLS)
def test_weights_changed_in_place_under_hooks_that_copy_get_the_read_weights_gradients(
        cell, hooks):
    """Under hooks that pack copies, autograd checks no version, and a native module's
    backward pass reads its saved copies of the weights: changed in place before it (an
    optimizer step), the bridge read the new ones and gave gradients 50% off. And
    save_on_cpu(pin_memory=True) packs copies too: it lost the layer's state."""
    native, bridge = modules(cell, input_size=3, hidden_size=6, num_layers=2)
    x = torch.randn(5, 4, 3, dtype=torch.float64)
    grads = []
    for module in (native, bridge):
        data = x.clone().requires_grad_()
        with hooks():
            out = module(data)[0]
        with torch.no_grad():
            for p in module.parameters():
                p.mul_(0.5)
        out.square().sum().backward()
        grads.append([data.grad, *(p.grad for p in module.parameters())])
    assert all(relative(g, w) < TOLERANCE for g, w in zip(grads[1], grads[0]))


def test_grad_enabled_inside_inference_mode_runs_as_the_native_module():
    """torch.enable_grad() inside inference_mode: the native module returns inference
    tensors that need no grad; the bridge tried to save them for backward and raised."""
    native, bridge = modules("lstm", input_size=3, hidden_size=4)
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    with torch.inference_mode(), torch.enable_grad():
        want, got = native(x), bridge(x)
    for g, w in zip(leaves(got), leaves(want)):
        assert g.is_inference() and not g.requires_grad and relative(g, w) < TOLERANCE


def test_checkpointing_still_frees_the_layers_states_after_the_forward_pass():
    """Under torch.utils.checkpoint (saved-tensors hooks of PyTorch's own, which recompute
    the forward pass) the graph does not keep the layer's states; under the caller's own
    hooks, which may copy what is saved, it keeps them for the backward pass."""
    import torch.utils.checkpoint as checkpoint

    native, bridge = modules("lstm", input_size=3, hidden_size=4)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    out = checkpoint.checkpoint(lambda x: bridge(x)[0], x, use_reentrant=False)
    assert type(out.grad_fn).__name__ == "_LayersBackward" and out.grad_fn.fastbptt_back is None
    out.square().sum().backward()
    want = native(x)[0]
    want.square().sum().backward()
    assert all(relative(g.grad, w.grad) < TOLERANCE
               for g, w in zip(leaves(bridge.parameters()), leaves(native.parameters())))
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
        assert bridge(x)[0].grad_fn.fastbptt_back is not None
    # hooks that hand the holder back as saved (save_on_cpu's, for a CPU tensor): the
    # states go with it after the backward pass, not with the graph
    with torch.autograd.graph.save_on_cpu(pin_memory=False):
        out = bridge(x)[0]
    out.square().sum().backward()
    assert out.grad_fn.fastbptt_back is None


def test_torch_export_is_refused_in_a_sentence_and_compile_still_works():
    """torch.export failed inside the bridge (.numpy() of a subclass tensor), and broke
    every torch.compile after it in the process."""
    native, bridge = modules("lstm", input_size=3, hidden_size=4)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    with pytest.raises(TypeError, match="cannot be exported by torch.export"):
        torch.export.export(bridge, (x,))
    with torch.no_grad():
        out = torch.compile(bridge, backend="eager")(x)[0]
        assert relative(out, native(x)[0]) < TOLERANCE


def test_torch_compile_after_dynamo_reset_runs_it_between_graphs():
    """A disabled forward made by an earlier compile (kept across torch._dynamo.reset())
    let Dynamo trace into fastbptt's helpers, a warning (here an error) on each."""
    native, bridge = modules("gru", input_size=3, hidden_size=4)
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    for _ in range(2):
        torch._dynamo.reset()
        with torch.no_grad():
            out = torch.compile(bridge, backend="eager")(x)[0]
            assert relative(out, native(x)[0]) < TOLERANCE


def test_fx_tracing_says_to_make_the_modules_leaves():
    """torch.fx traces into modules that are not torch.nn's; as leaves they trace."""
    native, bridge = modules("lstm", input_size=3, hidden_size=4)
    model = torch.nn.Sequential(bridge)
    with pytest.raises(TypeError, match="make them leaves"):
        torch.fx.symbolic_trace(model)

    class Leaves(torch.fx.Tracer):
        def is_leaf_module(self, m, name):
            return isinstance(m, ft.LSTM) or super().is_leaf_module(m, name)

    graph = torch.fx.GraphModule(model, Leaves().trace(model))
    x = torch.randn(5, 2, 3, dtype=torch.float64)
    with torch.no_grad():
        assert relative(graph(x)[0], native(x)[0]) < TOLERANCE
