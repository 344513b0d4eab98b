"""What a run of ``fastbptt train`` is (`TrainOptions`), each option's range, and the
command's defaults: NumPy and the engine are imported only to check a run's options, so
that the command builds its parser, prints ``-h`` and refuses a wrong option without them.
`fastbptt.train` holds the trainer and names `TrainOptions` too.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from ._ranges import Choice, Range, flag

__all__ = ["TrainOptions", "OPTION_RANGES", "DEFAULT_TIME", "DEFAULT_CHECKPOINT_EVERY"]

DEFAULT_TIME = 90.0         # seconds of training when neither --steps nor --time is given
# (steps, seconds) between periodic checkpoints; the default also waits at least 100 times
# as long as the last save took, so that saving costs under 1% of the run
DEFAULT_CHECKPOINT_EVERY = (None, 10.0)

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
    cell: str = "gru"              # "elman", "gru" or "lstm"
    layers: int = 1                # (the lowest validation loss of six models in 90 s)
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
        """The keyword arguments of the optimizer's constructor beyond lr (SGD's
        momentum)."""
        return {"momentum": self.momentum} if self.optimizer == "sgd" else {}

    def check(self):
        """ValueError naming the first option outside its range (`OPTION_RANGES`),
        momentum for an optimizer other than SGD, a stride longer than the window, or
        windows per output on a stack."""
        import numpy as np

        from ._inputs import _full_bptt

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
        if self.momentum and self.optimizer != "sgd":
            raise ValueError(f"--momentum applies to --optimizer sgd only; --optimizer "
                             f"{self.optimizer} has its own (leave --momentum out)")
        k, s = self.window
        if s > k:
            raise ValueError(f"--stride {s} exceeds the window of {k} steps (--truncate, or "
                             "--seq-length without it); choose 1 <= stride <= truncate")
        if self.layers > 1 and s < k and not _full_bptt(k, s, self.seq_length):
            raise ValueError(f"--stride {s} below --truncate {k} (a window per output) is not "
                             f"supported with --layers {self.layers}: an output's window would "
                             "end at different steps in different layers; use --stride "
                             f"{k} (chunks) or --layers 1")
        largest = float(np.finfo(self.dtype).max)
        if self.lr > largest:
            raise ValueError(f"--lr {self.lr:g} is beyond the range of --dtype {self.dtype} "
                             f"(at most {largest:.4g})")
        if np.dtype(self.dtype).type(self.lr) == 0:     # no update would change a weight
            raise ValueError(f"--lr {self.lr:g} rounds to 0 in --dtype {self.dtype}, whose "
                             f"smallest number is "
                             f"{float(np.finfo(self.dtype).smallest_subnormal):.2g}")
