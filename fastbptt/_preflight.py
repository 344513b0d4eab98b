"""Checks the commands run before any work, so that a run never fails at its end (or at
its first sample) for something that could be known at its start: output files that
cannot be written, a plot format matplotlib lacks, a model that cannot fit in memory,
a corpus too small for the options. Each raises `CommandError` with the fix.
"""
from __future__ import annotations

import math
import os
import zipfile
from types import SimpleNamespace

import numpy as np

from ._command_errors import CommandError, UsageError, describe
from ._ranges import digits
from ._resume import describe_model
from .checkpoint import check_target, load, write_atomically
from .params import CELLS, leaf_shapes

__all__ = ["output_file", "checkpoint_folder", "new_checkpoint", "plot_file", "memory",
           "model_memory", "corpus", "model_bytes"]


_EXAMPLES = {"--checkpoint": "run.npz", "--json": "bench.json", "--plot": "bench.png"}


def _named(path, option):
    """UsageError for a path that is empty or blank (argparse takes ``--json ''``)."""
    if not os.fspath(path).strip():
        raise UsageError(f"{option} needs a file name; got {os.fspath(path)!r}")


def output_file(path, option, *, make_folders=False):
    """``path`` (given as ``option``) can be written: its folder exists (or, with
    ``make_folders``, can be made) and takes a new file."""
    _named(path, option)
    try:
        check_target(path, make_folders=make_folders,
                     example=_EXAMPLES.get(option, "out" + os.path.splitext(path)[1]))
    except OSError as error:
        raise CommandError(f"{option} {path}: {describe(error)}") from None


def checkpoint_folder(path, option="--checkpoint"):
    """Make the missing folders of checkpoint ``path`` now, before any work, rather than at
    its first save: the run's claim (`_checkpoint_claim`) lives in that folder, and a folder
    name the file system refuses (too long, say) is refused here. Returns a function that
    removes those folders again if they are still empty (the run saved nothing in them)."""
    folder = os.path.dirname(os.path.realpath(path))
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)              # deepest first
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent

    def remove_if_empty():
        for made in missing:
            if not os.path.lexists(made):
                continue                    # never made (a makedirs that failed on the way)
            try:
                os.rmdir(made)
            except OSError:
                return                      # not empty: it holds a checkpoint, or another run's

    try:
        if missing:
            os.makedirs(missing[0])
    except OSError as error:
        remove_if_empty()
        raise CommandError(f"{option} {path}: cannot make its folder {missing[0]}: "
                           f"{describe(error)}") from None
    return remove_if_empty


def new_checkpoint(path, option="--checkpoint", *, overwrite=False):
    """`output_file`, and nothing at ``path`` would be lost: a file already there is
    refused unless it is a checkpoint and ``overwrite`` (--overwrite) says to replace it.
    """
    output_file(path, option, make_folders=True)
    target = os.path.realpath(path)
    if not (os.path.isfile(target) and os.path.getsize(target)):
        return
    try:
        with zipfile.ZipFile(target) as z:
            ours = "meta.npy" in z.namelist()
    except (zipfile.BadZipFile, OSError):
        ours = False
    if not ours:
        raise CommandError(f"{option} {path}: the file there is not a fastbptt checkpoint "
                           "(or one damaged or cut short) and would be overwritten, which "
                           "--overwrite does not do to other files; choose another path, or "
                           "delete that file first")
    if not overwrite:
        raise CommandError(f"{option} {path} holds {_earlier_run(target)}, which a new run "
                           "would replace: continue it with --resume, keep it with another "
                           "--checkpoint, or replace it with --overwrite")


def _earlier_run(path):
    """An existing checkpoint in words: "a run of 1 GRU layer of hidden size 256 at step
    6,832", or "an earlier run's checkpoint" when it cannot be read."""
    try:
        ckpt = load(path)
        o = ckpt.options
        model = SimpleNamespace(cell=o.get("cell", "elman"), layers=o.get("layers", 1),
                                hidden=o["hidden"])
        return f"a run of {describe_model(model)} at step {ckpt.step:,}"
    except (ValueError, KeyError, OSError):   # damaged: the refusal stands without details
        return "an earlier run's checkpoint"


def plot_file(path, option="--plot"):
    """``path`` is a file name, matplotlib is installed and can write its format, and it
    can be written."""
    _named(path, option)                    # a usage error, with or without matplotlib
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise CommandError(f"{option} needs matplotlib: pip install 'fastbptt[plot]'") from None
    formats = Figure().canvas.get_supported_filetypes()
    ext = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if ext not in formats:
        kind = f".{ext} files" if ext else "a file name without an extension"
        raise CommandError(f"{option} {path}: matplotlib cannot write {kind}; use one of "
                           f"{', '.join('.' + f for f in sorted(formats))}")
    if ext == "pgf":                        # matplotlib runs LaTeX to write it
        import shutil

        from matplotlib import rcParams
        tex = rcParams["pgf.texsystem"]
        if shutil.which(tex) is None:
            raise CommandError(f"{option} {path}: matplotlib writes .pgf files with "
                               f"{tex}, which is not installed; use .pdf or .svg")
    output_file(path, option)


def save_figure(fig, path, dpi=120):
    """A matplotlib figure written to ``path`` (whose extension names the format) whole
    or not at all, as checkpoints are: a signal or a full disk mid-way leaves the file
    that was there."""
    ext = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    write_atomically(path, lambda f: fig.savefig(f, dpi=dpi, format=ext))


def plot_apart(plot, checkpoint, files):
    """UsageError when --plot names the checkpoint or a text the run reads: the plot,
    written at the end, would replace it."""
    if not plot:
        return
    for path, what in [(checkpoint, f"--checkpoint {checkpoint}")] + \
            [(f, f"the text file {f}") for f in files]:
        if path and _same_file(plot, path):
            raise UsageError(f"--plot {plot} is {what}, which the plot would replace: give "
                             f"the plot another name")


def checkpoint_apart(checkpoint, files):
    """UsageError when --checkpoint names a text the run reads: the checkpoint would
    replace it, and with it the text that a resumed run reads again."""
    for f in files:
        if _same_file(checkpoint, f):
            raise UsageError(f"--checkpoint {checkpoint} is the text file {f}, which the "
                             f"checkpoint would replace: give the checkpoint another name")


def _same_file(a, b):
    a, b = os.fspath(a), os.fspath(b)
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def model_bytes(options, vocab):
    """Bytes a run of `fastbptt.train.TrainOptions` ``options`` over ``vocab`` characters
    needs: weights, gradients and optimizer state, and the working memory of a training
    step or an evaluation call (32 streams x 128 steps), whichever is larger."""
    H, V = options.hidden, vocab

    def weights_of(layers):
        return sum(math.prod(shape) for shape in leaf_shapes(
            V, H, V, cell=options.cell, num_layers=layers).values())
    # the layers above the first are alike: counted once, not listed (--layers 10**12)
    weights = weights_of(1) + (options.layers - 1) * (weights_of(2) - weights_of(1))
    state = {"adam": 2, "adagrad": 1}.get(options.optimizer, 1 if options.momentum else 0)
    k, s = options.window
    gates = CELLS[options.cell]
    # each layer's states, deltas, derivatives and gates; the output errors
    per_step = options.layers * ((7 if s < k else 5) + 2 * (gates - 1)) * H + V
    work = max(options.batch * options.seq_length, 32 * 128) * per_step
    return np.dtype(options.dtype).itemsize * (weights * (2 + state) + work)


def memory_limit():
    """Physical memory, or the container's limit where that is lower (bytes), or None."""
    limits = []
    try:
        limits.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            with open(path) as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():
            limits.append(int(text))
    return min(limits) if limits else None


def _size(n):
    if n >= 2**40 * 10**15:          # as 9.99e15 TB, in integers (a float may not hold n)
        tb = n // 2**40
        e = digits(tb) - 1
        return f"{tb // 10 ** (e - 2) / 100:.2f}e{e} TB"
    for unit, scale in (("TB", 2**40), ("GB", 2**30)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n / 2**20:,.0f} MB"


def memory(need, what, fix, limit=None):
    """CommandError when ``need`` bytes (for ``what``) cannot fit in this machine's memory,
    before anything that large is allocated; ``fix`` says what to change."""
    limit = memory_limit() if limit is None else limit
    if limit is not None and need > limit:
        raise CommandError(f"{what} needs about {_size(need)}, more than the {_size(limit)} "
                           f"of this machine; {fix}")


def model_memory(options, vocab):
    """`memory` for a training run of ``options`` over ``vocab`` characters."""
    memory(model_bytes(options, vocab),
           f"--hidden {options.hidden} --layers {options.layers} --cell {options.cell} with "
           f"--batch {options.batch} "
           f"--seq-length {options.seq_length} (weights, gradients, {options.optimizer} "
           "state, working memory)",
           "choose a smaller --hidden, --layers, --batch or --seq-length")


def corpus(codec, train_ids, val_ids, options):
    """The text can train the model the options describe, and score it on held-out text."""
    if len(codec) < 2:
        raise CommandError(f"the text holds one distinct character ({codec.chars[0]!r}); a "
                           "model needs at least two to have something to predict")
    if val_ids.size < 2:
        raise CommandError(f"the validation split holds {val_ids.size} character(s) "
                           f"(--val-fraction {options.val_fraction:g} of "
                           f"{train_ids.size + val_ids.size:,}); it needs at least 2: raise "
                           "--val-fraction or pass more text")
    if train_ids.size and not (train_ids != train_ids[0]).any():
        raise CommandError(f"the train split holds one distinct character "
                           f"({codec.chars[int(train_ids[0])]!r}, {train_ids.size:,} times); "
                           f"the others occur only in the validation split (the last "
                           f"--val-fraction {options.val_fraction:g} of the text): a model "
                           "learns nothing from it; pass text whose first part varies, or "
                           "change --val-fraction")
    if train_ids.size < options.batch + 1:
        raise CommandError(f"the train split holds {train_ids.size} characters, too few for "
                           f"--batch {options.batch} cursors (each needs at least 2); lower "
                           "--batch or pass more text")
