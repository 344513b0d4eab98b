"""A training run in one ``.npz`` file, written atomically.

Arrays: ``params.<name>`` (U, W, V, b, c), ``optim.<key>`` (the optimizer's buffers),
``vocab`` (code points), ``hidden`` (the state carried into the next call), ``history.<key>``.
Everything else (step, options, the optimizer's numbers, the RNG's state, the batcher's
position) is one JSON string under ``meta``. Nothing is pickled: ``np.load`` reads it with
``allow_pickle=False``. The file is written to a temporary file in the same folder and
renamed over the target with `os.replace`, so a crash leaves the old checkpoint or the new
one, never half of either.
"""
from __future__ import annotations

import json
import os
import tempfile
import zipfile
from dataclasses import dataclass, field

import numpy as np

from .params import NAMES, Params
from .text import Codec

__all__ = ["Checkpoint", "save", "load"]

FORMAT = 1


@dataclass
class Checkpoint:
    params: Params
    optimizer: dict                      # an optimizer's state_dict()
    codec: Codec
    step: int
    rng_state: dict                      # numpy Generator.bit_generator.state
    options: dict
    hidden: np.ndarray | None = None     # (B, H) state carried into the next call
    batcher: dict = field(default_factory=dict)
    history: dict = field(default_factory=dict)   # name -> 1-D array


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def save(path, ckpt):
    """Write ``ckpt`` to ``path`` atomically; return the path."""
    path = os.fspath(path)
    arrays = {f"params.{k}": v for k, v in zip(NAMES, ckpt.params) if v is not None}
    optim_numbers = {}
    for key, value in ckpt.optimizer.items():
        if isinstance(value, np.ndarray):
            arrays[f"optim.{key}"] = value
        else:
            optim_numbers[key] = value
    arrays["vocab"] = ckpt.codec.to_array()
    if ckpt.hidden is not None:
        arrays["hidden"] = ckpt.hidden
    for key, value in ckpt.history.items():
        arrays[f"history.{key}"] = np.asarray(value)
    meta = {"format": FORMAT, "step": int(ckpt.step), "rng_state": ckpt.rng_state,
            "options": ckpt.options, "optimizer": optim_numbers, "batcher": ckpt.batcher}
    arrays["meta"] = np.array(json.dumps(_jsonable(meta)))
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load(path):
    """Read a `Checkpoint` written by `save`."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no checkpoint at {path}")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a fastbptt checkpoint (not an .npz file)")
    with np.load(path, allow_pickle=False) as data:
        files = set(data.files)
        if "meta" not in files:
            raise ValueError(f"{path} is not a fastbptt checkpoint (no 'meta' entry)")
        meta = json.loads(str(data["meta"]))
        if meta.get("format") != FORMAT:
            raise ValueError(f"{path}: unsupported checkpoint format {meta.get('format')!r}")
        params = Params(*(data[f"params.{k}"] if f"params.{k}" in files else None
                          for k in NAMES))
        optimizer = dict(meta["optimizer"])
        history = {}
        for key in data.files:
            if key.startswith("optim."):
                optimizer[key[len("optim."):]] = data[key]
            elif key.startswith("history."):
                history[key[len("history."):]] = data[key]
        return Checkpoint(params=params, optimizer=optimizer,
                          codec=Codec.from_array(data["vocab"]), step=meta["step"],
                          rng_state=meta["rng_state"], options=meta["options"],
                          hidden=data["hidden"] if "hidden" in files else None,
                          batcher=meta["batcher"], history=history)
