"""SIGINT, SIGTERM and SIGHUP sent to real processes: exit statuses 130, 143 and 129, one
line or none on stderr, never a traceback, and a checkpoint that is whole whenever one
was due: during training (saved), during compilation (nothing to save), during the final
evaluation (already saved), and a stream of signals during the save."""
import os
import re
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from cli_processes import (SMALL, env, finish, read_until, start, word_corpus,
                           write_corpus)
from fastbptt import checkpoint

STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    here = tmp_path_factory.mktemp("signals")
    write_corpus(here)
    word_corpus(here, 300_000)
    made = finish(start(["train", "tiny.txt", *SMALL, "--steps", "2", "--sample-every", "0",
                         "--checkpoint", "resumable.npz"], here))   # and warms the cache
    assert made.status == 0, made
    return here


def interrupt(args, folder, marker, signum, line, **env):
    """Start ``args``, send ``signum`` once stdout shows ``marker``; the outcome, whose
    status is the signal's and whose stderr is ``line`` alone."""
    proc = start(args, folder, **env)
    if marker:
        read_until(proc, marker)
    else:
        time.sleep(1.0)
    proc.send_signal(signum)
    outcome = finish(proc)
    assert outcome.status == STATUS[signum], outcome
    assert outcome.one_line(line.split(":")[0]) == line
    return outcome


def no_traceback(outcome):
    assert "Traceback" not in outcome.out + outcome.err, outcome
    assert len(outcome.err.strip().splitlines()) <= 1, outcome


def test_each_signal_during_training_saves_and_exits_with_its_status(folder):
    runs = {}
    for signum in STATUS:
        ckpt = f"loop-{signum.name}.npz"
        args = ["train", "tiny.txt", *SMALL, "--time", "60", "--sample-every", "0",
                "--checkpoint", ckpt, "--checkpoint-every", "20"]
        (folder / ckpt).unlink(missing_ok=True)
        runs[signum] = (start(args, folder), ckpt)
    for signum, (proc, ckpt) in runs.items():
        read_until(proc, "training for 60 s")
        deadline = time.monotonic() + 60         # some steps (20 or more), on a busy host too
        while not (folder / ckpt).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    for signum, (proc, _) in runs.items():
        proc.send_signal(signum)
    for signum, (proc, ckpt) in runs.items():
        outcome = finish(proc)
        assert outcome.status == STATUS[signum], outcome
        no_traceback(outcome)
        assert outcome.err == "", outcome
        assert f"({signum.name}) after" in outcome.out, outcome
        step = int(outcome.out.split("interrupted at step ")[1].split()[0])
        assert step >= 1 and checkpoint.load(folder / ckpt).step == step


def test_a_signal_after_the_interrupted_line_adds_no_second_line(folder):
    """The run saved and said so on SIGINT; a SIGTERM while it leaves (Dask's workers
    closing, say) raised and printed a second line on stderr."""
    args = ["train", "tiny.txt", *SMALL, "--time", "60", "--sample-every", "0",
            "--checkpoint", "twice.npz"]
    proc = start(args, folder)
    read_until(proc, "training for 60 s")
    time.sleep(0.3)                                      # some steps
    proc.send_signal(signal.SIGINT)
    read_until(proc, "interrupted at step ")
    proc.send_signal(signal.SIGTERM)
    outcome = finish(proc)
    assert outcome.status == 130 and outcome.err == "", outcome


def test_the_line_of_an_interrupted_run_of_some_steps_resumes_it_to_them(folder):
    """A checkpoint keeps the model's options, not the invocation's --steps: the command
    the line gives repeats it, or the resumed run would train for a time budget instead."""
    args = ["train", "tiny.txt", *SMALL, "--steps", "900000", "--sample-every", "0",
            "--checkpoint", "some-steps.npz"]
    proc = start(args, folder)
    read_until(proc, "training to step 900,000")
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    outcome = finish(proc)
    assert outcome.status == STATUS[signal.SIGTERM], outcome
    assert outcome.out.rstrip().endswith(
        "continue with `fastbptt train --resume --checkpoint some-steps.npz --steps 900000 "
        "--sample-every 0`"), \
        outcome


def test_the_line_of_an_interrupted_run_repeats_its_samples_options(folder):
    """Samples draw from the run's RNG and estimates fill its history: the command the
    line gives repeats the options that set them (it gave --steps alone, so the resumed
    run drew its samples at other steps and ended with another RNG state)."""
    options = ["--steps", "6000", "--sample-every", "500", "--sample-chars", "20",
               "--temperature", "0.5", "--eval-chars", "200"]
    whole = finish(start(["train", "tiny.txt", *SMALL, *options, "--checkpoint", "w.npz"],
                         folder))
    assert whole.status == 0, whole
    proc = start(["train", "tiny.txt", *SMALL, *options, "--checkpoint", "p.npz"], folder)
    read_until(proc, "training to step 6,000")
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    outcome = finish(proc)
    assert outcome.status == 143, outcome
    command = outcome.out.rstrip().rsplit("continue with `", 1)[1].rstrip("`").split()
    assert command == ["fastbptt", "train", "--resume", "--checkpoint", "p.npz", *options]
    assert 0 < checkpoint.load(folder / "p.npz").step < 6000
    resumed = finish(start(command[1:], folder))
    assert resumed.status == 0, resumed
    a, b = checkpoint.load(folder / "w.npz"), checkpoint.load(folder / "p.npz")
    assert a.step == b.step == 6000 and a.rng_state == b.rng_state
    np.testing.assert_array_equal(a.history["evals"], b.history["evals"])
    np.testing.assert_array_equal(a.params.W, b.params.W)


@pytest.mark.parametrize("signum,resume", [
    pytest.param(signal.SIGINT, False, id="SIGINT"),
    pytest.param(signal.SIGTERM, False, id="SIGTERM"),
    pytest.param(signal.SIGHUP, True, id="SIGHUP-resumed")])
def test_a_signal_during_compilation_exits_cleanly(folder, signum, resume):
    """With Numba's cache off the warm-up call compiles for seconds: the signal comes
    then, and the run stops without saving (a resumed run's checkpoint is unchanged)."""
    ckpt = folder / ("resumable.npz" if resume else f"compile-{signum.name}.npz")
    before = ckpt.read_bytes() if resume else None
    args = ["train", "tiny.txt", *SMALL, "--steps", "5", "--checkpoint", ckpt.name]
    outcome = interrupt(args + ["--resume"] * resume, folder, "model:", signum,
                        f"fastbptt train: interrupted by {signum.name} before training "
                        "started; nothing was saved", FASTBPTT_CACHE="0")
    assert "training" not in outcome.out
    if resume:
        assert ckpt.read_bytes() == before
    else:
        assert not ckpt.exists()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_a_signal_during_the_final_evaluation_exits_cleanly(folder, signum):
    """The final losses are taken before the save that ends the run (so that a model
    whose states overflow is not saved over the last checkpoint), after the line that
    says so: a signal then lets the evaluation and the save finish, and the run stops
    at its last step, saved, with no report. (The evaluation of 165,052 + 165,052
    characters takes seconds, the signal comes at its first line.)"""
    ckpt = f"final-{signum.name}.npz"
    args = ["train", "words.txt", "--hidden", "128", "--seq-length", "8", "--batch", "2",
            "--no-progress", "--steps", "2", "--val-fraction", "0.5", "--checkpoint", ckpt]
    proc = start(args, folder)
    read_until(proc, "evaluating the final model on the last 165,052 characters of the "
                     "train split and the 165,052 held-out ones")
    proc.send_signal(signum)
    outcome = finish(proc)
    assert outcome.status == STATUS[signum], outcome
    no_traceback(outcome)
    assert outcome.err == "", outcome
    assert f"interrupted at step 2 ({signum.name}) after" in outcome.out, outcome
    assert "validation loss" not in outcome.out and "trained 2 steps" not in outcome.out
    assert checkpoint.load(folder / ckpt).step == 2


def test_a_signal_ignored_at_the_start_stays_ignored(folder):
    """``nohup fastbptt train``: started with SIGHUP ignored, the run goes on through a
    SIGHUP, and SIGINT still stops it with the checkpoint saved."""
    args = ["train", "tiny.txt", *SMALL, "--time", "60", "--sample-every", "0",
            "--checkpoint", "nohup.npz"]
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)    # as nohup: the child inherits
    try:                                                     # it (a preexec_fn would fork
        proc = start(args, folder)                           # with JAX's threads loaded)
    finally:
        signal.signal(signal.SIGHUP, before)
    read_until(proc, "training for 60 s")
    time.sleep(0.3)
    proc.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert proc.poll() is None                          # still training
    proc.send_signal(signal.SIGINT)
    outcome = finish(proc, args)
    assert outcome.status == 130 and "(SIGHUP)" not in outcome.out, outcome
    step = int(outcome.out.split("interrupted at step ")[1].split(" (SIGINT)")[0])
    assert checkpoint.load(folder / "nohup.npz").step == step > 0


SECOND_COMMAND = """
import os, signal, sys
from fastbptt import cli
from fastbptt._command_errors import run_command

sys.argv = ["fastbptt", "sample", "missing.npz"]
first = cli.main()                  # the program's way: the signals are ignored after it


def command(args):
    os.kill(os.getpid(), signal.SIGTERM)
    return 0


print(first, run_command("fastbptt train", command, None))
"""


def test_a_second_command_in_the_process_still_takes_the_signals(tmp_path):
    """Signals the first command's guard left ignored are not the caller's choice: the
    guard of a later command in the same process takes them again."""
    done = subprocess.run([sys.executable, "-c", SECOND_COMMAND], cwd=tmp_path, env=env(),
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["1", "143"], done


def test_a_signal_cuts_a_long_sample_in_the_loop_short(folder):
    """A sample of 10^7 characters (minutes) drawn at step 2: SIGINT ends it within a
    chunk, and the run stops after that step with its checkpoint."""
    args = ["train", "tiny.txt", *SMALL, "--steps", "10", "--sample-every", "2",
            "--sample-chars", "10000000", "--checkpoint", "long-sample.npz"]
    proc = start(args, folder)
    read_until(proc, "training to step 10")
    time.sleep(2.0)                                     # into the sample of step 2
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    outcome = finish(proc, args, timeout=60)
    assert outcome.status == 130 and time.monotonic() - sent < 30, outcome
    assert "(cut short by SIGINT)" in outcome.out, outcome
    assert checkpoint.load(folder / "long-sample.npz").step == 2


def test_a_stream_of_signals_does_not_cut_the_save_short(folder):
    """SIGTERM, then SIGINT and SIGHUP every millisecond through the save of a 27 MB
    checkpoint until the process ends: it ends with SIGTERM's status and a whole file.
    (Python runs the handlers of signals pending together in the order of their numbers,
    so the stream starts once SIGTERM has had time to be handled.)"""
    ckpt = folder / "stream.npz"
    args = ["train", "tiny.txt", "--hidden", "1500", "--cell", "elman", "--layers", "1",
            "--seq-length", "4", "--batch", "1", "--no-progress", "--time", "60",
            "--sample-every", "0", "--checkpoint", ckpt.name]
    proc = start(args, folder)
    read_until(proc, "training for 60 s")
    time.sleep(0.2)                                      # some steps
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.05)
    sent = 0
    while proc.poll() is None and sent < 5000:
        try:
            proc.send_signal((signal.SIGINT, signal.SIGHUP)[sent % 2])
        except ProcessLookupError:
            break
        sent += 1
        time.sleep(0.001)
    outcome = finish(proc)
    assert outcome.status == 143, outcome
    no_traceback(outcome)
    saved = checkpoint.load(ckpt)
    assert saved.step >= 1 and saved.params.W.shape == (1500, 1500)
    assert sent >= 5, sent
    assert not [name for name in os.listdir(folder) if name.endswith(".tmp")]


@pytest.mark.parametrize("command,signum,marker", [
    pytest.param(["sample", "resumable.npz", "--chars", "100000000", "--seed", "0"],
                 signal.SIGTERM, None, id="sample-SIGTERM"),
    pytest.param(["demo", "--steps", "20", "--repeat", "1000000000"], signal.SIGINT,
                 "first call", id="demo-SIGINT"),
])
def test_other_commands_exit_on_a_signal_with_one_line(folder, command, signum, marker):
    interrupt(command, folder, marker, signum,
              f"fastbptt {command[0]}: interrupted by {signum.name}")


def test_sample_shows_its_text_as_it_is_drawn_and_stops_when_the_reader_does(folder):
    """``fastbptt sample ... --chars 100000000 | head -c 10``: the first characters come
    within seconds (the whole draw takes hours), and closing the pipe ends the command
    with one line."""
    proc = start(["sample", "resumable.npz", "--chars", "100000000", "--seed", "0"], folder)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "no output within 60 s"
        assert len(proc.stdout.read(10)) == 10
        proc.stdout.close()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    proc.stderr.close()
    assert (proc.returncode, err) == (1, "fastbptt sample: the output was closed before it "
                                         "was all written (broken pipe)\n")


# The first moments of a command, made deterministic: a finder on sys.meta_path raises
# KeyboardInterrupt, as a Ctrl-C would, when the package first imports the named module.
CTRL_C_AT_IMPORT = """
import runpy, sys
class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            raise KeyboardInterrupt
sys.meta_path.insert(0, CtrlC())
sys.argv = ["fastbptt", *{args!r}]
{entry}
"""
ENTRIES = {
    # what pip's console script does (pyproject.toml's entry point), and `python -m fastbptt`
    "script": "from fastbptt._start import main\nsys.exit(main())",
    "module": "runpy.run_module('fastbptt', run_name='__main__', alter_sys=True)",
}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("module", ["numpy", "numba"])
@pytest.mark.parametrize("args", [
    ["train", "tiny.txt", "--steps", "1"], ["sample", "resumable.npz"], ["--steps", "5"],
    ["bench", "--workloads", "W2"]], ids=["train", "sample", "demo", "bench"])
def test_ctrl_c_while_the_command_imports_the_engine_says_one_line(folder, entry, module,
                                                                    args):
    code = CTRL_C_AT_IMPORT.format(module=module, args=args, entry=ENTRIES[entry])
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True,
                          text=True, timeout=120,          # bench: no re-execution
                          env=env(MALLOC_MMAP_THRESHOLD_="268435456"))
    # said by the command where it has started, else by the program while it parses; the
    # bench's progress and its warning of a busy machine go to stderr before it
    lines = done.stderr.splitlines()
    said = re.fullmatch(r"fastbptt( (train|sample|demo|bench))?: interrupted by SIGINT",
                        lines[-1] if lines else "")
    assert (done.returncode, bool(said), done.stdout) == (130, True, ""), done
    assert "Traceback" not in done.stderr and (len(lines) == 1 or args[0] == "bench"), done


def test_the_console_script_is_the_entry_tested_here():
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python "
                                                    "3.11's tomllib")
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts == {"fastbptt": "fastbptt._start:main"}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("module", ["fastbptt.cli", "argparse", "fastbptt._signals"])
def test_ctrl_c_while_the_program_loads_its_command_line_says_one_line(folder, entry, module):
    code = CTRL_C_AT_IMPORT.format(module=module, args=["train", "tiny.txt"],
                                   entry=ENTRIES[entry])
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True,
                          text=True, timeout=120, env=env())
    assert (done.returncode, done.stdout, done.stderr) == (
        130, "", "fastbptt: interrupted by SIGINT\n"), done


def test_bench_exits_on_a_signal_with_one_line_and_leaves_no_child(folder):
    """SIGHUP while `--startup` times a cold start in a child process: status 129, the
    last line of stderr says so (the lines above it are the bench's progress), and the
    child is gone."""
    proc = start(["bench", "--workloads", "W2", "--no-peers", "--startup"], folder)
    lines, deadline = [], time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if not line or line.startswith("W2 ("):
            break
    assert lines[-1].startswith("W2 ("), lines
    time.sleep(0.5)                                     # into the cold-start child
    children = _children(proc.pid)
    proc.send_signal(signal.SIGHUP)
    outcome = finish(proc)
    assert outcome.status == 129, outcome
    assert outcome.err.strip().splitlines()[-1] == "fastbptt bench: interrupted by SIGHUP"
    assert "Traceback" not in outcome.out + outcome.err, outcome
    time.sleep(0.5)
    assert not [pid for pid in children if os.path.exists(f"/proc/{pid}")], children


def _children(pid):
    """The pids of pid's child processes (Linux), or [] where /proc does not tell."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def test_a_signal_during_an_in_process_save_is_held_until_it_is_written(folder, tmp_path,
                                                                         monkeypatch):
    """Deterministic: SIGINT and SIGTERM arrive while np.savez writes the final
    checkpoint; the file is whole and the status is the first signal's."""
    from fastbptt.cli import main

    real = np.savez

    def interrupted_savez(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)
    monkeypatch.setattr(np, "savez", interrupted_savez)
    before = [signal.getsignal(signum) for signum in STATUS]
    ckpt = tmp_path / "held.npz"
    status = main(["train", str(folder / "tiny.txt"), *SMALL, "--steps", "3",
                   "--sample-every", "0", "--checkpoint", str(ckpt)])
    assert status == 130
    assert checkpoint.load(ckpt).step == 3
    assert [signal.getsignal(signum) for signum in STATUS] == before   # given back


def test_a_signal_after_a_commands_own_guard_keeps_the_first_ones_status(capsys):
    """Deterministic: a command's guard records SIGTERM and the command returns 143; a
    SIGINT that arrives after that guard is left, on the way out, neither raises nor
    changes the status (the outer guard took the inner one's signal as its own)."""
    from fastbptt._command_errors import run_command
    from fastbptt._signals import SignalGuard

    def command(args):
        with SignalGuard() as guard:
            with guard.deferred():
                os.kill(os.getpid(), signal.SIGTERM)
            status = guard.status
        os.kill(os.getpid(), signal.SIGINT)
        return status

    before = [signal.getsignal(signum) for signum in STATUS]
    assert run_command("prog", command, None) == 143
    assert capsys.readouterr().err == ""
    assert [signal.getsignal(signum) for signum in STATUS] == before


def _swallowed(signum):
    """The signal, sent to this process where its handler's exception is lost (as the
    interpreter loses one raised while ``compile`` runs, importing a module without its
    bytecode)."""
    from fastbptt._signals import Interrupted

    try:
        os.kill(os.getpid(), signum)
    except Interrupted:
        pass


def test_a_signal_whose_exception_was_lost_stops_the_command_where_its_guard_opens(capsys):
    """Deterministic: SIGTERM came while the command was importing, and its exception was
    dropped: the command's own guard, opening after, raises for it (it trained to the end
    with status 0, the signal ignored)."""
    from fastbptt._command_errors import run_command
    from fastbptt._signals import SignalGuard

    ran = []

    def command(args):
        _swallowed(signal.SIGTERM)
        with SignalGuard("before training started; nothing was saved"):
            ran.append("trained")
        return 0

    before = [signal.getsignal(signum) for signum in STATUS]
    assert run_command("prog", command, None) == 143
    assert not ran
    assert capsys.readouterr().err == ("prog: interrupted by SIGTERM before training "
                                       "started; nothing was saved\n")
    assert [signal.getsignal(signum) for signum in STATUS] == before


def test_a_guard_opened_while_a_signal_goes_out_lets_its_cleanup_finish(capsys):
    """A guard opened in a finally or an except after the outer guard raised (a cleanup
    that protects itself) is not taken for one after a dropped signal."""
    from fastbptt._command_errors import run_command
    from fastbptt._signals import Interrupted, SignalGuard

    done = []

    def in_finally(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            done.append("not reached")
        finally:
            with SignalGuard("while cleaning up"):
                done.append("cleaned up")
        return 0

    def in_except(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except Interrupted:
            with SignalGuard("while cleaning up"):
                done.append("handled")
            raise
        return 0

    for command, did in ((in_finally, "cleaned up"), (in_except, "handled")):
        done.clear()
        assert run_command("prog", command, None) == 143
        assert done == [did]
        assert capsys.readouterr().err == "prog: interrupted by SIGTERM\n"


def test_a_signal_a_library_raised_an_error_from_is_the_signal(capsys):
    """NumPy's import raises ImportError from an exception that came while it loaded its
    C extensions: one line, the signal's status, not an unexpected ImportError; an error
    only raised while one was handled is reported as itself."""
    from fastbptt._command_errors import run_command
    from fastbptt._signals import Interrupted

    def importing(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except Interrupted as exc:
            raise ImportError("Importing the numpy C-extensions failed.") from exc

    def cleaning_up(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except Interrupted:
            raise OSError("the cleanup failed")

    assert run_command("prog", importing, None) == 143
    assert capsys.readouterr().err == "prog: interrupted by SIGTERM\n"
    assert run_command("prog", cleaning_up, None) == 1
    assert capsys.readouterr().err == "prog: the cleanup failed\n"
