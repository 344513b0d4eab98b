"""fastbptt's own options as the PyTorch and JAX bridges check them before any work starts
(a module's constructor, a JAX trace): the layer API's own checks of truncate and stride
and its refusals (SPEC.md §8), applied to the layers and directions of a whole module,
which the PyTorch bridge may run one layer per call."""
from __future__ import annotations

from types import SimpleNamespace

from ._inputs import _full_bptt, _stack_truncation, _truncation
from .params import Model


def check_truncation(truncate, stride, *, reverse=False, layers=1, directions=1, steps=None):
    """Validate BPTT(k; s) for ``layers`` layers of ``directions`` directions (or one
    layer read in reverse); raises TypeError/ValueError, else returns them as Python
    ints (None for truncate=None). Given the number of ``steps``, a truncation that cuts
    nothing in them is full BPTT, as `fastbptt.layer` takes it."""
    truncate, stride = _truncation(truncate, stride)
    if steps is not None and _full_bptt(truncate, stride, steps):
        return truncate, stride
    shape = SimpleNamespace(model=Model(((None,) * directions,) * layers))
    _stack_truncation(shape, truncate, stride, reverse)
    return truncate, stride
