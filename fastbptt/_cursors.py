"""A training run's cursors in contiguous blocks, each block holding its own carried state.

A run's B cursors walk contiguous segments of the train split in lockstep
(`fastbptt.text.StreamBatcher`). A `CursorBlock` is cursors first ... stop - 1: their rows
of the text, their position, their carried states (h and, for an LSTM, c) and a model to
compute with; it computes the block's loss and summed gradient with `fastbptt.bptt`. A run
in one process has one block of all B cursors (`LocalBlocks`); a distributed run has one
block per worker, held there (`fastbptt.distributed`), so that carried states stay where
they are used. A step's result is the blocks' losses and gradients added in block order
(`combine`); with one block it is that block's own, bit for bit.

Steps are counted as the trainer counts them: a block at step k holds the state after k
applied updates. ``compute(k, params)`` leaves the state it reaches pending; the next call
with k + 1 (the trainer applied that update) commits it, one with k again (the step
diverged and was not applied) discards it, so a block always agrees with its trainer.
"""
from __future__ import annotations

import time
from typing import NamedTuple, Optional

import numpy as np

from .api import bptt
from .params import from_leaves, leaves, read_model
from .text import StreamBatcher, block_ids

__all__ = ["Carried", "Recipe", "CursorBlock", "LocalBlocks", "BlockLost", "place_local",
           "zero_state", "split_rows", "split_state", "merge_states", "combine"]


class BlockLost(Exception):
    """A block of cursors is gone with the worker that held it (``address``): the run can
    only go on from its last checkpoint."""

    def __init__(self, address):
        super().__init__(f"the worker {address} left the cluster")
        self.address = address


class Carried(NamedTuple):
    """Where cursors are and what they carry: the batcher's position (all cursors share
    it), h, and the LSTM's c (None for other cells); states (B, H) for one Elman layer
    with its head, (layers, B, H) for a stack (the cursors on the second-to-last axis)."""

    position: dict
    h: np.ndarray
    c: Optional[np.ndarray] = None


class Recipe(NamedTuple):
    """How every block computes a step: T steps per call and `fastbptt.bptt`'s options."""

    seq_length: int
    truncate: int
    stride: int
    activation: str


def zero_state(params, batch):
    """(h, c) of ``batch`` fresh cursors of ``params``: zeros (B, H) for one Elman layer
    with its head, (layers x directions, B, H) for a `Model`; c for an LSTM, else None."""
    model, _, stacked = read_model(params)
    W = model.layers[0][0].W
    shape = (model.num_layers * model.directions, batch, W.shape[1]) if stacked else \
        (batch, W.shape[1])
    return np.zeros(shape, W.dtype), (np.zeros(shape, W.dtype) if model.cell == "lstm"
                                      else None)


def split_rows(batch, parts):
    """``parts`` contiguous (first, stop) blocks of ``batch`` cursors, in order, whose sizes
    differ by at most one (the larger first)."""
    sizes = [batch // parts + (i < batch % parts) for i in range(parts)]
    edges = np.cumsum([0] + sizes)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def split_state(carried, rows):
    """A `Carried` for each (first, stop) of ``rows``: their cursors' states, copied."""
    def part(state, first, stop):
        return None if state is None else np.array(state[..., first:stop, :])
    return [Carried(dict(carried.position), part(carried.h, *r), part(carried.c, *r))
            for r in rows]


def merge_states(parts):
    """`split_state` undone: one `Carried` of all the blocks' cursors, in block order
    (copied). RuntimeError when the blocks are not at the same position."""
    first = parts[0]
    for other in parts[1:]:
        if other.position != first.position:
            raise RuntimeError(f"the blocks of cursors are at different positions: "
                               f"{first.position} and {other.position}")
    c = None if first.c is None else np.concatenate([p.c for p in parts], axis=-2)
    return Carried(dict(first.position), np.concatenate([p.h for p in parts], axis=-2), c)


def combine(results):
    """(loss, grads, characters, seconds) of a step from its blocks' `CursorBlock.compute`
    results in block order: losses, gradients and characters added one block after the
    other (one block: its own result), and the longest time a block spent in bptt."""
    loss, grads, chars, seconds = results[0]
    if len(results) == 1:
        return loss, grads, chars, seconds
    total = {name: np.array(a) for name, a in leaves(grads).items()}
    for more_loss, more, n, more_seconds in results[1:]:
        loss += more_loss
        chars += n
        seconds = max(seconds, more_seconds)
        for name, a in leaves(more).items():
            total[name] += a
    return loss, from_leaves(total), chars, seconds


class CursorBlock:
    """Cursors ``rows`` = (first, stop) of a run: a `StreamBatcher` over their rows of the
    text (``ids``, with the run's ``segment`` length), their carried states and a model.

    ``params`` is the model the block computes with: in one process the trainer's own
    arrays; on a worker, a copy that each `compute` overwrites with the values it is sent.
    """

    def __init__(self, ids, rows, segment, recipe, params, carried, step):
        first, stop = rows
        self.rows, self.recipe, self.params, self.step = rows, recipe, params, step
        self.batcher = StreamBatcher(ids, stop - first, recipe.seq_length, segment=segment)
        self.batcher.load_state_dict(carried.position)
        self.h, self.c = carried.h, carried.c
        self.zeros = zero_state(params, stop - first)
        self._pending = None

    def warm_up(self):
        """A call of each length the block's steps take (`StreamBatcher.call_steps`), on
        zeros: their kernels compile (or come from Numba's cache) before a run's clock
        starts. The block's state and params are untouched."""
        r = self.recipe
        for T in self.batcher.call_steps:
            x = np.zeros((self.rows[1] - self.rows[0], T), np.int64)
            bptt(x, x, self.params, truncate=r.truncate, stride=r.stride,
                 activation=r.activation, h0=self.zeros[0], c0=self.zeros[1])

    def _sync(self, step):
        """Commit the pending state if ``step`` says its update was applied, else discard
        it; then the block must be at ``step``."""
        if self._pending is not None:
            after, position, h, c = self._pending
            self._pending = None
            if after == step:
                self.h, self.c, self.step = h, c, step
            else:
                self.batcher.load_state_dict(position)
        if step != self.step:
            raise RuntimeError(f"cursors {self.rows[0]}-{self.rows[1] - 1} are at step "
                               f"{self.step}, the trainer at step {step}")

    def compute(self, step, params):
        """(loss, grads, characters, seconds in bptt) of the block's next T steps from the
        state after ``step`` updates, with ``params``' values; the state reached is pending
        until the next call says whether the update was applied."""
        self._sync(step)
        if params is not self.params:
            for mine, new in zip(leaves(self.params).values(), leaves(params).values()):
                np.copyto(mine, new)
        position = self.batcher.state_dict()
        batch = self.batcher.next()
        h0, c0 = self.zeros if batch.fresh else (self.h, self.c)
        r = self.recipe
        start = time.perf_counter()
        try:
            out = bptt(batch.x, batch.y, self.params, truncate=r.truncate, stride=r.stride,
                       activation=r.activation, h0=h0, c0=c0)
        except BaseException:
            self.batcher.load_state_dict(position)
            raise
        seconds = time.perf_counter() - start
        self._pending = (step + 1, position, out.h_final, out.c_final)
        return out.loss, out.grads, batch.x.size, seconds

    def state(self, step):
        """The `Carried` state after ``step`` updates; also while the state after the next
        update is pending, which is then left as it is (the run saves the state before a
        step once that step's loss and gradient are found finite, before its update)."""
        if self._pending is not None and self._pending[0] == step + 1 and self.step == step:
            return Carried(dict(self._pending[1]), self.h, self.c)
        self._sync(step)
        return Carried(self.batcher.state_dict(), self.h, self.c)


class LocalBlocks:
    """The blocks of a run in this process: one, or several (the split of a distributed
    run, computed here)."""

    def __init__(self, blocks):
        self.blocks = blocks

    @property
    def rows(self):
        return [b.rows for b in self.blocks]

    def warm_up(self):
        for b in self.blocks:
            b.warm_up()

    def gradients(self, step, params):
        return combine([b.compute(step, params) for b in self.blocks])

    def state(self, step):
        return merge_states([b.state(step) for b in self.blocks])

    def close(self):
        self.blocks = []


def block_args(ids, batch, rows, carried):
    """(ids, segment, Carried) of each block of ``rows``: what its `CursorBlock` needs
    besides the recipe, the model and the step."""
    for (first, stop), state in zip(rows, split_state(carried, rows)):
        part, segment = block_ids(ids, batch, first, stop)
        yield part, segment, state


def place_local(ids, batch, recipe, params, carried, step, parts=1):
    """`LocalBlocks` of ``parts`` blocks of the ``batch`` cursors over ``ids`` (the train
    split), all computing with ``params`` itself."""
    rows = split_rows(batch, parts)
    return LocalBlocks([CursorBlock(part, r, segment, recipe, params, state, step)
                        for r, (part, segment, state)
                        in zip(rows, block_args(ids, batch, rows, carried))])
