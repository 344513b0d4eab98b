"""Character-level training over one long stream: the loop and the ``fastbptt train`` command.

Each step takes the next T characters of B cursors (`fastbptt.text.StreamBatcher`), calls
`fastbptt.bptt` with ``h0`` = the previous step's ``h_final`` (zeros when the cursors start
a new pass), clips the gradients and updates the parameters in place. With the default
``truncate = stride = T`` this is min-char-rnn's chunked truncated BPTT (SPEC.md §3);
any other truncation works the same way. The model is one Elman layer with its head, or
a stack of Elman, GRU or LSTM layers (`TrainOptions.cell`, ``layers``).

The cursors live in blocks (`fastbptt._cursors`): one in this process, or one per worker
of a Dask cluster (`fastbptt.distributed`, SPEC.md §9), whose gradients are added in
worker order, clipped and applied once, here.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from . import _preflight, _resume
from . import checkpoint as ckpt_io
from ._command_errors import CommandError, UsageError, describe
from ._cursors import Carried, Recipe, place_local, zero_state
from ._kernels.checks import all_finite
from ._ranges import Choice, Range, flag
from ._run_saves import Diverged, failure, save_checkpoint
from ._signals import SignalGuard
from .api import bptt
from .clip import clip_grads
from .optim import make_optimizer
from .params import from_leaves, init_params, leaves
from .sampling import sample
from .text import Codec, StreamBatcher, unigram_entropy

__all__ = ["TrainOptions", "Trainer", "Diverged", "evaluate", "run"]

LN2 = math.log(2)

# The range of each `TrainOptions` field: the command line's types and `check` use them.
OPTION_RANGES = {
    "hidden": Range(1, integer=True),
    "cell": Choice("elman", "gru", "lstm"),
    "layers": Range(1, integer=True),
    "seq_length": Range(1, integer=True),
    "batch": Range(1, integer=True),
    "optimizer": Choice("adam", "adagrad", "sgd"),
    "lr": Range(0, low_open=True),
    "momentum": Range(0, 1, high_open=True),
    "clip_norm": Range(0, low_open=True, none=True),
    "clip_value": Range(0, low_open=True, none=True),
    "truncate": Range(1, integer=True, none=True),
    "stride": Range(1, integer=True, none=True),
    "dtype": Choice("float32", "float64"),
    "activation": Choice("tanh", "sigmoid", "relu", "identity"),
    "seed": Range(0, integer=True),
    "val_fraction": Range(0, 1, low_open=True, high_open=True),
    "lr_decay": Choice("linear", "none"),
    "lr_final": Range(0, 1),
    "horizon": Range(1, integer=True, none=True),
}


@dataclass
class TrainOptions:
    """What a run is: fixed when it starts and restored by --resume."""

    hidden: int = 256
    cell: str = "elman"            # "elman", "gru" or "lstm"
    layers: int = 1
    seq_length: int = 50
    batch: int = 32
    optimizer: str = "adam"
    lr: float = 3e-3
    momentum: float = 0.0          # SGD only
    clip_norm: float | None = None
    clip_value: float | None = 5.0
    truncate: int | None = None    # None: seq_length (chunks)
    stride: int | None = None      # None: truncate
    dtype: str = "float32"
    activation: str = "tanh"
    seed: int = 0
    val_fraction: float = 0.1
    lr_decay: str = "linear"       # "linear" to lr * lr_final at step `horizon`, or "none"
    lr_final: float = 0.05
    horizon: int | None = None     # the decay's last step; set once by the command

    # what a checkpoint written before a field existed was trained with
    ABSENT: ClassVar[dict] = {"cell": "elman", "layers": 1}

    def lr_at(self, step):
        """The learning rate of update number ``step + 1``."""
        if self.lr_decay == "none" or not self.horizon:
            return self.lr
        if self.lr_decay != "linear":
            raise ValueError(f"unknown lr_decay {self.lr_decay!r}; choose 'linear' or 'none'")
        return self.lr * (1 - (1 - self.lr_final) * min(step / self.horizon, 1.0))

    @property
    def window(self):
        """(truncate, stride) passed to bptt."""
        k = self.truncate if self.truncate is not None else self.seq_length
        return k, (self.stride if self.stride is not None else k)

    def optimizer_options(self):
        return {"momentum": self.momentum} if self.optimizer == "sgd" else {}

    def check(self):
        """ValueError naming the first option outside its range (`OPTION_RANGES`), or a
        stride longer than the window."""
        for f in dataclasses.fields(self):
            if f.name in OPTION_RANGES:
                try:
                    setattr(self, f.name, OPTION_RANGES[f.name](getattr(self, f.name)))
                except ValueError as error:
                    raise ValueError(f"{flag(f.name)} {error}") from None
        if self.cell != "elman" and self.activation != "tanh":
            raise ValueError(f"--activation {self.activation} applies to the Elman cell only; "
                             f"--cell {self.cell} has its own gates (leave --activation at "
                             "tanh)")
        k, s = self.window
        if s > k:
            raise ValueError(f"--stride {s} exceeds the window of {k} steps (--truncate, or "
                             "--seq-length without it); choose 1 <= stride <= truncate")
        largest = float(np.finfo(self.dtype).max)
        if self.lr > largest:
            raise ValueError(f"--lr {self.lr:g} is beyond the range of --dtype {self.dtype} "
                             f"(at most {largest:.4g})")


class Trainer:
    """Parameters, optimizer, RNG and history of one run, and its cursors in blocks.

    ``placement(ids, batch, recipe, params, carried, step)`` puts the cursors somewhere and
    returns their blocks: `fastbptt._cursors.place_local` (the default) keeps one block in
    this process; `fastbptt.distributed` puts one on each worker of a cluster.
    ``last_saved`` is the checkpoint the run would go back to (None: its start).
    """

    def __init__(self, options, train_ids, codec, *, resume=None, placement=None):
        self.options = options
        self.codec = codec
        self.dtype = np.dtype(options.dtype)
        self.train_ids = train_ids
        self.recipe = Recipe(options.seq_length, *options.window, options.activation)
        self.placement = placement or place_local
        self.blocks = None
        self.consistent = True               # False while an update is half applied
        self.seconds = {"bptt": 0.0, "gradients": 0.0, "update": 0.0}
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
            self.rng.bit_generator.state = resume.rng_state
            self.params = from_leaves({name: np.array(a, self.dtype)
                                       for name, a in leaves(resume.params).items()})
            self.optimizer.load_state_dict(resume.optimizer)
            h, c = zero_state(self.params, options.batch)
            states = [None if a is None else np.array(a, self.dtype)
                      for a in (resume.hidden, resume.cell_state)]
            _resume.check_model(self.params, self.codec, options, states[0],
                                self.optimizer.state, states[1])
            carried = Carried(resume.batcher, h if states[0] is None else states[0],
                              c if states[0] is None else states[1])
            self.step = resume.step
            self.losses = [float(v) for v in np.asarray(resume.history.get("loss", []))
                           .reshape(-1)]
            evals = np.asarray(resume.history.get("evals", np.empty((0, 2))), np.float64)
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
        return self.blocks.state(self.step)

    def train_step(self):
        """One update; returns (loss per character, characters).

        A step whose loss or gradient norm is not finite raises `Diverged` before it
        changes anything (its blocks drop the state they reached), so the trainer keeps the
        state before it. ``consistent`` is False only while the update is being applied.
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
        self.optimizer.lr = self.options.lr_at(self.step)
        self.consistent = False
        with np.errstate(over="ignore", invalid="ignore"):     # checked just below
            self.optimizer.step(self.params, grads)
        if not all(all_finite(a.reshape(-1)) for a in leaves(self.params).values()):
            raise Diverged(self.step + 1, "weights", "not finite", applied=True)
        self.consistent = True
        self.step += 1
        self.losses.append(loss / n)
        self.seconds["bptt"] += in_bptt
        self.seconds["gradients"] += between - start
        self.seconds["update"] += time.perf_counter() - between
        return loss / n, n

    def sample(self, chars=200, prime="\n", temperature=0.8):
        """Text from the current model, drawn with the run's RNG (part of its state)."""
        if not set(prime) <= set(self.codec.chars):
            prime = ""
        return sample(self.params, self.codec, prime=prime, chars=chars,
                      temperature=temperature, rng=self.rng,
                      activation=self.options.activation)

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
        ck = self.checkpoint()
        ck.options.update(extra_options)
        ckpt_io.save(path, ck)
        self.last_saved = ck
        return path


def evaluate(params, ids, *, activation="tanh", streams=32, steps=128):
    """Loss in nats per character of ``params`` predicting each next id of ``ids``.

    The ids are cut into ``streams`` contiguous segments (a remainder of fewer than
    ``streams`` ids at the end is left out), each read start to end from a zero state with
    the state carried from call to call, so every position of a segment is predicted once
    from all of the segment before it. The loss comes from `fastbptt.bptt` (summed in
    float64; its gradients are not used), which also returns the state to carry.
    """
    ids = np.asarray(ids, np.int64)
    if ids.size < 2:
        return float("nan")
    streams = max(1, min(streams, (ids.size - 1) // 2))
    batcher = StreamBatcher(ids, streams, steps)
    h, c = zero_state(params, streams)
    total, count = 0.0, 0
    for _ in range(batcher.calls_per_pass):
        x, y, _fresh = batcher.next()
        out = bptt(x, y, params, truncate=steps, stride=steps, activation=activation, h0=h,
                   c0=c)
        h, c = out.h_final, out.c_final
        total += out.loss
        count += y.size
    return total / count


def _number(value):
    return "off" if value is None else f"{value:g}"


def _bits(nats):
    return nats / LN2


def _plot(path, trainer, baseline, val_loss, eval_chars):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    losses = np.asarray(trainer.losses)
    fig, ax = plt.subplots(figsize=(7, 4))
    steps = np.arange(1, losses.size + 1)
    ax.plot(steps, losses, lw=0.5, alpha=0.4, color="C0", label="train (each step)")
    if losses.size >= 50:
        w = max(losses.size // 100, 10)
        smooth = np.convolve(losses, np.ones(w) / w, mode="valid")
        ax.plot(steps[w - 1:], smooth, color="C0", label=f"train (mean of {w} steps)")
    if trainer.evals:
        e = np.asarray(trainer.evals)
        ax.plot(e[:, 0], e[:, 1], "o-", color="C1",
                label=f"validation, first {eval_chars:,} held-out characters")
    if val_loss is not None:
        ax.axhline(val_loss, color="C1", ls=":", label=f"validation, final ({val_loss:.3f})")
    ax.axhline(baseline, color="gray", ls="--", label=f"unigram baseline ({baseline:.3f})")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per character)")
    ax.set_ylim(0, max(baseline * 1.3, float(np.nanmin(losses[:1])) if losses.size else 1))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _load_corpus(files):
    from .corpus import default_corpus, read_files

    return read_files(files) if files else default_corpus()


@dataclass
class _Run:
    """What `run` sets up before training, for the loop and the final report."""

    options: TrainOptions
    trainer: Trainer
    codec: Codec
    train_ids: np.ndarray
    val_ids: np.ndarray
    extra: dict                     # saved with the options: corpus files, digest, threads
    chars: int = 0
    elapsed: float = 0.0


def _start(args, given, say):
    """Every check, the corpus, the trainer and the compiled kernels, before training."""
    from ._threads import get_num_threads, set_num_threads

    resume, changed = None, {}
    if args.resume:
        resume = ckpt_io.load(args.checkpoint)
        options, changed = _resume.resumed_options(TrainOptions, resume.options, given,
                                                   args.checkpoint)
    else:
        options = TrainOptions(**given)
        try:
            options.check()
        except ValueError as error:
            raise UsageError(str(error)) from None
    if args.plot:
        _preflight.plot_file(args.plot)
    if resume is None:
        _preflight.new_checkpoint(args.checkpoint)
        corpus, files = _load_corpus(args.files), list(args.files)
        codec = Codec.from_text(corpus.text)
    else:
        _preflight.output_file(args.checkpoint, "--checkpoint", make_folders=True)
        corpus, files = _resume.find_corpus(_load_corpus, args.files, resume.options,
                                            args.checkpoint)
        codec = resume.codec
    train_text, val_text = corpus.split(options.val_fraction)
    train_ids, val_ids = codec.encode(train_text), codec.encode(val_text)
    _preflight.corpus(codec, train_ids, val_ids, options)
    _preflight.model_memory(options, len(codec))
    if args.threads:
        set_num_threads(args.threads)
    try:
        trainer = Trainer(options, train_ids, codec, resume=resume)
    except (ValueError, TypeError, KeyError, IndexError) as error:
        if resume is None:
            raise
        raise ckpt_io.CheckpointError(f"{args.checkpoint} is not a usable fastbptt "
                                      f"checkpoint: {describe(error)}") from None
    extra = {**_resume.corpus_paths(files, args.checkpoint), "corpus_sha256": corpus.digest,
             "threads": get_num_threads()}

    k, s = options.window
    say(f"corpus: {corpus.description}; {len(codec)} distinct characters; "
        f"train {train_ids.size:,}, validation {val_ids.size:,}")
    say(f"model: {_resume.describe_model(options)}"
        + (f", {options.activation}" if options.cell == "elman" else "")
        + f", {options.dtype}; "
        f"{options.batch} cursors x {options.seq_length} steps, truncate={k} stride={s}; "
        f"{options.optimizer} lr={options.lr:g}"
        + (f" decaying linearly to {options.lr * options.lr_final:g}"
           if options.lr_decay != "none" else "")
        + f", clip norm={options.clip_norm} "
        f"value={options.clip_value}" + (f"; resumed at step {trainer.step}" if resume else "")
        + "".join(f"; {flag(name)} changed from {_number(old)} to {_number(new)}"
                  for name, (old, new) in changed.items()))

    # compile (or load Numba's cache) before the clock starts
    warm = np.zeros((options.batch, 1), np.int64)
    h, c = zero_state(trainer.params, options.batch)
    bptt(warm, warm, trainer.params, h0=h, c0=c, truncate=k, stride=s,
         activation=options.activation)
    return _Run(options, trainer, codec, train_ids, val_ids, extra)


def _printer(out):
    return lambda *a: print(*a, file=out, flush=True)


def _train(args, r, guard, out):
    """The loop and the save that ends it; returns the exit status when a signal stopped
    it, else None. Signals are only recorded from here to the end of the save."""
    from tqdm import tqdm

    say = _printer(out)
    trainer, options = r.trainer, r.options
    target_steps = args.steps
    budget = args.time
    if target_steps is None and budget is None:
        budget = DEFAULT_TIME
    eval_ids = r.val_ids[:args.eval_chars]
    if options.lr_decay != "none" and options.horizon is None and target_steps is not None:
        options.horizon = target_steps
    first_step = trainer.step
    by_steps = budget is None
    total = (target_steps - trainer.step) if by_steps else budget
    say(f"training {f'to step {target_steps:,}' if by_steps else f'for {budget:g} s'}; "
        "Ctrl-C, SIGTERM or SIGHUP saves the checkpoint and stops")
    with guard.deferred():
        bar = tqdm(total=max(total, 0), unit="step" if by_steps else "s",
                   disable=args.no_progress, file=sys.stderr, dynamic_ncols=True,
                   bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} "
                              "[{elapsed}<{remaining}{postfix}]",
                   mininterval=0.5)
        start = time.perf_counter()
        last_post = start
        chars = 0
        smooth = None
        try:
            while guard.received is None:
                now = time.perf_counter()
                if target_steps is not None and trainer.step >= target_steps:
                    break
                if budget is not None and now - start >= budget:
                    break
                if (options.lr_decay != "none" and options.horizon is None
                        and budget is not None
                        and trainer.step - first_step == ESTIMATE_STEPS):
                    # a time budget: the decay ends where this speed reaches the budget
                    rate = ESTIMATE_STEPS / (now - start)
                    options.horizon = trainer.step + int(rate * (budget - (now - start)))
                loss, n = trainer.train_step()
                chars += n
                smooth = loss if smooth is None else 0.98 * smooth + 0.02 * loss
                after = time.perf_counter()
                bar.update(1 if by_steps else after - now)
                if after - last_post > 0.5:
                    last_post = after
                    bar.set_postfix_str(f"loss={smooth:.3f} {chars / (after - start):,.0f} "
                                        f"chars/s step {trainer.step}", refresh=False)
                if args.sample_every and trainer.step % args.sample_every == 0:
                    val = evaluate(trainer.params, eval_ids, activation=options.activation)
                    trainer.evals.append((trainer.step, val))
                    text = trainer.sample(args.sample_chars, temperature=args.temperature)
                    bar.write(f"--- step {trainer.step}: train {smooth:.3f}, validation "
                              f"{val:.3f} nats/char; sample:\n{text}\n---", file=out)
        except Exception as error:
            bar.close()
            raise failure(error, trainer, args.checkpoint, r.extra, guard) from None
        r.chars, r.elapsed = chars, time.perf_counter() - start
        bar.close()
        save_checkpoint(trainer, args.checkpoint, r.extra, guard)
        guard.note = f"after step {trainer.step}; the checkpoint {args.checkpoint} is saved"
    if guard.received is None:
        return None
    say(f"interrupted at step {trainer.step} ({guard.name}) after {r.elapsed:.1f} s; "
        f"checkpoint saved to {os.path.abspath(args.checkpoint)}; continue with "
        f"`fastbptt train --resume --checkpoint {args.checkpoint}`")
    return guard.status


def _report(args, r, say):
    """The final losses, a sample and the plot."""
    trainer, options, train_ids, val_ids = r.trainer, r.options, r.train_ids, r.val_ids
    rate = r.chars / r.elapsed if r.elapsed > 0 else float("nan")
    say(f"trained {trainer.step:,} steps in all; this run {r.chars:,} characters in "
        f"{r.elapsed:.1f} s, {rate:,.0f} chars/s")
    baseline = unigram_entropy(train_ids, len(r.codec))
    train_eval = train_ids[-max(val_ids.size, 1):]
    train_loss = evaluate(trainer.params, train_eval, activation=options.activation)
    val_loss = evaluate(trainer.params, val_ids, activation=options.activation)
    say(f"train loss       {train_loss:.3f} nats/char  {_bits(train_loss):.3f} bits/char  "
        f"(final model, last {train_eval.size:,} characters of the train split)")
    say(f"validation loss  {val_loss:.3f} nats/char  {_bits(val_loss):.3f} bits/char  "
        f"(final model, all {val_ids.size:,} held-out characters)")
    say(f"unigram baseline {baseline:.3f} nats/char  {_bits(baseline):.3f} bits/char  "
        "(entropy of the train split's character frequencies, on the train split)")
    say(f"validation / unigram = {val_loss / baseline:.3f}")
    say(f"checkpoint: {os.path.abspath(args.checkpoint)}")
    text = trainer.sample(args.sample_chars, temperature=args.temperature)
    say(f"sample (temperature {args.temperature:g}):\n{text}")
    if args.plot:
        _plot(args.plot, trainer, baseline, val_loss, min(val_ids.size, args.eval_chars))
        say(f"plot: {os.path.abspath(args.plot)}")


def run(args, given, *, out=None):
    """The ``fastbptt train`` command. Returns the exit status: 0 done, 128 + the signal's
    number when a signal stopped training (after the checkpoint was saved).

    ``given`` holds the `TrainOptions` fields set on the command line; a new run takes
    the defaults for the rest, a resumed one the checkpoint's. Everything that can be
    checked is checked before the corpus is read and the kernels compile. Failures
    raise `UsageError` or `CommandError` (an exception from inside the loop first saves
    the last good state, `fastbptt._run_saves`), and a signal outside the loop raises
    `Interrupted`, for `fastbptt._command_errors.run_command` to report in one line.
    """
    out = out or sys.stdout
    say = _printer(out)
    with SignalGuard("before training started; nothing was saved") as guard:
        r = _start(args, given, say)
        status = _train(args, r, guard, out)
        if status is not None:
            return status
        try:
            _report(args, r, say)
        except Exception as error:
            raise CommandError(f"{describe(error)} after training; the checkpoint "
                               f"{args.checkpoint} is saved") from None
    return 0


DEFAULT_TIME = 90.0
ESTIMATE_STEPS = 200        # steps timed to fix the decay's horizon under a time budget


def run_sample(args, *, out=None):
    """The ``fastbptt sample`` command."""
    out = out or sys.stdout
    ck = ckpt_io.load(args.checkpoint)
    options, _ = _resume.resumed_options(TrainOptions, ck.options, {}, args.checkpoint)
    params = from_leaves({name: np.asarray(a, options.dtype)
                          for name, a in leaves(ck.params).items()})
    try:
        _resume.check_model(params, ck.codec, options)
    except ValueError as error:
        raise ckpt_io.CheckpointError(f"{args.checkpoint} is not a usable fastbptt "
                                      f"checkpoint: {error}") from None
    unknown = sorted(set(args.prime) - set(ck.codec.chars))
    if unknown:
        raise UsageError(f"--prime holds characters not in the vocabulary of "
                         f"{args.checkpoint}: {''.join(unknown)!r}")
    text = sample(params, ck.codec, prime=args.prime, chars=args.chars,
                  temperature=args.temperature, rng=np.random.default_rng(args.seed),
                  activation=options.activation)
    print(args.prime + text, file=out)
    return 0
