"""What a run keeps in /dev/shm, claimed while it runs.

A run's shared mapping and its socket's folder are named after its PID, and a later run
removes those whose PID no longer runs (`fastbptt.distributed._remove_stale`): they
outlive a process killed outright. A PID says nothing across PID namespaces, though
(containers sharing /dev/shm as root): there a running process's PID may be unknown. So
the run also holds a shared ``flock`` on each while it needs it, which the kernel drops
when the process ends however it ends, and the cleanup leaves whatever it cannot lock
and whatever was changed in the last minute (made, not yet claimed).
"""
from __future__ import annotations

import contextlib
import os

try:
    import fcntl
except ImportError:                    # no flock (Windows): claims are not made
    fcntl = None

__all__ = ["claim", "claimed", "release"]


def claim(path_or_fd):
    """A descriptor holding a shared lock on the file or folder (or on an open
    descriptor's, which is then kept); None where locks are not available."""
    if fcntl is None:
        if isinstance(path_or_fd, int):
            os.close(path_or_fd)
        return None
    fd = os.open(path_or_fd, os.O_RDONLY) if not isinstance(path_or_fd, int) else path_or_fd
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        return None
    return fd


def release(fd):
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def claimed(path):
    """Whether a process (this one too) holds a claim on ``path``."""
    if fcntl is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False
