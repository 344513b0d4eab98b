"""Training stacks and gated cells: every leaf in the checkpoint, exact resume, sampling,
and checkpoints written before stacks existed."""
import json

import numpy as np
import pytest

import fastbptt
from checkpoint_edits import edit_meta, rewrite
from cli_processes import TEXT, write_corpus
from fastbptt import checkpoint
from fastbptt.cli import main
from fastbptt.params import leaves
from fastbptt.sampling import sample_ids
from fastbptt.text import Codec
from fastbptt.train import TrainOptions, Trainer

MODELS = [("elman", 2), ("gru", 1), ("lstm", 2)]


def make(cell, layers, resume=None, **more):
    codec = Codec.from_text(TEXT)
    options = TrainOptions(hidden=12, seq_length=10, batch=4, lr=1e-2, cell=cell,
                           layers=layers, **more)
    return Trainer(options, codec.encode(TEXT), codec, resume=resume)


def run(trainer, steps):
    for _ in range(steps):
        trainer.train_step()
    return trainer


@pytest.mark.parametrize("cell,layers", MODELS)
def test_resume_is_bit_exact_for_every_cell_and_stack(tmp_path, cell, layers):
    straight = run(make(cell, layers), 4)
    straight.sample(10)                              # draws from the run's RNG
    run(straight, 4)
    first = run(make(cell, layers), 4)
    first.sample(10)
    saved = checkpoint.load(first.save(tmp_path / "half.npz"))
    assert list(leaves(saved.params)) == list(leaves(first.params))
    assert saved.hidden.shape == (layers, 4, 12)
    assert (saved.cell_state is not None) == (cell == "lstm")
    second = run(make(cell, layers, resume=saved), 4)
    assert second.losses == straight.losses          # identical floats, not close
    for name, a in leaves(second.params).items():
        np.testing.assert_array_equal(a, leaves(straight.params)[name])
    for a, b in zip(second.carried, straight.carried):
        assert a == b if isinstance(a, dict) else (a is None and b is None) or \
            np.array_equal(a, b)
    assert second.sample(20) == straight.sample(20)
    assert np.mean(straight.losses[-2:]) < straight.losses[0]


@pytest.mark.parametrize("cell,layers", MODELS + [("elman", 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sampling_steps_agree_with_the_kernels(cell, layers, dtype):
    """The characters drawn one step at a time (reference cells), fed back through the
    kernels as a prime, reach the same state."""
    params = fastbptt.init_params(7, 5, 7, cell=cell, num_layers=layers, dtype=dtype, seed=3)
    ids, h, c = sample_ids(params, [1, 2], 12, temperature=0.9, rng=0)
    again, h2, c2 = sample_ids(params, [1, 2, *ids], 0)
    assert again.size == 0 and h.shape == h2.shape
    tol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(h2, h, rtol=0, atol=tol)
    if cell == "lstm":
        np.testing.assert_allclose(c2, c, rtol=0, atol=tol)
    assert c is None or cell == "lstm"


def test_a_bidirectional_model_cannot_sample():
    params = fastbptt.init_params(4, 3, 4, bidirectional=True, seed=0)
    with pytest.raises(ValueError, match="bidirectional model cannot generate text"):
        sample_ids(params, [], 3)


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path)


def args(corpus, ckpt, *more):
    return ["train", str(corpus), "--hidden", "10", "--batch", "3", "--seq-length", "8",
            "--checkpoint", str(ckpt), "--no-progress", "--sample-chars", "20",
            "--sample-every", "0", "--lr-horizon", "8", *more]


def test_the_command_trains_resumes_and_samples_a_stack_of_lstm_layers(corpus, tmp_path,
                                                                      capsys):
    straight, split = tmp_path / "straight.npz", tmp_path / "split.npz"
    model = ("--cell", "lstm", "--layers", "2")
    assert main(args(corpus, straight, *model, "--steps", "8")) == 0
    assert "model: 2 LSTM layers of hidden size 10, float32" in capsys.readouterr().out
    assert main(args(corpus, split, *model, "--steps", "5")) == 0
    assert main(args(corpus, split, "--steps", "8", "--resume")) == 0
    a, b = checkpoint.load(straight), checkpoint.load(split)
    np.testing.assert_array_equal(a.history["loss"], b.history["loss"])
    for name, value in leaves(a.params).items():
        np.testing.assert_array_equal(value, leaves(b.params)[name])
    np.testing.assert_array_equal(a.cell_state, b.cell_state)
    assert main(args(corpus, split, "--steps", "9", "--resume", "--cell", "gru")) == 2
    assert "the checkpoint has --cell 'lstm', the command line 'gru'" in \
        capsys.readouterr().err
    assert main(["sample", str(split), "--chars", "30", "--seed", "1", "--prime", "def"]) == 0
    assert capsys.readouterr().out.startswith("def")


def test_the_default_model_is_one_gru_layer(corpus, tmp_path, capsys):
    assert main(args(corpus, tmp_path / "d.npz", "--steps", "1")) == 0
    assert "model: 1 GRU layer of hidden size 10, float32;" in capsys.readouterr().out


def test_a_gated_cell_takes_no_activation(corpus, tmp_path, capsys):
    assert main(args(corpus, tmp_path / "c.npz", "--cell", "gru", "--activation", "relu",
                     "--steps", "1")) == 2
    assert "--activation relu applies to the Elman cell only" in capsys.readouterr().err


@pytest.mark.parametrize("optimizer", ["adam", "adagrad"])
def test_momentum_is_for_sgd_only(corpus, tmp_path, capsys, optimizer):
    assert main(args(corpus, tmp_path / "m.npz", "--optimizer", optimizer, "--momentum",
                     "0.5", "--steps", "1")) == 2
    assert (f"--momentum applies to --optimizer sgd only; --optimizer {optimizer} has its "
            "own (leave --momentum out)") in capsys.readouterr().err
    assert not (tmp_path / "m.npz").exists()
    assert main(args(corpus, tmp_path / "m.npz", "--optimizer", optimizer, "--momentum", "0",
                     "--steps", "1")) == 0
    assert main(args(corpus, tmp_path / "s.npz", "--optimizer", "sgd", "--momentum", "0.5",
                     "--steps", "1")) == 0


@pytest.mark.parametrize("optimizer", ["adam", "adagrad"])
def test_options_built_in_python_refuse_momentum_for_another_optimizer(optimizer):
    with pytest.raises(ValueError, match=f"--momentum applies to --optimizer sgd only; "
                                         f"--optimizer {optimizer} has its own"):
        make("elman", 1, optimizer=optimizer, momentum=0.5)
    make("elman", 1, optimizer=optimizer, momentum=0.0)


def test_a_checkpoint_with_momentum_its_optimizer_ignored_resumes_as_without(corpus,
                                                                             tmp_path):
    """Such a checkpoint could be saved before options built in Python were checked for
    it; its run went on without momentum, and so does the resumed one."""
    plain, odd = tmp_path / "plain.npz", tmp_path / "odd.npz"
    assert main(args(corpus, plain, "--cell", "elman", "--steps", "2")) == 0

    def momentum(meta):
        meta["options"]["momentum"] = 0.5
    rewrite(plain, odd, edit_meta(momentum))
    for ckpt in (plain, odd):
        assert main(args(corpus, ckpt, "--steps", "4", "--resume")) == 0
    with np.load(plain) as a, np.load(odd) as b:
        assert a.files == b.files
        assert all(np.array_equal(a[k], b[k]) for k in a.files)


def test_a_checkpoint_from_before_stacks_resumes_as_one_elman_layer(corpus, tmp_path,
                                                                    capsys):
    """Format 1 files have no cell, no layers and no cell state: they stay one Elman layer
    whatever today's default model is."""
    ckpt = tmp_path / "old.npz"
    assert main(args(corpus, ckpt, "--cell", "elman", "--layers", "1", "--steps", "2")) == 0

    def old(meta):
        meta["format"] = 1
        for name in ("cell", "layers"):
            meta["options"].pop(name)
    rewrite(ckpt, ckpt, edit_meta(old))
    assert main(args(corpus, ckpt, "--steps", "3", "--resume")) == 0
    assert "model: 1 Elman layer of hidden size 10" in capsys.readouterr().out
    with np.load(ckpt) as data:
        meta = json.loads(str(data["meta"]))
    assert meta["format"] == checkpoint.FORMAT and meta["options"]["cell"] == "elman"


def test_the_workers_line_counts_cursors_in_the_singular_too():
    from types import SimpleNamespace

    from fastbptt._train_command import _placed

    def placed(rows, notes=()):
        workers = SimpleNamespace(notes=list(notes))
        line = _placed(SimpleNamespace(blocks=SimpleNamespace(rows=rows)), workers)
        assert workers.notes == []                      # said once
        return line

    assert placed([(0, 1)]) == "1 worker, 1 cursor"             # it said "1 cursors"
    assert placed([(0, 2), (2, 3)], ["x left out"]) == "2 workers, 2 + 1 cursors; x left out"
