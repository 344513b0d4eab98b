"""Character-level training over one long stream: `TrainOptions`, `Trainer`, `evaluate`.

Each step takes the next T characters of B cursors (`fastbptt.text.StreamBatcher`), calls
`fastbptt.bptt` with ``h0`` = the previous step's ``h_final`` (zeros when the cursors start
a new pass), clips the gradients and updates the parameters in place. With the default
``truncate = stride = T`` this is min-char-rnn's chunked truncated BPTT (SPEC.md §3);
any other truncation works the same way. The model is one Elman layer with its head, or
a stack of Elman, GRU or LSTM layers (`TrainOptions.cell`, ``layers``).

The cursors live in blocks (`fastbptt._cursors`): one in this process, or one per worker
of a Dask cluster (`fastbptt.distributed`, SPEC.md §9), whose gradients are added in
worker order, clipped and applied once, here. The command around the loop is
`fastbptt._train_command`.
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from . import _resume
from . import checkpoint as ckpt_io
from ._cursors import Carried, Recipe, place_local, zero_state
from ._kernels.checks import all_finite
from ._run_saves import Diverged
from ._train_options import OPTION_RANGES, TrainOptions
from .api import bptt
from .clip import clip_grads
from .optim import make_optimizer
from .params import from_leaves, init_params, leaves
from .sampling import CHUNK, StatesOverflowed, sample_chunks
from .text import Codec, StreamBatcher, check_position, token_ids

__all__ = ["TrainOptions", "Trainer", "Diverged", "evaluate", "scored", "OPTION_RANGES"]

SAMPLE_CHUNK = CHUNK        # characters a sample draws between two questions to `stop`


class Trainer:
    """Parameters, optimizer, RNG and history of one run, and its cursors in blocks.

    ``placement(ids, batch, recipe, params, carried, step)`` puts the cursors somewhere and
    returns their blocks: `fastbptt._cursors.place_local` (the default) keeps one block in
    this process; `fastbptt.distributed` puts one on each worker of a cluster.
    ``last_saved`` is the checkpoint the run would go back to (None: its start).
    """

    def __init__(self, options, train_ids, codec, *, resume=None, placement=None):
        if not isinstance(options, TrainOptions):
            raise TypeError(f"options must be a TrainOptions; got {type(options).__name__}")
        if not isinstance(codec, Codec):
            raise TypeError(f"codec must be a fastbptt.text.Codec (Codec.from_text(text)); "
                            f"got {type(codec).__name__}")
        options.check()
        self.options = options
        self.codec = codec
        self.dtype = np.dtype(options.dtype)
        self.train_ids = token_ids("train_ids", train_ids)
        self.recipe = Recipe(options.seq_length, *options.window, options.activation)
        self.placement = placement or place_local
        self.blocks = None
        self.consistent = True               # False while an update is half applied
        # steps timed, and seconds: in bptt (the slowest block), getting the gradients
        # (bptt included), clipping and updating
        self.timing = {"steps": 0, "bptt": 0.0, "gradients": 0.0, "update": 0.0}
        self.restore(resume)

    def restore(self, resume=None):
        """Take the state of the checkpoint ``resume`` (None: a new run's, from the seed)
        and place the cursors afresh; ValueError or KeyError when it does not fit."""
        options = self.options
        V, H = len(self.codec), options.hidden
        self.optimizer = make_optimizer(options.optimizer, options.lr,
                                        **options.optimizer_options())
        if resume is None:
            self.rng = np.random.default_rng(options.seed)
            self.params = init_params(V, H, V, cell=options.cell, num_layers=options.layers,
                                      dtype=self.dtype, seed=self.rng)
            self.step = 0
            self.losses = []
            self.evals = []                  # (step, validation loss per char)
            carried = Carried({"pos": 0, "passes": 0}, *zero_state(self.params, options.batch))
        else:
            self.rng = np.random.default_rng()
            try:
                self.rng.bit_generator.state = resume.rng_state
            except (OverflowError, TypeError, ValueError, KeyError) as error:
                raise ValueError(f"its RNG state is not one of NumPy's "
                                 f"{type(self.rng.bit_generator).__name__} ({error})") from None
            self.params = from_leaves({name: _resume.in_dtype(f"params {name}", a, self.dtype)
                                       for name, a in leaves(resume.params).items()})
            self.optimizer.load_state_dict({       # buffers in the params' dtype, as saved
                key: _resume.in_dtype(f"the optimizer's {key}", value, self.dtype)
                if "." in key and isinstance(value, np.ndarray) and value.dtype.kind == "f"
                else value for key, value in resume.optimizer.items()})
            h, c = zero_state(self.params, options.batch)
            states = [None if a is None else _resume.in_dtype(f"the carried {what}", a,
                                                              self.dtype)
                      for a, what in ((resume.hidden, "state"),
                                      (resume.cell_state, "cell state"))]
            _resume.check_model(self.params, self.codec, options, states[0],
                                self.optimizer.state, states[1])
            self.optimizer.check_complete(leaves(self.params))
            # here, not only where the cursors are placed (a worker's error would not
            # say that the checkpoint is at fault)
            segment = (len(self.train_ids) - 1) // options.batch
            pos, _ = check_position(resume.batcher, segment)
            needed = (("hidden", states[0]), ("cell_state", states[1]))
            missing = [k for k, a in needed[:2 if options.cell == "lstm" else 1] if a is None]
            if missing and 0 < pos < segment:
                raise ValueError(f"the checkpoint has no {' or '.join(map(repr, missing))} "
                                 f"entry, the state its cursors carry {pos:,} steps into "
                                 f"their {segment:,}-step segments of the text: the run "
                                 "cannot go on exactly from it")
            carried = Carried(resume.batcher, h if states[0] is None else states[0],
                              c if states[0] is None else states[1])
            self.step = resume.step
            self.losses = [float(v) for v in np.asarray(resume.history.get("loss", []))
                           .reshape(-1)]
            evals = np.asarray(resume.history.get("evals", np.empty((0, 2))), np.float64)
            if evals.size % 2:
                raise ValueError(f"its history.evals holds {evals.size} numbers, not pairs "
                                 f"of a step and a validation loss")
            self.evals = [(float(a), float(b)) for a, b in evals.reshape(-1, 2)]
        self.close()
        self.blocks = self.placement(self.train_ids, options.batch, self.recipe, self.params,
                                     carried, self.step)
        self.last_saved = resume

    def close(self):
        """Release the blocks (a distributed run's workers keep nothing of it)."""
        if self.blocks is not None:
            self.blocks.close()
            self.blocks = None

    @property
    def carried(self):
        """Every cursor's position and carried state after the last applied step."""
        if self.blocks is None:
            raise RuntimeError("the run's cursors are not placed (its last placement failed): "
                               "call restore() again")
        return self.blocks.state(self.step)

    def train_step(self, *, before_update=None):
        """One update; returns (loss per character, characters).

        A step whose loss or gradient norm is not finite raises `Diverged` before it
        changes anything (its blocks drop the state they reached), so the trainer keeps the
        state before it. ``consistent`` is False only while the update is being applied.
        ``before_update``: a function called once the step's loss and gradient norm are
        found finite, before the update, while the trainer still holds the state before
        the step (the command saves its periodic checkpoints there: `checkpoint` works).
        """
        start = time.perf_counter()
        loss, grads, n, in_bptt = self.blocks.gradients(self.step, self.params)
        between = time.perf_counter()
        with np.errstate(over="ignore", invalid="ignore"):     # checked just below
            norm = clip_grads(grads, max_norm=self.options.clip_norm,
                              max_value=self.options.clip_value)
        for what, value in (("loss", loss), ("gradient norm", norm)):
            if not math.isfinite(value):
                raise Diverged(self.step + 1, what, value)
        paused = time.perf_counter()
        if before_update is not None:
            before_update()
        paused = time.perf_counter() - paused           # not in the step's own times
        self.optimizer.lr = self.options.lr_at(self.step)
        self.consistent = False
        with np.errstate(over="ignore", invalid="ignore"):     # checked just below
            self.optimizer.step(self.params, grads)
        if not all(all_finite(a.reshape(-1)) for a in leaves(self.params).values()):
            raise Diverged(self.step + 1, "weights", "not finite", applied=True)
        if not all(all_finite(a.reshape(-1)) for slot in self.optimizer.state.values()
                   for a in slot.values()):     # Adam's v of a float32 gradient above 1.8e19
            raise Diverged(self.step + 1, f"{self.optimizer.kind} optimizer's state",
                           "not finite", applied=True)
        self.consistent = True
        self.step += 1
        self.losses.append(loss / n)
        self.timing["steps"] += 1
        self.timing["bptt"] += in_bptt
        self.timing["gradients"] += between - start
        self.timing["update"] += time.perf_counter() - between - paused
        return loss / n, n

    def sample(self, chars=200, prime="\n", temperature=0.8, rng=None, stop=None):
        """Text from the current model, drawn with the run's RNG (part of its state), or
        with ``rng``.

        ``stop``: a function asked after every `SAMPLE_CHUNK` characters; when it says
        True, the sample ends there and None is returned, the RNG moved on past the
        numbers the rest would have drawn, so that the run goes on as it would have.
        A ``prime`` with characters outside the vocabulary is left out (the default, a
        newline, in a text without one).
        """
        if not isinstance(prime, str):
            raise TypeError(f"prime must be a str; got {type(prime).__name__}")
        if not set(prime) <= set(self.codec.chars):
            prime = ""
        rng = self.rng if rng is None else rng
        pieces = sample_chunks(self.params, self.codec, prime=prime, chars=chars,
                               chunk=SAMPLE_CHUNK, temperature=temperature, rng=rng,
                               activation=self.options.activation)
        text = []
        for drawn, piece in zip(range(SAMPLE_CHUNK, chars + SAMPLE_CHUNK, SAMPLE_CHUNK),
                                pieces):
            text.append(piece)
            if drawn < chars and stop is not None and stop():
                _draw_numbers(rng, chars - drawn)              # one a character
                return None
        return "".join(text)

    def draw_past(self, state, chars):
        """The run's RNG set to ``state`` moved past the numbers a sample of ``chars``
        characters draws (one a character), as that sample would leave it; drawn on a
        copy, so that a failure here leaves the run's RNG as it was."""
        rng = np.random.Generator(type(self.rng.bit_generator)())
        rng.bit_generator.state = state
        _draw_numbers(rng, chars)
        self.rng.bit_generator.state = rng.bit_generator.state

    def checkpoint(self):
        """The run as a `fastbptt.checkpoint.Checkpoint`, of copies: later steps do not
        change it."""
        carried = self.carried
        return ckpt_io.Checkpoint(
            params=from_leaves({name: a.copy() for name, a in leaves(self.params).items()}),
            optimizer=self.optimizer.state_dict(), codec=self.codec, step=self.step,
            rng_state=self.rng.bit_generator.state, options=dataclasses.asdict(self.options),
            hidden=carried.h, cell_state=carried.c, batcher=carried.position,
            history={"loss": np.array(self.losses, np.float64),
                     "evals": np.array(self.evals, np.float64).reshape(-1, 2)})

    def save(self, path, **extra_options):
        """Write `checkpoint` to ``path`` atomically (`fastbptt.checkpoint.save`), with
        ``extra_options`` added to its options (the command adds the corpus's digest and
        files); returns ``path``."""
        ck = self.checkpoint()
        ck.options.update(extra_options)
        ckpt_io.save(path, ck)
        self.last_saved = ck
        return path


def _streams(size, streams):
    """How many segments `evaluate` cuts a text of `size` ids into (each at least 2)."""
    return max(1, min(streams, (size - 1) // 2))


def scored(size, streams=32):
    """How many next-id predictions `evaluate` scores in a text of `size` ids: each of
    its segments predicts all of its ids but its first, and a remainder is left out."""
    if size < 2:
        return 0
    n = _streams(size, streams)
    return n * ((size - 1) // n)


def _draw_numbers(rng, n):
    """``rng`` moved past ``n`` uniform numbers, drawn `SAMPLE_CHUNK` at a time."""
    for start in range(0, n, SAMPLE_CHUNK):
        rng.random(min(SAMPLE_CHUNK, n - start))


def evaluate(params, ids, *, activation="tanh", streams=32, steps=128):
    """Loss in nats per character of ``params`` predicting each next id of ``ids``.

    The ids are cut into ``streams`` contiguous segments (a remainder of fewer than
    ``streams`` ids at the end is left out), each read start to end from a zero state with
    the state carried from call to call, so every position of a segment is predicted once
    from all of the segment before it. The loss comes from `fastbptt.bptt` (summed in
    float64; its gradients are not used), which also returns the state to carry.
    `fastbptt.sampling.StatesOverflowed` where the loss or a carried state is not finite.
    """
    ids = token_ids("ids", ids)
    for name, value in (("streams", streams), ("steps", steps)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int; got {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be at least 1; got {value}")
    if ids.size < 2:
        return float("nan")
    streams = _streams(ids.size, streams)
    batcher = StreamBatcher(ids, streams, steps)
    h, c = zero_state(params, streams)
    total, count = 0.0, 0
    for _ in range(batcher.calls_per_pass):
        x, y, _fresh = batcher.next()
        out = bptt(x, y, params, truncate=steps, stride=steps, activation=activation, h0=h,
                   c0=c)
        h, c = out.h_final, out.c_final
        if not (math.isfinite(out.loss) and all(
                s is None or all_finite(s.reshape(-1)) for s in (h, c))):
            raise StatesOverflowed(f"the model's states overflowed (NaN or inf) after "
                                   f"{count + y.size:,} of the {ids.size:,} ids: it has no "
                                   f"loss")
        total += out.loss
        count += y.size
    return total / count
