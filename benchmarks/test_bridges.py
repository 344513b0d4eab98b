"""T1-T5: training steps through fastbptt.torch and fastbptt.jax against the native layer
of the same framework (`fastbptt.bench.bridge_steps`), grouped by step.

Each case warms up (the first call compiles, traces or loads a cache), checks that the
first-step losses and gradients of the two sides agree, then times one step per round.
"""
import functools

import pytest

from fastbptt.bench.bridge_steps import STEPS, check_agreement, make, unavailable

SIDES = ("native", "fastbptt")


@functools.lru_cache(maxsize=None)
def prepared(name):
    step = STEPS[name]
    reason = unavailable(step)
    if reason:
        pytest.skip(f"{step.framework}: {reason}")
    calls, note, _, _ = make(step)
    check_agreement(step, calls)
    return calls, note


@pytest.mark.parametrize("name, side", [(n, s) for n in STEPS for s in SIDES],
                         ids=[f"{n}-{s}" for n in STEPS for s in SIDES])
def test_step(benchmark, name, side):
    calls, note = prepared(name)
    benchmark.group = f"{name}: {STEPS[name].what}"
    benchmark.extra_info.update(step=name, side=side, note=note)
    benchmark(calls[side])
