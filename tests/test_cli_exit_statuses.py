"""Every mistake gets one line on stderr and the status of its class: 2 for a command
line that is wrong by itself, 1 for any other failure. Each case runs through
`fastbptt.cli.main` in this process, and the ones marked ``PROCESS`` (a few per class and
subcommand) also as real processes. (Signals: test_signals.py; failures inside a
training run: test_run_safety.py.)"""
import os
import shutil
import stat
import sys

import numpy as np
import pytest

import fastbptt
from checkpoint_edits import edit_meta, rewrite
from cli_processes import SMALL, Outcome, finish, run_all, start, write_corpus
from fastbptt.cli import main

PROCESS = "process"
LIMITED = "limited"       # only as a process, of 3 GB: a regression would take all memory
LIMIT = 3 << 30


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A tiny corpus, a checkpoint trained on it (the run also fills Numba's cache for the
    processes that follow), and damaged copies of the checkpoint."""
    here = tmp_path_factory.mktemp("cli")
    write_corpus(here)
    write_corpus(here, "one.txt", "a" * 400)
    write_corpus(here, "short.txt", "abcdefghij")
    write_corpus(here, "one_then_two.txt", "a" * 900 + "b" * 100)
    write_corpus(here, "other.txt", "a quite different text, " * 40)
    (here / "folder").mkdir()
    runs = [start(["train", "tiny.txt", *SMALL, "--steps", "2", "--sample-every", "0",
                   "--checkpoint", name, *model], here)
            for name, model in (("good.npz", ()), ("lstm.npz", ("--cell", "lstm", "--layers",
                                                                 "2")))]
    for made in map(finish, runs):
        assert made.status == 0, made
    good = (here / "good.npz").read_bytes()
    (here / "truncated.npz").write_bytes(good[:len(good) // 2])
    flipped = bytearray(good)
    flipped[len(good) // 3] ^= 0x10
    (here / "flipped.npz").write_bytes(bytes(flipped))
    np.savez(here / "foreign.npz", weights=np.arange(3.0))
    rewrite(here / "good.npz", here / "no_vocab.npz", lambda a: a.pop("vocab"))
    rewrite(here / "good.npz", here / "no_W.npz", lambda a: a.pop("params.W"))
    rewrite(here / "good.npz", here / "text_hidden.npz",
            edit_meta(lambda m: m["options"].update(hidden="abc")))
    rewrite(here / "good.npz", here / "int_W.npz",
            lambda a: a.update({"params.W": a["params.W"].astype(np.int64)}))
    rewrite(here / "good.npz", here / "no_step.npz", edit_meta(lambda m: m.pop("step")))
    rewrite(here / "good.npz", here / "bad_rng.npz",
            edit_meta(lambda m: m["rng_state"]["state"].update(state=2 ** 200)))
    rewrite(here / "good.npz", here / "two_layers.npz",
            edit_meta(lambda m: m["options"].update(layers=2)))
    rewrite(here / "lstm.npz", here / "huge_layers.npz",      # not enumerated: no memory
            edit_meta(lambda m: m["options"].update(layers=10**30)))
    rewrite(here / "lstm.npz", here / "no_cell_state.npz", lambda a: a.pop("cell_state"))
    rewrite(here / "good.npz", here / "surrogate.npz",
            lambda a: a.update(vocab=np.where(np.arange(a["vocab"].size) == 3, 0xD800,
                                              a["vocab"])))
    rewrite(here / "lstm.npz", here / "gru.npz", edit_meta(lambda m: m["options"].update(
        cell="gru")))
    rewrite(here / "good.npz", here / "no_digest.npz", edit_meta(lambda m: m["options"].update(
        corpus_sha256=None)))
    rewrite(here / "good.npz", here / "odd_digest.npz", edit_meta(
        lambda m: m["options"].update(corpus_sha256="z" * 64)))
    return here


USAGE = [
    (["train", "tiny.txt", *SMALL, "--hidden", "0"],
     "argument --hidden: must be an integer of at least 1; got 0", PROCESS),
    (["train", "tiny.txt", *SMALL, "--checkpoint-every", "3,xs"],
     "argument --checkpoint-every: must be N steps (a whole number), Ts seconds, both as "
     "N,Ts, or 0 for none; got '3,xs'"),
    (["train", "tiny.txt", *SMALL, "--checkpoint-every", "5,7"],       # which one?
     "argument --checkpoint-every: must be N steps (a whole number), Ts seconds, both as "
     "N,Ts, or 0 for none; got '5,7'"),
    (["train", "tiny.txt", *SMALL, "--checkpoint-every", "5,10s,20"],
     "argument --checkpoint-every: must be N steps"),
    (["train", "tiny.txt", *SMALL, "--lr", "nan"], "argument --lr: must be a finite number"),
    (["train", "tiny.txt", *SMALL, "--lr", "1e39"],
     "--lr 1e+39 is beyond the range of --dtype float32"),
    (["train", "tiny.txt", *SMALL, "--lr", "1e-50"],       # trained nothing
     "--lr 1e-50 rounds to 0 in --dtype float32, whose smallest number is 1.4e-45"),
    (["train", "tiny.txt", *SMALL, "--val-fraction", "1"],
     "argument --val-fraction: must be a finite number in (0, 1)"),
    (["train", "tiny.txt", *SMALL, "--truncate", "4", "--stride", "5"],
     "--stride 5 exceeds the window of 4 steps", PROCESS),
    (["train", "tiny.txt", *SMALL, "--layers", "2", "--truncate", "3", "--stride", "1"],
     "--stride 1 below --truncate 3 (a window per output) is not supported with --layers 2"),
    (["train", "tiny.txt", *SMALL, "--temperature", "0"], "argument --temperature"),
    (["train", "tiny.txt", *SMALL, "--sample-chars", "-5"], "argument --sample-chars"),
    (["train", "tiny.txt", *SMALL, "--lr-final", "1.5"], "argument --lr-final"),
    (["train", "tiny.txt", *SMALL, "--seed", "-1"], "argument --seed"),
    (["train", "tiny.txt", *SMALL, "--hiden", "8"], "unrecognized arguments: --hiden"),
    (["train", "tiny.txt", *SMALL, "--checkpoint-every", "-3s"],     # read as an option
     "argument --checkpoint-every: expected one argument; a value that begins with '-' is "
     "written --checkpoint-every=-3s"),
    (["train", "tiny.txt", *SMALL, "--checkpoint-ev", "-3s"],       # abbreviated
     "a value that begins with '-' is written --checkpoint-ev=-3s"),
    (["train", "tiny.txt", *SMALL, "--checkpoint", "--resume"],    # a value left out
     "argument --checkpoint: expected one argument; see"),
    (["train", "tiny.txt", *SMALL, "--time", "--ste", "5"],       # before an abbreviation
     "argument --time: expected one argument; see"),
    (["sample", "good.npz", "--prime", "--chars=5"],
     "argument --prime: expected one argument; see"),
    (["train", "tiny.txt", *SMALL, "--checkpoint-every=-3s"],
     "argument --checkpoint-every: must be N steps"),
    (["sample", "good.npz", "--prime", "-QZ"],
     "argument --prime: expected one argument; a value that begins with '-' is written "
     "--prime=-QZ"),
    (["train", "tiny.txt", *SMALL, "--scheduler", "foo:bar"],
     "argument --scheduler: must be a scheduler's address such as tcp://host:8786; got "
     "'foo:bar'"),
    (["train", "tiny.txt", *SMALL, "--scheduler", "tcp://127.0.0.1:99999"],
     "argument --scheduler: must be a scheduler's address such as tcp://host:8786; got "
     "'tcp://127.0.0.1:99999'"),
    (["train", "tiny.txt", *SMALL, "--checkpoint", "tiny.txt"],
     "--checkpoint tiny.txt is the text file tiny.txt, which the checkpoint would replace: "
     "give the checkpoint another name"),
    (["train", "good.npz", *SMALL, "--checkpoint", "./good.npz", "--overwrite"],  # read as
     "--checkpoint ./good.npz is the text file good.npz, which the checkpoint would "  # text
     "replace"),
    (["train", "tiny.txt", *SMALL, "--scheduler", "tcp://127.0.0.1"],     # no port
     "argument --scheduler: must be a scheduler's address such as tcp://host:8786; got "
     "'tcp://127.0.0.1'"),
    (["train", "tiny.txt", *SMALL, "--scheduler", "http://127.0.0.1:8787"],  # no Dask's
     "argument --scheduler: must be a scheduler's address such as tcp://host:8786; got "
     "'http://127.0.0.1:8787'"),
    (["train", "tiny.txt", *SMALL, "--resume", "--checkpoint", "good.npz", "--hidden", "9"],
     "--resume: the checkpoint has --hidden 8, the command line 9", PROCESS),
    (["train", "tiny.txt", *SMALL, "--resume", "--checkpoint", "good.npz", "--lr", "1e39"],
     "--resume: --lr 1e+39 is beyond the range of --dtype float32"),
    (["train", "tiny.txt", *SMALL, "--resume", "--checkpoint", "good.npz", "--truncate", "4"],
     "--resume: the checkpoint has --truncate 8, the command line 4"),
    (["train", "tiny.txt", *SMALL, "--resume", "--checkpoint", "good.npz", "--stride", "3"],
     "--resume: the checkpoint has --stride 8, the command line 3"),
    (["train", "tiny.txt", *SMALL, "--resume", "--overwrite", "--checkpoint", "good.npz"],
     "--overwrite starts a new run over --checkpoint's and --resume continues it: give one "
     "of them"),
    (["sample", "good.npz", "--chars", "-1"], "argument --chars"),
    (["sample", "good.npz", "--chars", "99999999999999999999999"],
     "argument --chars: must be an integer in [0, 1e+08]"),
    (["sample", "good.npz", "--temperature", "-0.5"], "argument --temperature"),
    (["sample", "good.npz", "--temperature", "1e-400"],      # above 0, but 0 as a float
     "argument --temperature: must be a finite number above 0; got 1e-400, which is 0 as a "
     "float: a number of at least 5e-324"),
    (["train", "tiny.txt", *SMALL, "--clip-norm", "1e-400"],    # not 0, which is no clipping
     "argument --clip-norm: must be a finite number of at least 0; got 1e-400, which is 0 as "
     "a float: give 0 if 0 is meant, or a number of at least 5e-324"),
    (["train", "tiny.txt", *SMALL, "--checkpoint-every", "1e-400s"],   # not 0: none at all
     "argument --checkpoint-every: must be N steps"),
    (["train", "tiny.txt", *SMALL, "--lr=-1e-999"],
     "argument --lr: must be a finite number above 0; got -1e-999; see"),
    (["train", "tiny.txt", *SMALL, "--lr", "0E5"],
     "argument --lr: must be a finite number above 0; got 0E5; see"),
    (["sample", "good.npz", "--prime", "QZ"], "--prime holds characters not in the vocabulary",
     PROCESS),
    (["demo", "--truncate", "0"], "argument --truncate", PROCESS),
    (["demo", "--hidden", "x"], "argument --hidden: must be an integer"),
    (["bench", "--workloads", "W9"], "argument --workloads: unknown workload 'W9'",
     PROCESS),
    (["bench", "--repeat", "0"], "argument --repeat"),
    (["bench", "--json", ""], "--json needs a file name; got ''"),
    (["bench", "--plot", " "], "--plot needs a file name; got ' '"),
    (["bench", "--torch", "--no-peers"], "--no-peers cannot be used with --torch alone (it "
     "prints its own table); add --workloads to time the workloads as well"),
    (["bench", "--jax", "--reference"], "--reference cannot be used with --jax alone"),
    (["bench", "--distributed", "--repeat", "3"], "--repeat cannot be used with --distributed"),
    (["bench", "--workloads", "W2,G1", "--reference"],
     "--reference times the documents' loop on W3 and W4, and --workloads W2,G1 has neither"),
    (["bench", "--no-peers", "--plot", "x.png"],
     "--plot draws fastbptt's speed-up against its peers, and --no-peers times none (add "
     "--reference for the documents' loop on W3, W4)"),
    (["bench", "--torch", "--jax", "--plot", "t.png", "--startup"],
     "--plot and --startup cannot be used with --torch and --jax alone"),
    (["bench", "--distributed", "--workloads", "W2"],
     "--workloads cannot be used with --distributed (it prints its own table)"),
]


def in_process(args, capsys):
    """`main(args)` as an `Outcome` (argparse's errors leave through SystemExit)."""
    try:
        status = main(list(args))
    except SystemExit as stop:
        status = stop.code
    captured = capsys.readouterr()
    return Outcome(args, status, captured.out, captured.err)


def outcomes(cases, folder, capsys, monkeypatch):
    """(outcome, case) of every case in this process, then of the PROCESS ones as
    processes; the LIMITED ones run only as processes of `LIMIT` bytes."""
    monkeypatch.chdir(folder)
    out = [(in_process(case[0], capsys), case) for case in cases if LIMITED not in case]
    chosen = [case for case in cases if PROCESS in case]
    limited = [case for case in cases if LIMITED in case]
    assert len(chosen) >= 5
    return (out + list(zip(run_all([case[0] for case in chosen], folder), chosen))
            + list(zip(run_all([case[0] for case in limited], folder, memory=LIMIT),
                       limited)))


def test_usage_errors_exit_2_with_one_line(folder, capsys, monkeypatch):
    for outcome, (args, phrase, *_) in outcomes(USAGE, folder, capsys, monkeypatch):
        assert outcome.status == 2, outcome
        line = outcome.one_line(f"fastbptt {args[0]}: ")
        assert phrase in line and line.endswith(f"see `fastbptt {args[0]} -h`"), outcome


def test_an_unknown_command_is_named_with_the_commands_and_version_answers(folder, capsys,
                                                                        monkeypatch):
    monkeypatch.chdir(folder)
    typo = in_process(["smaple", "good.npz"], capsys)
    assert typo.status == 2 and not typo.out
    assert typo.one_line("fastbptt: ") == (
        "fastbptt: unknown command 'smaple' (did you mean 'sample'?); the commands are demo, "
        "bench, train, sample; see `fastbptt -h`")
    bogus = in_process(["--bogus"], capsys)         # demo's parser, without its name
    assert bogus.status == 2 and bogus.one_line("fastbptt: ") == (
        "fastbptt: unrecognized arguments: --bogus; without a command fastbptt runs demo: "
        "see `fastbptt demo -h`, and `fastbptt -h` for the commands")
    steps = in_process(["--steps", "0"], capsys)
    assert steps.status == 2 and steps.one_line("fastbptt: ").startswith(
        "fastbptt: argument --steps: must be an integer of at least 1; got 0; without a "
        "command fastbptt runs demo")
    other = in_process(["tiny.txt"], capsys)
    assert other.status == 2 and "unknown command 'tiny.txt'; the commands" in other.err
    version = in_process(["--version"], capsys)
    assert version.status == 0 and version.out == f"fastbptt {fastbptt.__version__}\n"


def _unwritable_folder(folder):
    """A folder this process cannot create files in, or None: a folder without write
    permission, or, for root (which writes anywhere else), Linux's /proc."""
    if os.geteuid() != 0:
        path = folder / "locked"
        path.mkdir(exist_ok=True)
        path.chmod(0o555)
        return path
    return "/proc" if os.path.isdir("/proc/self") else None


def _has_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def failures(folder):
    cases = [
        (["train", "missing.txt", *SMALL], "missing.txt: No such file or directory", PROCESS),
        (["train", "", *SMALL], "train: '': No such file or directory"),   # named too
        (["train", "folder", *SMALL], "folder: Is a directory"),
        (["train", "tiny.txt", *SMALL, "--checkpoint", "folder"],
         "--checkpoint folder: that is a folder", PROCESS),
        (["train", "tiny.txt", *SMALL, "--checkpoint", "tiny.txt/c.npz"],
         "tiny.txt is a file, not a folder"),
        (["train", "tiny.txt", *SMALL, "--checkpoint", "new.npz/"],   # written as new.npz,
         "--checkpoint new.npz/: a path that ends in / names a folder; give the file's "
         "name without it, e.g. new.npz"),                            # resumed by nothing
        (["train", "tiny.txt", *SMALL, "--checkpoint", "other.txt"],
         "the file there is not a fastbptt checkpoint (or one damaged or cut short) and would "
         "be overwritten, which --overwrite does not do to other files; choose another path, "
         "or delete that file first"),
        (["train", "tiny.txt", *SMALL, "--checkpoint", "truncated.npz", "--overwrite"],
         "--checkpoint truncated.npz: the file there is not a fastbptt checkpoint (or one "
         "damaged or cut short)"),
        (["train", "tiny.txt", *SMALL, "--checkpoint", "good.npz"],
         "--checkpoint good.npz holds a run of 1 Elman layer of hidden size 8 at step 2, "
         "which a new run would replace: continue it with --resume, keep it with another "
         "--checkpoint, or replace it with --overwrite", PROCESS),
        (["train", "tiny.txt", *SMALL, "--checkpoint", "lstm.npz"],
         "--checkpoint lstm.npz holds a run of 2 LSTM layers of hidden size 8 at step 2,"),
        (["train", "tiny.txt", *SMALL, "--checkpoint", "flipped.npz"],
         "--checkpoint flipped.npz holds an earlier run's checkpoint, which a new run would "
         "replace"),
        (["train", "tiny.txt", *SMALL, "--plot", "loss.xyz"], "--plot"),
        (["train", "one.txt", *SMALL], "the text holds one distinct character ('a')",
         PROCESS),
        (["train", "short.txt", *SMALL], "the validation split holds 1 character(s)"),
        (["train", "one_then_two.txt", *SMALL], "the train split holds one distinct "
         "character ('a', 900 times); the others occur only in the validation split"),
        (["train", "tiny.txt", *SMALL, "--hidden", "100000000"],
         "--hidden 100000000 --layers 1 --cell elman with --batch 2 --seq-length 8 (weights",
         PROCESS),
        (["train", "tiny.txt", *SMALL, "--layers", "1000000000000"],     # not listed: no hang
         "--layers 1000000000000 --cell elman with --batch 2 --seq-length 8 (weights"),
        (["train", "tiny.txt", *SMALL, "--hidden", "9" * 400],          # beyond any float
         "(weights, gradients, adam state, working memory) needs about 1.45e789 TB, more "
         "than"),
        (["train", "tiny.txt", *SMALL, "--seq-length", "9" * 400],
         "choose a smaller --hidden, --layers, --batch or --seq-length"),
        (["train", "tiny.txt", *SMALL, "--resume", "--checkpoint", "nothere.npz"],
         "no checkpoint at nothere.npz"),
        (["sample", ""], "no checkpoint at ''"),
        (["train", "tiny.txt", *SMALL, "--resume", "--checkpoint", "truncated.npz"],
         "truncated.npz is not a fastbptt checkpoint", PROCESS),
        (["train", "tiny.txt", *SMALL, "--resume", "--checkpoint", "flipped.npz"],
         "flipped.npz is damaged or not a fastbptt checkpoint"),
        (["train", "tiny.txt", *SMALL, "--resume", "--checkpoint", "text_hidden.npz"],
         "text_hidden.npz is not a usable fastbptt checkpoint: its options: --hidden must "
         "be an integer"),
        (["train", "--resume", "--checkpoint", "two_layers.npz"],
         "two_layers.npz is not a usable fastbptt checkpoint: params hold 1 layer(s); a model "
         "of 2 Elman layers of hidden size 8 over 34 characters has 2"),
        (["train", "--resume", "--checkpoint", "huge_layers.npz"],
         "huge_layers.npz is not a usable fastbptt checkpoint: params hold 2 layer(s); a "
         "model of 1000000000000000000000000000000 LSTM layers of hidden size 8", LIMITED),
        (["sample", "huge_layers.npz"],
         "huge_layers.npz is not a usable fastbptt checkpoint: params hold 2 layer(s); a "
         "model of 1000000000000000000000000000000 LSTM layers of hidden size 8", LIMITED),
        (["train", "--resume", "--checkpoint", "no_cell_state.npz"],
         "no_cell_state.npz is not a usable fastbptt checkpoint: an LSTM's carried state "
         "needs both h ('hidden') and c ('cell_state')", PROCESS),
        (["sample", "gru.npz"], "gru.npz is not a usable fastbptt checkpoint: params "
                                "layers.0.0.U is (32, 34); a model of 2 GRU layers of hidden "
                                "size 8 over 34 characters needs (24, 34)"),
        (["train", "other.txt", *SMALL, "--resume", "--checkpoint", "good.npz"],
         "--resume: the text of other.txt differs from the text good.npz was trained on",
         PROCESS),
        (["sample", "foreign.npz"], "foreign.npz is not a usable fastbptt checkpoint: no "
                                    "'meta' entry", PROCESS),
        (["sample", "no_vocab.npz"], "no 'vocab' entry"),
        (["sample", "surrogate.npz"], "surrogate.npz is not a usable fastbptt checkpoint: "
                                      "'vocab' holds values that are not Unicode characters' "
                                      "code points"),
        (["sample", "no_W.npz"], "no params.W entry"),
        (["sample", "int_W.npz"], "params.W is a 2-D int64 array"),
        (["sample", "no_step.npz"], "'meta' has no 'step'"),
        (["train", "--resume", "--checkpoint", "no_digest.npz"],   # its text is there
         "no_digest.npz is not a usable fastbptt checkpoint: its options' 'corpus_sha256', "
         "the SHA-256 digest of the text that fastbptt train writes, is None, not 64 hex "
         "digits"),
        (["train", "--resume", "--checkpoint", "odd_digest.npz"],
         "odd_digest.npz is not a usable fastbptt checkpoint: its options' 'corpus_sha256', "
         "the SHA-256 digest of the text that fastbptt train writes, is 'zzz"),
        (["train", "tiny.txt", *SMALL, "--resume", "--checkpoint", "bad_rng.npz"],
         "bad_rng.npz is not a usable fastbptt checkpoint: its RNG state is not one of "
         "NumPy's PCG64 (", PROCESS),
        (["sample", "tiny.txt"], "tiny.txt is not a fastbptt checkpoint (not an .npz file"),
        (["bench", "--json", "folder"], "--json folder: that is a folder; give a file name, "
                                        "e.g. folder/bench.json"),
        (["bench", "--json", "nodir/out.json"], "its folder", PROCESS),
        (["demo", "--hidden", "1000000"], "--hidden 1000000 --vocab 65 --batch 1 --steps 100 "
                                          "(weights and gradients of the kernels and the "
                                          "reference) needs about", PROCESS),
    ]
    fifo = folder / "fifo"
    if hasattr(os, "mkfifo"):
        if not fifo.exists():
            os.mkfifo(fifo)
        cases.append((["train", "tiny.txt", *SMALL, "--checkpoint", "fifo"],
                      "--checkpoint fifo: that is a device, FIFO or socket, not a file"))
    if _has_matplotlib() and shutil.which("xelatex") is None:
        cases.append((["bench", "--plot", "x.pgf"], "--plot x.pgf: matplotlib writes .pgf files "
                      "with xelatex, which is not installed; use .pdf or .svg"))
    locked = _unwritable_folder(folder)
    if locked is not None:
        cases.append((["train", "tiny.txt", *SMALL, "--checkpoint", f"{locked}/c.npz"],
                      f"cannot create a file in {locked}", PROCESS))
        cases.append((["bench", "--json", f"{locked}/out.json"],
                      f"--json {locked}/out.json: cannot create a file in {locked}"))
        if _has_matplotlib():
            cases.append((["train", "tiny.txt", *SMALL, "--plot", f"{locked}/loss.png"],
                          f"--plot {locked}/loss.png: cannot create a file in {locked}"))
            cases.append((["bench", "--plot", f"{locked}/bench.png"],
                          f"--plot {locked}/bench.png: cannot create a file in {locked}",
                          PROCESS))
    return cases


def test_other_failures_exit_1_with_one_line(folder, capsys, monkeypatch):
    checkpoints = {path: path.read_bytes() for path in folder.glob("*.npz")}
    for outcome, (args, phrase, *_) in outcomes(failures(folder), folder, capsys,
                                                monkeypatch):
        assert outcome.status == 1, outcome
        line = outcome.one_line(f"fastbptt {args[0]}: ")
        assert phrase in line, outcome
    for path, data in checkpoints.items():                   # nothing was overwritten
        assert path.read_bytes() == data, path
    assert not (folder / "nodir").exists() and not (folder / "c.npz").exists()
    assert (folder / "tiny.txt").read_text().startswith("the quick")    # not overwritten
    assert not hasattr(os, "mkfifo") or stat.S_ISFIFO(os.stat(folder / "fifo").st_mode)


@pytest.mark.parametrize("bridge, framework", [("torch", "PyTorch"), ("jax", "JAX")])
@pytest.mark.parametrize("workloads", [[], ["--workloads", "W2"]], ids=["alone", "with-W2"])
def test_bench_of_a_bridge_whose_extra_is_missing_says_which_in_one_line(
        capsys, monkeypatch, bridge, framework, workloads):
    """As for ``--plot`` without matplotlib: status 1 and the extra named, before any
    measuring."""
    monkeypatch.setitem(sys.modules, bridge, None)           # `import torch` fails
    monkeypatch.delitem(sys.modules, f"fastbptt.{bridge}", raising=False)
    outcome = in_process(["bench", f"--{bridge}", *workloads], capsys)
    assert (outcome.status, outcome.out, outcome.err) == (
        1, "", f"fastbptt bench: --{bridge}: fastbptt.{bridge} needs {framework}: pip "
               f"install 'fastbptt[{bridge}]'\n")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_as_the_checkpoint_to_read_is_refused_not_waited_on(tmp_path, capsys,
                                                                   monkeypatch):
    """Reading would wait for a writer for good: one line, status 1, for sample and for
    a resumed run."""
    monkeypatch.chdir(tmp_path)
    write_corpus(tmp_path)
    os.mkfifo("fifo.npz")
    line = "fifo.npz is a device, FIFO or socket, not a checkpoint file"
    for args in (["sample", "fifo.npz"],
                 ["train", "tiny.txt", *SMALL, "--resume", "--checkpoint", "fifo.npz"]):
        outcome = in_process(args, capsys)
        assert (outcome.status, outcome.err) == (1, f"fastbptt {args[0]}: {line}\n"), outcome


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_device_as_the_text_is_refused_not_read_without_end(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outcome = in_process(["train", "/dev/zero", *SMALL, "--steps", "1"], capsys)
    assert (outcome.status, outcome.err) == (1, "fastbptt train: /dev/zero: that is a device, "
                                                "not a text file (/dev/zero would be read "
                                                "without end)\n"), outcome


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", [["demo", "--steps", "4", "--hidden", "4", "--repeat", "1"],
                                  ["sample", "good.npz", "--chars", "20"]],
                         ids=["demo", "sample"])
def test_a_full_standard_output_is_named(folder, args):
    """A write to a full device raises an OSError without a file name: the line says that
    it was the standard output's."""
    import subprocess

    from cli_processes import env
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "fastbptt", *args], cwd=folder,
                              env=env(), stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=300)
    outcome = Outcome(args, done.returncode, "", done.stderr)
    assert outcome.status == 1, outcome
    assert outcome.one_line(f"fastbptt {args[0]}: ") == (
        f"fastbptt {args[0]}: the standard output: No space left on device"), outcome
