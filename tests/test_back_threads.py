"""``back`` (`fastbptt.layer.vjp`) called from other threads than the one that made it,
several at once.

Scratch memory is kept per thread (`fastbptt._workspace`). Two ``back``s of one shape,
made on one thread and called at the same time from two others, must each return what
it returns when the calls run one after the other: the scratch they write (the gates'
gradients, the carries, the feature-major copies of the states) must be the calling
thread's, not that of the thread that ran the forward pass. The kernels release the GIL,
so the two calls really overlap. Every cell, on both kernel paths, token ids and dense
inputs.
"""
import threading

import numpy as np
import pytest

import fastbptt
from models import CELLS
from test_back_reuse import arrays

L, H, T = 5, 64, 200
ROUNDS = 10


def make_backs(rng, cell, ids):
    model = fastbptt.init_params(L, H, 3, cell=cell, dtype=np.float64, seed=rng)
    layer = fastbptt.Layer(model.U, model.W, model.b) if cell == "elman" else \
        model.layers[0][0]
    backs, dhs = [], []
    for _ in range(2):
        x = rng.integers(0, L, size=(3, T)) if ids else rng.normal(size=(3, T, L))
        out, back = fastbptt.layer.vjp(x, layer, lengths=[T, T - 7, 40])
        backs.append(back)
        dhs.append(rng.normal(size=out.h.shape))
    return backs, dhs


@pytest.mark.parametrize("ids", [False, True], ids=["dense", "ids"])
@pytest.mark.parametrize("cell", CELLS)
def test_backs_called_at_once_from_other_threads(rng, kernel_path, cell, ids):
    backs, dhs = make_backs(rng, cell, ids)
    want = [arrays(back(dh)) for back, dh in zip(backs, dhs)]      # one after the other
    start = threading.Barrier(2)
    got = [[], []]

    def run(i):
        for _ in range(ROUNDS):
            start.wait()
            got[i].append(arrays(backs[i](dhs[i])))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i in range(2):
        assert len(got[i]) == ROUNDS
        for result in got[i]:
            assert result.keys() == want[i].keys()
            wrong = [name for name in result if not np.array_equal(result[name], want[i][name])]
            assert not wrong, f"back {i} on another thread: {wrong} differ from a lone call"


def test_one_back_called_from_two_threads_at_once(rng):
    """The same ``back`` twice at once: each call gets the gradients a lone call gets."""
    backs, dhs = make_backs(rng, "lstm", False)
    want = arrays(backs[0](dhs[0]))
    start = threading.Barrier(2)
    got = []

    def run():
        for _ in range(ROUNDS):
            start.wait()
            got.append(arrays(backs[0](dhs[0])))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(got) == 2 * ROUNDS
    for result in got:
        assert all(np.array_equal(result[name], want[name]) for name in want)
