"""fastbptt's own options as the PyTorch and JAX bridges check them before any work starts
(a module's constructor, a JAX trace): the layer API's checks of truncate and stride, and
its refusals (SPEC.md §8) for the layers and directions of a whole module, which the
PyTorch bridge may run one layer per call."""
from __future__ import annotations

from ._inputs import _truncation


def check_truncation(truncate, stride, *, reverse=False, layers=1):
    """Validate BPTT(k; s) for ``layers`` layers, with or without a reverse direction;
    raises TypeError/ValueError."""
    truncate, stride = _truncation(truncate, stride)
    if truncate is None:
        return
    if reverse:
        raise ValueError(f"truncate={truncate} is not supported with a reverse direction: "
                         "truncation counts steps back from each output in the forward "
                         "direction only; pass truncate=None (full BPTT)")
    if layers > 1 and stride < truncate:
        raise ValueError(f"truncate={truncate} with stride={stride} (a window per output) is "
                         f"not supported with {layers} layers: pass stride=truncate (chunks) "
                         "or use one layer")
