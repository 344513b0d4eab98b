"""SIGINT, SIGTERM and SIGHUP for the commands: stop now, or finish what must not be cut.

Inside a `SignalGuard` the first of the three signals raises `Interrupted` where the
program is (reading a corpus, compiling, evaluating), or, inside ``guard.deferred()``, is
only recorded: the training loop checks ``guard.received`` between steps, and a
checkpoint being written is never cut short by a second signal. A guard raises at most
once; later signals are recorded, so that cleaning up after the first (even when it
came as the guard was being left) is never interrupted in turn. A guard opened inside
another hands the first signal it received to the outer one as it is left, so a signal
that arrives on the way out neither raises again nor changes the exit status. The exit status is the shell's
convention, 128 + the number of the first signal: 130 (SIGINT), 143 (SIGTERM), 129
(SIGHUP).

A signal whose exception the interpreter dropped (it drops one raised by a handler while
``compile`` runs, as an import without bytecode does) is raised again where the next guard
opens inside the one that took it: the program would otherwise go on as if none came.

A signal set to be ignored when a guard opens (``nohup`` starts the program with SIGHUP
ignored; a shell script's background job, with SIGINT) stays ignored: the guard takes
only the others.
"""
from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

__all__ = ["Interrupted", "SignalGuard", "SIGNALS"]

SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP")
                if hasattr(signal, name))
_IGNORED = set()        # signals a guard's ``ignore_after`` left ignored: not the caller's


class Interrupted(BaseException):
    """A signal stopped the command; ``note`` says what became of the work.

    A BaseException, as KeyboardInterrupt is: ``except Exception`` does not catch it.
    """

    def __init__(self, signum, note=""):
        super().__init__(signum, note)
        self.signum, self.note = signum, note

    @property
    def status(self):
        return 128 + self.signum

    @property
    def name(self):
        return signal.Signals(self.signum).name

    def __str__(self):
        return f"interrupted by {self.name}" + (f" {self.note}" if self.note else "")


class SignalGuard:
    """Handlers for `SIGNALS` while the context is open (main thread only; elsewhere it
    leaves signals alone). ``note`` goes into the `Interrupted` raised. On leaving, the
    previous handlers come back, or with ``ignore_after`` the signals are ignored from
    then on (for a program that is about to exit with its command's status)."""

    def __init__(self, note="", *, ignore_after=False):
        self.note = note
        self.ignore_after = ignore_after
        self.received = None            # the first signal's number
        self._defer = 0
        self._raised = False
        self._acted = False             # the command acted on the signal (handled, or an
        self._old = {}                  # inner guard raised for it)
        self._outer = None              # the guard whose handlers this one replaced

    @property
    def status(self):
        return None if self.received is None else 128 + self.received

    @property
    def name(self):
        return None if self.received is None else signal.Signals(self.received).name

    def _handle(self, signum, frame):
        if self.received is None:
            self.received = signum
        if not self._defer and not self._raised:
            self._raised = True
            raise Interrupted(self.received, self.note)

    @contextmanager
    def deferred(self):
        """Signals are recorded, not raised, until the block ends."""
        self._defer += 1
        try:
            yield self
        finally:
            self._defer -= 1

    def handled(self):
        """The command acts on the signal it received (it saved and returns its status):
        the signals after it are recorded, never raised, until the guard is left."""
        self._raised = self._acted = True

    def _dropped(self):
        """The signal this guard raised for, where the program went on regardless (the
        interpreter drops an exception raised by a handler while ``compile`` runs, as
        importing a module without its bytecode does), or None."""
        if self.received is None or not self._raised or self._acted or self._defer:
            return None
        error = sys.exc_info()[1]
        while error is not None:            # on its way out, or being handled: not dropped
            if isinstance(error, Interrupted):
                return None
            error = error.__context__
        return self.received

    def __enter__(self):
        with self.deferred():           # all handlers in place before one may raise
            for signum in SIGNALS:
                if signal.getsignal(signum) is signal.SIG_IGN and signum not in _IGNORED:
                    continue            # the caller's choice (nohup, a background job)
                try:
                    self._old[signum] = old = signal.signal(signum, self._handle)
                except ValueError:      # not the main thread
                    break
                if isinstance(getattr(old, "__self__", None), SignalGuard):
                    self._outer = old.__self__
        if self.received is None and self._outer is not None:
            # a guard opens in the code the outer one guards only when that one's raise
            # did not stop it: the signal is raised for here
            self.received = self._outer._dropped()
        if self.received is not None and not self._defer and not self._raised:
            self._raised = True
            self.release()
            raise Interrupted(self.received, self.note)
        return self

    def release(self):
        """Give the signals back (or ignore them, with ``ignore_after``); idempotent, so
        it can run again after a signal cut a first attempt short."""
        self._defer += 1                # no handler of this guard raises from here on
        outer = self._outer
        if outer is not None and self.received is not None and outer.received is None:
            # the signal was this guard's to act on (raised, or the command returns its
            # status): the guard around it keeps its number and does not raise for the
            # signals after it, before its handlers take them again
            outer.received, outer._raised, outer._acted = self.received, True, True
        while self._old:
            signum, old = next(iter(self._old.items()))
            signal.signal(signum, signal.SIG_IGN if self.ignore_after else old)
            if self.ignore_after:
                _IGNORED.add(signum)
            elif old is not signal.SIG_IGN:
                _IGNORED.discard(signum)
            del self._old[signum]

    def __exit__(self, *exc):
        self.release()
        return False
