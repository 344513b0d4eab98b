"""A run's steps sent to the worker processes of one machine over Unix-domain sockets.

A step on a local cluster needs only a few bytes each way: the model and the gradients
are in shared memory (`fastbptt.distributed.Mapping`). Through Dask each step still
costs a request and a reply per worker through its event loop and its actor thread,
about 3 ms for two workers; a socket between the training process and each worker
carries the same message in tens of microseconds. A worker's process that ends closes
its socket, so the training process learns of a lost worker at once.

Messages are pickles behind a 4-byte mark and an 8-byte length. The training process's
`Listener` takes one connection per block, each opened by the block (`connect`) and
served on a thread of the worker (`serve`) that calls the block's handler with each
message and sends back ``("ok", result)`` or ``("error", exception)``, with the number
the call gave it.

A call cut short (Ctrl-C, which may land between any two statements) leaves nothing that
stops the next, its requests being a few bytes, which go out in one piece: its replies
come with their old number and are skipped, and a message is taken off the socket by one
read of all its bytes, so none is ever half read. A read cut inside that one read (by a
signal while the rest of a long message was on its way) leaves part of a message, whose
bytes, not starting with the mark, the next call does not take for a message: it raises
`Closed` for that block.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import select
import shutil
import socket
import struct
import tempfile
import threading
import time

from ._shm_claims import claim, release

__all__ = ["Listener", "Closed", "connect", "serve"]

HEADER = struct.Struct("<4sQ")          # the mark, then the pickle's length
MARK = b"fbs\x01"


class Closed(ConnectionError):
    """The other end of block ``index``'s socket closed (its process ended)."""

    def __init__(self, index):
        super().__init__(f"the socket of block {index} closed")
        self.index = index


def _send(sock, message):
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(HEADER.pack(MARK, len(payload)) + payload)


def _length(header):
    """The pickle's length from a message's header; EOFError for bytes that are not one."""
    mark, size = HEADER.unpack(header)
    if mark != MARK:
        raise EOFError
    return size


def _receive_exactly(sock, n):
    parts, left = [], n
    while left:
        part = sock.recv(left)
        if not part:
            raise EOFError
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _receive(sock):
    return pickle.loads(_receive_exactly(sock, _length(_receive_exactly(sock, HEADER.size))))


def _receive_whole(sock):
    """`_receive` taking the message off the socket in one read: its header peeked, then
    header and pickle read together. EOFError where the other end closed, or where the
    bytes are not a message's start (the rest of one whose read was cut short)."""
    head = sock.recv(HEADER.size, socket.MSG_PEEK | socket.MSG_WAITALL)
    if len(head) < HEADER.size:
        raise EOFError
    n = HEADER.size + _length(head)
    data = sock.recv(n, socket.MSG_WAITALL)
    if len(data) < n:
        raise EOFError
    return pickle.loads(memoryview(data)[HEADER.size:])


def connect(path, index):
    """A block's end of its socket: connected to the `Listener` at ``path``, which it
    tells its ``index``."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    _send(sock, index)
    return sock


def _reply(handle, message):
    try:
        return ("ok", handle(*message))
    except BaseException as error:      # sent back: the training process raises it
        try:                            # (an exception whose __init__ takes other
            pickle.loads(pickle.dumps(error))       # arguments pickles, and unpickles not)
        except Exception:
            error = RuntimeError(f"{type(error).__name__}: {error}")
        return ("error", error)


def serve(sock, handle, name="fastbptt-steps"):
    """A daemon thread that answers each message ``m`` on ``sock`` with ``handle(*m)``
    until the training process closes its end."""
    def loop():
        with sock:
            while True:
                try:
                    number, message = _receive(sock)
                except (EOFError, OSError):
                    return
                try:
                    _send(sock, (number, *_reply(handle, message)))
                except OSError:
                    return
    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread


class Listener:
    """The training process's end: a socket in a new directory that only this user can
    enter, taking ``count`` connections (`accept`), one per block, after which the
    directory is removed. ``call`` sends a message to every block and returns their
    results in block order."""

    def __init__(self, count):
        self.count = count
        self.folder = tempfile.mkdtemp(prefix=f"fastbptt-{os.getpid()}-", dir=_folder())
        self._claim = claim(self.folder)            # until `remove`
        self.path = os.path.join(self.folder, "steps")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.server.bind(self.path)
            self.server.listen(count)
        except BaseException:           # (a folder whose path is too long for a socket)
            self.remove()
            raise
        self.socks = [None] * count
        self.number = 0                 # of the last call

    def accept(self, timeout, alive=lambda: True):
        """Wait for every block's connection; TimeoutError after ``timeout`` seconds, or as
        soon as ``alive()`` (asked every second) is false."""
        deadline = time.monotonic() + timeout
        try:
            while None in self.socks:
                left = deadline - time.monotonic()
                if left <= 0 or not alive():
                    raise TimeoutError("a block did not connect")
                self.server.settimeout(min(1.0, left))
                try:
                    sock, _ = self.server.accept()
                except socket.timeout:
                    continue
                sock.settimeout(min(1.0, left))
                try:
                    index = _receive(sock)
                except (EOFError, OSError):
                    sock.close()
                    continue
                sock.settimeout(None)
                self.socks[index] = sock
        finally:
            self.remove()

    def remove(self):
        """The socket's file and directory removed: connected sockets live on."""
        self.server.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        release(self._claim)
        self._claim = None

    def call(self, message, poll=1.0, check=None):
        """Each block's result of ``message``, in block order. `Closed` when a block's
        socket closes; ``check()`` is called every ``poll`` seconds while waiting (it
        raises to stop waiting). A block's exception is raised here, after every block
        has answered; replies to earlier calls, cut short, are skipped."""
        self.number += 1
        number = self.number
        for i, sock in enumerate(self.socks):
            try:
                _send(sock, (number, message))
            except OSError:
                raise Closed(i) from None
        replies = [None] * self.count
        waiting = {sock.fileno(): i for i, sock in enumerate(self.socks)}
        while waiting:
            ready, _, _ = select.select(list(waiting), [], [], poll)
            if not ready and check is not None:
                check()
            for fd in ready:
                answered, *reply = self._read(waiting[fd])
                if answered == number:
                    replies[waiting.pop(fd)] = reply
        for status, result in replies:
            if status == "error":
                raise result
        return [result for _, result in replies]

    def _read(self, i):
        try:
            return _receive_whole(self.socks[i])
        except (EOFError, OSError):
            raise Closed(i) from None

    def close(self):
        for sock in self.socks:
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
        self.socks = [None] * self.count
        self.remove()


def _folder():
    """/dev/shm where there is one (nothing of the socket reaches a disk), else the
    system's temporary folder."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) \
        else None
