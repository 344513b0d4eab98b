"""A training run in one ``.npz`` file, written atomically.

Arrays: ``params.<name>`` under the names of `fastbptt.params.leaves` (U, W, V, b, c for
one Elman layer; ``layers.<l>.<d>.U``, ..., V, c for a stack or a gated cell),
``optim.<key>`` (the optimizer's buffers), ``vocab`` (code points), ``hidden`` (every
cursor's state carried into the next call: (B, H) for one Elman layer, a `Params`, or
(layers, B, H) for a `Model`, a stack or a gated cell, one layer too) and, for an LSTM,
``cell_state`` (its c, shaped like ``hidden``), ``history.<key>``. Everything else
(step, options, the optimizer's numbers, the RNG's state, the cursors' position) is one
JSON string under ``meta``, with the format's number. Nothing is pickled: ``np.load``
reads it with ``allow_pickle=False``. Format 1 (before stacks and gated cells) holds one
Elman layer and is read as before.

Writing: the file goes to a temporary file in the target's folder, is flushed to disk
and renamed over the target with `os.replace`, so a crash or a full disk leaves the old
checkpoint or the new one, never half of either. A new file gets the permissions any
new file gets (0o666 less the umask); a file that is replaced keeps its permissions; a
path that is a symbolic link has its target replaced, and the link is kept.

Reading: zip's CRC-32 covers every entry, and every entry is checked for its kind,
type and number of dimensions, so a truncated file, a flipped byte, a foreign ``.npz``
or missing or mistyped entries raise `CheckpointError` (a ValueError) saying which file
and what is wrong. Whether the arrays make one model (each shape, dtype, the states'
and the optimizer buffers' shapes) is checked where they are used: by ``fastbptt train
--resume`` and ``fastbptt sample`` when they read a checkpoint, and by any call given
the params.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import zipfile
from dataclasses import dataclass, field

import numpy as np

from .params import LeafError, from_leaves, leaves
from .text import Codec

__all__ = ["Checkpoint", "CheckpointError", "save", "load", "check_target",
           "remove_stale_temporaries"]

FORMAT = 2                   # what `save` writes
READABLE = (1, 2)            # what `load` reads


class CheckpointError(ValueError):
    """A file that is not a readable fastbptt checkpoint."""


@dataclass
class Checkpoint:
    params: object                       # a Params or a Model
    optimizer: dict                      # an optimizer's state_dict()
    codec: Codec
    step: int
    rng_state: dict                      # numpy Generator.bit_generator.state
    options: dict
    hidden: np.ndarray | None = None     # (B, H) or (S, B, H) state carried into the next call
    batcher: dict = field(default_factory=dict)
    history: dict = field(default_factory=dict)   # name -> 1-D array
    cell_state: np.ndarray | None = None  # an LSTM's carried c, shaped like hidden


def params_to_arrays(params):
    """The model's named arrays, ``name -> array`` (`fastbptt.params.leaves`)."""
    return leaves(params)


def params_from_arrays(arrays, fmt=FORMAT):
    """`params_to_arrays` undone for a file of format ``fmt``: every array a float matrix
    or vector, and the names those of a `Params` (format 1 has no other) or a `Model`,
    with U, W (of every layer) and V present."""
    for name, value in arrays.items():
        if value.dtype.kind != "f" or value.ndim not in (1, 2):
            raise CheckpointError(f"params.{name} is a {value.ndim}-D {value.dtype} array, "
                                  "not a float matrix or vector")
    if fmt == 1:
        stacked = [name for name in arrays if name.startswith("layers.")]
        if stacked:
            raise CheckpointError(f"unknown entry params.{stacked[0]} in a format 1 file")
    try:
        return from_leaves(arrays)
    except LeafError as error:
        raise CheckpointError(f"no params.{error.name} entry" if error.missing
                              else f"unknown entry params.{error.name}") from None


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):           # a bit generator's state: MT19937's key
        return value.tolist()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _numbers(name, value):
    """``value`` as an array, as np.savez would save it (a list of numbers, a tensor)."""
    try:
        return np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"its {name} must be an array of numbers ({error})") from None


def _arrays(ckpt):
    arrays = {f"params.{k}": _numbers(f"params.{k}", v)
              for k, v in params_to_arrays(ckpt.params).items()}
    optim_numbers = {}
    for key, value in ckpt.optimizer.items():
        if isinstance(value, np.ndarray):
            arrays[f"optim.{key}"] = value
        else:
            optim_numbers[key] = value
    arrays["vocab"] = ckpt.codec.to_array()
    for key in ("hidden", "cell_state"):
        if getattr(ckpt, key) is not None:
            arrays[key] = _numbers(key, getattr(ckpt, key))
    for key, value in ckpt.history.items():
        arrays[f"history.{key}"] = np.asarray(value)
    meta = {"format": FORMAT, "step": int(ckpt.step), "rng_state": ckpt.rng_state,
            "options": ckpt.options, "optimizer": optim_numbers, "batcher": ckpt.batcher}
    try:
        arrays["meta"] = np.array(json.dumps(_jsonable(meta)))
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"its step, options, RNG state, optimizer numbers and batcher "
                              f"must be JSON's kinds of values ({error})") from None
    return arrays


class _Entries(dict):
    """Arrays by name, read as `np.load` gives a file's (``files``, ``[name]``)."""

    @property
    def files(self):
        return list(self)


# The files beside a checkpoint are ".NAME.PID.N.tmp" (a save's; a PID of up to 7 digits,
# N of up to 2) and ".NAME.lock" (the run's claim, `fastbptt._checkpoint_claim`), in the
# 255 bytes a file's name may have
TMP_ROOM, LOCK_ROOM = len(".4194304.99.tmp"), len(".lock")


def sibling_stem(name, room):
    """NAME of a file ".NAME" and ``room`` bytes more beside checkpoint ``name``: the name
    itself where that fits, as it always was, else its beginning and a digest of the
    whole."""
    def size(stem):
        return 1 + len(os.fsencode(stem)) + room

    if size(name) <= 255:
        return name
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:16]
    head = name
    while size(f"{head}~{digest}") > 255:
        head = head[:-1]
    return f"{head}~{digest}"


def _new_file(folder, name, made=None):
    """A new, empty temporary file in ``folder`` for checkpoint ``name`` (created with
    mode 0o666, which the umask reduces, as for any new file), open for writing: (file,
    path). ``made``, a list, holds the path from just before the file is made, and the
    file from just after, so that a caller interrupted (Ctrl-C) before this returns can
    still close and remove it; a file object, unlike a bare descriptor, is closed when
    it is dropped, even in the instant before it is in ``made``."""
    made = [] if made is None else made
    for attempt in range(100):
        stem = sibling_stem(name, TMP_ROOM)
        path = os.path.join(folder, f".{stem}.{os.getpid()}.{attempt}.tmp")
        made[:] = [path]
        try:
            made.append(open(path, "xb"))
            return made[1], path
        except FileExistsError:
            made.clear()                # another's
            continue
    raise FileExistsError(f"could not create a temporary file in {folder}")


def remove_stale_temporaries(path):
    """Delete the temporary files that saves of ``path`` by processes no longer running
    left beside it (a process killed outright in the middle of a save leaves its
    ``.NAME.PID.N.tmp``, as large as the checkpoint); returns how many. For a caller that
    holds the path's claim (`fastbptt._checkpoint_claim`), so that no other run is saving
    it; the files of a process still running are kept."""
    if os.name != "posix":                   # os.kill(pid, 0) would end the process there
        return 0
    target = os.path.realpath(os.fspath(path))
    folder, name = os.path.split(target)
    pattern = re.compile(rf"\.{re.escape(sibling_stem(name, TMP_ROOM))}\.(\d+)\.\d+\.tmp")
    try:
        entries = os.listdir(folder)
    except OSError:
        return 0
    removed = 0
    for entry in entries:
        match = pattern.fullmatch(entry)
        if match and not running(int(match[1])):
            try:
                os.unlink(os.path.join(folder, entry))
                removed += 1
            except OSError:
                pass
    return removed


def running(pid):
    """Whether process ``pid`` exists (this one included)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OverflowError, OSError):         # PermissionError: someone else's process
        return True
    return True


def _sync_folder(folder):
    """Flush the folder's entry for the renamed file (where the system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _existing_ancestor(folder):
    """``folder`` or its nearest ancestor that exists."""
    while not os.path.exists(folder):
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return folder


def _refuse_special(target, named=True):
    """OSError when ``target`` exists and is not a regular file (a device, a FIFO, a
    socket), which a save would replace by renaming its file over it; ``named``: the
    error carries the path."""
    try:
        kind = os.stat(target).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return                              # nothing there (the folder is checked apart)
    if not stat.S_ISREG(kind) and not stat.S_ISDIR(kind):
        raise OSError(errno.EEXIST, "that is a device, FIFO or socket, not a file; give the "
                      "name of a file to write to", *([target] if named else []))


def check_target(path, *, make_folders=True, example="run.npz"):
    """Raise OSError unless a file can be written at ``path`` the way `save` writes one,
    for checks before work that ends in a save. Creates nothing that stays: missing
    folders (which `save` creates, when ``make_folders``) are checked by a probe in
    their nearest existing ancestor. The messages do not repeat the path; ``example``
    is the file name a folder given as ``path`` is told to add."""
    target = os.path.realpath(os.fspath(path))
    if os.path.isdir(target):
        raise IsADirectoryError(f"that is a folder; give a file name, e.g. "
                                f"{os.path.join(os.fspath(path), example)}")
    given, slashes = os.fspath(path), os.sep + (os.altsep or "")
    if given.endswith(tuple(slashes)):
        # the file would be written without the slash, and read back with it by nothing
        raise IsADirectoryError(f"a path that ends in {given[-1]} names a folder; give the "
                                f"file's name without it, e.g. {given.rstrip(slashes)}")
    _refuse_special(target, named=False)
    folder = os.path.dirname(target)
    base = _existing_ancestor(folder)
    if base != folder and not make_folders:
        raise FileNotFoundError(f"its folder {folder} does not exist")
    if not os.path.isdir(base):
        raise NotADirectoryError(f"{base} is a file, not a folder")
    try:
        f, tmp = _new_file(base, os.path.basename(target))
    except OSError as error:
        raise type(error)(f"cannot create a file in {base}: "
                          f"{error.strerror or error}") from None
    f.close()
    os.unlink(tmp)


def save(path, ckpt):
    """Write ``ckpt`` to ``path`` atomically; return the path.

    `CheckpointError`, before anything is written, for a checkpoint that `load` would
    refuse (so that a good file is never replaced by one that cannot be read back)."""
    if not isinstance(ckpt, Checkpoint):
        raise TypeError(f"ckpt must be a fastbptt.checkpoint.Checkpoint; got "
                        f"{type(ckpt).__name__}")
    if not isinstance(ckpt.codec, Codec):
        raise TypeError(f"the checkpoint's codec must be a fastbptt.text.Codec; got "
                        f"{type(ckpt.codec).__name__}")
    if isinstance(ckpt.step, (bool, np.bool_)) or not isinstance(
            ckpt.step, (int, np.integer, float, np.floating)) or \
            not float(ckpt.step).is_integer():
        raise TypeError(f"the checkpoint's step must be an int; got {ckpt.step!r}")
    try:
        arrays = _arrays(ckpt)
        held = next((name for name, a in arrays.items() if a.dtype.hasobject), None)
        if held is not None:            # np.savez would pickle it, and load refuses pickles
            raise CheckpointError(f"its {held} holds Python objects (dtype object), which "
                                  f"a checkpoint does not pickle; give numbers")
        _read(_Entries(arrays))
    except CheckpointError as error:
        raise CheckpointError(f"not saved to {os.fspath(path)}: {error}") from None
    return write_atomically(path, lambda f: np.savez(f, **arrays))


def write_atomically(path, write):
    """``write(f)`` into a temporary file beside ``path``'s target, then renamed over it:
    the file is whole or as it was, whatever happens (this module's docstring); return
    the path."""
    path = os.fspath(path)
    target = os.path.realpath(path)      # a symbolic link: replace its target, keep it
    if os.path.isdir(target):
        raise IsADirectoryError(errno.EISDIR, "a folder, not a file", path)
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    _refuse_special(target)
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = None                          # a new file: the umask decides
    made = []
    try:
        f, tmp = _new_file(folder, os.path.basename(target), made)
        with f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
        made.clear()
    except BaseException:               # Ctrl-C included: no temporary file stays
        if made:
            with contextlib.suppress(OSError):
                os.unlink(made[0])
            for f in made[1:]:
                f.close()
        raise
    _sync_folder(folder)
    return path


def _entry(data, key):
    try:
        return data[key]
    except KeyError:
        raise CheckpointError(f"no {key!r} entry") from None


def _meta(data):
    raw = _entry(data, "meta")
    if raw.dtype.kind != "U" or raw.ndim != 0:
        raise CheckpointError(f"'meta' is a {raw.dtype} array, not a JSON string")
    meta = json.loads(str(raw))
    if not isinstance(meta, dict):
        raise CheckpointError("'meta' is not a JSON object")
    if isinstance(meta.get("format"), bool) or meta.get("format") not in READABLE:
        raise CheckpointError(f"format {meta.get('format')!r} is not one this version reads "
                              f"({', '.join(map(str, READABLE))})")
    kinds = {"step": int, "rng_state": dict, "options": dict, "optimizer": dict,
             "batcher": dict}
    for key, kind in kinds.items():
        if key not in meta:
            raise CheckpointError(f"'meta' has no {key!r}")
        if not isinstance(meta[key], kind) or isinstance(meta[key], bool):
            raise CheckpointError(f"'meta' {key!r} is a {type(meta[key]).__name__}, not "
                                  f"a {kind.__name__}")
    if meta["step"] < 0:
        raise CheckpointError(f"'meta' step is {meta['step']}")
    return meta


def _vocabulary(codes):
    if codes.dtype.kind not in "iu" or codes.ndim != 1 or not codes.size:
        raise CheckpointError(f"'vocab' is a {codes.ndim}-D {codes.dtype} array, not a list "
                              "of code points")
    if codes.min() < 0 or codes.max() >= 0x110000 or \
            ((codes >= 0xD800) & (codes <= 0xDFFF)).any():      # surrogates: no characters
        raise CheckpointError("'vocab' holds values that are not Unicode characters' code "
                              "points")
    return Codec.from_array(codes)


def _read(data):
    meta = _meta(data)
    files = set(data.files)
    for key in files - {"meta", "vocab", "hidden", "cell_state"}:
        if not key.startswith(("params.", "optim.", "history.")):
            raise CheckpointError(f"unknown entry {key!r}")
    params = params_from_arrays({key[len("params."):]: data[key] for key in files
                                 if key.startswith("params.")}, meta["format"])
    optimizer = dict(meta["optimizer"])
    history = {}
    for key in files:
        if key.startswith("optim."):
            optimizer[key[len("optim."):]] = data[key]
        elif key.startswith("history."):
            history[key[len("history."):]] = data[key]
    states = {}
    for key in ("hidden", "cell_state"):
        value = states[key] = data[key] if key in files else None
        if value is not None and (value.dtype.kind != "f" or value.ndim not in (2, 3)):
            raise CheckpointError(f"'{key}' is a {value.ndim}-D {value.dtype} array, not "
                                  "float states of (batch, hidden) or (layers, batch, hidden)")
    return Checkpoint(params=params, optimizer=optimizer,
                      codec=_vocabulary(_entry(data, "vocab")), step=meta["step"],
                      rng_state=meta["rng_state"], options=meta["options"],
                      batcher=meta["batcher"], history=history, **states)


def load(path):
    """Read a `Checkpoint` written by `save`.

    FileNotFoundError or IsADirectoryError when there is no file; `CheckpointError` for a
    file that is not a complete, undamaged checkpoint.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no checkpoint at {path!r}" if not path.strip() else
                                f"no checkpoint at {path}")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path} is a folder, not a checkpoint")
    if not stat.S_ISREG(os.stat(path).st_mode):     # reading a FIFO would wait for a writer
        raise CheckpointError(f"{path} is a device, FIFO or socket, not a checkpoint file")
    with open(path, "rb") as f:              # unreadable: the OSError says so
        if not zipfile.is_zipfile(f):
            raise CheckpointError(f"{path} is not a fastbptt checkpoint (not an .npz file, "
                                  "or one cut short)")
        f.seek(0)
        try:
            damaged = zipfile.ZipFile(f).testzip()  # np.load may stop short of an entry's
        except Exception:                           # end, where zipfile checks its CRC
            damaged = None                          # (np.load words what this could not)
        if damaged is not None:
            raise CheckpointError(f"{path} is damaged or not a fastbptt checkpoint (its "
                                  f"entry {damaged} fails its CRC-32 check)")
        f.seek(0)
        try:
            with np.load(f, allow_pickle=False) as data:
                return _read(data)
        except CheckpointError as error:
            raise CheckpointError(f"{path} is not a usable fastbptt checkpoint: "
                                  f"{error}") from None
        except Exception as error:          # whatever damaged bytes make zipfile or numpy do
            reason = " ".join(f"{type(error).__name__}: {error}".split())
            raise CheckpointError(f"{path} is damaged or not a fastbptt checkpoint "
                                  f"({reason})") from None
