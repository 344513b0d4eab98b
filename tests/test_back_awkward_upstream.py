"""back's dh, dh_final and dc_final in awkward layouts (read-only, Fortran order, strided,
a stride-0 broadcast as PyTorch's gradient of a .sum()) give the clean result, leave the
caller's arrays as they were, and compile no new kernels."""
import numpy as np
import pytest
from numba import types

import fastbptt
import fastbptt.layer
from test_awkward_inputs import kernel_dispatchers, snapshot, assert_same


def signatures():
    return {d.py_func.__qualname__: set(d.signatures) for d in kernel_dispatchers()}


def read_only(a):
    a = np.array(a)
    a.flags.writeable = False
    return a


LAYOUTS = {
    "read-only": read_only,
    "Fortran order": np.asfortranarray,
    "strided": lambda a: np.repeat(a, 2, axis=-1)[..., ::2],
    "broadcast": lambda a: np.broadcast_to(a[..., :1], a.shape),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("B", [3, 64])
def test_awkward_upstream_gradients(layout, B):
    rng = np.random.default_rng(0)
    layer = fastbptt.init_params(5, 4, 3, cell="lstm", dtype=np.float64, seed=0).layers[0][0]
    x = rng.normal(size=(B, 6, 5))
    lengths = np.r_[6, rng.integers(0, 7, B - 1)]
    out, back = fastbptt.layer.vjp(x, layer, h0=np.zeros((B, 4)), lengths=lengths)
    clean = [rng.normal(size=out.h.shape), rng.normal(size=out.h_final.shape),
             rng.normal(size=out.c_final.shape)]
    clean = [np.ascontiguousarray(LAYOUTS[layout](a)) for a in clean]   # the same values
    back(*clean)                                                        # compiles the clean kernels
    before = signatures()
    awkward = [LAYOUTS[layout](a) for a in clean]
    kept = snapshot(awkward)
    assert_same(back(*awkward), back(*clean))
    assert snapshot(awkward) == kept
    new = {k: v - before.get(k, set()) for k, v in signatures().items()}
    assert not any(new.values()), {k: v for k, v in new.items() if v}
    for dispatcher in kernel_dispatchers():
        for signature in dispatcher.signatures:
            for arg in signature:
                assert not (isinstance(arg, types.Array) and not arg.mutable)
