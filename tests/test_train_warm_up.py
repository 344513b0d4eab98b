"""`fastbptt train` compiles what its loop calls before the clock of its budget starts
(the loop compiles nothing):
a step at the run's shape, the optimizer's update, the validation estimate and the
sampler. Measured with Numba's compile events in a process with an empty cache: 32
cursors of 48 steps each (the tiny corpus's train split), in calls of 40 steps and of 8
(B T above and below 1024, where the kernels' paths differ)."""
import json
import subprocess
import sys

import numpy as np
import pytest

from cli_processes import SMALL, env, write_corpus
from fastbptt.text import StreamBatcher

CHILD = """
import json, sys
from numba.core import event
import fastbptt._train_command as command
from fastbptt.cli import main

looping, late = [], []
real = command._Loop.run


def run(self):
    looping.append(True)
    try:
        return real(self)
    finally:
        looping.pop()


class Compiles(event.Listener):
    def on_start(self, ev):
        if looping:
            late.append(ev.data["dispatcher"].py_func.__qualname__)

    def on_end(self, ev):
        pass


command._Loop.run = run
event.register("numba:compile", Compiles())
status = main(sys.argv[1:])
print(json.dumps({"status": status, "late": late}))
"""


@pytest.mark.parametrize("sample_every", ["0", "3"])
def test_the_loop_compiles_nothing(tmp_path, sample_every):
    corpus = write_corpus(tmp_path)
    args = [str(corpus), *SMALL, "--batch", "32", "--seq-length", "40", "--steps", "6",
            "--sample-every",
            sample_every, "--sample-chars", "5", "--checkpoint", str(tmp_path / "run.npz")]
    done = subprocess.run([sys.executable, "-c", CHILD, "train", *args], cwd=tmp_path,
                          env=env(NUMBA_CACHE_DIR=str(tmp_path / "cache")),
                          capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"status": 0, "late": []}, done.stderr


def test_a_batcher_names_the_lengths_of_its_calls():
    ids = np.arange(32 * 49 + 1)
    assert StreamBatcher(ids, 32, 40).call_steps == (40, 9)
    assert StreamBatcher(ids, 32, 49).call_steps == (49,)
    assert StreamBatcher(ids, 32, 60).call_steps == (49,)
    batcher = StreamBatcher(ids, 32, 20)
    assert {batcher.next().x.shape[1] for _ in range(batcher.calls_per_pass)} == {20, 9}
    assert batcher.call_steps == (20, 9)
