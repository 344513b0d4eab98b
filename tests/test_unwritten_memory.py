"""The kernels never read scratch memory that the call did not write: with every new
workspace and kept array filled with NaN first, results equal the reference's.

Ragged batches whose longest sequence ends before T leave the last steps to padding,
which the narrow forward loop never reaches; every cell, both kernel paths, both
entry points (the head and the layer's backward pass)."""
import numpy as np
import pytest

import fastbptt
from fastbptt import _workspace, reference


@pytest.fixture
def poisoned(monkeypatch):
    """New workspace views and fresh arrays come filled with NaN."""
    get, aligned = _workspace.Workspace.get, _workspace.aligned_empty

    def poisoned_get(self, name, shape, dtype):
        new = (name, shape, dtype) not in self._views
        view = get(self, name, shape, dtype)
        if new and view.dtype.kind == "f":
            view[...] = np.nan
        return view

    def poisoned_aligned(shape, dtype):
        out = aligned(shape, dtype)
        if out.dtype.kind == "f":
            out[...] = np.nan
        return out

    fastbptt.clear_workspace()
    monkeypatch.setattr(_workspace.Workspace, "get", poisoned_get)
    monkeypatch.setattr(_workspace, "aligned_empty", poisoned_aligned)
    yield
    fastbptt.clear_workspace()


def relative(a, b):
    return float(np.abs(np.asarray(a) - b).max() / max(np.abs(b).max(), 1e-300))


@pytest.mark.parametrize("cell", ["elman", "lstm", "gru"])
@pytest.mark.parametrize("truncation", [(None, 1), (3, 3), (3, 1)],
                         ids=["full", "chunks", "windows"])
def test_results_do_not_depend_on_scratch_contents(poisoned, kernel_path, cell, truncation):
    rng = np.random.default_rng(3)
    B, T, L, H, C = 5, 9, 4, 3, 3
    m = fastbptt.init_params(L, H, C, cell=cell, dtype=np.float64, seed=4)
    if cell == "elman":                       # a stack of one, as the gated cells come
        m = fastbptt.Model(((fastbptt.Layer(m.U, m.W, m.b),),), m.V, m.c)
    x, y = rng.integers(0, L, (B, T)), rng.integers(0, C, (B, T))
    lengths = np.array([6, 0, 3, 6, 1])               # the longest ends before T
    h0 = rng.normal(size=(1, B, H))
    k, s = truncation
    options = dict(lengths=lengths, truncate=k, stride=s, h0=h0)
    got, want = fastbptt.bptt(x, y, m, **options), reference.bptt(x, y, m, **options)
    assert abs(got.loss - want.loss) <= 1e-12 * abs(want.loss)
    for (name, g), w in zip(fastbptt.params.leaves(got.grads).items(),
                            fastbptt.params.leaves(want.grads).values()):
        assert relative(g, w) <= 1e-10, name
    assert relative(got.dh0, want.dh0) <= 1e-10

    layer = m.layers[0][0]
    xd = rng.normal(size=(B, T, L))
    out, back = fastbptt.layer.vjp(xd, layer, lengths=lengths, truncate=k, stride=s)
    rout, rback = reference.layer_vjp(xd, layer, lengths=lengths, truncate=k, stride=s)
    dh = rng.normal(size=out.h.shape)
    r, rr = back(dh), rback(dh)
    assert relative(out.h, rout.h) <= 1e-12
    assert relative(r.dx, rr.dx) <= 1e-10
    for g, w in zip(r.grads, rr.grads):
        if w is not None:
            assert relative(g, w) <= 1e-10
