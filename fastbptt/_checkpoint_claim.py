"""One ``fastbptt train`` at a time per checkpoint path.

Two runs writing the same checkpoint would replace each other's saves, the last one to
save winning, and each would end saying its work was saved. `claimed` holds an advisory
lock (``flock``) on a file beside the checkpoint, ``.<name>.lock`` in the folder of the
path's target, for the whole run; a second run on that path stops before any work with
one line naming the first run's process. The kernel drops the lock when its process
ends, however it ends, so a run killed outright leaves no claim behind (only the empty
file, which the next run takes over). Where ``flock`` is missing (not POSIX) or the file
system refuses it, the run goes on unclaimed.
"""
from __future__ import annotations

import contextlib
import errno
import os

from ._command_errors import CommandError
from .checkpoint import LOCK_ROOM, sibling_stem

__all__ = ["claimed", "lock_path"]


def lock_path(path):
    """The lock file of checkpoint ``path``: beside its target (a symbolic link's)."""
    target = os.path.realpath(path)
    folder, name = os.path.split(target)
    return os.path.join(folder, f".{sibling_stem(name, LOCK_ROOM)}.lock")


@contextlib.contextmanager
def claimed(path, option="--checkpoint"):
    """Hold checkpoint ``path`` for this process (module docstring); CommandError when
    another process holds it. A missing folder claims nothing (the checks that follow say
    what is wrong with the path)."""
    try:
        import fcntl
    except ImportError:                     # not POSIX: no claim
        yield
        return
    lock = lock_path(path)
    if not os.path.isdir(os.path.dirname(lock)):
        yield
        return
    fd = _locked(fcntl, lock, path, option)
    try:
        yield
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                if _same_file(fd, lock):
                    os.unlink(lock)             # still ours: no other run is waiting on it
            os.close(fd)                        # releases the lock


def _locked(fcntl, lock, path, option):
    """An open descriptor of ``lock`` holding its flock, or None when it cannot be taken
    for a reason other than another holder."""
    for _ in range(10):                     # the file may be unlinked under us: open again
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None                     # a read-only folder: the save will say so
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            holder = _holder(fd)
            os.close(fd)
            if error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise CommandError(
                    f"{option} {path} is being written by another fastbptt train"
                    f"{f' (process {holder})' if holder else ''}: let that run end, or give "
                    "this one another --checkpoint") from None
            return None                     # no locks on this file system
        if _same_file(fd, lock):
            with contextlib.suppress(OSError):      # who holds it, for another run's
                os.ftruncate(fd, 0)                 # message; a full disk leaves it out
                os.write(fd, str(os.getpid()).encode())
            return fd
        os.close(fd)                        # unlinked by the run that just ended
    return None


def _same_file(fd, path):
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _holder(fd):
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""
