"""A training run never loses its work: an error inside the loop or a closed output saves
the last good state and ends with one line and status 1, a diverging step keeps the last
checkpoint and says where to go back; a corpus is
recognised by its content; a resumed run may lower its learning rate or add clipping."""
import os
import shutil

import numpy as np
import pytest

from checkpoint_edits import edit_meta, rewrite
from cli_processes import SMALL, finish, read_until, start, write_corpus
from fastbptt import checkpoint
from fastbptt.cli import main
from fastbptt.params import leaves
from fastbptt.text import Codec
from fastbptt.train import Diverged, TrainOptions, Trainer
from pids import NO_PROCESS


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path)


def train(corpus, ckpt, *more):
    return ["train", str(corpus), *SMALL, "--sample-every", "0", "--checkpoint", str(ckpt),
            *more]


def stderr_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def same_run(a, b):
    assert a.step == b.step and a.batcher == b.batcher and a.rng_state == b.rng_state
    assert leaves(a.params).keys() == leaves(b.params).keys()
    for name, x in leaves(a.params).items():
        np.testing.assert_array_equal(x, leaves(b.params)[name])
    assert a.optimizer.keys() == b.optimizer.keys()
    for key in a.optimizer:
        np.testing.assert_array_equal(a.optimizer[key], b.optimizer[key])
    np.testing.assert_array_equal(a.hidden, b.hidden)
    np.testing.assert_array_equal(a.history["loss"], b.history["loss"])


@pytest.mark.parametrize("every", [None, "2", "3"])
@pytest.mark.parametrize("what", ["gradient", "loss"])
def test_divergence_keeps_the_last_checkpoint_and_says_where_to_go_back(
        corpus, tmp_path, capsys, monkeypatch, what, every):
    """Step 4's gradients (or loss) turn NaN. The state before it would give the same NaN
    again, resumed with any learning rate, so it is not saved: the last checkpoint stays,
    bit for bit that of a run stopped at its step, and the line says to resume from it (step
    2) or to start a new run (none yet). A periodic checkpoint of step 3, just before the
    failing step, is not written either: it is written in step 4, once that step's loss and
    gradient are found finite."""
    import fastbptt._cursors as cursors

    real_compute, calls = cursors.CursorBlock.compute, []

    def nan_at_step_4(self, step, params):
        loss, grads, chars, seconds = real_compute(self, step, params)
        calls.append(1)
        if len(calls) == 4:
            if what == "loss":
                loss = float("nan")
            else:
                grads.W[0, 0] = np.nan
        return loss, grads, chars, seconds
    periodic = () if every is None else ("--checkpoint-every", every)
    straight = tmp_path / "straight.npz"
    if every == "2":
        assert main(train(corpus, straight, "--steps", every, "--lr-horizon", "10")) == 0
    capsys.readouterr()
    monkeypatch.setattr(cursors.CursorBlock, "compute", nan_at_step_4)
    diverged = tmp_path / "diverged.npz"
    assert main(train(corpus, diverged, "--steps", "10", "--lr-horizon", "10", *periodic)) == 1
    line = stderr_line(capsys)
    norm = "gradient norm" if what == "gradient" else "loss"
    assert line.startswith(f"fastbptt train: the run diverged: step 4's {norm} is nan, so "
                           f"that step was not applied; the state before it would give the "
                           f"same {norm} again whatever the learning rate, so it is not saved"
                           ), line
    assert "check_finite" not in line and "--lr 0.0003 --clip-norm 1" in line
    if every != "2":
        assert line.endswith("so it is not saved; start a new run with a lower learning rate "
                             "or gradient clipping, e.g. --lr 0.0003 --clip-norm 1"), line
        assert not diverged.exists()
        return
    assert f"; {diverged} keeps step 2: resume from it with a lower learning rate" in line
    same_run(checkpoint.load(diverged), checkpoint.load(straight))


def test_a_diverging_process_exits_1_with_one_line_and_a_lower_lr_trains(corpus):
    folder = corpus.parent
    common = ["train", corpus.name, *SMALL, "--sample-every", "0", "--optimizer", "sgd",
              "--activation", "identity", "--steps", "50", "--checkpoint", "div.npz"]
    outcome = finish(start([*common, "--lr", "1e6", "--clip-value", "0"], folder))
    assert outcome.status == 1, outcome
    line = outcome.one_line("fastbptt train: the run diverged: step ")
    advice = " start a new run with a lower learning rate or gradient clipping, e.g. --lr "
    assert advice in line, line
    assert not (folder / "div.npz").exists()
    again = finish(start([*common, "--lr", "1e-4", "--clip-norm", "1"], folder))
    assert again.status == 0, again
    assert checkpoint.load(folder / "div.npz").step == 50


def test_an_update_that_overflows_the_weights_saves_nothing_over_the_last_checkpoint(
        corpus, tmp_path, capsys, monkeypatch):
    """Finite gradients times a learning rate near float32's largest value: the update of
    step 3 turns weights into inf."""
    from fastbptt.optim import SGD

    ckpt = tmp_path / "big-lr.npz"
    assert main(train(corpus, ckpt, "--steps", "2", "--optimizer", "sgd", "--lr-decay",
                      "none")) == 0
    before = ckpt.read_bytes()
    capsys.readouterr()
    real = SGD._update

    def amplified(self, name, p, g):              # gradients of 10 in every entry
        real(self, name, p, np.full_like(g, 10.0))
    monkeypatch.setattr(SGD, "_update", amplified)
    assert main(train(corpus, ckpt, "--steps", "4", "--resume", "--lr", "3e38")) == 1
    line = stderr_line(capsys)
    assert "the update of step 3 made the weights overflow" in line
    assert f"so they are lost; {ckpt} keeps step 2: resume from it with a lower learning " \
           "rate" in line
    assert ckpt.read_bytes() == before


def huge_W_after_step_3(real):
    """`Trainer.train_step` (``real``) that leaves every recurrent weight 1e30, finite,
    after the update of step 3."""
    def train_step(self, **kwargs):
        out = real(self, **kwargs)
        if self.step == 3:
            for name, a in leaves(self.params).items():
                if name.endswith("W"):
                    a[...] = 1e30
        return out
    return train_step


@pytest.mark.parametrize("estimate", [False, True])
def test_finite_weights_whose_states_overflow_save_nothing_over_the_last_checkpoint(
        corpus, tmp_path, capsys, monkeypatch, estimate):
    """Step 3's update leaves every weight finite but W so large (1e30) that a ReLU
    model's states overflow as it runs: the validation estimate after the step (with
    --sample-every 1), or the final one, taken before the save that ends the run, says
    so, and that state, from which no step can go on, is not saved over step 2's
    checkpoint (it was, and neither --resume nor sample could use it)."""
    import fastbptt.train as train_module

    ckpt = tmp_path / "overflow.npz"
    relu = ("--activation", "relu", "--optimizer", "sgd", "--lr-decay", "none")
    assert main(train(corpus, ckpt, "--steps", "2", *relu)) == 0
    before = ckpt.read_bytes()
    capsys.readouterr()
    monkeypatch.setattr(train_module.Trainer, "train_step",
                        huge_W_after_step_3(train_module.Trainer.train_step))
    more = ("--sample-every", "1", "--sample-chars", "5") if estimate else ()
    assert main([*train(corpus, ckpt, "--steps", "3", "--resume"), *more]) == 1
    line = stderr_line(capsys)
    assert ("the run diverged: the update of step 3 made the model's states overflow in "
            "the run's validation estimate or sample") in line, line
    assert f"so it is not saved; {ckpt} keeps step 2: resume from it" in line, line
    assert "check_finite" not in line
    assert ckpt.read_bytes() == before


@pytest.mark.parametrize("every", ["1", "1,0.001s"])
def test_a_periodic_checkpoint_is_written_once_the_next_step_is_found_finite(
        corpus, tmp_path, capsys, monkeypatch, every):
    """Step 3's update leaves every weight finite but W so large (1e30) that a ReLU model's
    states overflow in step 4, whose loss is not finite. With a checkpoint every step and
    no validation estimate between them, step 3's state was saved over step 2's checkpoint,
    and the run then diverged: no resumed run could go on from it (it gives step 4's loss
    again), and the work before it was lost. A periodic checkpoint is now written in the
    step after the one it holds, once that step is found finite: step 2's stays, and the
    line says to resume from it."""
    import fastbptt.train as train_module

    ckpt = tmp_path / "ruinous.npz"
    relu = ("--activation", "relu", "--optimizer", "sgd", "--lr-decay", "none")
    assert main(train(corpus, ckpt, "--steps", "2", *relu)) == 0
    before = ckpt.read_bytes()
    capsys.readouterr()
    real, saves = train_module.Trainer.train_step, []
    real_save = train_module.Trainer.save

    def save(self, *args, **kwargs):
        saves.append(self.step)
        return real_save(self, *args, **kwargs)
    monkeypatch.setattr(train_module.Trainer, "train_step", huge_W_after_step_3(real))
    monkeypatch.setattr(train_module.Trainer, "save", save)
    args = [*train(corpus, ckpt, "--steps", "6", "--resume", "--checkpoint-every", every),
            *relu]
    assert main(args) == 1
    line = stderr_line(capsys)
    assert "the run diverged: step 4's loss is " in line, line
    assert f"so it is not saved; {ckpt} keeps step 2: resume from it" in line, line
    assert ckpt.read_bytes() == before
    assert saves == [], saves             # step 3's was due, and not written
    # a run that does not diverge writes each periodic checkpoint a step later, of the
    # step it was due at, and the last at the end
    monkeypatch.setattr(train_module.Trainer, "train_step", real)
    assert main(args) == 0
    assert saves == [3, 4, 5, 6] and checkpoint.load(ckpt).step == 6, saves


def test_an_update_that_overflows_the_optimizers_state_saves_nothing_either(
        corpus, tmp_path, capsys, monkeypatch):
    """Adam's v of a float32 gradient above 1.8e19 is inf while the weights stay finite (its
    update of that entry is then 0): every checkpoint a run writes must resume, and
    loading refuses such a state, so the run diverged there."""
    from fastbptt.optim import Adam

    ckpt = tmp_path / "adam.npz"
    assert main(train(corpus, ckpt, "--steps", "2", "--lr-decay", "none")) == 0
    before = ckpt.read_bytes()
    capsys.readouterr()
    real = Adam._update

    def huge(self, name, p, g):                   # one gradient entry of 1e20 at step 3
        g = g.copy()
        g.reshape(-1)[0] = 1e20 if self.t == 3 else g.reshape(-1)[0]
        real(self, name, p, g)
    monkeypatch.setattr(Adam, "_update", huge)
    assert main(train(corpus, ckpt, "--steps", "4", "--resume")) == 1
    line = stderr_line(capsys)
    assert ("the update of step 3 made the adam optimizer's state overflow (a gradient is "
            "far too large)") in line
    assert f"so it is lost; {ckpt} keeps step 2: resume from it" in line
    assert ckpt.read_bytes() == before


def test_a_failed_sample_saves_the_run_and_resume_continues(corpus, tmp_path, capsys,
                                                            monkeypatch):
    ckpt = tmp_path / "sample.npz"

    real = Trainer.sample

    def broken(self, *args, **kwargs):            # once the run has stepped (not warming up)
        if self.step:
            raise RuntimeError("the sampler broke")
        return real(self, *args, **kwargs)
    monkeypatch.setattr(Trainer, "sample", broken)
    args = ["train", str(corpus), *SMALL, "--sample-every", "3", "--checkpoint", str(ckpt)]
    assert main(args + ["--steps", "9"]) == 1
    line = stderr_line(capsys)
    assert line == (f"fastbptt train: the sampler broke after step 3; the state after that "
                    f"step is saved in {ckpt}, and `fastbptt train --resume --checkpoint "
                    f"{ckpt} --steps 9 --sample-every 3` continues from it")
    assert checkpoint.load(ckpt).step == 3
    monkeypatch.setenv("FASTBPTT_TRACEBACK", "1")             # where the error came from
    assert main(args + ["--steps", "9", "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and "RuntimeError: the sampler broke\n" in err
    assert err.splitlines()[-1] == line
    monkeypatch.undo()
    assert main(args + ["--steps", "5", "--resume"]) == 0
    assert checkpoint.load(ckpt).step == 5


@pytest.mark.parametrize("where", ["estimate", "sample"])
def test_a_failed_estimate_leaves_the_rng_as_the_steps_sample_would(corpus, tmp_path, capsys,
                                                                    monkeypatch, where):
    """The run saved its RNG as it was before the failed step's sample, which the resumed
    run, going on after that step, never draws: its later samples and RNG state differed
    from a run without the failure (its weights did not)."""
    import fastbptt._train_command as command
    whole, cut = tmp_path / "whole.npz", tmp_path / "cut.npz"
    args = ["train", str(corpus), *SMALL, "--sample-every", "3", "--sample-chars", "7"]
    assert main(args + ["--steps", "8", "--checkpoint", str(whole)]) == 0
    real_evaluate, real_sample = command.evaluate, Trainer.sample

    def evaluate(params, ids, **kwargs):        # the loop's estimates read 50,000 chars,
        if where == "estimate" and len(ids) > 65:               # the warm-up's 65
            raise MemoryError("no room for the estimate")
        return real_evaluate(params, ids, **kwargs)

    def sample(self, chars=200, *more, **kwargs):
        if where == "sample" and self.step and kwargs.get("rng") is None:
            self.rng.random(3)                                  # part-way through it
            raise RuntimeError("the sampler broke")
        return real_sample(self, chars, *more, **kwargs)
    monkeypatch.setattr(command, "evaluate", evaluate)
    monkeypatch.setattr(Trainer, "sample", sample)
    assert main(args + ["--steps", "8", "--checkpoint", str(cut)]) == 1
    assert checkpoint.load(cut).step == 3
    capsys.readouterr()
    monkeypatch.undo()
    assert main(args + ["--steps", "8", "--checkpoint", str(cut), "--resume"]) == 0
    resumed, uncut = checkpoint.load(cut), checkpoint.load(whole)
    same_run(resumed, uncut)                                       # the RNG's state too
    evals = uncut.history["evals"]                  # step 3's estimate, where it failed,
    if where == "estimate":                         # is not in the resumed run's history
        evals = evals[evals[:, 0] != 3]
    np.testing.assert_array_equal(resumed.history["evals"], evals)
    capsys.readouterr()


def test_a_failure_while_settling_the_rng_still_saves_and_names_the_first(
        corpus, tmp_path, capsys, monkeypatch):
    import fastbptt._train_command as command
    ckpt = tmp_path / "run.npz"

    def evaluate(params, ids, **kwargs):
        if len(ids) > 65:                               # the loop's, not the warm-up's
            raise MemoryError("no room for the estimate")
        return 1.0

    def draw_past(self, state, chars):
        raise MemoryError("no room at all")
    monkeypatch.setattr(command, "evaluate", evaluate)
    monkeypatch.setattr(Trainer, "draw_past", draw_past)
    args = ["train", str(corpus), *SMALL, "--sample-every", "3", "--checkpoint", str(ckpt)]
    assert main(args + ["--steps", "8"]) == 1
    assert stderr_line(capsys).startswith("fastbptt train: out of memory (no room for the "
                                          "estimate) after step 3; the state after that step "
                                          "is saved in ")
    assert checkpoint.load(ckpt).step == 3


def test_an_error_whose_save_fails_says_both(corpus, tmp_path, capsys, monkeypatch):
    ckpt = tmp_path / "both.npz"
    calls = []

    def fail_at_step_2(self, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            monkeypatch.setattr(np, "savez", disk_full)
            raise MemoryError("Unable to allocate 4 GiB")
        return real(self, **kwargs)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    real = Trainer.train_step
    monkeypatch.setattr(Trainer, "train_step", fail_at_step_2)
    assert main(train(corpus, ckpt, "--steps", "5")) == 1
    line = stderr_line(capsys)
    assert line == ("fastbptt train: out of memory (Unable to allocate 4 GiB) after step 1, "
                    "and could not write the checkpoint of step 1 (No space left on device); "
                    f"nothing was saved over {ckpt}")
    assert not ckpt.exists() and os.listdir(tmp_path) == ["tiny.txt"]
    monkeypatch.undo()
    assert main(train(corpus, ckpt, "--steps", "2")) == 0       # a checkpoint to keep
    before = ckpt.read_bytes()
    calls.clear()
    monkeypatch.setattr(Trainer, "train_step", fail_at_step_2)
    assert main(train(corpus, ckpt, "--steps", "5", "--resume")) == 1
    assert stderr_line(capsys) == (
        "fastbptt train: out of memory (Unable to allocate 4 GiB) after step 3, and could not "
        f"write the checkpoint of step 3 (No space left on device); nothing was saved over "
        f"{ckpt}, which holds step 2: `fastbptt train --resume --checkpoint {ckpt} --steps 5 "
        "--sample-every 0` continues from it")
    assert ckpt.read_bytes() == before


def test_a_closed_stdout_saves_the_run_and_exits_1(corpus):
    folder = corpus.parent
    args = ["train", corpus.name, *SMALL, "--sample-every", "1", "--sample-chars", "20",
            "--time", "60", "--checkpoint", "pipe.npz"]
    proc = start(args, folder)
    read_until(proc, "training for 60 s")
    proc.stdout.close()                                  # the reader goes away
    err = proc.stderr.read()
    proc.stderr.close()
    proc.wait(timeout=60)
    assert proc.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("fastbptt train: the output was closed before it was all "
                               "written (broken pipe) after step "), err
    step = int(lines[0].split("after step ")[1].split(";")[0])
    assert checkpoint.load(folder / "pipe.npz").step == step


def test_a_moved_project_resumes_by_content(tmp_path, capsys):
    project = tmp_path / "project"
    project.mkdir()
    write_corpus(project, "notes.txt")
    ckpt = project / "run.npz"
    assert main(train(project / "notes.txt", ckpt, "--steps", "2")) == 0
    moved = tmp_path / "renamed-project"
    shutil.move(project, moved)
    capsys.readouterr()
    # no files named: found beside the checkpoint, as they were saved relative to it
    assert main(["train", *SMALL, "--sample-every", "0", "--checkpoint",
                 str(moved / "run.npz"), "--resume", "--steps", "3"]) == 0
    assert "corpus: notes.txt" in capsys.readouterr().out
    # a renamed file with the same text
    (moved / "notes.txt").rename(moved / "renamed.txt")
    assert main(train(moved / "renamed.txt", moved / "run.npz", "--resume", "--steps",
                      "4")) == 0
    assert checkpoint.load(moved / "run.npz").options["files"] == [str(moved / "renamed.txt")]
    capsys.readouterr()
    # other text is refused, naming the fix
    (moved / "other.txt").write_text("something else entirely, " * 40)
    assert main(train(moved / "other.txt", moved / "run.npz", "--resume", "--steps",
                      "5")) == 1
    assert "differs from the text" in stderr_line(capsys)
    # the text edited where it is: said so, not that it cannot be found
    text = (moved / "renamed.txt").read_text()
    (moved / "renamed.txt").write_text(text + "an edit")
    assert main(["train", *SMALL, "--checkpoint", str(moved / "run.npz"), "--resume",
                 "--steps", "5"]) == 1
    assert f"the text {moved / 'run.npz'} was trained on (renamed.txt) is where it was, but " \
           f"it has changed since" in stderr_line(capsys)
    (moved / "renamed.txt").write_text(text)
    (moved / "renamed.txt").rename(moved / "gone.txt")
    assert main(["train", *SMALL, "--checkpoint", str(moved / "run.npz"), "--resume",
                 "--steps", "5"]) == 1
    assert "cannot find the text" in stderr_line(capsys)


def test_text_files_may_stand_among_the_options(tmp_path, capsys):
    for name in ("a.txt", "b.txt"):
        write_corpus(tmp_path, name)
    ckpt = tmp_path / "run.npz"
    assert main(["train", *SMALL, str(tmp_path / "a.txt"), "--steps", "1", "--checkpoint",
                 str(ckpt), str(tmp_path / "b.txt"), "--sample-every", "0"]) == 0
    assert "corpus: a.txt, b.txt" in capsys.readouterr().out
    files = [str(tmp_path / name) for name in ("a.txt", "b.txt")]
    assert checkpoint.load(ckpt).options["files"] == files
    with pytest.raises(SystemExit) as stop:
        main(["train", *SMALL, str(tmp_path / "a.txt"), "--bogus", "1"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == ("fastbptt train: unrecognized arguments: --bogus 1; see "
                                       "`fastbptt train -h`\n")


def test_a_new_run_replaces_an_earlier_checkpoint_only_when_told(corpus, tmp_path, capsys):
    ckpt = tmp_path / "run.npz"
    assert main(train(corpus, ckpt, "--steps", "3")) == 0
    earlier = ckpt.read_bytes()
    capsys.readouterr()
    assert main(train(corpus, ckpt, "--steps", "1", "--seed", "1")) == 1
    assert "holds a run of 1 Elman layer of hidden size 8 at step 3" in stderr_line(capsys)
    assert ckpt.read_bytes() == earlier
    assert main(train(corpus, ckpt, "--steps", "1", "--seed", "1", "--overwrite")) == 0
    replaced = checkpoint.load(ckpt)
    assert replaced.step == 1 and replaced.options["seed"] == 1
    # a path that holds nothing yet needs no --overwrite, and --overwrite does no harm there
    assert main(train(corpus, tmp_path / "new.npz", "--steps", "1", "--overwrite")) == 0
    assert checkpoint.load(tmp_path / "new.npz").step == 1


@pytest.mark.parametrize("window", [("--truncate", "8"), ("--stride", "8"),
                                    ("--truncate", "8", "--stride", "8")])
def test_resume_takes_the_checkpoints_window_in_other_words(corpus, tmp_path, capsys,
                                                            window):
    """A run of --seq-length 8 without --truncate has the window --truncate 8 --stride 8:
    naming it on --resume changes nothing, and is not refused as a change."""
    ckpt = tmp_path / "run.npz"
    assert main(train(corpus, ckpt, "--steps", "2")) == 0
    saved = checkpoint.load(ckpt).options
    assert main(train(corpus, ckpt, "--resume", "--steps", "3", *window)) == 0
    resumed = checkpoint.load(ckpt)
    assert resumed.step == 3
    assert {k: resumed.options[k] for k in ("truncate", "stride")} == \
        {k: saved[k] for k in ("truncate", "stride")}


def test_a_resumed_run_past_its_decay_says_so_and_may_move_its_end(corpus, tmp_path,
                                                                   capsys):
    ckpt = tmp_path / "run.npz"
    assert main(train(corpus, ckpt, "--steps", "3")) == 0
    assert checkpoint.load(ckpt).options["horizon"] == 3      # fixed by the first --steps
    capsys.readouterr()
    assert main(train(corpus, ckpt, "--resume", "--steps", "5")) == 0
    assert "note: the learning rate decayed to 0.00015 by step 3 (--lr-horizon) and stays " \
           "there to step 5; --lr-horizon STEP moves that end" in capsys.readouterr().out
    assert main(train(corpus, ckpt, "--resume", "--steps", "7", "--lr-horizon", "9")) == 0
    out = capsys.readouterr().out
    assert "--lr-horizon changed from 3 to 9" in out and "note:" not in out
    resumed = checkpoint.load(ckpt)
    assert resumed.step == 7 and resumed.options["horizon"] == 9
    assert main(train(corpus, ckpt, "--resume", "--steps", "9")) == 0     # within it
    assert "note:" not in capsys.readouterr().out


def test_a_resume_under_a_time_budget_before_its_decays_end_says_where_it_ends(
        corpus, tmp_path, capsys):
    ckpt = tmp_path / "run.npz"
    assert main(train(corpus, ckpt, "--steps", "2", "--lr-horizon", "1000000")) == 0
    capsys.readouterr()
    assert main(train(corpus, ckpt, "--resume", "--time", "0.01")) == 0
    assert "note: the learning rate decays to 0.00015 by step 1,000,000 (--lr-horizon) and " \
           "stays there past it; --steps 1000000 stops there" in capsys.readouterr().out


@pytest.mark.parametrize("steps", ["1", "3"])
def test_a_resume_to_no_more_steps_than_the_checkpoint_holds_says_so_and_ends(
        corpus, tmp_path, capsys, steps):
    """The same command run again after it finished (a job restarted, say) ends at once
    with status 0, saying why, the checkpoint untouched; before, it said "training to
    step 1", trained nothing and reported as if it had."""
    ckpt = tmp_path / "run.npz"
    assert main(train(corpus, ckpt, "--steps", "3")) == 0
    before = ckpt.read_bytes()
    capsys.readouterr()
    assert main(train(corpus, ckpt, "--resume", "--steps", steps)) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == (
        f"{ckpt} is at step 3, which --steps {steps} counts as done (it counts the run's "
        "steps in all): nothing to train; a larger --steps, or --time, goes on\n")
    assert ckpt.read_bytes() == before


def test_a_checkpoint_without_relative_paths_still_resumes_from_named_files(tmp_path,
                                                                            capsys):
    """Checkpoints written before the relative paths were saved: resumed where the
    files are, or from files named on the command line."""
    corpus = write_corpus(tmp_path)
    ckpt = tmp_path / "old.npz"
    assert main(train(corpus, ckpt, "--steps", "2")) == 0
    ck = checkpoint.load(ckpt)
    del ck.options["files_relative"]
    checkpoint.save(ckpt, ck)
    assert main(["train", *SMALL, "--checkpoint", str(ckpt), "--resume", "--steps", "3",
                 "--sample-every", "0"]) == 0
    corpus.rename(tmp_path / "moved.txt")
    capsys.readouterr()
    assert main(["train", *SMALL, "--checkpoint", str(ckpt), "--resume", "--steps", "4"]) == 1
    assert "name its files: fastbptt train FILE... --resume" in stderr_line(capsys)
    assert main(train(tmp_path / "moved.txt", ckpt, "--resume", "--steps", "4")) == 0


def test_a_diverging_step_changes_nothing_in_the_trainer():
    text = "abcdefgh" * 40
    codec = Codec.from_text(text)
    options = TrainOptions(hidden=5, seq_length=4, batch=2, activation="identity",
                           cell="elman", layers=1)
    t = Trainer(options, codec.encode(text), codec)
    t.train_step()
    t.params.W[...] = 1e30                    # finite, but the states overflow
    params = [p.copy() for p in t.params]
    before, state = t.carried, t.optimizer.state_dict()
    with pytest.raises(Diverged, match="step 2's loss is"):
        t.train_step()
    assert t.carried.position == before.position and t.step == 1 and t.consistent
    np.testing.assert_array_equal(t.carried.h, before.h)
    after = t.optimizer.state_dict()
    assert after.keys() == state.keys() and after["t"] == state["t"] == 1
    for key in state:
        np.testing.assert_array_equal(after[key], state[key])
    for p, q in zip(t.params, params):
        np.testing.assert_array_equal(p, q)


def test_a_new_checkpoint_folder_is_made_before_any_work_and_holds_the_claim(corpus,
                                                                             tmp_path, capsys):
    """A checkpoint in folders that do not exist yet: they are made before the run starts,
    so that its claim holds (a second run on the path stops while the first one trains),
    and a name the file system refuses stops the run before any work; a run that saves
    nothing leaves none of the folders it made."""
    ckpt = tmp_path / "new" / "deeper" / "run.npz"
    first = start(train(corpus, ckpt, "--time", "60"), tmp_path)
    try:
        read_until(first, "training for")               # its checks are done, its claim held
        assert main(train(corpus, ckpt, "--steps", "2")) == 1
        line = stderr_line(capsys)
        assert line.startswith(f"fastbptt train: --checkpoint {ckpt} is being written by "
                               f"another fastbptt train (process {first.pid})"), line
    finally:
        first.terminate()                               # SIGTERM: it saves, then stops
    assert finish(first).status == 143
    checkpoint.load(ckpt)                               # its save, whatever step it reached

    long = tmp_path / "out" / ("y" * 300) / "run.npz"
    assert main(train(corpus, long, "--steps", "2")) == 1
    line = stderr_line(capsys)
    assert f"cannot make its folder {tmp_path / 'out' / ('y' * 300)}" in line \
        and line.endswith("File name too long"), line
    assert not (tmp_path / "out").exists()
    unused = tmp_path / "unused" / "run.npz"
    assert main(train(tmp_path / "no such text.txt", unused, "--steps", "2")) == 1
    assert "no such text.txt" in stderr_line(capsys)
    assert not (tmp_path / "unused").exists()


def test_a_run_removes_the_temporary_files_of_killed_saves_of_its_checkpoint(corpus, tmp_path):
    """A process killed in the middle of a save leaves its temporary file; the next run on
    that checkpoint, new or resumed, removes the ones of processes no longer running, and
    only those of its own checkpoint."""
    dead = NO_PROCESS
    for resume in (False, True):
        names = {f".run.npz.{dead}.0.tmp": False, f".run.npz.{dead}.3.tmp": False,
                 f".run.npz.{os.getpid()}.0.tmp": True,     # a process still running
                 f".other.npz.{dead}.0.tmp": True, f".run.npz.{dead}.x.tmp": True}
        for name in names:
            (tmp_path / name).write_bytes(b"half a checkpoint")
        more = ("--resume",) if resume else ("--overwrite",)
        assert main(train(corpus, tmp_path / "run.npz", "--steps", "2" if not resume else "3",
                          *more)) == 0
        assert {n: (tmp_path / n).exists() for n in names} == names
    assert checkpoint.remove_stale_temporaries(tmp_path / "none" / "run.npz") == 0


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 CPUs for --threads 2")
def test_a_resumed_run_keeps_the_thread_count_it_was_written_with(corpus, tmp_path):
    """--resume without --threads goes on at the checkpoint's thread count, so that it is
    the same bits as the run that never stopped (on one thread, the sums of a 2-thread run
    differ in their last bits); a count beyond this machine's CPUs is said in a line."""
    run = ["train", corpus, "--hidden", "16", "--seq-length", "10", "--batch", "4",
           "--no-progress", "--sample-every", "0", "--lr-decay", "none"]

    def train_run(*more):
        done = finish(start([*run, *more], tmp_path))
        assert done.status == 0, done
        return done

    train_run("--threads", "2", "--steps", "20", "--checkpoint", "whole.npz")
    train_run("--threads", "2", "--steps", "10", "--checkpoint", "split.npz")
    train_run("--resume", "--steps", "20", "--checkpoint", "split.npz")
    whole, split = (checkpoint.load(tmp_path / n) for n in ("whole.npz", "split.npz"))
    same_run(whole, split)
    assert split.options["threads"] == 2

    many = os.cpu_count() + 1
    rewrite(tmp_path / "whole.npz", tmp_path / "many.npz",
            edit_meta(lambda meta: meta["options"].update(threads=many)))
    done = train_run("--resume", "--steps", "21", "--checkpoint", "many.npz")
    assert (f"threads: {os.cpu_count()}, this machine's CPU count, where the checkpoint was "
            f"written on {many}") in done.out
    assert checkpoint.load(tmp_path / "many.npz").options["threads"] == os.cpu_count()


@pytest.mark.parametrize("resume", [False, True])
def test_a_second_run_on_a_claimed_checkpoint_stops_before_any_work(corpus, tmp_path, capsys,
                                                                    resume):
    """Another run holding the path (here: this process, through the same claim) refuses
    a new run and a resumed one in one line naming it; the file stays as it was, and once
    the claim ends the run goes ahead and leaves no lock file."""
    from fastbptt._checkpoint_claim import claimed, lock_path

    ckpt = tmp_path / "held.npz"
    if resume:
        assert main(train(corpus, ckpt, "--steps", "2")) == 0
    before = ckpt.read_bytes() if resume else None
    again = train(corpus, ckpt, "--steps", "3", *(["--resume"] if resume else []))
    capsys.readouterr()
    with claimed(ckpt):
        assert main(again) == 1
        line = stderr_line(capsys)
        assert line == (f"fastbptt train: --checkpoint {ckpt} is being written by another "
                        f"fastbptt train (process {os.getpid()}): let that run end, or give "
                        "this one another --checkpoint"), line
        assert (ckpt.read_bytes() if resume else ckpt.exists()) == (before if resume
                                                                     else False)
    assert main(again) == 0
    assert checkpoint.load(ckpt).step == 3
    assert not os.path.exists(lock_path(ckpt))


@pytest.mark.parametrize("cell, removed, said", [
    ("elman", ("hidden",), "the checkpoint has no 'hidden' entry"),
    ("lstm", ("hidden", "cell_state"), "the checkpoint has no 'hidden' or 'cell_state' entry"),
    ("lstm", ("cell_state",), "needs both h ('hidden') and c ('cell_state')")])
def test_a_checkpoint_without_the_carried_state_is_refused_mid_text(corpus, tmp_path, capsys,
                                                                    cell, removed, said):
    """Its cursors are part-way through their text: from zero states the run would go on,
    but not as the run itself would have (it used to, silently)."""
    ckpt = tmp_path / "run.npz"
    assert main(train(corpus, ckpt, "--cell", cell, "--steps", "3")) == 0
    assert 0 < checkpoint.load(ckpt).batcher["pos"]
    rewrite(ckpt, ckpt, lambda arrays: [arrays.pop(key) for key in removed])
    before = ckpt.read_bytes()
    capsys.readouterr()
    assert main(train(corpus, ckpt, "--cell", cell, "--steps", "5", "--resume")) == 1
    line = stderr_line(capsys)
    assert said in line, line
    assert ckpt.read_bytes() == before
