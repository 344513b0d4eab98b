"""The reference's layer API and stacks at the edges: one sequence, no steps or no
sequences, c0 without h0, and `back` called twice (SPEC.md §7, §8)."""
import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from models import BACK_FIELDS, BPTT_FIELDS, CELLS, IMPLS, OUT_FIELDS, Case, disagreement, \
    reference_bptt, upstream

L, H, C = 3, 2, 3


def stack(cell, layers=2, bidirectional=True):
    return fastbptt.init_params(L, H, C, cell=cell, num_layers=layers,
                                bidirectional=bidirectional, dtype=np.float64, seed=7)


@pytest.mark.parametrize("cell", CELLS)
def test_one_sequence_is_a_batch_of_one(rng, cell):
    """(T,) ids give (T, H D) states and (S, H) final states, equal to those of (1, T)."""
    m = stack(cell)
    S, T = 4, 5
    x, y = rng.integers(0, L, T), rng.integers(-1, C, T)
    options = {"h0": rng.normal(size=(S, H))}
    if cell == "lstm":
        options["c0"] = rng.normal(size=(S, H))
    batch = {k: v[:, None] for k, v in options.items()}
    one, many = reference_bptt(x, y, m, **options), reference_bptt(x[None], y[None], m, **batch)
    assert one.h_final.shape == one.dh0.shape == (S, H)
    squeezed = {k: None if v is None else v[:, 0] for k, v in many._asdict().items()
                if k in ("h_final", "dh0", "c_final", "dc0")}
    errors = disagreement(one, many._replace(**squeezed), BPTT_FIELDS)
    assert all(e <= 1e-14 for e in errors.values()), errors
    layers = fastbptt.Model(m.layers)
    out, back = reference.layer_vjp(x, layers, **options)
    assert out.h.shape == (T, 2 * H) and out.h_final.shape == (S, H)
    grads = back(*upstream(rng, out, cell))
    assert grads.dx is None and grads.dh0.shape == (S, H)


@pytest.mark.parametrize("lead", [(0,), (2, 0), (0, 4)])
@pytest.mark.parametrize("cell", CELLS)
def test_no_steps_or_no_sequences(rng, cell, lead):
    """Nothing runs: h_final is h0, dh0 is dh_final, every gradient is zero."""
    m = fastbptt.Model(stack(cell).layers)
    S = 4
    states = (S,) + lead[:-1] + (H,)
    h0 = rng.normal(size=states)
    x = np.zeros(lead + (L,))
    out, back = reference.layer_vjp(x, m, h0=h0)
    assert out.h.shape == lead + (2 * H,) and np.array_equal(out.h_final, h0)
    dh_final = rng.normal(size=states)
    grads = back(np.zeros(out.h.shape), dh_final)
    assert np.array_equal(grads.dh0, dh_final) and grads.dx.shape == x.shape
    assert not any(v.any() for v in fastbptt.params.leaves(grads.grads).values())


def test_c0_alone_and_dc_final_alone(rng):
    """dL/dc0 is reported for a given c0 even without h0 (dh0 is then zeros), and
    dc_final may come without dh_final."""
    layer = stack("lstm", 1, False).layers[0][0]
    x = rng.normal(size=(2, 4, L))
    c0 = rng.normal(size=(2, H))
    out, back = reference.layer_vjp(x, layer, c0=c0, lengths=[4, 0])
    dc_final = rng.normal(size=(2, H))
    grads = back(np.zeros(out.h.shape), dc_final=dc_final)
    assert not grads.dh0.any() and grads.dc0[0].any()
    assert np.array_equal(grads.dc0[1], dc_final[1])       # length 0: c_final is c0
    with pytest.raises(ValueError, match="dc_final"):
        reference.layer_vjp(x, stack("gru", 1, False).layers[0][0])[1](
            np.zeros((2, 4, H)), dc_final=dc_final)


@pytest.mark.parametrize("cell", CELLS)
def test_back_twice_and_forward(rng, cell):
    case = Case(cell, 2, 1, False, "chunks", "tanh", True, True, False, True, True, False)
    x, _, p, options = case.data(rng, head=False)
    out, back = reference.layer_vjp(x, p, **options)
    upstream_grads = upstream(rng, out, cell)
    first, second = back(*upstream_grads), back(*upstream_grads)
    errors = disagreement(second, first, BACK_FIELDS)
    assert all(e == 0 for e in errors.values()), errors
    forward = reference.layer_forward(x, p, **{k: v for k, v in options.items()
                                               if k not in ("truncate", "stride")})
    errors = disagreement(forward, out, OUT_FIELDS)
    assert all(e == 0 for e in errors.values()), errors


def test_one_sequence_kernels_match(rng):
    """The Elman kernels agree with the reference for one sequence of a stack."""
    m = stack("elman")
    x, y = rng.integers(0, L, 6), rng.integers(-1, C, 6)
    h0 = rng.normal(size=(4, H))
    errors = disagreement(fastbptt.bptt(x, y, m, h0=h0), reference.bptt(x, y, m, h0=h0),
                          BPTT_FIELDS)
    assert all(e <= 1e-10 for e in errors.values()), errors


@pytest.mark.parametrize("sizes", [dict(B=1, T=1, L=1, H=1, C=1), dict(B=1, T=7, L=1, H=1, C=2),
                                   dict(B=4, T=1, L=2, H=3, C=2)], ids=str)
@pytest.mark.parametrize("cell", CELLS)
def test_sizes_of_one_match_torch(rng, cell, sizes):
    pytest.importorskip("torch")
    case = Case(cell, 2, 2, False, "full", "tanh", False, True, False, True, True, False)
    x, y, p, options = case.data(rng, head=True, **sizes)
    errors = disagreement(reference_bptt(x, y, p, **options),
                          IMPLS["torch"].bptt(case)(x, y, p, **options), BPTT_FIELDS)
    assert all(e <= 1e-10 for e in errors.values()), errors
