"""The ``fastbptt train`` and ``fastbptt sample`` commands: checks, setup, the loop and
the report around `fastbptt.train.Trainer`.

Before any work: every option, the output files, the corpus, the memory the model needs
and, for ``--workers``/``--scheduler``, Dask. The loop keeps a progress bar, validation
estimates and samples, writes a checkpoint every ``--checkpoint-every`` (`Schedule`;
each once the step after it is found finite) and, in a distributed run, goes on from the
last checkpoint when a worker leaves (and onto more workers when they join, after a
checkpoint). Every save goes through `fastbptt._run_saves.save_checkpoint`.
"""
from __future__ import annotations

import contextlib
import copy
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from . import _preflight, _resume
from . import checkpoint as ckpt_io
from ._checkpoint_claim import claimed
from ._command_errors import CommandError, UsageError, describe
from ._cursors import BlockLost
from ._ranges import flag
from ._run_saves import (Diverged, NothingToSave, Schedule, failure, kept, resume_hint,
                         save_checkpoint)
from ._signals import Interrupted, SignalGuard
from ._train_options import DEFAULT_CHECKPOINT_EVERY, DEFAULT_TIME
from .params import from_leaves, leaves
from .sampling import StatesOverflowed, sample_chunks
from .text import Codec, unigram_entropy
from .train import Trainer, TrainOptions, evaluate, scored

__all__ = ["run", "run_sample", "DEFAULT_TIME", "DEFAULT_CHECKPOINT_EVERY"]

ESTIMATE_STEPS = 200        # steps timed to fix the decay's horizon under a time budget
LN2 = math.log(2)
DISTRIBUTED = "pip install 'fastbptt[distributed]'"


def _number(value):
    return "off" if value is None else f"{value:g}"


def _bits(nats):
    return nats / LN2


def _warm_up(trainer, args, val_ids):
    """Compile (or load from Numba's cache) what the loop calls, before its clock starts:
    the steps' kernels at each of their shapes (`CursorBlock.warm_up`), the optimizer's
    update and, where the loop samples, the validation estimate and the sampler. The
    update runs on copies, and the sampler with an RNG of its own: the run's state is
    untouched."""
    trainer.blocks.warm_up()
    arrays = leaves(trainer.params)
    copy.deepcopy(trainer.optimizer).step(
        from_leaves({name: a.copy() for name, a in arrays.items()}),
        from_leaves({name: np.zeros_like(a) for name, a in arrays.items()}))
    if args.sample_every:
        evaluate(trainer.params, val_ids[:65],                    # 32 streams, as the loop's
                 activation=trainer.options.activation)
        if args.sample_chars:
            trainer.sample(1, rng=np.random.default_rng(0))


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
    _preflight.save_figure(fig, path)
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
    workers: object = None          # fastbptt.distributed.Workers of a distributed run
    chars: int = 0
    elapsed: float = 0.0
    saves: int = 0                  # periodic checkpoints written, and the seconds they took
    saving: float = 0.0
    losses: tuple = None            # the final model's (train, validation) loss, for the report

    def close(self):
        self.trainer.close()
        if self.workers is not None:
            self.workers.close()


def distributed_module(option):
    """`fastbptt.distributed`, or the one line saying that ``option`` needs its extra."""
    try:
        from . import distributed
    except ImportError:
        raise CommandError(f"{option} needs Dask: {DISTRIBUTED}") from None
    return distributed


def _dask(args):
    """`fastbptt.distributed` for --workers or --scheduler, else None."""
    if not (args.workers or args.scheduler):
        return None
    return distributed_module("--scheduler" if args.scheduler else "--workers")


def _workers(dask, args, options):
    """The `fastbptt.distributed.Workers` of --workers N (a local cluster) or --scheduler
    ADDRESS, and the line that says so."""
    if args.workers and args.workers > options.batch:
        raise UsageError(f"--workers {args.workers} exceeds --batch {options.batch}: each "
                         "worker needs at least one cursor")
    try:
        if args.scheduler:
            workers = dask.Workers.connect(args.scheduler, want=args.workers)
            where = f"of the Dask cluster at {args.scheduler}"
        else:
            workers = dask.Workers.local(args.workers)
            where = "in a local Dask cluster on 127.0.0.1"
    except (OSError, TimeoutError, ValueError, RuntimeError) as error:
        what = f"--scheduler {args.scheduler}" if args.scheduler else \
            f"--workers {args.workers}"
        raise CommandError(f"{what}: could not start or reach the Dask cluster "
                           f"({describe(error)})") from None
    return workers, where


def _start(args, given, say, claims):
    """Every check, the corpus, the trainer and the compiled kernels, before training;
    the checkpoint's path is claimed for the run into the ExitStack ``claims``. None
    for a resumed run whose --steps it has taken already."""
    from ._threads import get_num_threads, set_num_threads

    dask = _dask(args)
    resume, changed = None, {}
    if args.resume:
        if args.overwrite:
            raise UsageError("--overwrite starts a new run over --checkpoint's and --resume "
                             "continues it: give one of them")
        claims.enter_context(claimed(args.checkpoint))
        ckpt_io.remove_stale_temporaries(args.checkpoint)
        resume = ckpt_io.load(args.checkpoint)
        options, changed = _resume.resumed_options(TrainOptions, resume.options, given,
                                                   args.checkpoint)
        try:                    # before the memory a model of that many layers would need
            _resume.check_layers(resume.params, resume.codec, options)
        except ValueError as error:
            raise ckpt_io.CheckpointError(f"{args.checkpoint} is not a usable fastbptt "
                                          f"checkpoint: {error}") from None
        if args.steps is not None and args.steps <= resume.step:   # done (a rerun, say)
            say(f"{args.checkpoint} is at step {resume.step:,}, which --steps {args.steps} "
                "counts as done (it counts the run's steps in all): nothing to train; a "
                "larger --steps, or --time, goes on")
            return None
    else:
        options = TrainOptions(**given)
        try:
            options.check()
        except ValueError as error:
            raise UsageError(str(error)) from None
    if args.plot is not None:                  # '' too: refused, as bench's
        _preflight.plot_file(args.plot)
    if resume is None:
        _preflight.checkpoint_apart(args.checkpoint, args.files)
        _preflight.output_file(args.checkpoint, "--checkpoint", make_folders=True)
        # the folder, made now, holds the claim; it goes again if the run saves nothing
        claims.callback(_preflight.checkpoint_folder(args.checkpoint))
        claims.enter_context(claimed(args.checkpoint))          # then nothing lands there
        ckpt_io.remove_stale_temporaries(args.checkpoint)
        _preflight.new_checkpoint(args.checkpoint, overwrite=args.overwrite)
        corpus, files = _load_corpus(args.files), list(args.files)
        codec = Codec.from_text(corpus.text)
    else:
        _preflight.output_file(args.checkpoint, "--checkpoint", make_folders=True)
        corpus, files = _resume.find_corpus(_load_corpus, args.files, resume.options,
                                            args.checkpoint)
        _preflight.checkpoint_apart(args.checkpoint, files)
        codec = resume.codec
    _preflight.plot_apart(args.plot, args.checkpoint, files)
    train_text, val_text = corpus.split(options.val_fraction)
    train_ids, val_ids = codec.encode(train_text), codec.encode(val_text)
    _preflight.corpus(codec, train_ids, val_ids, options)
    _preflight.model_memory(options, len(codec))
    threads = args.threads or _resumed_threads(resume, say)
    if threads:
        set_num_threads(threads)
    workers, where = _workers(dask, args, options) if dask else (None, "")
    try:
        trainer = _trainer(args, options, train_ids, codec, resume, workers)
    except BaseException:
        if workers is not None:
            workers.close()
        raise
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
    if resume is not None:
        _decay_note(options, trainer.step, args.steps, say)
    if workers is not None:
        say(f"workers: {_placed(trainer, workers)} {where}")
    _warm_up(trainer, args, val_ids)                       # before the clock starts
    return _Run(options, trainer, codec, train_ids, val_ids, extra, workers)


def _decay_note(options, step, steps, say):
    """On resume: say so when the run goes on past the end of its learning-rate decay,
    fixed by the first invocation, at the final rate, and how to decay further."""
    end = options.horizon
    if options.lr_decay == "none" or not end:
        return
    final = options.lr * options.lr_final
    if steps is None and step < end:       # a time budget may go past it
        say(f"note: the learning rate decays to {final:g} by step {end:,} (--lr-horizon) "
            f"and stays there past it; --steps {end} stops there, --lr-horizon STEP moves "
            "that end")
        return
    if (steps or step) <= end:
        return
    after = f"to step {steps:,}" if steps else "from here"
    say(f"note: the learning rate decayed to {final:g} by step {end:,} (--lr-horizon) and "
        f"stays there {after}; --lr-horizon STEP moves that end")


def _resumed_threads(resume, say):
    """A resumed run's thread count when --threads is not given: the checkpoint's, so that
    it goes on with the same sums (the same bits as a run that never stopped), or this
    machine's CPU count where that is fewer, saying so. None for a new run, or a
    checkpoint that does not say."""
    from ._threads import MAX_THREADS

    saved = None if resume is None else resume.options.get("threads")
    if isinstance(saved, bool) or not isinstance(saved, int) or saved < 1:
        return None
    if saved > MAX_THREADS:
        say(f"threads: {MAX_THREADS}, this machine's CPU count, where the checkpoint was "
            f"written on {saved} (sums split across threads differ in their last bits)")
        return MAX_THREADS
    return saved


def _trainer(args, options, train_ids, codec, resume, workers):
    """The `Trainer`, its cursors placed on the workers when there are any."""
    try:
        return Trainer(options, train_ids, codec, resume=resume,
                       placement=None if workers is None else workers.place)
    except BlockLost as lost:
        raise CommandError(f"{lost} while the run was being placed on it; start again"
                           ) from None
    except (ValueError, TypeError, KeyError, IndexError) as error:
        if resume is None:
            raise
        what = f"it has no entry {error.args[0]!r}" if isinstance(error, KeyError) else \
            describe(error)
        raise ckpt_io.CheckpointError(f"{args.checkpoint} is not a usable fastbptt "
                                      f"checkpoint: {what}") from None


def _placed(trainer, workers):
    """How the cursors are spread: "2 workers, 16 + 16 cursors", and the workers the
    placement left out."""
    sizes = [b - a for a, b in trainer.blocks.rows]
    notes = [] if workers is None else workers.notes
    if workers is not None:
        workers.notes = []
    return (f"{len(sizes)} worker{'s' if len(sizes) > 1 else ''}, "
            f"{' + '.join(map(str, sizes))} cursor{'s' if sum(sizes) > 1 else ''}"
            + "".join(f"; {n}" for n in notes))


# what a resumed run repeats of an invocation, where it differs from the default: its
# samples and estimates draw from the run's RNG and fill its history
_REPEATED = (("--sample-every", "sample_every"), ("--sample-chars", "sample_chars"),
             ("--temperature", "temperature"), ("--eval-chars", "eval_chars"))


def repeated(args):
    """The options of this invocation that a resumed run repeats to go on as this one
    would have: --steps (a checkpoint keeps the model's options, not the invocation's)
    and those of the samples and estimates that differ from their defaults."""
    from .cli import build_parser

    command = build_parser().commands["train"]
    again = [] if args.steps is None else [f"--steps {args.steps}"]
    again += [f"{option} {getattr(args, name)!r}" for option, name in _REPEATED
              if getattr(args, name) != command.get_default(name)]
    return " ".join(again)


def _printer(out):
    return lambda *a: print(*a, file=out, flush=True)


class _Loop:
    """The training loop of one invocation: budget, progress bar, validation estimates
    and samples, periodic checkpoints, and going on after a lost worker."""

    def __init__(self, args, r, guard, out):
        from tqdm import tqdm

        self.args, self.r, self.guard, self.out = args, r, guard, out
        self.again = repeated(args)
        self.trainer, options = r.trainer, r.options
        self.target = args.steps
        self.budget = args.time
        if self.target is None and self.budget is None:
            self.budget = DEFAULT_TIME
        if options.lr_decay != "none" and options.horizon is None and self.target is not None:
            options.horizon = self.target
        self.first_step = self.trainer.step
        self.by_steps = self.budget is None
        total = (self.target - self.trainer.step) if self.by_steps else self.budget
        until = f"to step {self.target:,}" if self.by_steps else f"for {self.budget:g} s"
        if self.target is not None and not self.by_steps:
            until += f" or to step {self.target:,}, whichever comes first"
        _printer(out)(f"training {until}; Ctrl-C, SIGTERM or SIGHUP saves the checkpoint "
                      "and stops")
        self.bar = tqdm(total=max(total, 0), unit="step" if self.by_steps else "s",
                        disable=args.no_progress, file=sys.stderr, dynamic_ncols=True,
                        bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} "
                                   "[{elapsed}<{remaining}{postfix}]",
                        mininterval=0.5)
        self.start = self.last_post = time.perf_counter()
        steps, seconds = args.checkpoint_every or DEFAULT_CHECKPOINT_EVERY
        self.schedule = Schedule(steps, seconds, self.trainer.step, self.start,
                                 floor=100 if args.checkpoint_every is None else 0)
        self.chars = 0
        self.smooth, self.smoothed = 0.0, 0     # a moving average of the loss, of steps
        # the run's RNG state before the sample of the step being estimated (None outside)
        self.before_sample = None
        self.save_due = False       # a periodic checkpoint is written in the next step

    def done(self, now):
        if self.target is not None and self.trainer.step >= self.target:
            return True
        return self.budget is not None and now - self.start >= self.budget

    def run(self):
        """Steps until the target, the budget or a signal, going on after a lost worker
        (`recover`)."""
        trainer, options = self.trainer, self.r.options
        while self.guard.received is None:
            now = time.perf_counter()
            if self.done(now):
                break
            if (options.lr_decay != "none" and options.horizon is None
                    and self.budget is not None
                    and trainer.step - self.first_step == ESTIMATE_STEPS):
                # a time budget: the decay ends where this speed reaches the budget
                rate = ESTIMATE_STEPS / (now - self.start)
                options.horizon = trainer.step + int(rate * (self.budget - (now - self.start)))
            try:
                saving = self.save_due
                loss, n = trainer.train_step(before_update=self.periodic if saving else None)
                self.after_step(loss, n, now)
                if saving:
                    self.place_on_joined()
                if not self.save_due and self.schedule.due(trainer.step, time.perf_counter()):
                    self.save_due = True
            except BlockLost as lost:
                self.recover(lost)

    def after_step(self, loss, n, now):
        trainer, args = self.trainer, self.args
        self.chars += n
        self.smooth, self.smoothed = 0.98 * self.smooth + 0.02 * loss, self.smoothed + 1
        recent = self.recent_loss()
        after = time.perf_counter()
        if self.by_steps:
            self.bar.update(1)
        else:        # the time since the start: the samples and saves between steps too
            self.bar.update(max(min(after - self.start, self.budget) - self.bar.n, 0.0))
        if after - self.last_post > 0.5:
            self.last_post = after
            self.bar.set_postfix_str(f"loss={recent:.3f} "
                                     f"{self.chars / (after - self.start):,.0f} chars/s "
                                     f"step {trainer.step}", refresh=False)
        if args.sample_every and trainer.step % args.sample_every == 0:
            self.before_sample = trainer.rng.bit_generator.state
            try:
                self.estimate_and_sample(recent)
            except StatesOverflowed:
                # finite weights whose states overflow: the update diverged, and the
                # state after it is not saved over the last checkpoint
                raise Diverged(trainer.step, "model's states", "not finite",
                               applied=True) from None

    def estimate_and_sample(self, recent):
        """The step's validation estimate and sample, said on the output."""
        trainer, args = self.trainer, self.args
        eval_ids = self.r.val_ids[:args.eval_chars]
        val = evaluate(trainer.params, eval_ids, activation=self.r.options.activation)
        trainer.evals.append((trainer.step, val))
        line = f"--- step {trainer.step}: train {recent:.3f}, validation {val:.3f} nats/char"
        if not args.sample_chars:
            self.say(line + " ---")
            self.before_sample = None
            return
        text = trainer.sample(args.sample_chars, temperature=args.temperature,
                              stop=lambda: self.guard.received is not None)
        if text is None:            # a signal: the run stops after this step
            text = f"(cut short by {self.guard.name})"
        self.say(f"{line}; sample:\n{text}\n---")
        self.before_sample = None

    def settle_sample(self):
        """After a failure in a step's estimate or sample: the run's RNG as that sample
        leaves it (one number a character), so that the resumed run, which goes on after
        the step, draws what the run would have drawn without the failure (the step's
        estimate, where it failed, is not in its history). Where even that fails, the
        RNG stays as it is: the failure's line and save come first."""
        state, self.before_sample = self.before_sample, None
        if state is not None:
            try:
                self.trainer.draw_past(state, self.args.sample_chars)
            except Exception:
                pass

    def recent_loss(self):
        """The mean loss of recent steps of this invocation: their moving average, each
        step 0.98 times the weight of the next, its start's bias to 0 divided out."""
        return self.smooth / (1 - 0.98 ** self.smoothed)

    def say(self, text):
        self.bar.write(text, file=self.out)

    def save(self):
        save_checkpoint(self.trainer, self.args.checkpoint, self.r.extra, self.guard,
                        self.again)

    def periodic(self):
        """A periodic checkpoint, written in the step after the one it holds, once that
        step's loss and gradient are found finite, before its update
        (`Trainer.train_step`): a state from which the next step diverges (an update that
        left the weights finite but ruinous) is never saved over the last checkpoint, which
        would otherwise hold a state that no resumed run can go on from."""
        self.save_due = False
        began = time.perf_counter()
        self.save()
        end = time.perf_counter()
        self.schedule.saved(self.trainer.step, end, end - began)
        self.r.saves += 1
        self.r.saving += end - began

    def place_on_joined(self):
        """After the step of a periodic checkpoint, in a distributed run that more workers
        have joined and that has steps left: the run placed again on all of them, from its
        state after that step (kept in memory: the checkpoint on disk stays the last one
        saved)."""
        workers, trainer = self.r.workers, self.trainer
        if workers is not None and not self.done(time.perf_counter()) and \
                workers.growth(self.r.options.batch) > 0:
            saved = trainer.last_saved
            trainer.restore(trainer.checkpoint())
            trainer.last_saved = saved
            self.say(f"more Dask workers joined: the run goes on from step {trainer.step} "
                     f"on {_placed(trainer, workers)}")

    def recover(self, lost):
        """Place the run again from its last checkpoint on the workers there are; say so."""
        trainer, step = self.trainer, self.trainer.step
        first = lost
        while True:
            if self.r.workers is not None:
                self.r.workers.forget(lost.address)
            try:
                trainer.restore(trainer.last_saved)
                break
            except BlockLost as again:
                lost = again
        back = "its start" if trainer.last_saved is None else \
            f"its checkpoint of step {trainer.step}"
        self.say(f"{first} during step {step + 1}; the run goes on from {back} on "
                 f"{_placed(trainer, self.r.workers)}")
        if self.by_steps:
            self.bar.n = max(trainer.step - self.first_step, 0)
            self.bar.refresh()

    def finish(self):
        """The loop, then the save that ends it (placed again and retried, with the loop,
        when a worker left). CommandError for any failure; `Interrupted` for a signal that
        came while the run waited for workers to place it on again."""
        try:
            self._finish()
        except Interrupted as stop:
            raise Interrupted(stop.signum, f"while the run waited for Dask workers; "
                              f"{kept(self.trainer, self.args.checkpoint, self.again)}"
                              ) from None

    def final_losses(self):
        """The final model's (train, validation) loss, as the report says them, taken
        before the save that ends the run: `Diverged` where its states overflow, so that
        it is not saved over the last checkpoint (its weights are finite, but no step
        can go on from them)."""
        r = self.r
        try:
            return tuple(evaluate(self.trainer.params, ids, activation=r.options.activation)
                         for ids in (_train_tail(r), r.val_ids))
        except StatesOverflowed:
            raise Diverged(self.trainer.step, "model's states", "not finite",
                           applied=True) from None

    def _finish(self):
        while True:
            try:
                self.run()
                self.r.chars, self.r.elapsed = self.chars, time.perf_counter() - self.start
                if self.guard.received is None:
                    r = self.r
                    self.say(f"evaluating the final model on the last "
                             f"{_train_tail(r).size:,} characters of the train split and "
                             f"the {r.val_ids.size:,} held-out ones")
                    r.losses = self.final_losses()
            except NothingToSave as error:
                self.settle_sample()
                raise failure(error, self.trainer, self.args.checkpoint, self.r.extra,
                              self.guard, self.again) from None
            except CommandError:
                raise
            except Exception as error:
                self.settle_sample()
                raise failure(error, self.trainer, self.args.checkpoint, self.r.extra,
                              self.guard, self.again) from None
            try:
                self.save()
                return
            except BlockLost as lost:
                try:
                    self.recover(lost)
                except Exception as error:
                    raise failure(error, self.trainer, self.args.checkpoint, self.r.extra,
                                  self.guard, self.again) from None


def _train(args, r, guard, out):
    """The loop and the save that ends it; returns the exit status when a signal stopped
    it, else None. Signals are only recorded from here to the end of the save."""
    say = _printer(out)
    trainer = r.trainer
    with guard.deferred():
        if r.workers is not None:
            r.workers.stopped = lambda: guard.received
        loop = _Loop(args, r, guard, out)
        try:
            loop.finish()
        finally:
            loop.bar.close()
        guard.note = f"after step {trainer.step}; the checkpoint {args.checkpoint} is saved"
        if guard.received is not None:
            guard.handled()             # a second signal adds no second line
    if guard.received is None:
        return None
    say(f"interrupted at step {trainer.step} ({guard.name}) after {r.elapsed:.1f} s; "
        f"checkpoint saved to {os.path.abspath(args.checkpoint)}; continue with "
        f"{resume_hint(args.checkpoint, again=loop.again)}")
    return guard.status


def _train_tail(r):
    """The end of the train split, as long as the validation split, whose loss the report
    gives beside the validation loss."""
    return r.train_ids[-max(r.val_ids.size, 1):]


def _report(args, r, say):
    """The final losses, a sample and the plot."""
    trainer, options, train_ids, val_ids = r.trainer, r.options, r.train_ids, r.val_ids
    rate = r.chars / r.elapsed if r.elapsed > 0 else float("nan")
    say(f"trained {trainer.step:,} steps in all; this run {r.chars:,} characters in "
        f"{r.elapsed:.1f} s, {rate:,.0f} chars/s")
    if r.saves:
        say(f"periodic checkpoints: {r.saves} in {1e3 * r.saving:.0f} ms, "
            f"{100 * r.saving / r.elapsed:.2f}% of the run")
    timing = trainer.timing
    if r.workers is not None and timing["steps"]:
        per = {k: 1e3 * v / timing["steps"] for k, v in timing.items() if k != "steps"}
        say(f"per step: {per['bptt']:.2f} ms in bptt on the slowest worker, "
            f"{per['gradients'] - per['bptt'] + per['update']:.2f} ms outside it (the model "
            f"out to the workers and their gradients back {per['gradients'] - per['bptt']:.2f}"
            f" ms, clipping and {options.optimizer} {per['update']:.2f} ms)")
    baseline = unigram_entropy(train_ids, len(r.codec))
    train_eval = _train_tail(r)
    train_loss, val_loss = r.losses
    say(f"train loss       {train_loss:.3f} nats/char  {_bits(train_loss):.3f} bits/char  "
        f"(final model, {scored(train_eval.size):,} predictions in the last "
        f"{train_eval.size:,} characters of the train split)")
    say(f"validation loss  {val_loss:.3f} nats/char  {_bits(val_loss):.3f} bits/char  "
        f"(final model, {scored(val_ids.size):,} predictions in the {val_ids.size:,} "
        "held-out characters)")
    say(f"unigram baseline {baseline:.3f} nats/char  {_bits(baseline):.3f} bits/char  "
        "(entropy of the train split's character frequencies, on the train split)")
    say(f"validation / unigram = {val_loss / baseline:.3f}")
    say(f"checkpoint: {os.path.abspath(args.checkpoint)}")
    if args.sample_chars:
        text = trainer.sample(args.sample_chars, temperature=args.temperature)
        say(f"sample (temperature {args.temperature:g}):\n{text}")
    if args.plot is not None:
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
    with SignalGuard("before training started; nothing was saved") as guard, \
            contextlib.ExitStack() as claims:
        r = _start(args, given, say, claims)
        if r is None:
            return 0
        try:
            status = _train(args, r, guard, out)
            if status is not None:
                return status
            try:
                _report(args, r, say)
            except Exception as error:
                raise CommandError(f"{describe(error)} after training; the checkpoint "
                                   f"{args.checkpoint} is saved") from None
        finally:
            r.close()
    return 0


def run_sample(args, *, out=None):
    """The ``fastbptt sample`` command."""
    out = out or sys.stdout
    ck = ckpt_io.load(args.checkpoint)
    options, _ = _resume.resumed_options(TrainOptions, ck.options, {}, args.checkpoint)
    try:
        params = from_leaves({name: _resume.in_dtype(f"params {name}", a, options.dtype,
                                                     copy=False)
                              for name, a in leaves(ck.params).items()})
        _resume.check_model(params, ck.codec, options)
    except ValueError as error:
        raise ckpt_io.CheckpointError(f"{args.checkpoint} is not a usable fastbptt "
                                      f"checkpoint: {error}") from None
    unknown = sorted(set(args.prime) - set(ck.codec.chars))
    if unknown:
        raise UsageError(f"--prime holds characters not in the vocabulary of "
                         f"{args.checkpoint}: {''.join(unknown)!r}")
    pieces = sample_chunks(params, ck.codec, prime=args.prime, chars=args.chars,
                           temperature=args.temperature, rng=np.random.default_rng(args.seed),
                           activation=options.activation)
    out.write(args.prime)
    for piece in pieces:                        # shown as it is drawn
        out.write(piece)
        out.flush()
    out.write("\n")
    return 0
