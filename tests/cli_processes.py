"""Running ``python -m fastbptt`` in real processes, for the tests of exit statuses,
one-line errors and signals: this checkout's package, small corpora and sizes."""
import contextlib
import io
import os
import subprocess
import sys
import time

import numpy as np

import fastbptt
from fastbptt.cli import build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(fastbptt.__file__)))
TEXT = ("the quick brown fox jumps over the lazy dog. " * 6
        + "def f(x):\n    return x + 1\n" * 6) * 4
# one Elman layer, the quickest model: these runs test the command, not the model
SMALL = ("--hidden", "8", "--cell", "elman", "--layers", "1", "--seq-length", "8", "--batch",
         "2", "--no-progress")


def env(**changes):
    """The environment of a command: this checkout first on PYTHONPATH, unbuffered output."""
    out = dict(os.environ, PYTHONUNBUFFERED="1")
    out["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    out.update(changes)
    return out


# `python -m fastbptt` in a process that limits its own address space first (a
# preexec_fn would fork the test process, which JAX, imported by other tests, warns of):
# the limit holds across exec
LIMITED = ("import os, resource, sys\n"
           "resource.setrlimit(resource.RLIMIT_AS, ({0}, {0}))\n"
           "os.execv(sys.executable, [sys.executable, '-m', 'fastbptt', *sys.argv[1:]])\n")


def start(args, cwd, memory=None, **env_changes):
    """``python -m fastbptt args`` in cwd; with ``memory``, in at most that many bytes of
    address space, so that a command which would take the machine's memory fails."""
    head = ["-m", "fastbptt"] if memory is None else ["-c", LIMITED.format(int(memory))]
    return subprocess.Popen([sys.executable, *head, *map(str, args)], cwd=cwd,
                            env=env(**env_changes), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


class Outcome:
    def __init__(self, args, status, out, err):
        self.args, self.status, self.out, self.err = args, status, out, err

    def __repr__(self):
        return f"{self.args}: status {self.status}\nstdout: {self.out[-600:]}\nstderr: {self.err}"

    def one_line(self, prefix):
        """stderr is a single line starting with ``prefix``, and no traceback anywhere."""
        lines = self.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(prefix), self
        assert "Traceback" not in self.out + self.err, self
        return lines[0]


def run_all(commands, cwd, timeout=300, memory=None):
    """Run the argument lists at once, except that ``train`` commands on the same
    checkpoint run one after another (a run claims its checkpoint, and a second one at
    the same time would stop on that claim); their `Outcome`s in order. ``memory``: as
    for `start`."""
    waves, seen = {}, {}
    for i, args in enumerate(commands):
        key = _checkpoint(args)
        wave = seen.get(key, 0) if key is not None else 0
        if key is not None:
            seen[key] = wave + 1
        waves.setdefault(wave, []).append(i)
    outcomes = [None] * len(commands)
    for wave in sorted(waves):
        procs = [(i, start(commands[i], cwd, memory)) for i in waves[wave]]
        for i, proc in procs:
            try:
                out, err = proc.communicate(timeout=timeout)
            finally:
                if proc.poll() is None:
                    proc.kill()
            outcomes[i] = Outcome(commands[i], proc.returncode, out, err)
    return outcomes


def _checkpoint(args):
    """The checkpoint a ``train`` command claims (its --checkpoint, or the default, as the
    command's parser reads them), or None for other commands and for command lines the
    parser refuses, which stop before any claim."""
    if not args or args[0] != "train":
        return None
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            parsed, _ = build_parser().parse_known_args(list(args))
    except SystemExit:
        return None
    return parsed.checkpoint


def read_until(proc, marker, timeout=120):
    """Lines of proc's stdout up to the one starting with ``marker`` (which must come)."""
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith(marker):
            return lines
    raise AssertionError(f"no line starting with {marker!r} in {lines}; "
                         f"stderr: {proc.stderr.read() if proc.poll() is not None else ''}")


def finish(proc, args=(), timeout=120):
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return Outcome(args, proc.returncode, out, err)


def write_corpus(folder, name="tiny.txt", text=TEXT):
    path = folder / name
    path.write_text(text)
    return path


def word_corpus(folder, chars, name="words.txt"):
    """About ``chars`` characters of random words: a corpus whose evaluation takes a while."""
    rng = np.random.default_rng(0)
    words = np.array(["alpha ", "beta ", "gamma ", "delta\n", "eps ", "zeta. "])
    text = "".join(rng.choice(words, size=chars // 5))
    return write_corpus(folder, name, text)
