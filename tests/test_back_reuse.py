"""The kernels' ``back`` (`fastbptt.layer.vjp`) called twice, and after other calls.

The kernels keep scratch memory between calls (`fastbptt._workspace`): a ``back`` must
still read its own forward pass after another `layer.vjp`, its ``back`` and a `bptt` of
the same shapes have run, and what it returned must not change under those later calls.
Every cell, on both kernel paths, for one sequence ((T, L), and B = 1), a batch and one
step; dense inputs, so dx is computed too; full BPTT, chunks and per-output windows.
"""
import warnings

import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from fastbptt.params import leaves
from models import BACK_FIELDS, CELLS, OUT_FIELDS, disagreement

TOLERANCE = 1e-10
L, H, C = 2, 3, 3
# x's leading shape (one sequence: (T, L) input) and lengths (None: every sequence whole)
LEADS = {"one-sequence": ((7,), None), "B1": ((1, 7), [5]), "batch": ((4, 7), [7, 3, 0, 5]),
         "T1": ((4, 1), [1, 0, 1, 1]), "B1-T1": ((1, 1), None)}
TRUNCATIONS = {"full": {}, "chunks": dict(truncate=3, stride=3),
               "windows": dict(truncate=3, stride=1)}


def arrays(result):
    """Every array of a `LayerOutput` or `LayerGrads`, by name."""
    out = {}
    for name, value in result._asdict().items():
        if name == "grads":
            out.update({"grads " + k: v for k, v in leaves(value).items()})
        elif value is not None:
            out[name] = value
    return out


def copies(result):
    return {name: a.copy() for name, a in arrays(result).items()}


def changed(result, saved):
    """The arrays of ``result`` that no longer equal their ``saved`` copies."""
    now = arrays(result)
    assert now.keys() == saved.keys()
    return [name for name in saved if not np.array_equal(now[name], saved[name])]


def problem(rng, cell, lead, lengths, options):
    model = fastbptt.init_params(L, H, C, cell=cell, dtype=np.float64, seed=rng)
    layer = fastbptt.Layer(model.U, model.W, model.b) if cell == "elman" else \
        model.layers[0][0]
    x = rng.normal(size=lead + (L,))
    options = dict(options)
    if lengths is not None:
        options["lengths"] = np.array(lengths)
    options["h0"] = rng.normal(size=lead[:-1] + (H,))
    if cell == "lstm":
        options["c0"] = rng.normal(size=lead[:-1] + (H,))
    return model, layer, x, options


def upstream(rng, out, cell):
    return (rng.normal(size=out.h.shape), rng.normal(size=out.h_final.shape),
            rng.normal(size=out.h_final.shape) if cell == "lstm" else None)


@pytest.mark.parametrize("truncation", TRUNCATIONS)
@pytest.mark.parametrize("lead", LEADS)
@pytest.mark.parametrize("cell", CELLS)
def test_back_twice_and_after_other_calls(rng, kernel_path, cell, lead, truncation):
    """back(g1), back(g2), another vjp and back and a bptt, back(g1) again: each result
    is the reference's, and none of the calls changes an earlier call's arrays (each
    result is checked before a later call could write the same values back)."""
    lead, lengths = LEADS[lead]
    model, layer, x, options = problem(rng, cell, lead, lengths, TRUNCATIONS[truncation])
    out, back = fastbptt.layer.vjp(x, layer, **options)
    out_ref, back_ref = reference.layer_vjp(x, layer, **options)
    g1, g2 = upstream(rng, out, cell), upstream(rng, out, cell)
    saved_out = copies(out)
    first = back(*g1)
    assert first.dx is not None and first.dx.shape == x.shape
    saved_first = copies(first)

    second = back(*g2)                              # the same back, other gradients
    assert changed(first, saved_first) == [], "a second back changed the first's arrays"
    saved_second = copies(second)
    other_out, other_back = fastbptt.layer.vjp(rng.normal(size=x.shape), layer, **options)
    other_back(*upstream(rng, other_out, cell))     # another vjp of the same shapes
    ids = rng.integers(0, L, lead)
    fastbptt.bptt(ids, rng.integers(0, C, ids.shape), model,
                  **{k: v for k, v in options.items() if k not in ("h0", "c0")})
    for name, result, saved in (("first", first, saved_first),
                                ("second", second, saved_second), ("out", out, saved_out)):
        assert changed(result, saved) == [], f"later calls changed {name}'s arrays"
    third = back(*g1)                               # the same back, after all that
    assert changed(second, saved_second) == [], "a third back changed the second's arrays"

    for name, result, want in (("first", first, back_ref(*g1)),
                               ("second", second, back_ref(*g2)),
                               ("third", third, back_ref(*g1))):
        errors = disagreement(result, want, BACK_FIELDS)
        assert all(e <= TOLERANCE for e in errors.values()), (name, errors)
    errors = disagreement(out, out_ref, OUT_FIELDS)
    assert all(e <= TOLERANCE for e in errors.values()), errors


@pytest.mark.parametrize("change", ["U shape", "W shape", "U dtype"])
@pytest.mark.parametrize("cell", CELLS)
def test_back_after_the_params_are_reshaped_in_place(rng, kernel_path, cell, change):
    """back read the caller's arrays themselves, with the shapes they had by then: U
    reshaped in place between vjp and back sent the ids' scatter past the end of dU (the
    process aborted), and W reshaped made the BLAS read past the states. back now reads
    the same numbers through views of its own, as they were shaped at vjp."""
    model = fastbptt.init_params(L, H, C, cell=cell, dtype=np.float64, seed=rng)
    layer = fastbptt.Layer(model.U, model.W, model.b) if cell == "elman" else \
        model.layers[0][0]
    layer = layer._replace(U=layer.U.copy(), W=layer.W.copy())
    x = rng.integers(0, L, (600, 3))             # many sequences
    out, back = fastbptt.layer.vjp(x, layer)
    dh = rng.normal(size=out.h.shape)
    want = reference.layer_vjp(x, layer)[1](dh)
    shapes = layer.U.shape, layer.W.shape
    with warnings.catch_warnings():              # NumPy 2.5 deprecates setting them
        warnings.simplefilter("ignore", DeprecationWarning)
        if change == "U shape":
            layer.U.shape = layer.U.shape[::-1]
        elif change == "W shape":
            layer.W.shape = (1, layer.W.size)
        else:
            layer.U.dtype = np.int64             # the same bytes, read as integers
    assert (layer.U.shape, layer.W.shape) != shapes or layer.U.dtype == np.int64
    got = back(dh)
    assert (got.grads.U.shape, got.grads.W.shape) == shapes
    errors = disagreement(got, want, BACK_FIELDS)
    assert all(e <= TOLERANCE for e in errors.values()), errors
