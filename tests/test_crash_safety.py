"""Periodic checkpoints: a run killed with SIGKILL loses at most the steps since the last
one, and --resume continues it to the same bits as a run that was never killed."""
import signal
import time

import numpy as np
import pytest

from cli_processes import SMALL, finish, start, write_corpus
from fastbptt import checkpoint
from fastbptt._run_saves import Schedule
from fastbptt.cli import _checkpoint_every
from fastbptt.params import leaves


def wait_for_step(path, step, proc, timeout=120):
    """Wait until the checkpoint at ``path`` holds at least ``step`` steps; its step."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended first: {finish(proc)}")
        try:
            found = checkpoint.load(path).step
        except (FileNotFoundError, ValueError):
            found = -1
        if found >= step:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint of step {step} within {timeout} s")


def same_weights(a, b):
    np.testing.assert_array_equal(a.history["loss"], b.history["loss"])
    for name, value in leaves(a.params).items():
        np.testing.assert_array_equal(value, leaves(b.params)[name])
    assert a.rng_state == b.rng_state and a.batcher == b.batcher


def test_a_killed_run_resumes_to_the_bits_of_a_run_never_killed(tmp_path):
    """The killed run would take 20,000 steps; it is killed past its checkpoint of step 50,
    resumed to step 1,000 and compared with a run of 1,000 steps on the same schedule."""
    write_corpus(tmp_path)
    run = ["train", "tiny.txt", *SMALL, "--sample-every", "0", "--lr-horizon", "20000",
           "--checkpoint-every", "25"]
    killed = start([*run, "--steps", "20000", "--checkpoint", "killed.npz"], tmp_path)
    saved = wait_for_step(tmp_path / "killed.npz", 50, killed)
    killed.send_signal(signal.SIGKILL)
    assert finish(killed).status == -signal.SIGKILL
    kept = checkpoint.load(tmp_path / "killed.npz")
    assert saved <= kept.step < 1000 and kept.step % 25 == 0
    straight = start([*run, "--steps", "1000", "--checkpoint", "straight.npz"], tmp_path)
    resumed = finish(start([*run, "--steps", "1000", "--resume", "--checkpoint",
                            "killed.npz"], tmp_path))
    assert resumed.status == 0, resumed
    assert f"resumed at step {kept.step}" in resumed.out
    assert finish(straight).status == 0
    same_weights(checkpoint.load(tmp_path / "killed.npz"),
                 checkpoint.load(tmp_path / "straight.npz"))


@pytest.mark.parametrize("text,expected", [
    ("500", (500, None)), ("30s", (None, 30.0)), ("500,2.5s", (500, 2.5)),
    (" 2.5s , 500 ", (500, 2.5)), ("0", (None, None)), ("0s", (None, None))])
def test_checkpoint_every_reads_steps_and_seconds(text, expected):
    assert _checkpoint_every(text) == expected


def test_the_schedule_saves_on_either_measure_and_never_costs_more_than_its_floor():
    every = Schedule(10, 5.0, 0, 0.0)
    assert not every.due(9, 4.9) and every.due(10, 1.0) and every.due(3, 5.0)
    every.saved(10, 1.0, 0.2)
    assert not every.due(19, 5.9) and every.due(20, 1.1)
    floored = Schedule(None, 5.0, 0, 0.0, floor=100)
    floored.saved(0, 0.0, 0.2)                     # a save of 0.2 s: the next after 20 s
    assert not floored.due(1000, 19.9) and floored.due(1000, 20.0)
