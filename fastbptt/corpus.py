"""Text to train on: the user's files, or the Python standard library's own source.

The default corpus needs no download: the ``.py`` files directly in the folder of the
``os`` module, in sorted order, skipping any that are not pure ASCII (a handful, which
would add dozens of rare characters to the vocabulary), whole files until the next one
would pass ``max_chars``. The last ``val_fraction`` of the text is held out for validation.
"""
from __future__ import annotations

import errno
import hashlib
import numbers
import os
import stat
from typing import NamedTuple

__all__ = ["Corpus", "default_corpus", "read_files", "DEFAULT_MAX_CHARS"]

DEFAULT_MAX_CHARS = 3_000_000


class Corpus(NamedTuple):
    text: str
    description: str
    sources: tuple[str, ...]       # the files read, or ("<stdlib>",)

    @property
    def digest(self):
        """sha256 of the text: a resumed run checks it reads the same corpus."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def split(self, val_fraction):
        """(train, validation): the last ``val_fraction`` of the characters is validation."""
        if isinstance(val_fraction, bool) or not isinstance(val_fraction, numbers.Real):
            raise TypeError(f"val_fraction must be a number; got "
                            f"{type(val_fraction).__name__}")
        if not 0 <= val_fraction < 1:
            raise ValueError(f"val_fraction must lie in [0, 1); got {val_fraction}")
        cut = len(self.text) - int(round(len(self.text) * val_fraction))
        return self.text[:cut], self.text[cut:]


def default_corpus(max_chars=DEFAULT_MAX_CHARS):
    """The standard library's top-level ASCII source files, up to ``max_chars`` characters."""
    if isinstance(max_chars, bool) or not isinstance(max_chars, numbers.Integral):
        raise TypeError(f"max_chars must be an int; got {max_chars!r}")
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1; got {max_chars}")
    folder = os.path.dirname(os.__file__)
    parts, total, used, first = [], 0, 0, None
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".py"):
            continue
        try:
            with open(os.path.join(folder, name), encoding="ascii") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue
        if total + len(text) > max_chars:
            first = len(text) if first is None else first
            break
        parts.append(text)
        total += len(text)
        used += 1
    if not parts and first is not None:
        raise ValueError(f"max_chars={max_chars:,} is below the {first:,} characters of the "
                         f"first standard-library source file, the least it takes")
    if not parts:
        raise RuntimeError(f"found no readable standard-library source in {folder}")
    description = (f"the standard library's source: {used} .py files in {folder}, "
                   f"{total:,} characters")
    return Corpus("".join(parts), description, ("<stdlib>",))


def _device(fd):
    """Whether ``fd`` is a character or block device: files and pipes (a FIFO, /dev/stdin,
    a shell's <(...)) end, a device may not."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def read_files(paths):
    """The files' text (UTF-8, undecodable bytes replaced), concatenated in the given order
    (``paths``: a list of paths, or one).

    The description says how many byte sequences were not UTF-8 (each read as U+FFFD), and
    in which files, so that a binary file or another encoding does not pass unnoticed."""
    if isinstance(paths, (str, bytes, os.PathLike)):       # one file, not its characters
        paths = [paths]
    try:
        paths = list(paths)                 # read once (a generator)
    except TypeError:
        raise TypeError(f"paths must be a file path or a list of them; got "
                        f"{type(paths).__name__}") from None
    odd = next((p for p in paths if not isinstance(p, (str, bytes, os.PathLike))), None)
    if odd is not None:                     # an int would be a file descriptor, then closed
        raise TypeError(f"paths must be file paths (str, bytes or os.PathLike); got "
                        f"{type(odd).__name__}")
    paths = [os.fsdecode(p) for p in paths]                 # named as str
    if not paths:
        raise ValueError("paths names no file")
    parts, replaced = [], []
    for path in paths:
        with open(path, "rb") as f:
            if _device(f.fileno()):
                raise OSError(errno.ENODEV, "that is a device, not a text file (/dev/zero "
                                            "would be read without end)", path)
            data = f.read()
        text = data.decode("utf-8", errors="replace")
        bad = text.count("\ufffd") - data.count("\ufffd".encode())   # U+FFFD of its own
        if bad:
            replaced.append(f"{bad:,} undecodable byte sequence{'s' if bad > 1 else ''} in "
                            f"{os.path.basename(path)}")
        parts.append(text)
    text = "".join(parts)
    if len(text) < 3:
        raise ValueError(f"the text files hold {len(text)} characters; need at least 3")
    names = ", ".join(os.path.basename(p) for p in paths)
    note = (f" (not UTF-8: {', '.join(replaced)}, each read as U+FFFD; convert other "
            "encodings to UTF-8, e.g. with iconv)") if replaced else ""
    return Corpus(text, f"{names}: {len(text):,} characters{note}",
                  tuple(os.path.abspath(p) for p in paths))
