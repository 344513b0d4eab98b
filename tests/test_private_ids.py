"""Token ids, class ids and lengths index memory in the kernels: every path from the
caller to a kernel checks, and then hands on, a copy of its own, so that another thread
writing to the caller's array during a call cannot make a kernel read or write outside
its arrays."""
import threading

import numpy as np
import pytest

import fastbptt
from fastbptt._accept import accept
from fastbptt._inputs import prepare, prepare_layer

P = fastbptt.init_params(5, 4, 3, seed=0)
X = np.random.default_rng(0).integers(0, 5, size=(3, 7))
Y = np.random.default_rng(1).integers(0, 3, size=(3, 7))


def _apart(problem, *given):
    for name in ("x", "y", "lengths"):
        ours = getattr(problem, name)
        for theirs in given:
            if ours is not None and isinstance(theirs, np.ndarray):
                assert not np.shares_memory(ours, theirs), name


@pytest.mark.parametrize("options", [{}, {"truncate": 3}, {"lengths": np.array([7, 2, 5])},
                                     {"time_major": True}])
def test_the_kernels_read_copies_of_ids_and_lengths(options):
    lengths = options.get("lengths")
    if not options:
        fast = accept(X, Y, P)
        assert fast is not None
        _apart(fast, X, Y)
    if "time_major" not in options:
        _apart(prepare(X, Y, P, **options), X, Y, lengths)
    layer = fastbptt.Layer(P.U, P.W, P.b)
    _apart(prepare_layer(X, layer, **options), X, lengths)


def test_ids_changed_by_another_thread_during_a_call_are_not_read():
    """B = 1, T = 200,000: the writer sets an id of 2^40 while the kernels run (or before
    or after them): the call gives the result of the ids it checked, or, where the write
    came before the check, refuses them."""
    T = 200_000
    x, y = np.zeros((1, T), np.int64), np.zeros((1, T), np.int64)
    want = fastbptt.bptt(x, y, P).loss
    go = threading.Event()

    def writer():
        go.wait()
        x[0, T // 2] = y[0, T // 3] = 2 ** 40

    thread = threading.Thread(target=writer)
    thread.start()
    go.set()
    try:
        got = fastbptt.bptt(x, y, P).loss
    except ValueError as error:
        assert "must lie in" in str(error)
    else:
        assert got == want
    finally:
        thread.join()
