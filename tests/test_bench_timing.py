"""`fastbptt.bench.timing.measure_turns`: several calls timed in turns."""
import itertools

from fastbptt.bench.timing import measure_turns


class _Clock:
    """time.perf_counter and time.process_time that advance only when a fake call runs."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _fake(clock, log, name, seconds):
    def call():
        log.append(name)
        clock.now += seconds
    return call


def _with_clock(monkeypatch):
    from fastbptt.bench import timing

    clock = _Clock()
    monkeypatch.setattr(timing.time, "perf_counter", clock)
    monkeypatch.setattr(timing.time, "process_time", clock)
    return clock


def test_each_call_gets_its_share_and_the_calls_take_turns(monkeypatch):
    clock, log = _with_clock(monkeypatch), []
    calls = {"fast": _fake(clock, log, "fast", 0.001), "slow": _fake(clock, log, "slow", 0.5)}
    timings = measure_turns(calls, repeat=20, budget=2.0, rounds=4, warmup=1)
    # as `measure` would: 20 (the cap) of the fast one, 2.0 / 0.5 = 4 of the slow one
    assert len(timings["fast"].times) == 20 and len(timings["slow"].times) == 4
    assert abs(timings["fast"].median - 0.001) < 1e-12 and timings["slow"].median == 0.5
    # sizing (fast, slow), then 4 rounds whose order rotates: fast, -; slow, fast;
    # fast, slow; slow, fast (the slow one had its first round's share from sizing)
    blocks = [name for name, _ in itertools.groupby(log)]
    assert blocks == ["fast", "slow", "fast", "slow", "fast", "slow", "fast"], blocks
    # the untimed calls: one warm-up each before sizing, one per later round
    assert log.count("fast") == 20 + 1 + 3 and log.count("slow") == 4 + 1 + 3


def test_a_call_slower_than_the_budget_is_still_timed_three_times(monkeypatch):
    clock, log = _with_clock(monkeypatch), []
    calls = {"a": _fake(clock, log, "a", 5.0), "b": _fake(clock, log, "b", 0.01)}
    timings = measure_turns(calls, repeat=50, budget=1.0, rounds=5, warmup=0)
    assert len(timings["a"].times) == 3 and len(timings["b"].times) == 50
    assert log.count("a") == 3 and log.count("b") == 50


def test_repeat_below_three_is_honoured(monkeypatch):
    clock, log = _with_clock(monkeypatch), []
    timings = measure_turns({"a": _fake(clock, log, "a", 1.0)}, repeat=1, budget=0.1,
                            warmup=0)
    assert len(timings["a"].times) == 1 and log == ["a"]


def test_enter_runs_untimed_before_each_turn_of_its_name(monkeypatch):
    clock, log = _with_clock(monkeypatch), []

    def enter():
        log.append("enter")
        clock.now += 7.0                    # would show in every timing if it were timed

    calls = {"a": _fake(clock, log, "a", 0.5), "b": _fake(clock, log, "b", 0.5)}
    timings = measure_turns(calls, repeat=4, budget=10.0, rounds=2, warmup=1,
                            enter={"a": enter})
    assert timings["a"].times == [0.5] * 4 and timings["b"].times == [0.5] * 4
    # before a's sizing, then before each of its turns: round 0 (a first), round 1 (b
    # first); never between a's own calls; a's turns start with a warm-up in every round,
    # b's from round 1 on
    assert log == ["enter", "a", "a", "b", "b",             # sizing: warm-up and one timed
                   "enter", "a", "a", "b",                  # round 0: a's warm-up only
                   "b", "b", "b",                           # round 1: warm-up, then 2
                   "enter", "a", "a", "a"], log
