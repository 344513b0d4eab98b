"""The ranges of the commands' numbers, each written once.

A `Range` turns a value (the command line's text, or a number read back from a
checkpoint) into an int or float inside its range, or raises ValueError saying what the
value must be ("must be an integer of at least 1; got 0"). The command line wraps
them as argparse types; `fastbptt.train.TrainOptions.check` applies them to a
checkpoint's options.
"""
from __future__ import annotations

import math
import numbers

__all__ = ["Range", "Choice", "flag", "finite", "shown", "digits"]


def finite(value):
    """Whether a real number is finite (an int too large for a float is not)."""
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def shown(value):
    """A value for a message: an int too large for a float by its size, a long text by its
    start and length."""
    if isinstance(value, numbers.Integral) and not finite(value):
        return f"an int of {digits(abs(int(value)))} digits"
    if isinstance(value, str) and len(value) > 60:
        return f"{value[:20]!r}... ({len(value)} characters)"
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return str(value)                       # NumPy's scalars as numbers: 0, not np.int64(0)
    return repr(value)


def digits(n):
    """The decimal digits of an int n > 0, without str(n) (which Python refuses beyond
    4,300 digits)."""
    d = int((n.bit_length() - 1) * math.log10(2)) + 1    # at most one too few
    return d + 1 if n >= 10 ** d else d


def flag(field):
    """The command-line option of a `fastbptt.train.TrainOptions` field."""
    return "--lr-horizon" if field == "horizon" else "--" + field.replace("_", "-")


class Range:
    """An int (``integer=True``) or a finite float between ``low`` and ``high``.

    ``low_open``/``high_open`` exclude that end; ``none`` also accepts None (and, from
    the command line, "none").
    """

    def __init__(self, low=None, high=None, *, integer=False, low_open=False,
                 high_open=False, none=False):
        self.low, self.high, self.integer = low, high, integer
        self.low_open, self.high_open, self.none = low_open, high_open, none

    def describe(self):
        kind = "an integer" if self.integer else "a finite number"
        low, high = self.low, self.high
        if low is not None and high is not None:
            text = (f"{kind} in {'(' if self.low_open else '['}{low:g}, "
                    f"{high:g}{')' if self.high_open else ']'}")
        elif low is not None:
            text = f"{kind} {'above' if self.low_open else 'of at least'} {low:g}"
        elif high is not None:
            text = f"{kind} {'below' if self.high_open else 'of at most'} {high:g}"
        else:
            text = kind
        return text + (" (or none)" if self.none else "")

    def _number(self, value):
        if isinstance(value, str):
            text = value.strip()
            if self.none and text.lower() == "none":
                return None
            try:
                return int(text) if self.integer else float(text)
            except ValueError:
                return value
        return value

    def __call__(self, value):
        number = self._number(value)
        if number is None and self.none:
            return None
        if isinstance(number, bool) or not isinstance(
                number, numbers.Integral if self.integer else numbers.Real):
            raise ValueError(f"must be {self.describe()}; got {shown(value)}")
        if self.integer:                # compared exactly: an int may be beyond any float
            number = int(number)
            if not self._inside(number):
                raise ValueError(f"must be {self.describe()}; got "
                                 f"{value if isinstance(value, str) else shown(value)}")
            return number
        if not finite(number):
            raise ValueError(f"must be {self.describe()}; got "
                             f"{value if isinstance(value, str) else shown(value)}")
        number = float(number)
        mantissa = value.strip().lower().split("e")[0] if isinstance(value, str) else ""
        if number == 0 and any(c in "123456789" for c in mantissa):  # 1e-400: not 0, and
            if mantissa.startswith("-"):                # where 0 means "none", not that
                raise ValueError(f"must be {self.describe()}; got {value}")
            fix = "give 0 if 0 is meant, or " if self._inside(0.0) else ""
            raise ValueError(f"must be {self.describe()}; got {value}, which is 0 as a "
                             f"float: {fix}a number of at least 5e-324")
        if not math.isfinite(number) or not self._inside(number):
            raise ValueError(f"must be {self.describe()}; got {value}")
        return number

    def _inside(self, x):
        if self.low is not None and (x <= self.low if self.low_open else x < self.low):
            return False
        return self.high is None or (x < self.high if self.high_open else x <= self.high)


class Choice:
    """One of a few strings."""

    def __init__(self, *choices):
        self.choices = choices

    def __call__(self, value):
        if value not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}; got {value!r}")
        return value
