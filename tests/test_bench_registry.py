"""The bench's registry: workloads, flop counts, data, and fastbptt's and the peers'
agreement on tiny versions of the stacked, bidirectional, gated and layer workloads
(S1-S3, G1-G5).

The peer tests need PyTorch and/or JAX and skip with the reason where they are missing.
"""
import dataclasses
import itertools
import os
import sys

import numpy as np
import pytest

import fastbptt
from fastbptt.bench.agreement import compare
from fastbptt.bench.peers import PEERS, as_numpy
from fastbptt.bench.stacks import GATES, flatten, grad_names
from fastbptt.bench.workloads import GROUPS, WORKLOADS, make_data, select

NEW = GROUPS["S"] + GROUPS["G"]

# The bench starts JAX on its own thread count, and warns that it cannot where a test file
# run before this one imported JAX first: these tests compare values, which the thread
# count does not change (the warning itself is tested in test_bench_jax_threads.py).
pytestmark = pytest.mark.filterwarnings(
    "ignore:JAX started outside the bench:RuntimeWarning")


def tiny(name):
    """The workload with its structure (cell, layers, directions, kind, inputs, B = 1 or
    not) and sizes small enough for a test."""
    w = WORKLOADS[name]
    return w._replace(B=min(w.B, 3), T=6, L=5, H=4, C=min(w.C, 3))


def test_documents_workloads_keep_their_definitions_and_flop_counts():
    assert [tuple(WORKLOADS[n])[:10] for n in GROUPS["W"]] == [
        ("W1", 1, 100, 65, 128, 65, "sigmoid", 10, "float64", 0),
        ("W2", 1, 100, 65, 128, 65, "tanh", None, "float32", 0),
        ("W3", 32, 100, 65, 128, 65, "tanh", None, "float32", 0),
        ("W4", 32, 100, 65, 128, 65, "tanh", 10, "float32", 0),
        ("W5", 32, 50, 1024, 1024, 16, "relu", None, "float32", 203)]
    assert [WORKLOADS[n].flops for n in GROUPS["W"]] == [
        41036800, 14822400, 474316800, 1313177600, 10223616000]
    assert all(WORKLOADS[n].documents_model for n in GROUPS["W"])
    assert not any(WORKLOADS[n].documents_model for n in NEW)


def test_new_workloads_are_the_issues_tables():
    rows = {n: (w.cell, w.num_layers, w.bidirectional, w.kind, w.inputs, w.B, w.T, w.L, w.H,
                w.C, w.dtype, w.truncate) for n, w in WORKLOADS.items() if n in NEW}
    assert rows == {
        "S1": ("elman", 2, False, "model", "ids", 32, 100, 65, 256, 65, "float32", None),
        "S2": ("elman", 1, True, "model", "ids", 32, 100, 65, 256, 65, "float32", None),
        "S3": ("elman", 1, False, "layer", "dense", 32, 100, 128, 256, 0, "float32", None),
        "G1": ("lstm", 1, False, "model", "ids", 32, 100, 65, 256, 65, "float32", None),
        "G2": ("gru", 1, False, "model", "ids", 32, 100, 65, 256, 65, "float32", None),
        "G3": ("lstm", 1, False, "model", "ids", 1, 100, 65, 128, 65, "float32", None),
        "G4": ("lstm", 1, False, "model", "ids", 32, 50, 1024, 1024, 16, "float32", None),
        "G5": ("lstm", 2, True, "model", "ids", 32, 100, 65, 256, 65, "float32", None)}


def counted_flops(w, params):
    """2·m·k·n for every product a step-by-step BPTT makes, read off the weights' shapes:
    forward and backward of each layer and direction, then the head."""
    flops = 0
    B = w.B
    # W: a Params (one layer, U (H, L), W (H, H)); else a Model
    layers = [[params]] if w.documents_model else params.layers
    for l, row in enumerate(layers):
        for layer in row:
            U, W = layer.U, layer.W
            gh, n_in = U.shape
            dense = l > 0 or w.inputs == "dense"
            for _ in range(w.T):
                flops += 2 * B * W.shape[1] * gh            # W h_{t-1}
                flops += 2 * B * gh * W.shape[1]            # Wᵀ δ_t
                flops += 2 * gh * B * W.shape[1]            # dW += δ_t h_{t-1}ᵀ
                if dense:
                    flops += 2 * B * n_in * gh              # U x_t
                    flops += 2 * gh * B * n_in              # dU += δ_t x_tᵀ
                    if l > 0 or w.kind == "layer":
                        flops += 2 * B * gh * n_in          # dx_t = Uᵀ δ_t
    if params.V is not None:
        C, width = params.V.shape
        flops += 3 * w.T * 2 * B * C * width                # V h_t, Vᵀ e_t, dV
    return flops


@pytest.mark.parametrize("name", [n for n in WORKLOADS if WORKLOADS[n].truncate is None])
def test_flops_formula_matches_a_count_of_the_products(name):
    w = tiny(name)
    assert w.flops == counted_flops(w, make_data(w)[2])


def test_flops_of_the_new_workloads():
    # per step and sequence, in multiply-adds; ids into layer 0 are a gather (not counted)
    H = 256
    expect = {
        "S1": 3 * H * H + (3 * H * H + 3 * H * H) + 3 * H * 65,
        "S2": 2 * 3 * H * H + 3 * 2 * H * 65,
        "S3": 3 * H * H + 3 * H * 128,
        "G1": 3 * 4 * H * H + 3 * H * 65,
        "G2": 3 * 3 * H * H + 3 * H * 65,
        "G3": 3 * 4 * 128 * 128 + 3 * 128 * 65,
        "G4": 3 * 4 * 1024 * 1024 + 3 * 1024 * 16,
        "G5": 2 * 3 * 4 * H * H + 2 * (3 * 4 * H * H + 3 * 4 * H * 2 * H) + 3 * 2 * H * 65}
    for name, per_step in expect.items():
        w = WORKLOADS[name]
        assert w.flops == 2 * w.B * w.T * per_step, name


@pytest.mark.parametrize("name", NEW)
def test_data_chains_layer_to_layer(name):
    w = tiny(name)
    x, y, model = make_data(w)
    directions = 2 if w.bidirectional else 1
    G = GATES[w.cell]
    assert isinstance(model, fastbptt.Model) and model.c is None
    assert len(model.layers) == w.num_layers
    width = w.L
    for row in model.layers:
        assert len(row) == directions
        for layer in row:
            assert isinstance(layer, fastbptt.Layer) and layer.b is None and layer.bh is None
            assert layer.U.shape == (G * w.H, width) and layer.W.shape == (G * w.H, w.H)
            assert layer.U.dtype == layer.W.dtype == np.dtype(w.dtype)
        width = w.H * directions
    steps = (w.T,) if w.B == 1 else (w.B, w.T)
    assert x.shape == steps + ((w.L,) if w.inputs == "dense" else ())
    if w.kind == "layer":
        assert model.V is None and y.shape == steps + (w.H * directions,)
    else:
        assert model.V.shape == (w.C, width) and y.shape == steps
        assert y.min() >= 0 and y.max() < w.C
    assert len(grad_names(w)) == len(flatten(model.layers, model.V))
    assert np.array_equal(make_data(w)[0], x)                  # seeded


def test_select_takes_names_and_groups():
    assert select("s1, g3") == ("S1", "G3")
    assert select("S") == ("S1", "S2", "S3")
    assert select("W2,W,G5") == ("W2", "W1", "W3", "W4", "W5", "G5")
    for bad in ("S4", "", "X"):
        with pytest.raises(ValueError):
            select(bad)


def test_every_workload_has_fastbptt_and_the_framework_peers():
    for name in WORKLOADS:
        assert PEERS["fastbptt"].runs(name)
    for name in ("W2", "W3", "W5") + NEW:
        assert PEERS["PyTorch"].runs(name) and PEERS["JAX"].runs(name)


def _outcomes(w, data):
    """{implementation: (loss, grads)} from fastbptt, and from both PyTorch variants and
    JAX where installed."""
    outcomes = {"fastbptt": PEERS["fastbptt"].make(w, *data)()}
    if PEERS["PyTorch"].unavailable(w) is None:
        from fastbptt.bench.torch_stack import variants
        for variant, run in variants(w, *data).items():
            outcomes[f"PyTorch {variant}"] = run()
    if PEERS["JAX"].unavailable(w) is None:
        outcomes["JAX"] = PEERS["JAX"].make(w, *data)()
    return outcomes


@pytest.mark.parametrize("name", NEW)
def test_peers_agree_on_a_tiny_version(name):
    w = tiny(name)
    data = make_data(w)
    outcomes = _outcomes(w, data)
    if len(outcomes) < 2:
        pytest.skip("needs PyTorch or JAX (neither is installed)")
    for (a, out_a), (b, out_b) in itertools.combinations(outcomes.items(), 2):
        agreement = compare(a, w, out_a, out_b, against=b)
        assert agreement.ok, agreement.describe()
    loss, grads = as_numpy(next(iter(outcomes.values())))
    assert np.isfinite(loss).all() and all(np.abs(g).max() > 0 for g in grads)
    if w.kind == "layer":
        assert loss.shape == data[1].shape and grads[-1].shape == data[0].shape


def test_bench_times_fastbptt_and_the_peers_of_a_stacked_workload(monkeypatch):
    """`fastbptt bench` on a tiny S1: fastbptt is timed, the peers are checked against it
    and timed, and the table, the JSON and the notes say what ran."""
    import json

    from fastbptt.bench import report, runner, workloads

    monkeypatch.setitem(workloads.WORKLOADS, "S1", tiny("S1"))
    result = runner.run(names=("S1",), repeat=3, budget=0.05)
    (r,) = result.results
    assert r.fastbptt.median > 0
    assert {entry.status for entry in r.peers.values()} <= {"timed", "unavailable"}
    text = report.table(result)
    assert "S1" in text and "GF/s (% peak)" in text
    json.dumps(report.as_json(result))


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the 2-thread timing needs two CPUs")
def test_bench_times_one_and_two_threads_in_turns_for_a_scaled_workload(monkeypatch):
    """For G4 (a SCALED workload) fastbptt and sgemm are timed on 1 and 2 threads in the
    same turns: each timed call runs at the thread count it is filed under, and the
    run's own count is set again afterwards."""
    from fastbptt.bench import peers, report, runner, workloads

    monkeypatch.setitem(workloads.WORKLOADS, "G4", tiny("G4"))
    seen, original = [], peers.PEERS["fastbptt"].make

    def make(*args):
        call = original(*args)

        def run():
            seen.append(peers.get_threads())
            return call()
        return peers.Call(run, call.note)

    monkeypatch.setitem(peers.PEERS, "fastbptt",
                        dataclasses.replace(peers.PEERS["fastbptt"], make=make))
    result = runner.run(names=("G4",), repeat=3, budget=0.05, with_peers=False)
    (r,) = result.results
    assert set(r.scaling) == {1, 2} and set(r.scaling_peak) == {1, 2}
    assert all(len(r.scaling[n].times) >= 3 for n in (1, 2))
    main = len(r.fastbptt.times)
    assert seen.count(1) >= main + len(r.scaling[1].times)
    assert seen.count(2) >= len(r.scaling[2].times)
    first_two = seen.index(2)
    assert 1 in seen[first_two:], seen          # 1 thread again after 2: in turns
    assert peers.get_threads() == 1
    assert "G4 fastbptt on 2 threads" in report.table(result)


def test_startup_cases_are_each_cell_and_dtype_and_the_report_names_them():
    """`fastbptt bench --startup` times a cold first call of every cell and dtype and a
    warm one of every cell, on workloads of that cell and dtype."""
    from fastbptt.bench import startup
    from fastbptt.bench.report import _startup

    cells, dtypes = ("elman", "lstm", "gru"), ("float32", "float64")
    assert set(startup.COLD_CASES) == set(itertools.product(cells, dtypes))
    assert set(startup.WARM_CASES) == set(cells)
    for (cell, dtype), spec in startup.COLD_CASES.items():
        w = startup.workload(spec)
        assert (w.cell, w.dtype, w.name) == (cell, dtype, spec.split(":")[0]), spec
        x, y, params = make_data(w._replace(B=2, T=3, L=5, H=4, C=3))
        assert {a.dtype for a in _arrays(params)} == {np.dtype(dtype)}, spec
    assert all(startup.workload(spec).cell == cell for cell, spec in startup.WARM_CASES.items())
    warm = {"import_s": 0.3, "first_call_s": 0.2, "import_and_first_call_s": 0.5}
    text = "\n".join(_startup({
        "warm_starts": {cell: dict(warm, workload=spec)
                        for cell, spec in startup.WARM_CASES.items()},
        "cold_starts": {f"{cell} {dtype}": {"workload": spec, "first_call_s": 9.0}
                        for (cell, dtype), spec in startup.COLD_CASES.items()}}))
    for (cell, dtype), spec in startup.COLD_CASES.items():
        assert f"{cell} {dtype} ({spec}) 9.0 s" in text
    for cell, spec in startup.WARM_CASES.items():
        assert f"{cell} ({spec}) 0.30 + 0.20 = 0.50 s" in text


def _arrays(tree):
    """The arrays of a params structure (nested tuples and named tuples)."""
    if isinstance(tree, np.ndarray):
        yield tree
    elif isinstance(tree, tuple):
        for part in tree:
            yield from _arrays(part)


def test_the_documents_loop_runs_where_asked_and_no_peer_with_no_peers():
    """--no-peers --reference timed the loop on W1 as its regular peer, in turns."""
    from fastbptt.bench.runner import _peers_for
    names = {(n, wp, r): [p.name for p in _peers_for(n, wp, r)]
             for n in ("W1", "W3") for wp in (True, False) for r in (True, False)}
    assert names[("W1", False, True)] == [] and names[("W1", True, False)] == ["documents' loop"]
    assert names[("W3", False, True)] == ["documents' loop"]
    assert "documents' loop" not in names[("W3", True, False)]
    assert names[("W3", True, True)][0] == "documents' loop"


def test_the_json_holds_the_bridges_steps_and_each_workloads_peak(monkeypatch, tmp_path,
                                                                   capsys):
    """--json with --torch or --jax wrote the workloads alone (or was refused), and no
    workload's gemm figure, the denominator of its % of peak."""
    import json

    from fastbptt import cli
    from fastbptt.bench import bridge_steps, report, runner, workloads

    step = bridge_steps.STEPS["T1"]
    timed = bridge_steps.Result(step, {"native": 0.02, "fastbptt": 0.01}, {"own": 1e-4},
                                (4.1, 4.1), "note")
    monkeypatch.setattr(bridge_steps, "run", lambda names, **kw: [timed])
    monkeypatch.setattr(bridge_steps, "table", lambda results, threads: "table")
    monkeypatch.setitem(sys.modules, "fastbptt.torch", sys)        # the extra is there
    path = tmp_path / "t.json"
    assert cli.main(["bench", "--torch", "--json", str(path)]) == 0
    saved = json.loads(path.read_text())
    assert saved["results"] == [] and saved["bridge_steps"][0]["speed_up"] == 2.0
    assert saved["bridge_steps"][0]["step"]["name"] == "T1"
    monkeypatch.setitem(workloads.WORKLOADS, "S1", tiny("S1"))
    result = runner.run(names=("S1",), repeat=3, budget=0.05, with_peers=False)
    out = report.as_json(result)["results"][0]
    assert out["peak_gflops"] == result.results[0].peak > 0
    capsys.readouterr()


def test_a_missing_frameworks_peer_names_its_extra(monkeypatch):
    from fastbptt.bench import torch_peer
    monkeypatch.setitem(sys.modules, "torch", None)
    assert torch_peer.unavailable().startswith("not installed (pip install 'fastbptt[torch]'; ")


@pytest.mark.parametrize("step_name", ["T1", "T2", "T3"])
def test_a_bridge_step_is_timed_only_after_its_gradients_agree(monkeypatch, step_name):
    """The steps were checked by their first loss alone, which a backward pass that
    returned wrong gradients left as it was."""
    pytest.importorskip("torch")
    from fastbptt.bench import bridge_steps
    from fastbptt.torch import _function
    step = bridge_steps.STEPS[step_name]
    monkeypatch.setitem(WORKLOADS, step.workload, tiny(step.workload))
    calls = bridge_steps.make(step)[0]
    native, ours = bridge_steps.check_agreement(step, calls)
    assert ours == pytest.approx(native, rel=1e-5)
    right = _function._weight_grads
    monkeypatch.setattr(_function, "_weight_grads",
                        lambda cfg, grads: [t * 1.01 for t in right(cfg, grads)])
    calls = bridge_steps.make(step)[0]
    with pytest.raises(AssertionError, match=f"{step_name}: the gradient of rnn.weight_ih_l0 "
                                             "differs from the native one by 0.01 of"):
        bridge_steps.check_agreement(step, calls)


@pytest.mark.parametrize("step_name", ["T4", "T5"])
def test_a_jax_step_checks_each_weights_gradient_by_name(monkeypatch, step_name):
    pytest.importorskip("jax")
    from fastbptt.bench import bridge_steps
    step = bridge_steps.STEPS[step_name]
    monkeypatch.setitem(WORKLOADS, step.workload, tiny(step.workload))
    calls = bridge_steps.make(step)[0]
    bridge_steps.check_agreement(step, calls)
    assert set(calls["fastbptt"].gradients()) == {"U", "W", "V"}
    right = calls["fastbptt"].gradients
    calls["fastbptt"].gradients = lambda: {**right(), "W": right()["W"] * 1.01}
    with pytest.raises(AssertionError, match=f"{step_name}: the gradient of W differs"):
        bridge_steps.check_agreement(step, calls)
