"""fastbptt.torch and the memory of the tensors it reads: a weight's memory that moves
between the forward and the backward pass, its numbers the same (``share_memory_``,
FSDP's parameters freed after the forward pass and gathered again before the backward
pass), and storages that must stay resizable, as they do for torch.nn's modules."""
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install "
                                            "'fastbptt[torch]')")
import fastbptt.torch as ft                                               # noqa: E402

NAMES = ["RNN", "GRU", "LSTM"]


def _run(cls, layers, x_grad, between, seed=0):
    torch.manual_seed(seed)
    module = cls(6, 7, num_layers=layers, bidirectional=layers == 2, dtype=torch.float64)
    state = {k: v.clone() for k, v in module.state_dict().items()}
    x = torch.randn(9, 4, 6, dtype=torch.float64, requires_grad=x_grad)
    out, _ = module(x)
    between(module)
    # fill memory that was freed with other numbers, as later allocations would
    junk = [torch.full_like(p, 1e6) for _ in range(4) for p in module.parameters()]
    (out ** 2).sum().backward()
    del junk
    grads = {n: p.grad for n, p in module.named_parameters()}
    if x_grad:
        grads["x"] = x.grad
    return state, x.detach().clone(), grads


def _moved(module):
    module.share_memory()                  # the same numbers in new memory


def _freed_and_gathered(module):
    """What FSDP does to a parameter between the passes: its storage freed (resized to
    nothing), then allocated and filled with the same numbers again, its version kept."""
    with torch.no_grad():
        for p in module.parameters():
            keep = p.detach().clone()
            storage = p.untyped_storage()
            size = storage.nbytes()
            storage.resize_(0)
            storage.resize_(size)
            with torch.autograd._unsafe_preserve_version_counter(p):
                p.copy_(keep)


@pytest.mark.parametrize("between", [_moved, _freed_and_gathered])
@pytest.mark.parametrize("x_grad", [True, False])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("name", NAMES)
def test_weights_whose_memory_moved_before_backward_give_natives_gradients(name, layers,
                                                                           x_grad, between):
    """The backward pass read the weights through views of their old memory, freed:
    x's gradient, and the lower layers' weights' gradients, came out wrong (to 1e8), with
    no error; on the FSDP path resizing failed outright (see below)."""
    state, x, got = _run(getattr(ft, name), layers, x_grad, between)
    native = getattr(torch.nn, name)(6, 7, num_layers=layers, bidirectional=layers == 2,
                                     dtype=torch.float64)
    native.load_state_dict(state)
    x.requires_grad_(x_grad)
    out, _ = native(x)
    (out ** 2).sum().backward()
    want = {n: p.grad for n, p in native.named_parameters()}
    if x_grad:
        want["x"] = x.grad
    assert got.keys() == want.keys()
    for key in want:
        scale = float(want[key].abs().max())
        assert float((got[key] - want[key]).abs().max()) <= 1e-12 * scale, key


@pytest.mark.parametrize("name", NAMES)
def test_the_tensors_it_reads_stay_resizable(name):
    """Tensor.numpy() marks a storage as never to be resized again: after one forward
    pass, resize_ failed on the input, h0 and every weight (torch.nn's modules leave
    them resizable), and FSDP could not free the parameters' memory."""
    module = getattr(ft, name)(3, 4, dtype=torch.float64)
    x = torch.randn(5, 2, 3, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(1, 2, 4, dtype=torch.float64)
    hx = (h0, h0.clone()) if name == "LSTM" else h0
    out, _ = module(x, hx)
    out.sum().backward()
    with torch.no_grad():
        module(x, hx)
    for tensor in (x, h0, *module.parameters()):
        storage = tensor.untyped_storage()
        size = storage.nbytes()
        storage.resize_(size + 8)
        storage.resize_(size)
    x.detach().resize_(10, 3)
