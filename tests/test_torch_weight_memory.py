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


def _misaligned(module):
    """Each weight moved, the same numbers and version, to memory 4 bytes past a 64-byte
    boundary (as views into FSDP's flat parameters can be)."""
    with torch.no_grad():
        for p in module.parameters():
            flat = torch.empty(p.numel() + 64, dtype=p.dtype)
            start = (-flat.data_ptr() // p.element_size()) % (64 // p.element_size()) + 1
            view = flat[start:start + p.numel()].view(p.shape)
            view.copy_(p)
            with torch.autograd._unsafe_preserve_version_counter(p):
                p.set_(view.untyped_storage(), view.storage_offset(), view.shape, view.stride())


def _transposed_weights(module):
    """Every weight matrix non-contiguous (the transpose of a contiguous one), the same
    numbers."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if p.dim() == 2:
                setattr(module, name, torch.nn.Parameter(p.detach().t().contiguous().t()))


def _grads_after(cls, layers, B, before, between, retain=False):
    torch.manual_seed(0)
    module = cls(5, 16, num_layers=layers, bidirectional=layers == 2, batch_first=True)
    before(module)
    x = torch.randn(B, 7, 5, requires_grad=True)
    out, _ = module(x)
    loss = (out ** 2).sum()
    between(module)
    loss.backward(retain_graph=retain)
    grads = [p.grad.clone() for p in module.parameters()] + [x.grad.clone()]
    if retain:                             # moved again, and a second backward pass
        module.zero_grad()
        x.grad = None
        if between is not _nothing:
            _moved(module)
        loss.backward()
        grads += [p.grad.clone() for p in module.parameters()] + [x.grad.clone()]
    return grads


def _nothing(module):
    pass


@pytest.mark.parametrize("B", [1, 2, 4, 9])
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("before, between, retain", [
    (_nothing, _misaligned, False), (_transposed_weights, _moved, False),
    (_nothing, _moved, True), (_transposed_weights, _misaligned, True)],
    ids=["misaligned", "non-contiguous", "moved-twice", "non-contiguous-misaligned-twice"])
def test_weights_moved_anywhere_give_the_gradients_of_weights_never_moved(
        name, layers, B, before, between, retain):
    """Weights moved to memory of another alignment, or moved while the forward pass had
    read copies of them (non-contiguous weights), or moved again between two backward
    passes of a retained graph: the backward pass must read the same numbers laid out
    as the forward pass's (a view in another layout, or of misaligned memory, made it
    read W's padded copy that the forward pass had not filled: NaN)."""
    cls = getattr(ft, name)
    want = _grads_after(cls, layers, B, before, _nothing, retain)
    got = _grads_after(cls, layers, B, before, between, retain)
    for a, b in zip(got, want):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_from_torch_leaves_the_modules_storages_resizable(name):
    """It read the state dict through Tensor.numpy(), which marked the module's own
    parameters' storages as never to be resized again."""
    import fastbptt

    module = getattr(torch.nn, name)(3, 4, num_layers=2)
    fastbptt.from_torch(module.state_dict())
    for p in module.parameters():
        storage = p.untyped_storage()
        size = storage.nbytes()
        storage.resize_(size + 8)
        storage.resize_(size)
