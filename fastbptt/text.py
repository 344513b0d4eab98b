"""Characters as token ids, and a batcher that walks B cursors through one long id stream.

`Codec` maps each distinct character of a text to an id (sorted by code point) and back;
its vocabulary is an int32 array of code points, stored with the model in a checkpoint.

`StreamBatcher` cuts a stream of N ids into B contiguous segments of S = (N - 1) // B
steps, one per cursor, and each `next()` returns the next T steps of every cursor:
x = ids[pos : pos + T] and y = ids[pos + 1 : pos + T + 1] of each segment. Carrying each
call's ``h_final`` into the next call's ``h0`` makes a run of calls with
``truncate=stride=T`` compute exactly the loss and gradients of one call over the whole
segments (SPEC.md §3, chunked training). When the segments are used up the cursors start
again from their beginnings, and `next()` says so (``fresh``), to reset the state.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._masks import refuse_masked as _refuse_masked

__all__ = ["Codec", "StreamBatcher", "Batch", "unigram_entropy", "block_ids", "check_position",
           "token_ids"]


class Codec:
    """Text <-> integer ids over a fixed vocabulary of characters."""

    def __init__(self, chars):
        if not isinstance(chars, str) and not hasattr(chars, "__iter__"):
            raise TypeError(f"chars must be characters (one str, or an iterable of str of "
                            f"length 1); got {type(chars).__name__}")
        chars = list(chars)
        odd = next((c for c in chars if not (isinstance(c, str) and len(c) == 1)), None)
        if odd is not None:
            raise TypeError(f"a vocabulary is characters (str of length 1, or one str of "
                            f"them); got {odd!r}")
        surrogate = next((c for c in chars if "\ud800" <= c <= "\udfff"), None)
        if surrogate is not None:
            raise ValueError(f"the vocabulary holds {surrogate!r}, a lone surrogate, which "
                             f"is no Unicode character (text decoded with "
                             f"errors='surrogateescape'?); decode the text as UTF-8")
        if len(set(chars)) != len(chars):
            raise ValueError("the vocabulary has repeated characters")
        if not chars:
            raise ValueError("the vocabulary is empty")
        self.chars = chars
        self._index = {c: i for i, c in enumerate(chars)}
        size = max(map(ord, chars)) + 1
        self._table = np.full(size, -1, np.int64)          # code point -> id
        self._table[[ord(c) for c in chars]] = np.arange(len(chars))

    @classmethod
    def from_text(cls, text):
        """The distinct characters of ``text``, sorted by code point."""
        return cls(sorted(set(text)))

    @classmethod
    def from_array(cls, codes):
        """From `to_array`'s code points."""
        _refuse_masked("codes", codes)
        codes = np.asarray(codes)
        if codes.ndim != 1 or (codes.size and codes.dtype.kind not in "iu"):
            raise TypeError(f"codes must be a 1-D array of integer code points; got "
                            f"{codes.ndim}-D {codes.dtype}")
        bad = codes[(codes < 0) | (codes > 0x10FFFF)]
        if bad.size:
            raise ValueError(f"codes must be Unicode code points, in [0, 0x10FFFF]; got "
                             f"{bad[0]}")
        return cls([chr(int(c)) for c in codes])

    def to_array(self):
        """The vocabulary as int32 code points (what a checkpoint stores)."""
        return np.array([ord(c) for c in self.chars], np.int32)

    def __len__(self):
        return len(self.chars)

    def __eq__(self, other):
        return isinstance(other, Codec) and self.chars == other.chars

    def encode(self, text):
        """int64 ids of ``text``; ValueError naming any character outside the vocabulary."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str; got {type(text).__name__}")
        raw = text.encode("utf-32-le", "surrogatepass")    # a lone surrogate: not in vocab
        codes = np.frombuffer(raw, np.uint32).astype(np.int64)
        ids = np.full(codes.shape, -1, np.int64)
        inside = codes < self._table.size
        ids[inside] = self._table[codes[inside]]
        if (ids < 0).any():
            missing = sorted({chr(c) for c in codes[ids < 0]})
            raise ValueError(f"characters not in the vocabulary: {''.join(missing)!r}")
        return ids

    def decode(self, ids):
        """The text of ``ids``: integers in [0, len(self)) (ValueError for others, such as
        the -1 that marks a step without loss in targets)."""
        _refuse_masked("ids", ids)
        ids = np.asarray(ids).reshape(-1)
        if ids.size and ids.dtype.kind not in "iu":
            raise TypeError(f"ids must be integers; got {ids.dtype}")
        bad = ids[(ids < 0) | (ids >= len(self.chars))]
        if bad.size:
            raise ValueError(f"ids must lie in [0, {len(self.chars)}) for this codec's "
                             f"{len(self.chars)} characters; got {bad[0]}")
        return "".join(self.chars[int(i)] for i in ids)


def token_ids(name, ids):
    """``ids`` as a flat int64 array of token ids (a copy where it is not one already):
    TypeError for other than integers, ValueError for ids below 0 or beyond int64 (a
    uint64 id of 2**64 - 1 would wrap to -1, which marks a step without loss)."""
    _refuse_masked(name, ids)
    given = np.asarray(ids)
    if given.size and given.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integer token ids; got dtype {given.dtype}")
    if given.size and given.dtype.kind == "u" and given.dtype.itemsize == 8 and \
            given.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} must be token ids, in [0, 2**63); got {given.max()}")
    out = np.ascontiguousarray(given, np.int64).reshape(-1)
    if out.size and out.min() < 0:
        raise ValueError(f"{name} must be token ids, 0 or more; got {out.min()}")
    return out


def unigram_entropy(ids, size):
    """Entropy in nats of the ids' own frequencies: -sum p log p with p the counts / N.

    That is the cross-entropy per character of the best context-free model of ``ids``,
    evaluated on the same ``ids``.
    """
    ids = token_ids("ids", ids)
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
        raise TypeError(f"size must be an int; got {size!r}")
    if size < 0:
        raise ValueError(f"size must be at least 0; got {size}")
    if not ids.size:
        return float("nan")
    counts = np.bincount(ids, minlength=size).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


class Batch(NamedTuple):
    """x, y (B, T') int64 views and whether the cursors just (re)started.

    The views are of the batcher's ids, which are the caller's own array where that is
    already contiguous int64: writing into x or y writes into it (and y is x shifted by
    one step). Copy them to change them."""

    x: np.ndarray
    y: np.ndarray
    fresh: bool


class StreamBatcher:
    """B parallel cursors over one id stream, T steps per call (the last call of a pass
    may be shorter when T does not divide the segment length S).

    ``segment`` fixes S (by default (N - 1) // B): cursors first ... stop - 1 of a larger
    batcher over ``full`` are ``StreamBatcher(full[first * S : stop * S + 1], stop - first,
    T, segment=S)`` (`block_ids`), which is how a worker of a distributed run holds its
    block of the cursors.
    """

    def __init__(self, ids, batch, steps, *, segment=None):
        sizes = {"batch": batch, "steps": steps, **({} if segment is None else
                                                     {"segment": segment})}
        for name, value in sizes.items():
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise TypeError(f"{name} must be an int; got {value!r}")
        ids = token_ids("ids", ids)
        if batch < 1 or steps < 1:
            raise ValueError(f"batch and steps must be at least 1; got {batch}, {steps}")
        if segment is not None and segment < 1:
            raise ValueError(f"segment must be at least 1 (None: (N - 1) // batch); got "
                             f"{segment}")
        if segment is None:
            segment = (ids.size - 1) // batch
        elif batch * segment + 1 > ids.size:
            raise ValueError(f"{batch} cursors of {segment} steps need {batch * segment + 1} "
                             f"ids; got {ids.size}")
        if segment < 1:
            raise ValueError(f"a stream of {ids.size} ids is too short for {batch} cursors "
                             "(each needs at least 2)")
        self.batch, self.steps, self.segment = batch, steps, segment
        n = batch * segment
        self.inputs = ids[:n].reshape(batch, segment)          # x of every cursor
        self.targets = ids[1:n + 1].reshape(batch, segment)    # y: the next id
        self.pos = 0
        self.passes = 0                                        # completed passes

    @property
    def calls_per_pass(self):
        """The calls of `next` that read every segment once: ceil(S / T)."""
        return -(-self.segment // self.steps)

    @property
    def call_steps(self):
        """The lengths T of a pass's calls: ``steps``, and the shorter last call's where
        ``steps`` does not divide the segment (or the segment, where it is shorter)."""
        full, rest = divmod(self.segment, self.steps)
        return ((self.steps,) if full else ()) + ((rest,) if rest else ())

    def next(self):
        """The next T steps of every cursor, (B, T') each, as a `Batch`."""
        if self.pos >= self.segment:
            self.pos = 0
            self.passes += 1
        fresh = self.pos == 0
        stop = min(self.pos + self.steps, self.segment)
        x = self.inputs[:, self.pos:stop]
        y = self.targets[:, self.pos:stop]
        self.pos = stop
        return Batch(x, y, fresh)

    def state_dict(self):
        """The cursors' position, {"pos", "passes"} (`load_state_dict` restores it)."""
        return {"pos": self.pos, "passes": self.passes}

    def load_state_dict(self, state):
        """Restore `state_dict`'s position; ValueError for one this batcher cannot have."""
        self.pos, self.passes = check_position(state, self.segment)


def check_position(state, segment):
    """(pos, passes) of a batcher's `state_dict` for segments of ``segment`` steps;
    ValueError for a position no such batcher can have, or a state without one."""
    if not hasattr(state, "keys"):
        raise ValueError(f"a batcher state must be a dict from state_dict(); got "
                         f"{type(state).__name__}")
    missing = [name for name in ("pos", "passes") if name not in state]
    if missing:
        raise ValueError(f"the batcher state has no {' or '.join(map(repr, missing))} entry")
    pos, passes = state["pos"], state["passes"]
    for name, value in (("pos", pos), ("passes", passes)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"batcher {name} must be an int; got {value!r}")
    if not (0 <= pos <= segment and passes >= 0):
        raise ValueError(f"batcher position {pos} (pass {passes}) lies outside a segment "
                         f"of {segment} steps")
    return int(pos), int(passes)


def block_ids(ids, batch, first, stop):
    """The ids that cursors first ... stop - 1 of a `StreamBatcher` of ``batch`` cursors over
    ``ids`` read, and its segment length: ``(ids[first S : stop S + 1], S)``."""
    for name, value in (("batch", batch), ("first", first), ("stop", stop)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int; got {value!r}")
    if not 0 <= first < stop <= batch:
        raise ValueError(f"cursors first ... stop - 1 must lie in 0 ... batch - 1, with "
                         f"first < stop; got first={first}, stop={stop}, batch={batch}")
    segment = (np.size(ids) - 1) // batch
    if segment < 1:
        raise ValueError(f"a stream of {np.size(ids)} ids is too short for {batch} cursors "
                         "(each needs at least 2)")
    return ids[first * segment:stop * segment + 1], segment
