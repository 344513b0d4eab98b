"""The sockets that carry a local cluster's steps (`fastbptt._step_socket`), here between
threads of this process: replies in block order, a block's error raised in the training
process, a closed block named, a check while waiting, and a call cut short leaving
nothing behind for the next."""
import os
import threading
import time

import pytest

from fastbptt._step_socket import Closed, Listener, connect, serve


class TwoArguments(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a} and {b}")


class Block:
    def __init__(self, index):
        self.index, self.calls = index, []

    def handle(self, method, *args):
        self.calls.append((method, args, threading.current_thread().name))
        if method == "fail":
            raise ValueError(f"block {self.index} failed")
        if method == "odd":
            raise TwoArguments(self.index, "more")
        if method == "sleep":
            time.sleep(args[0])
        return self.index, args


def open_blocks(count):
    listener = Listener(count)
    blocks, socks = [], []
    for index in reversed(range(count)):              # connections arrive in any order
        sock = connect(listener.path, index)
        block = Block(index)
        serve(sock, block.handle, name=f"block-{index}")
        blocks.insert(0, block)
        socks.insert(0, sock)
    listener.accept(timeout=10)
    return listener, blocks, socks


def test_replies_come_in_block_order_and_the_folder_is_gone():
    listener, blocks, _ = open_blocks(3)
    try:
        assert not os.path.exists(listener.folder)
        assert listener.call(("step", 7)) == [(0, (7,)), (1, (7,)), (2, (7,))]
        assert listener.call(("step", 8)) == [(0, (8,)), (1, (8,)), (2, (8,))]
        assert [b.calls[-1][2] for b in blocks] == ["block-0", "block-1", "block-2"]
    finally:
        listener.close()


def test_a_blocks_error_is_raised_here_and_the_next_call_works():
    listener, blocks, _ = open_blocks(2)
    try:
        with pytest.raises(ValueError, match="block 0 failed"):
            listener.call(("fail",))
        assert [len(b.calls) for b in blocks] == [1, 1]       # every block was asked
        assert listener.call(("step", 1)) == [(0, (1,)), (1, (1,))]
    finally:
        listener.close()


def test_an_error_that_pickles_but_does_not_unpickle_is_named_and_the_next_call_works():
    """An exception whose __init__ takes other arguments than its args pickles, and fails
    to unpickle: the reply's read raised that TypeError, and every later call read the
    reply left behind and raised it again."""
    listener, _, _ = open_blocks(2)
    try:
        with pytest.raises(RuntimeError, match="TwoArguments: 0 and more"):
            listener.call(("odd",))
        assert listener.call(("step", 3)) == [(0, (3,)), (1, (3,))]
    finally:
        listener.close()


def test_a_closed_block_is_named():
    listener, _, socks = open_blocks(3)
    try:
        socks[1].close()
        with pytest.raises(Closed) as closed:
            listener.call(("step", 1))
        assert closed.value.index == 1
    finally:
        listener.close()


def test_the_check_runs_while_waiting_and_a_cut_call_leaves_no_reply_behind():
    listener, _, _ = open_blocks(2)
    checks = []

    def check():
        checks.append(time.monotonic())
        if len(checks) == 2:
            raise KeyboardInterrupt
    try:
        with pytest.raises(KeyboardInterrupt):
            listener.call(("sleep", 0.5), poll=0.05, check=check)
        assert len(checks) == 2
        assert listener.call(("step", 2)) == [(0, (2,)), (1, (2,))]   # not the sleep's
    finally:
        listener.close()


def test_accept_gives_up_when_a_block_never_connects():
    listener = Listener(2)
    sock = connect(listener.path, 0)
    try:
        with pytest.raises(TimeoutError):
            listener.accept(timeout=0.3)
        assert not os.path.exists(listener.folder)
    finally:
        sock.close()
        listener.close()


@pytest.mark.parametrize("where", ["sent to one block", "a reply read"])
def test_a_ctrl_c_between_any_two_statements_of_a_call_leaves_the_next_call_working(
        monkeypatch, where):
    """A KeyboardInterrupt after a message went to one block but not the other, or after
    a reply was read but before it was counted: the next call waited for good for a
    reply that was never to come (never asked for, or read already)."""
    import fastbptt._step_socket as steps
    listener, _, _ = open_blocks(2)
    send, receive, cuts = steps._send, steps._receive_whole, []

    def cut(real):
        def call(*args):
            out = real(*args)
            if not cuts and threading.current_thread() is threading.main_thread():
                cuts.append(1)          # (the blocks' threads send with it too)
                raise KeyboardInterrupt
            return out
        return call
    if where == "sent to one block":
        monkeypatch.setattr(steps, "_send", cut(send))
    else:
        monkeypatch.setattr(steps, "_receive_whole", cut(receive))
    try:
        with pytest.raises(KeyboardInterrupt):
            listener.call(("step", 1))
        done = []
        worker = threading.Thread(target=lambda: done.append(listener.call(("step", 2))),
                                  daemon=True)
        worker.start()
        worker.join(10)
        assert done == [[(0, (2,)), (1, (2,))]]
    finally:
        listener.close()


def test_a_read_cut_inside_a_message_makes_the_next_call_say_the_block_is_closed():
    """Part of a message left in the socket would be read as the next one's header: the
    next call raises Closed for that block instead."""
    import fastbptt._step_socket as steps
    listener, _, _ = open_blocks(2)
    try:
        listener.call(("step", 1))
        steps._send(listener.socks[1], ("sleep", 0))     # a message the block answers
        time.sleep(0.2)
        sock = listener.socks[1]
        sock.recv(steps.HEADER.size + 3)                  # cut inside it
        with pytest.raises(Closed) as closed:
            listener.call(("step", 2))
        assert closed.value.index == 1
    finally:
        listener.close()
