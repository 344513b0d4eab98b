"""Where ``fastbptt train`` writes its checkpoint: at the end, on a signal, after an error
in the loop, and periodically (`Schedule`): one function for each, so every save holds
signals back until the file is complete and words a failure the same way.
"""
from __future__ import annotations

import shlex

from ._command_errors import CommandError, describe
from ._cursors import BlockLost

__all__ = ["save_checkpoint", "Diverged", "NothingToSave", "Schedule", "failure", "kept",
           "resume_hint"]


class Diverged(ArithmeticError):
    """A step's loss or gradient norm was not finite (``applied=False``: the step was
    skipped and the trainer holds the state before it), or its update made the weights or
    the optimizer's state overflow, or the model's states as it ran after it (a
    validation estimate or sample: ``applied=True``, they are lost).

    Neither state is saved. A run resumed from the state before a step whose value was not
    finite computes the same loss and gradient again (resuming is exact), whatever its
    learning rate or clipping, so only an earlier checkpoint, or a new run, takes another
    path; an update that overflowed can be retried with a lower rate from the last one."""

    def __init__(self, step, what, value, applied=False):
        super().__init__(f"step {step}'s {what} is {value}")
        self.step, self.what, self.value, self.applied = step, what, value, applied


class NothingToSave(CommandError):
    """A failure after which the run's state is not whole (a distributed run whose workers
    are gone with their cursors' states): the last checkpoint stays as it is."""


class Schedule:
    """When the periodic checkpoints of a run fall: every ``steps`` steps and/or every
    ``seconds`` seconds, whichever comes first (None: not by that measure), and, with
    ``floor``, never sooner than ``floor`` times the last save took (100: saving costs
    under 1% of the run, whatever the model's size)."""

    def __init__(self, steps, seconds, step, now, floor=0):
        self.steps, self.seconds, self.floor = steps, seconds, floor
        self.last_step, self.last_time, self.least = step, now, 0.0

    def due(self, step, now):
        if now - self.last_time < self.least:
            return False
        return ((self.steps is not None and step - self.last_step >= self.steps)
                or (self.seconds is not None and now - self.last_time >= self.seconds))

    def saved(self, step, now, took):
        """A checkpoint of ``step`` was written at ``now`` in ``took`` seconds."""
        self.last_step, self.last_time, self.least = step, now, self.floor * took


def save_checkpoint(trainer, path, extra, guard, again=""):
    """Write ``trainer``'s run to ``path`` with signals held back until the file is
    complete; CommandError (the previous file unchanged) when it cannot be written."""
    with guard.deferred():
        try:
            return trainer.save(path, **extra)
        except OSError as error:
            raise CommandError(f"could not write the checkpoint of step {trainer.step} "
                               f"({describe(error)}); {kept(trainer, path, again)}") from None


def resume_hint(path, changes="", again=""):
    """The command that continues the run saved in ``path``, with ``again``, the options
    of the invocation it repeats (`_train_command.repeated`: a checkpoint keeps the
    model's options, not the invocation's), and ``changes``."""
    return (f"`fastbptt train --resume --checkpoint {shlex.quote(str(path))}"
            f"{' ' + again if again else ''}{changes}`")


def kept(trainer, path, again):
    """What is left when nothing could be saved: the last checkpoint, and how to resume."""
    saved = trainer.last_saved
    return f"nothing was saved over {path}" + (
        f", which holds step {saved.step}: {resume_hint(path, again=again)} continues from it"
        if saved is not None else "")


def failure(error, trainer, path, extra, guard, again=""):
    """The CommandError to raise for ``error`` from inside the training loop, after saving
    the last good state when the trainer holds one; ``again``: as for `resume_hint`."""
    lr = trainer.options.lr
    if isinstance(error, NothingToSave):
        return CommandError(f"{error}; {kept(trainer, path, again)}")
    if trainer.blocks is None:          # a placement failed: no cursors, no state to save
        return CommandError(f"{describe(error)} while the run was placed again; "
                            f"{kept(trainer, path, again)}")
    if isinstance(error, Diverged):
        return _diverged(error, trainer, path, lr, again)
    if not trainer.consistent:
        return CommandError(f"{describe(error)} during the update of step {trainer.step + 1},"
                            f" which may have left the weights half-updated; "
                            f"{kept(trainer, path, again)}")
    try:
        save_checkpoint(trainer, path, extra, guard, again)
    except CommandError as unsaved:
        return CommandError(f"{describe(error)} after step {trainer.step}, and {unsaved}")
    except BlockLost as lost:
        return CommandError(f"{describe(error)} after step {trainer.step}, and {lost} before "
                            f"its cursors' states were saved; {kept(trainer, path, again)}")
    return CommandError(f"{describe(error)} after step {trainer.step}; the state after "
                        f"that step is saved in {path}, and {resume_hint(path, again=again)} "
                        "continues from it")


def _diverged(error, trainer, path, lr, again):
    """The line for `Diverged`: nothing is saved (its docstring says why), and the last
    checkpoint is the way back when it lies before the step that failed."""
    if error.applied:
        rate = f"the learning rate {lr:g} is far too large"
        if error.what == "model's states":      # finite weights whose states overflow
            what = (f"the update of step {error.step} made the model's states overflow in "
                    f"the run's validation estimate or sample ({rate}), so it is not saved")
        else:
            cause = rate if error.what == "weights" else \
                "a gradient is far too large"   # Adam's v: a gradient's square
            what = (f"the update of step {error.step} made the {error.what} overflow "
                    f"({cause}), so {'they are' if error.what == 'weights' else 'it is'} lost")
    else:
        what = (f"{error}, so that step was not applied; the state before it would give the "
                f"same {error.what} again whatever the learning rate, so it is not saved")
    change = f" --lr {lr / 10:.2g} --clip-norm 1"
    saved = trainer.last_saved
    # an update that overflowed can be retried from the state just before it, with a
    # lower rate; a value that was not finite comes back unless the run goes further back
    if saved is not None and (error.applied or saved.step < error.step - 1):
        return CommandError(
            f"the run diverged: {what}; {path} keeps step {saved.step}: resume from it with a "
            f"lower learning rate or gradient clipping, e.g. "
            f"{resume_hint(path, change, again)}, or start a new run with them")
    kept = "" if saved is None else f" ({path} keeps step {saved.step}, just before it)"
    return CommandError(f"the run diverged: {what}{kept}; start a new run with a lower "
                        f"learning rate or gradient clipping, e.g.{change}")
