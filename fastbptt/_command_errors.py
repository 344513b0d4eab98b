"""What a command prints and returns when it cannot finish: one line on stderr, never a
traceback, and the exit status.

- 2, `UsageError`: the command line is wrong by itself (argparse's errors, values out of
  range, options that contradict each other or the run being resumed).
- 1, everything else: files missing, unreadable, damaged or unwritable, a corpus that
  cannot serve the options, a run that diverged, memory, a closed output stream, and
  anything unexpected (``FASTBPTT_TRACEBACK=1`` shows where that came from).
- 128 + the signal's number, `Interrupted`: 130 (SIGINT), 143 (SIGTERM), 129 (SIGHUP).
"""
from __future__ import annotations

import os
import sys
import traceback

from . import JitDisabledError
from ._signals import Interrupted, SignalGuard

__all__ = ["UsageError", "CommandError", "USAGE", "FAILURE", "run_command", "interrupted",
           "describe"]

USAGE, FAILURE = 2, 1


class UsageError(Exception):
    """The command line itself is wrong; the message names the option and the fix."""


class CommandError(Exception):
    """A failure already worded for the user (what happened, what became of the work, what
    to try)."""


def describe(error):
    """One line for an exception: its message, or for an OSError what the system said
    about which file."""
    if isinstance(error, BrokenPipeError):
        return "the output was closed before it was all written (broken pipe)"
    if isinstance(error, OSError) and error.strerror:
        name = error.filename
        if name is None:
            return error.strerror
        return f"{name if str(name).strip() else repr(name)}: {error.strerror}"   # '' named
    if isinstance(error, MemoryError):
        return f"out of memory ({error})" if str(error) else "out of memory"
    text = str(error) or type(error).__name__
    return " ".join(text.split())


def _silence_stdout():
    """After a reader closed stdout, point it at /dev/null, so that Python's flush at exit
    does not print a second error."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.flush()
    except (BrokenPipeError, ValueError):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass


def _say(prog, text):
    try:
        print(f"{prog}: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def interrupted(prog):
    """The status of a command that a SIGINT (Ctrl-C) stopped before its guard took over
    SIGINT, or after it let go, said in one line."""
    _say(prog, "interrupted by SIGINT")
    return 130


def _tracebacks():
    """FASTBPTT_TRACEBACK=1: where an unexpected error came from is shown."""
    return os.environ.get("FASTBPTT_TRACEBACK", "") not in ("", "0")


def _interruption(error):
    """The `Interrupted` that ``error`` was raised from (NumPy's import raises an
    ImportError from one that came while it loaded its C extensions), or None. An error
    raised while one was handled (a cleanup that failed) is reported as itself."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, Interrupted):
            return error
        seen.add(id(error))
        error = error.__cause__
    return None


def run_command(prog, command, args, *, last=False):
    """``command(args)``'s exit status, with every failure reported in one line.

    ``last``: the program exits after this command, so signals that come after it are
    ignored (they cannot change the status or print a traceback on the way out).
    """
    guard, status = SignalGuard(ignore_after=last), None
    try:
        with guard:
            try:
                status = command(args)
            except Exception as error:
                signalled = _interruption(error)
                if signalled is None:
                    raise
                raise signalled from None
        return status
    except UsageError as error:
        _say(prog, f"{error}; see `{prog} -h`")
        return USAGE
    except Interrupted as error:
        if status is not None:                   # came after the command had finished
            return status
        _say(prog, str(error))
        return error.status
    except KeyboardInterrupt:                    # a SIGINT outside the guard's reach
        return interrupted(prog)
    except (CommandError, OSError, ValueError, MemoryError, JitDisabledError) as error:
        if isinstance(error, CommandError) and error.__context__ is not None and \
                _tracebacks():              # what the run's own line reports on
            traceback.print_exception(error.__context__, file=sys.stderr)
        line = describe(error)
        _say(prog, line.removeprefix("fastbptt ") if isinstance(error, JitDisabledError)
             else line)                     # "fastbptt demo: cannot run with ..."
        return FAILURE
    except Exception as error:
        if _tracebacks():
            raise
        _say(prog, f"unexpected {type(error).__name__}: {describe(error)} (set "
                   "FASTBPTT_TRACEBACK=1 to see where)")
        return FAILURE
    finally:
        guard.release()                          # again, if a signal cut __exit__ short
        _silence_stdout()
