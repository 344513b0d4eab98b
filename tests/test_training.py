"""The training loop, checkpoints, exact resume, sampling and the train/sample commands."""
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import fastbptt
from fastbptt import checkpoint
from fastbptt.cli import main
from fastbptt.params import leaves
from fastbptt.text import Codec
from fastbptt.train import TrainOptions, Trainer, evaluate, scored

TEXT = ("the quick brown fox jumps over the lazy dog. " * 6
        + "def f(x):\n    return x + 1\n" * 6) * 4
SMALL = dict(hidden=24, seq_length=12, batch=4, lr=1e-2, cell="elman", layers=1)


def make(options=None, *, resume=None, text=TEXT):
    codec = Codec.from_text(text) if resume is None else resume.codec
    return Trainer(options or TrainOptions(**SMALL), codec.encode(text), codec, resume=resume)


def test_loss_falls():
    t = make()
    losses = [t.train_step()[0] for _ in range(80)]
    assert np.mean(losses[-10:]) < 0.6 * np.mean(losses[:5])
    assert t.step == 80 and len(t.losses) == 80


@pytest.mark.parametrize("optimizer, lr, window", [
    ("adagrad", 0.1, (None, None)), ("sgd", 0.05, (5, 1)), ("adam", 1e-2, (6, 3))])
def test_other_optimizers_and_truncations_learn(optimizer, lr, window):
    options = TrainOptions(**{**SMALL, "optimizer": optimizer, "lr": lr,
                              "truncate": window[0], "stride": window[1],
                              "clip_norm": 5.0, "dtype": "float64"})
    t = make(options)
    losses = [t.train_step()[0] for _ in range(60)]
    assert np.mean(losses[-10:]) < np.mean(losses[:5])


@pytest.mark.parametrize("cell, layers", [("elman", 1), ("gru", 1), ("lstm", 1), ("lstm", 2)])
def test_evaluate_matches_the_loss_of_one_call(cell, layers):
    """Chunks of 37 steps carry every state to the next, the LSTM's c too."""
    params = fastbptt.init_params(5, 6, 5, cell=cell, num_layers=layers, dtype=np.float64,
                                  seed=0)
    ids = np.random.default_rng(0).integers(0, 5, size=201)
    got = evaluate(params, ids, streams=1, steps=37)
    want = fastbptt.loss(ids[:-1], ids[1:], params) / 200
    assert got == pytest.approx(want, rel=1e-10)


def test_evaluate_scores_the_predictions_scored_counts():
    params = fastbptt.init_params(5, 6, 5, dtype=np.float64, seed=1)
    ids = np.random.default_rng(1).integers(0, 5, size=203)
    assert scored(203, streams=4) == 200        # 4 segments of 50 predictions; 2 ids left
    assert scored(1) == 0 and scored(2) == 1 and scored(5) == 4
    want = sum(fastbptt.loss(ids[k * 50:(k + 1) * 50], ids[k * 50 + 1:(k + 1) * 50 + 1],
                             params) for k in range(4)) / 200
    assert evaluate(params, ids, streams=4, steps=16) == pytest.approx(want, rel=1e-10)


def test_checkpoint_round_trip(tmp_path):
    t = make()
    for _ in range(7):
        t.train_step()
    path = t.save(tmp_path / "run.npz", corpus_sha256="abc")
    assert sorted(os.listdir(tmp_path)) == ["run.npz"]          # no temporary file left
    ck = checkpoint.load(path)
    assert ck.step == 7 and ck.codec == t.codec and ck.options["corpus_sha256"] == "abc"
    assert ck.options["hidden"] == SMALL["hidden"]
    for a, b in zip(ck.params, t.params):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == np.float32
    np.testing.assert_array_equal(ck.hidden, t.carried.h)
    np.testing.assert_array_equal(ck.history["loss"], t.losses)
    assert ck.batcher == t.carried.position
    assert ck.optimizer["t"] == 7
    np.testing.assert_array_equal(ck.optimizer["m.W"], t.optimizer.state["W"]["m"])
    rng = np.random.default_rng()
    rng.bit_generator.state = ck.rng_state
    assert rng.random() == t.rng.random()


def test_resume_is_bit_exact(tmp_path):
    straight = make()
    for i in range(10):
        straight.train_step()
        if i == 4:
            straight.sample(20)                      # draws from the run's RNG
    first = make()
    for _ in range(5):
        first.train_step()
    first.sample(20)
    path = first.save(tmp_path / "half.npz")
    second = make(resume=checkpoint.load(path))
    for _ in range(5):
        second.train_step()
    assert second.losses == straight.losses           # identical floats, not close
    for a, b in zip(second.params, straight.params):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(second.carried.h, straight.carried.h)
    assert second.sample(30) == straight.sample(30)


@pytest.mark.parametrize("cell", ["elman", "lstm"])
def test_a_checkpoint_taken_before_a_steps_update_is_the_state_before_that_step(cell):
    """`train_step(before_update=...)` runs once the step's values are found finite, while
    the step's carried state is pending: the checkpoint taken there is the one taken after
    the step before (bit for bit), and taking it changes nothing of the run (the pending
    state is left as it is, not dropped)."""
    options = dict(SMALL, cell=cell)
    straight, probed = make(TrainOptions(**options)), make(TrainOptions(**options))
    taken = []
    for _ in range(6):
        before = straight.checkpoint()
        straight.train_step()
        probed.train_step(before_update=lambda: taken.append(probed.checkpoint()))
        mid = taken[-1]
        assert (mid.step, mid.batcher, mid.rng_state) == \
            (before.step, before.batcher, before.rng_state)
        for a, b in ((mid.hidden, before.hidden), (mid.cell_state, before.cell_state)):
            np.testing.assert_array_equal(a, b)
        assert leaves(mid.params).keys() == leaves(before.params).keys()
        for name, a in leaves(mid.params).items():
            np.testing.assert_array_equal(a, leaves(before.params)[name])
        assert mid.optimizer.keys() == before.optimizer.keys()
        assert all(np.array_equal(mid.optimizer[k], before.optimizer[k]) for k in mid.optimizer)
    assert probed.losses == straight.losses
    np.testing.assert_array_equal(probed.carried.h, straight.carried.h)
    assert probed.carried.position == straight.carried.position
    resumed = make(TrainOptions(**options), resume=taken[3])
    for _ in range(3):
        resumed.train_step()
    assert resumed.losses == straight.losses[:6] and resumed.step == 6


def test_sampling_is_deterministic():
    t = make()
    for _ in range(20):
        t.train_step()
    a = fastbptt.sample(t.params, t.codec, prime="the ", chars=50, temperature=0.7,
                        rng=np.random.default_rng(3))
    b = fastbptt.sample(t.params, t.codec, prime="the ", chars=50, temperature=0.7,
                        rng=np.random.default_rng(3))
    c = fastbptt.sample(t.params, t.codec, prime="the ", chars=50, temperature=0.7,
                        rng=np.random.default_rng(4))
    assert a == b and len(a) == 50 and set(a) <= set(TEXT)
    assert a != c
    cold = fastbptt.sample(t.params, t.codec, chars=10, temperature=1e-3,
                           rng=np.random.default_rng(0))
    assert cold == fastbptt.sample(t.params, t.codec, chars=10, temperature=1e-3,
                                   rng=np.random.default_rng(1))   # ~argmax: seed-free


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text(TEXT)
    return path


def small_args(corpus, ckpt, *more):
    return ["train", str(corpus), "--hidden", "16", "--cell", "elman", "--layers", "1",
            "--batch", "4", "--seq-length", "10", "--checkpoint", str(ckpt), "--no-progress",
            "--sample-chars", "20", *more]


def test_train_and_sample_commands(corpus, tmp_path, capsys):
    ckpt = tmp_path / "c.npz"
    assert main(small_args(corpus, ckpt, "--steps", "6", "--sample-every", "3")) == 0
    out = capsys.readouterr().out
    assert "--- step 3:" in out and "--- step 6:" in out
    for line in ("validation loss", "unigram baseline", "validation / unigram",
                 f"checkpoint: {ckpt}"):
        assert line in out
    assert checkpoint.load(ckpt).step == 6
    assert main(small_args(corpus, ckpt, "--steps", "9", "--resume")) == 0
    out = capsys.readouterr().out
    assert "resumed at step 6" in out and "trained 9 steps in all" in out
    assert main(small_args(corpus, ckpt, "--steps", "12", "--resume", "--hidden", "8")) == 2
    assert "the checkpoint has --hidden 16, the command line 8" in capsys.readouterr().err

    assert main(["sample", str(ckpt), "--chars", "40", "--seed", "2", "--prime", "the"]) == 0
    first = capsys.readouterr().out
    assert main(["sample", str(ckpt), "--chars", "40", "--seed", "2", "--prime", "the"]) == 0
    assert capsys.readouterr().out == first and first.startswith("the")
    assert main(["sample", str(ckpt), "--prime", "QQ"]) == 2
    assert "not in the vocabulary" in capsys.readouterr().err


def test_train_plot(corpus, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    png = tmp_path / "loss.png"
    assert main(small_args(corpus, tmp_path / "p.npz", "--steps", "4", "--sample-every", "2",
                           "--plot", str(png))) == 0
    assert png.stat().st_size > 1000


def test_sigint_saves_and_resume_continues(corpus, tmp_path):
    ckpt = tmp_path / "int.npz"
    args = small_args(corpus, ckpt, "--time", "60", "--sample-every", "0")
    args.remove("--no-progress")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "fastbptt", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stderr.read(1)                 # the progress bar's first output
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err.decode()[-2000:]
    assert b"interrupted at step" in out and b"Traceback" not in err
    step = checkpoint.load(ckpt).step
    assert step < 10_000
    resumed = subprocess.run([sys.executable, "-m", "fastbptt",
                              *small_args(corpus, ckpt, "--resume", "--steps", str(step + 3))],
                             capture_output=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr.decode()[-2000:]
    assert checkpoint.load(ckpt).step == step + 3


def test_command_resume_matches_a_straight_run(corpus, tmp_path, capsys):
    """--steps 10 in one go, or --steps 5 then --resume --steps 10: the same bits."""
    straight, split = tmp_path / "straight.npz", tmp_path / "split.npz"
    common = ("--lr-horizon", "10", "--sample-every", "4")
    assert main(small_args(corpus, straight, "--steps", "10", *common)) == 0
    assert main(small_args(corpus, split, "--steps", "5", *common)) == 0
    assert main(small_args(corpus, split, "--steps", "10", "--resume", *common)) == 0
    capsys.readouterr()
    a, b = checkpoint.load(straight), checkpoint.load(split)
    np.testing.assert_array_equal(a.history["loss"], b.history["loss"])
    np.testing.assert_array_equal(a.history["evals"], b.history["evals"])
    for x, y in zip(a.params, b.params):
        np.testing.assert_array_equal(x, y)
    assert a.rng_state == b.rng_state and a.optimizer["t"] == b.optimizer["t"] == 10


def test_failed_save_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    t = make()
    t.train_step()
    t.save(tmp_path / "keep.npz")
    before = (tmp_path / "keep.npz").read_bytes()
    t.train_step()

    def broken(*args, **kwargs):
        raise OSError("disk full")
    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(OSError, match="disk full"):
        t.save(tmp_path / "keep.npz")
    assert (tmp_path / "keep.npz").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["keep.npz"]
    with pytest.raises(ValueError, match="not a fastbptt checkpoint"):
        (tmp_path / "text.npz").write_text("hello")
        checkpoint.load(tmp_path / "text.npz")


def test_time_budget_fixes_the_decay_horizon(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("fastbptt._train_command.ESTIMATE_STEPS", 3)
    ckpt = tmp_path / "t.npz"
    assert main(small_args(corpus, ckpt, "--time", "0.3", "--sample-every", "0")) == 0
    assert "validation / unigram" in capsys.readouterr().out
    ck = checkpoint.load(ckpt)
    assert ck.step > 3 and ck.options["horizon"] >= 3
    assert ck.options["threads"] == fastbptt.get_num_threads()


@pytest.mark.parametrize("cell", ["elman", "lstm"])
def test_a_sample_drawn_in_chunks_is_the_sample_drawn_at_once(monkeypatch, cell):
    monkeypatch.setattr(fastbptt.train, "SAMPLE_CHUNK", 7)
    a, b = make(TrainOptions(**{**SMALL, "cell": cell})), \
        make(TrainOptions(**{**SMALL, "cell": cell}))
    at_once = fastbptt.sample(b.params, b.codec, prime="\n", chars=30, temperature=0.8,
                              rng=b.rng, activation=b.options.activation)
    assert a.sample(30) == at_once
    assert a.rng.bit_generator.state == b.rng.bit_generator.state


def test_a_sample_stopped_part_way_moves_the_rng_as_the_whole_would(monkeypatch):
    """So that a run whose in-loop sample a signal cut short goes on, resumed, as the run
    that drew it whole."""
    monkeypatch.setattr(fastbptt.train, "SAMPLE_CHUNK", 7)
    asked, a, b = [], make(), make()
    assert a.sample(30, stop=lambda: asked.append(1) or len(asked) == 2) is None
    assert len(asked) == 2                      # after 7 and 14 characters
    b.sample(30)
    assert a.rng.bit_generator.state == b.rng.bit_generator.state
