"""The kernels (`fastbptt.bptt`, `fastbptt.layer.vjp`) against the reference, in float64.

The grid of `models.cases` with every truncation family, on both kernel paths, for
every cell; and on the narrow path with 9 sequences, whose steps walk W in panels
(`_kernels.matvec.panels_axpy`): two groups of 4 and one of 1. Over the same grid, the
forward-only entry points (`fastbptt.loss`, `fastbptt.forward`, `fastbptt.layer.forward`)
against `bptt`'s loss, the reference's states and `layer.vjp`'s ``out``.
"""
import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from models import (BACK_FIELDS, IMPLS, OUT_FIELDS, Case, cases, compare, compare_forward,
                    disagreement, params)

TOLERANCE = 1e-10


@params(cases(head=False, per_shape=2))
def test_kernels_match_reference(rng, kernel_path, case):
    errors = compare(case, rng, IMPLS["kernels"], IMPLS["reference"])
    assert all(e <= TOLERANCE for e in errors.values()), errors


@params(cases(head=False))
def test_forward_and_loss_match(rng, kernel_path, case):
    """`fastbptt.loss`, `fastbptt.forward` and `fastbptt.layer.forward` on stacks,
    bidirectional and reverse layers and gated cells: the loss of `bptt`, the reference's
    states and softmax outputs, and the ``out`` of `layer.vjp`."""
    errors = compare_forward(case, rng)
    assert all(e <= TOLERANCE for e in errors.values()), errors


@params(cases(head=False))
def test_kernels_match_reference_with_panels(rng, monkeypatch, case):
    from fastbptt import _stack
    monkeypatch.setattr(_stack, "NARROW", 10**9)
    errors = compare(case, rng, IMPLS["kernels"], IMPLS["reference"], B=9)
    assert all(e <= TOLERANCE for e in errors.values()), errors


@params(cases(head=False, cells={"elman": ("tanh", "relu")}))
@pytest.mark.parametrize("B", [4, 7])
def test_elman_batches_of_4_to_7_in_panels_match_reference(rng, monkeypatch, case, B):
    """Elman batches of 4 to 7 sequences walk W in panels where W is large
    (`_stack.walks_panels`): here at any size, against the reference."""
    from fastbptt import _stack
    monkeypatch.setattr(_stack, "ELMAN_PANELS_BYTES", 0)
    monkeypatch.setattr(_stack, "ELMAN_PANELS_BYTES_4", 0)
    assert _stack.walks_panels(B, np.zeros((8, 8)))
    errors = compare(case, rng, IMPLS["kernels"], IMPLS["reference"], B=B)
    assert all(e <= TOLERANCE for e in errors.values()), errors


@pytest.mark.parametrize("cell", ["elman", "lstm", "gru"])
@pytest.mark.parametrize("directions,truncation", [(1, "full"), (2, "full"), (1, "chunks")])
def test_token_ids_through_rows_of_U_transposed(rng, kernel_path, cell, directions,
                                                truncation):
    """With many steps per token id (T B >= 16 L), a narrow batch gathers each step's
    gates from the rows of a transposed copy of U (`inputs.gather_inputs`), where the
    cases above, with their few steps, read U's columns."""
    case = Case(cell, 1, directions, False, truncation, "tanh", True, True, True, True, True,
                False)
    errors = compare(case, rng, IMPLS["kernels"], IMPLS["reference"], B=9, T=30)
    assert all(e <= TOLERANCE for e in errors.values()), errors


@pytest.mark.parametrize("cell", ["elman", "lstm", "gru"])
@pytest.mark.parametrize("truncate,stride", [(3, 2), (5, 2), (4, 3), (7, 3)])
def test_groups_of_outputs_for_every_length(rng, kernel_path, cell, truncate, stride):
    """Strides between 1 and k run one sweep per group of outputs, which steps of the
    groups before reach too: every length from 0 to T (the last step of a sequence is an
    output of one group and a step that later groups sweep through), with dh_final and
    the LSTM's dc_final injected there, against the reference's per-output windows."""
    T, H = 8, 3
    lengths = np.arange(T + 1)
    B = lengths.size
    model = fastbptt.init_params(2, H, 2, cell=cell, dtype=np.float64, seed=rng)
    layer = fastbptt.Layer(model.U, model.W, model.b) if cell == "elman" else \
        model.layers[0][0]
    x = rng.normal(size=(B, T, 2))
    options = dict(truncate=truncate, stride=stride, lengths=lengths,
                   h0=rng.normal(size=(B, H)))
    if cell == "lstm":
        options["c0"] = rng.normal(size=(B, H))
    out, back = fastbptt.layer.vjp(x, layer, **options)
    out_ref, back_ref = reference.layer_vjp(x, layer, **options)
    errors = disagreement(out, out_ref, OUT_FIELDS)
    dh = rng.normal(size=out.h.shape)
    finals = [rng.normal(size=out.h_final.shape),
              rng.normal(size=out.h_final.shape) if cell == "lstm" else None]
    errors.update(disagreement(back(dh, *finals), back_ref(dh, *finals), BACK_FIELDS))
    assert all(e <= TOLERANCE for e in errors.values()), errors
