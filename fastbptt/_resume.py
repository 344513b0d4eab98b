"""What ``fastbptt train --resume`` takes from a checkpoint, and how it checks it.

- Options: the checkpoint's, with a field it lacks (one added to `TrainOptions` after it
  was written) at the value runs had before the field existed (``ABSENT``: one Elman
  layer), else at its default. The command line may change the learning rate and the
  clipping (what a diverged run needs); any other option it gives must agree.
- Corpus: recognised by its content (the sha256 saved with the run), not by its path:
  the files named on the command line, else the saved paths relative to the
  checkpoint's folder (a project folder moved or renamed with its checkpoint), else the
  saved absolute paths.
- Model: every array's name and shape agrees with the options (cell, layers, hidden
  size) and the vocabulary, so do the carried states', and the weights are finite, so a
  damaged or foreign file is refused before training.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from ._command_errors import CommandError, UsageError
from ._ranges import flag
from .checkpoint import CheckpointError
from .params import Params, leaf_shapes, leaves

__all__ = ["ADJUSTABLE", "resumed_options", "find_corpus", "corpus_paths", "check_model",
           "describe_model"]

ADJUSTABLE = ("lr", "clip_norm", "clip_value", "horizon")   # may differ from the checkpoint's


WINDOW = ("truncate", "stride")     # options that say the truncation window together


def resumed_options(options_class, saved, given, path):
    """The run's options from the checkpoint's ``saved`` dict and the command line's
    ``given`` fields; returns (options, {name: (old, new)} of the adjusted ones)."""
    absent = getattr(options_class, "ABSENT", {})
    fields = {f.name: saved.get(f.name, absent.get(f.name, f.default))
              for f in dataclasses.fields(options_class)}
    if "momentum" in fields and fields.get("optimizer") != "sgd":
        fields["momentum"] = 0.0    # a run of the Python API could save one it ignored
    try:
        options = options_class(**fields)
        options.check()
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path} is not a usable fastbptt checkpoint: its options: "
                              f"{error}") from None
    given = dict(given or {})
    window = {name: given[name] for name in WINDOW if name in given}
    if window and dataclasses.replace(options, **window).window == options.window:
        for name in window:         # the same window in other words (--truncate T, say)
            del given[name]
    changed = {}
    for name, value in given.items():
        old = getattr(options, name)
        if old == value:
            continue
        if name not in ADJUSTABLE:
            shown = dict(zip(WINDOW, options.window)).get(name, old)
            raise UsageError(f"--resume: the checkpoint has {flag(name)} {shown!r}, the "
                             f"command line {value!r}; drop the option or start a new run")
        setattr(options, name, value)
        changed[name] = (old, value)
    if changed:
        try:                        # the adjusted values, as a new run's are checked
            options.check()
        except ValueError as error:
            raise UsageError(f"--resume: {error}") from None
    return options, changed


def corpus_paths(files, checkpoint):
    """What a run saves about its text files: absolute paths and paths relative to the
    checkpoint's folder."""
    folder = os.path.dirname(os.path.abspath(checkpoint))
    absolute = [os.path.abspath(p) for p in files]
    return {"files": absolute,
            "files_relative": [os.path.relpath(p, folder) for p in absolute]}


def find_corpus(load, files, saved, checkpoint):
    """(corpus, files) of the text the checkpoint was trained on; ``load(files)`` reads
    files ([] for the default corpus)."""
    digest = saved.get("corpus_sha256")
    if not (isinstance(digest, str) and len(digest) == 64
            and all(c in "0123456789abcdef" for c in digest)):
        raise CheckpointError(f"{checkpoint} is not a usable fastbptt checkpoint: its "
                              f"options' 'corpus_sha256', the SHA-256 digest of the text that "
                              f"fastbptt train writes, is {digest!r}, not 64 hex digits; "
                              f"--resume reads only the text it was trained on")
    if files:
        corpus = load(files)
        if corpus.digest != digest:
            raise CommandError(f"--resume: the text of {', '.join(files)} differs from the "
                               f"text {checkpoint} was trained on; pass the same text (it "
                               "may have moved or been renamed, not changed)")
        return corpus, list(files)
    known = saved.get("files") or []
    relative = saved.get("files_relative") or []
    for name, value in (("files", known), ("files_relative", relative)):
        if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
            raise CheckpointError(f"{checkpoint} is not a usable fastbptt checkpoint: its "
                                  f"'{name}' is not a list of paths")
    if not known:
        corpus = load([])
        if corpus.digest != digest:
            raise CommandError(f"--resume: {checkpoint} was trained on another version of "
                               "the standard library's source than this Python's")
        return corpus, []
    folder = os.path.dirname(os.path.abspath(checkpoint))
    candidates = [known]
    if relative:
        candidates.insert(0, [os.path.normpath(os.path.join(folder, p)) for p in relative])
    changed = None
    for paths in candidates:
        if all(os.path.isfile(p) for p in paths):
            corpus = load(paths)
            if corpus.digest == digest:
                return corpus, paths
            changed = changed or paths
    names = ", ".join(os.path.basename(p) for p in known)
    if changed is not None:
        raise CommandError(f"--resume: the text {checkpoint} was trained on ({names}) is "
                           f"where it was, but it has changed since; --resume reads only "
                           f"the text it was trained on: restore it, or name a copy of "
                           f"it: fastbptt train FILE... --resume")
    raise CommandError(f"--resume: cannot find the text {checkpoint} was trained on "
                       f"({names}) where it was, nor at the same place relative to the "
                       "checkpoint; name its files: fastbptt train FILE... --resume")


def describe_model(options):
    """The model of `fastbptt.train.TrainOptions` ``options`` in words: "2 LSTM layers of
    hidden size 256"."""
    cell = {"elman": "Elman", "gru": "GRU", "lstm": "LSTM"}[options.cell]
    layers = "1 " + cell + " layer" if options.layers == 1 else \
        f"{options.layers} {cell} layers"
    return f"{layers} of hidden size {options.hidden}"


def _states(params, options, hidden, cell_state):
    """ValueError unless the carried states fit the model: (B, H) for one Elman layer
    with its head, (layers, B, H) for a stack; c for an LSTM and for nothing else."""
    B, H = options.batch, options.hidden
    want = (B, H) if isinstance(params, Params) else (options.layers, B, H)
    if options.cell == "lstm" and (hidden is None) != (cell_state is None):
        raise ValueError("an LSTM's carried state needs both h ('hidden') and c "
                         "('cell_state'); the file has only one of them")
    if options.cell != "lstm" and cell_state is not None:
        raise ValueError(f"it holds a carried cell state ('cell_state'), which only an LSTM "
                         f"has, for a {options.cell} model")
    for name, value in (("carried state", hidden), ("carried cell state", cell_state)):
        if value is not None and value.shape != want:
            raise ValueError(f"the {name} is {value.shape}, not {want} for {B} cursors of "
                             f"{describe_model(options)}")
        if value is not None and not np.isfinite(value).all():
            raise ValueError(f"the {name} holds NaN or inf")


def in_dtype(what, array, dtype, *, copy=True):
    """``array`` in ``dtype`` (a copy, or where ``copy`` is False only where it is in
    another dtype); ValueError where a finite entry lies beyond that dtype's range (a
    float64 file of a float32 run), which the cast would make inf."""
    dtype = np.dtype(dtype)
    with np.errstate(over="ignore"):
        out = np.array(array, dtype) if copy else np.asarray(array, dtype)
    if out is not array and out.dtype != array.dtype:
        beyond = np.isinf(out) & np.isfinite(array)
        if beyond.any():
            raise ValueError(f"{what} holds {float(array[beyond][0]):.4g}, beyond the range "
                             f"of --dtype {dtype.name} (at most "
                             f"{float(np.finfo(dtype).max):.4g})")
    return out


def check_layers(params, codec, options):
    """ValueError unless the params hold as many layers as ``options`` say: asked before
    anything is sized by that number (a damaged meta may claim 10^30 layers)."""
    held = 1 + max((int(name.split(".")[1]) for name in leaves(params)
                    if name.startswith("layers.")), default=0)
    if held != options.layers:
        raise ValueError(f"params hold {held} layer(s); a model of {describe_model(options)} "
                         f"over {len(codec)} characters has {options.layers}")


def check_model(params, codec, options, hidden=None, optimizer_state=None, cell_state=None):
    """ValueError unless the arrays fit a model of ``options`` over ``codec``'s
    characters: each name and shape, the carried states', the optimizer buffers', and
    finiteness."""
    V = len(codec)
    arrays = leaves(params)
    model = f"a model of {describe_model(options)} over {V} characters"
    check_layers(params, codec, options)
    want = leaf_shapes(V, options.hidden, V, cell=options.cell, num_layers=options.layers)
    for name, shape in want.items():
        value = arrays.get(name)
        if value is None:
            raise ValueError(f"params {name} is missing; {model} has one")
        if value.shape != shape:
            raise ValueError(f"params {name} is {value.shape}; {model} needs {shape}")
        if not np.isfinite(value).all():
            raise ValueError(f"params {name} holds NaN or inf")
    for name in arrays:
        if name not in want:
            raise ValueError(f"params {name} does not belong to {model}")
    _states(params, options, hidden, cell_state)
    for name, slot in (optimizer_state or {}).items():
        for key, buffer in slot.items():
            if arrays.get(name) is None or buffer.shape != arrays[name].shape:
                raise ValueError(f"the optimizer's {key}.{name} is {buffer.shape}, not the "
                                 f"shape of params {name}")
