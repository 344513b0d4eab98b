"""T1-T5: training steps through the PyTorch and JAX bridges against the same framework's
native layer, in one process, same weights (``fastbptt bench --torch`` / ``--jax``).

- T1-T3 (`torch_steps`): forward, summed cross-entropy, backward and Adam, with
  ``nn.RNN``/``nn.LSTM``/``nn.GRU`` against ``fastbptt.torch``'s module, on token ids
  (one-hot vectors for the native module); T1e is T1 with ``nn.Embedding`` in front of
  both, so that both modules take the same dense input.
- T4 (`jax_steps`): ``jit(value_and_grad)`` with ``fastbptt.jax.lstm`` against a
  ``lax.scan`` LSTM. T5, not in the issue's table, is the same with the Elman cell at T1's
  sizes.

The native and the fastbptt step are timed in turns, one call each per round, so that
load from other processes falls on both alike; medians are reported. The bridge's own
cost is the time a layer's forward and backward through the bridge spends outside
`fastbptt.layer`'s calls (`own_cost`). The first step of each is compared before timing
(`check_agreement`: its loss and every gradient within 1e-4 relative).
"""
from __future__ import annotations

import gc
import statistics
import time
from typing import NamedTuple, Optional

__all__ = ["Step", "STEPS", "FRAMEWORKS", "make", "unavailable", "check_agreement",
           "measure_turns", "own_cost", "run", "table", "as_json"]


class Step(NamedTuple):
    name: str
    workload: str               # the sizes: B, T, L, H, C of this workload
    framework: str              # "torch" or "jax"
    inputs: str                 # "ids" or "embedding" (`torch_steps`)
    target: Optional[float]     # native time / fastbptt time the issue asks for
    what: str


STEPS = {s.name: s for s in [
    Step("T1", "W3", "torch", "ids", 2.0, "fastbptt.torch.RNN training step vs nn.RNN"),
    Step("T1e", "W3", "torch", "embedding", 2.0, "the same with nn.Embedding in front"),
    Step("T2", "G1", "torch", "ids", 1.3, "fastbptt.torch.LSTM training step vs nn.LSTM"),
    Step("T3", "G2", "torch", "ids", 1.4, "fastbptt.torch.GRU training step vs nn.GRU"),
    Step("T4", "G1", "jax", "ids", 1.5,
         "fastbptt.jax.lstm in jit(value_and_grad) vs lax.scan LSTM"),
    Step("T5", "W3", "jax", "ids", None,
         "fastbptt.jax.rnn in jit(value_and_grad) vs lax.scan Elman"),
]}
FRAMEWORKS = {"torch": ("T1", "T1e", "T2", "T3"), "jax": ("T4", "T5")}


def make(step, threads=1):
    """``(calls, note)`` of a step: {"native": ..., "fastbptt": ..., parts...}."""
    if step.framework == "torch":
        from .torch_steps import make as make_torch
        return make_torch(step, threads)
    from .jax_steps import make as make_jax
    return make_jax(step, threads)


def measure_turns(calls, repeat=30, budget=6.0, warmup=2):
    """{name: [seconds, ...]}: ``warmup`` untimed rounds, then rounds of one call each,
    up to ``repeat`` rounds or about ``budget`` seconds (at least 3)."""
    for _ in range(warmup):
        for fn in calls.values():
            fn()
    times = {name: [] for name in calls}
    enabled = gc.isenabled()
    gc.disable()
    try:
        start, rounds = time.perf_counter(), 0
        while rounds < repeat and (rounds < 3 or time.perf_counter() - start < budget):
            for name, fn in calls.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
            rounds += 1
    finally:
        if enabled:
            gc.enable()
    return times


def check_agreement(step, calls, rel=1e-4):
    """The first-step losses (native, fastbptt) of ``calls``, after checking that they
    and every parameter's gradient (relative to its largest entry) agree within ``rel``:
    AssertionError naming the first that does not."""
    losses = [calls[side]() for side in ("native", "fastbptt")]
    if not abs(losses[1] - losses[0]) <= rel * abs(losses[0]):          # NaN fails
        raise AssertionError(f"{step.name}: first-step loss {losses[1]} (fastbptt) vs "
                             f"{losses[0]} (native) differ by more than {rel:g} relative")
    want, got = calls["native"].gradients(), calls["fastbptt"].gradients()
    if want.keys() != got.keys():
        raise AssertionError(f"{step.name}: gradients of {sorted(got)} (fastbptt) vs "
                             f"{sorted(want)} (native)")
    for name, w in want.items():
        scale = float(abs(w).max()) or 1.0
        error = float(abs(got[name] - w).max()) / scale
        if not error <= rel:
            raise AssertionError(f"{step.name}: the gradient of {name} differs from the "
                                 f"native one by {error:.2g} of its largest entry (more "
                                 f"than {rel:g})")
    return tuple(losses)


class _Timed:
    """Stands in for `fastbptt.layer` where a bridge calls it, adding up the seconds spent
    in ``forward``, ``vjp`` and the ``back`` it returns."""

    def __init__(self, layer):
        self.layer, self.seconds = layer, {"forward": 0.0, "vjp": 0.0, "back": 0.0}
        self.calls = {"forward": 0, "vjp": 0, "back": 0}

    def _timed(self, name, fn):
        def call(*args, **kwargs):
            self.calls[name] += 1
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
        return call

    def forward(self, *args, **kwargs):
        return self._timed("forward", self.layer.forward)(*args, **kwargs)

    def vjp(self, *args, **kwargs):
        out, back = self._timed("vjp", self.layer.vjp)(*args, **kwargs)
        return out, _TimedBack(self._timed("back", back), back)


class _TimedBack:
    """A timed ``back`` that has the real one's other attributes (which a bridge may use
    untimed, as its own work)."""

    def __init__(self, timed, back):
        self._timed_call, self._back = timed, back

    def __call__(self, *args, **kwargs):
        return self._timed_call(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._back, name)


def own_cost(layer, owner, repeat=30):
    """Medians over ``repeat`` calls of ``layer()`` (a bridge's layer, forward and
    backward): {"total", "fastbptt" (inside `fastbptt.layer`'s calls), "own" (the rest:
    the bridge's conversions and its framework's bookkeeping)}, in seconds, and "vjp
    calls" per call (2 where a backward pass ran the forward pass again). ``owner`` is
    the bridge module whose ``_layer`` is `fastbptt.layer`; it is restored afterwards."""
    original = owner._layer
    rows = []
    try:
        for i in range(repeat + 2):
            timed = owner._layer = _Timed(original)
            start = time.perf_counter()
            layer()
            total = time.perf_counter() - start
            inside = sum(timed.seconds.values())
            if i >= 2:                                         # two warm-up calls
                rows.append((total, inside, total - inside, timed.calls["vjp"]))
    finally:
        owner._layer = original
    return {key: statistics.median(column)
            for key, column in zip(("total", "fastbptt", "own", "vjp calls"), zip(*rows))}


class Result(NamedTuple):
    step: Step
    medians: dict               # "native", "fastbptt" -> seconds per step
    cost: Optional[dict]        # `own_cost` of the bridge's layer
    losses: tuple               # first-step losses (native, fastbptt)
    note: str
    skipped: str = ""           # why the step was not timed (its framework is missing):
                                # then medians is {}, cost None and losses (None, None)


def unavailable(step, threads=1):
    """Why the step's framework cannot run here, or None."""
    if step.framework == "torch":
        from .torch_peer import unavailable as torch_unavailable
        return torch_unavailable()
    from .jax_peer import unavailable as jax_unavailable
    return jax_unavailable(threads)


def run_step(step, threads=1, repeat=30, budget=6.0):
    reason = unavailable(step, threads)
    if reason:
        return Result(step, {}, None, (None, None), "", f"{step.framework}: {reason}")
    calls, note, layer, owner = make(step, threads)
    native, ours = check_agreement(step, calls)
    times = measure_turns(calls, repeat, budget)
    cost = own_cost(layer, owner, repeat)
    medians = {name: statistics.median(t) for name, t in times.items()}
    return Result(step, medians, cost, (native, ours), note)


def run(names, threads=1, repeat=30, budget=6.0, progress=print):
    from .peers import set_threads

    set_threads(threads)
    results = []
    for name in names:
        progress(f"{name}: {STEPS[name].what} ...")
        results.append(run_step(STEPS[name], threads, repeat, budget))
    return results


def as_json(results):
    """The steps' measurements as JSON's values: per step its sizes, target, medians in
    seconds (native, fastbptt and their parts), speed-up, the bridge's own cost, the
    first-step losses, and why it was skipped, if it was."""
    out = []
    for r in results:
        ours = r.medians.get("fastbptt")
        out.append({"step": r.step._asdict(), "medians": dict(r.medians),
                    "speed_up": None if ours is None else r.medians["native"] / ours,
                    "own_cost": None if r.cost is None else dict(r.cost),
                    "losses": list(r.losses), "note": r.note, "skipped": r.skipped})
    return out


def _ms(seconds):
    return f"{seconds * 1e3:.2f}"


def table(results, threads=1):
    """The steps' table, the bridge's own cost per step, and the machine."""
    rows = [["step", "native ms", "fastbptt ms", "speed-up", "target", "what"]]
    notes = []
    for r in results:
        m, s = r.medians, r.step
        ours = m.get("fastbptt")
        rows.append([s.name, _ms(m["native"]) if m else "n/a",
                     "n/a" if ours is None else _ms(ours),
                     "-" if ours is None else f"{m['native'] / ours:.2f}x",
                     "-" if s.target is None else f"{s.target:.1f}x", s.what])
        notes.append(f"{s.name}: {r.note}")
        if r.skipped:
            notes.append(f"  {r.skipped}")
            continue
        notes += ["  " + line for line in _parts(r)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(wd) if i in (0, 5) else c.rjust(wd)
                       for i, (c, wd) in enumerate(zip(row, widths))).rstrip() for row in rows]
    return "\n".join(lines + ["", "speed-up: native median / fastbptt median, timed in turns "
                              "in this process"] + notes + [""] + _machine(threads))


def _machine(threads):
    import datetime
    import shlex
    import sys

    from .timing import machine_info, openblas_warnings

    m = machine_info()
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
    env = ", ".join(f"{k}={v}" if v is not None else f"{k} unset"
                    for k, v in m["environment"].items()
                    if k.startswith("OPENBLAS") or (k.startswith("MALLOC") and v is not None))
    return [f"CPU: {m['cpu']} ({m['cpus']} CPUs; {' '.join(m['cpu_flags'])}); {threads} "
            f"thread(s) for every implementation",
            f"versions: python {m['python']}, {versions}",
            f"environment: {env}",
            f"date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}",
            f"command: fastbptt {shlex.join(sys.argv[1:])}"] + openblas_warnings()


def _parts(r):
    step, c = r.medians["fastbptt"], r.cost

    def share(seconds):
        return f"{_ms(seconds)} ms, {100 * seconds / step:.1f}% of the fastbptt step"

    lines = [f"bridge's own cost: {share(c['own'])} (the layer's forward and backward "
             f"through the bridge took {_ms(c['total'])} ms, {_ms(c['fastbptt'])} ms of it "
             "inside fastbptt.layer)"]
    if c["vjp calls"] != 1:
        lines.append(f"fastbptt.layer.vjp ran {c['vjp calls']:g} times per forward and "
                     "backward: the backward pass ran the forward pass again")
    return lines
