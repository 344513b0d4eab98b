"""What `fastbptt train` writes besides its checkpoint, and when its outputs are closed:
a plot is whole or as it was and never replaces the checkpoint or the text; a run whose
decay reached a rate of 0 resumes; a closed stdout is refused before any work, a closed
stderr silences the messages; the "train" figure beside a sample is the mean of recent
steps."""
import re
import subprocess
import sys

import pytest

from cli_processes import SMALL, env, write_corpus
from fastbptt import checkpoint
from fastbptt.cli import main
from fastbptt.optim import Adam
from fastbptt.text import Codec
from fastbptt.train import TrainOptions, Trainer


def _run(args, cwd, redirect=""):
    """``python -m fastbptt args`` through the shell, for redirections such as >&-."""
    command = " ".join([sys.executable, "-m", "fastbptt", *map(str, args)]) + " " + redirect
    return subprocess.run(command, shell=True, cwd=cwd, env=env(), capture_output=True,
                          text=True, timeout=300)


def test_a_run_whose_decay_reached_a_rate_of_0_resumes(tmp_path):
    text = "the quick brown fox jumps over the lazy dog. " * 20
    codec = Codec.from_text(text)
    options = TrainOptions(hidden=6, seq_length=5, batch=2, lr_final=0.0, horizon=3)
    trainer = Trainer(options, codec.encode(text), codec)
    for _ in range(5):
        trainer.train_step()
    assert trainer.optimizer.lr == 0.0
    trainer.save(tmp_path / "t.npz")
    saved = checkpoint.load(tmp_path / "t.npz")
    again = Trainer(options, codec.encode(text), codec, resume=saved)
    assert again.step == 5 and again.optimizer.lr == 0.0
    state = Adam().state_dict()
    for bad in (-1.0, float("nan"), float("inf"), "0.1"):
        with pytest.raises(ValueError, match="the adam state's lr must be a finite number >= 0"):
            Adam().load_state_dict({**state, "lr": bad})


def test_a_plot_may_not_replace_the_checkpoint_or_a_text(tmp_path, capsys, monkeypatch):
    pytest.importorskip("matplotlib", reason="needs matplotlib (the plot extra)")
    write_corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    for plot, checkpoint_path, what in (("run.png", "run.png", "--checkpoint run.png"),
                                        ("./sub/../run.png", "run.png", "--checkpoint run.png"),
                                        ("tiny.svg", "c.npz", "the text file tiny.svg")):
        if what.startswith("the text"):
            write_corpus(tmp_path, "tiny.svg")
        files = ["tiny.svg"] if what.startswith("the text") else ["tiny.txt"]
        (tmp_path / "sub").mkdir(exist_ok=True)
        status = main(["train", *files, *SMALL, "--steps", "2", "--sample-every", "0",
                       "--checkpoint", checkpoint_path, "--plot", plot])
        err = capsys.readouterr().err
        assert status == 2 and f"--plot {plot} is {what}, which the plot would replace" in err
        assert not (tmp_path / "run.png").exists() and not (tmp_path / "c.npz").exists()


def test_a_plot_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="needs matplotlib (the plot extra)")
    from matplotlib.figure import Figure

    from fastbptt._preflight import save_figure

    path = tmp_path / "p.svg"
    fig = Figure()
    fig.add_subplot().plot([1, 2, 3])
    save_figure(fig, path)
    good = path.read_bytes()
    assert good.startswith(b"<?xml")

    def cut_short(self, f, **kwargs):
        f.write(b"<svg half")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", cut_short)
    with pytest.raises(KeyboardInterrupt):
        save_figure(fig, path)
    assert path.read_bytes() == good and [p.name for p in tmp_path.iterdir()] == ["p.svg"]


def test_a_closed_stdout_is_refused_before_any_work(tmp_path):
    write_corpus(tmp_path)
    out = _run(["train", "tiny.txt", *SMALL, "--steps", "2", "--checkpoint", "c.npz"],
               tmp_path, ">&-")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip() == ("fastbptt: the standard output is closed; redirect it to a "
                                  "file, or to /dev/null to discard it")
    assert not (tmp_path / "c.npz").exists()


def test_a_closed_stderr_silences_messages_and_the_progress_bar(tmp_path):
    write_corpus(tmp_path)
    small = [a for a in SMALL if a != "--no-progress"]           # the bar writes to stderr
    out = _run(["train", "tiny.txt", *small, "--steps", "3", "--sample-every", "0",
                "--checkpoint", "c.npz"], tmp_path, "2>&-")
    assert out.returncode == 0 and "trained 3 steps" in out.stdout, out
    assert checkpoint.load(tmp_path / "c.npz").step == 3
    missing = _run(["sample", "nothere.npz"], tmp_path, "2>&-")
    assert missing.returncode == 1 and missing.stdout == ""


def test_the_train_figure_beside_a_sample_is_the_mean_of_recent_steps(tmp_path, capsys,
                                                                     monkeypatch):
    write_corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "tiny.txt", *SMALL, "--steps", "2", "--sample-every", "2",
                 "--sample-chars", "5", "--checkpoint", "c.npz"]) == 0
    shown = float(re.search(r"--- step 2: train ([0-9.]+),", capsys.readouterr().out)[1])
    l1, l2 = checkpoint.load(tmp_path / "c.npz").history["loss"]
    assert abs(shown - (0.98 * l1 + l2) / 1.98) < 6e-4          # printed to 3 decimals


def test_sample_chars_0_draws_no_samples_and_an_empty_plot_name_is_refused(tmp_path, capsys,
                                                                            monkeypatch):
    write_corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "tiny.txt", *SMALL, "--steps", "4", "--time", "60",
                 "--sample-every", "2", "--sample-chars", "0", "--checkpoint", "c.npz"]) == 0
    out = capsys.readouterr().out
    assert "training for 60 s or to step 4, whichever comes first;" in out
    assert re.search(r"^--- step 2: train [0-9.]+, validation [0-9.]+ nats/char ---$", out,
                     re.M), out
    assert "; sample:" not in out and "sample (temperature" not in out, out
    assert main(["train", "tiny.txt", *SMALL, "--steps", "4", "--plot", "",
                 "--checkpoint", "d.npz"]) == 2
    assert capsys.readouterr().err == ("fastbptt train: --plot needs a file name; got ''; see "
                                       "`fastbptt train -h`\n")
    assert not (tmp_path / "d.npz").exists()


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_plot_name_is_a_usage_error_without_matplotlib(tmp_path, capsys,
                                                                 monkeypatch, name):
    """Where matplotlib is not installed, an empty name is still the usage error it is
    (status 2): it was answered with "--plot needs matplotlib" (status 1)."""
    write_corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    for module in ("matplotlib", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, module, None)
    assert main(["train", "tiny.txt", *SMALL, "--plot", name, "--checkpoint", "d.npz"]) == 2
    assert capsys.readouterr().err == (f"fastbptt train: --plot needs a file name; got "
                                       f"{name!r}; see `fastbptt train -h`\n")
    assert main(["train", "tiny.txt", *SMALL, "--plot", "a.png", "--checkpoint", "d.npz"]) == 1
    assert capsys.readouterr().err == ("fastbptt train: --plot needs matplotlib: pip install "
                                       "'fastbptt[plot]'\n")
    assert not (tmp_path / "d.npz").exists()


def test_an_ascii_locale_prints_text_it_cannot_encode_as_escapes(tmp_path):
    """LC_ALL=C without Python's UTF-8 mode: stdout is ASCII. A sample of non-ASCII text
    (and a --prime given in UTF-8, whose bytes the locale cannot decode) is printed with
    backslash escapes, status 0; the run used to stop at its first sample."""
    corpus = tmp_path / "text.txt"
    corpus.write_text("café naïve 日本 " * 200, encoding="utf-8")
    ckpt = tmp_path / "run.npz"
    environ = env(LC_ALL="C", PYTHONUTF8="0")
    environ.pop("PYTHONIOENCODING", None)
    train = subprocess.run(
        [sys.executable, "-m", "fastbptt", "train", str(corpus), *SMALL, "--steps", "4",
         "--sample-every", "2", "--sample-chars", "40", "--checkpoint", str(ckpt)],
        env=environ, capture_output=True, text=True, timeout=300, encoding="utf-8")
    assert train.returncode == 0, train.stderr
    assert checkpoint.load(ckpt).step == 4
    drawn = subprocess.run(
        [sys.executable, "-m", "fastbptt", "sample", str(ckpt), "--prime", "café ",
         "--chars", "30"], env=environ, capture_output=True, timeout=300)
    assert drawn.returncode == 0, drawn.stderr
    assert drawn.stdout.startswith(b"caf\\xe9 ") and drawn.stdout.isascii()
