"""``fastbptt bench --distributed``: data-parallel training on a local Dask cluster, measured.

- Equality (SPEC.md §9): 30 steps on 2 workers against one process over the same cursors,
  float64 and float32 (the largest difference of any weight over that array's largest
  weight); then the checkpoint written with 2 workers resumed on 1 worker, 10 steps more,
  against the one process.
- Throughput: ``fastbptt train``'s step (the batcher, `bptt` with the carried state,
  clipping, Adam) with B = 64, T = 50, H = 256, float32, on the default corpus, for the
  default model and for one Elman layer (the least work per byte of model): one process
  with BLAS on one thread (the default) and on two, and 1 and 2 worker processes of one
  thread each, sharing the buffers through /dev/shm with each step's message on a Unix
  socket (a local cluster) or sending them in Dask's messages over TCP (as across
  machines). The configurations take turns, ``ROUNDS`` rounds
  of ``STEPS`` steps each, so that a neighbour's load spreads over all of them; each
  figure is the median round. Per step: the time in `bptt` on the slowest worker, the
  round trip around it (the model out, the gradients back, adding them) and clipping
  with the update.
- Traffic: bytes a step sends to and from each worker (the flat buffers of the model and
  of its gradient) and, from them and the times over TCP, the efficiency of N workers on
  a 10 Gb/s network and the cursors per worker that keep it at 90%.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from ..params import leaves
from ..text import Codec
from ..train import TrainOptions, Trainer

__all__ = ["run", "equality", "throughput", "projection"]

ROUNDS, STEPS = 7, 20
LINK = 10e9 / 8                  # bytes per second of a 10 Gb/s network


def _config(n, how):
    return f"{n} worker{'s' * (n > 1)}, {how}"


def _relative(a, b):
    return max(float(np.abs(leaves(a)[k].astype(np.float64) - v).max() / np.abs(v).max())
               for k, v in leaves(b).items())


def _corpus():
    from ..corpus import default_corpus

    corpus = default_corpus()
    codec = Codec.from_text(corpus.text)
    train, _ = corpus.split(TrainOptions().val_fraction)
    return codec, codec.encode(train)


def equality(workers, codec, ids):
    """{dtype: (after 30 steps on 2 workers, after 10 more on 1 worker)}: relative
    differences from one process."""
    out = {}
    for dtype in ("float64", "float32"):
        options = TrainOptions(hidden=64, batch=16, dtype=dtype)
        one = Trainer(options, ids, codec)
        two = Trainer(options, ids, codec, placement=workers.place)
        for _ in range(30):
            one.train_step()
            two.train_step()
        after_two = _relative(two.params, one.params)
        saved = two.checkpoint()
        two.close()
        single = Trainer(options, ids, codec, resume=saved,
                         placement=workers.limited(1).place)
        for _ in range(10):
            one.train_step()
            single.train_step()
        out[dtype] = (after_two, _relative(single.params, one.params))
        single.close()
    return out


def throughput(workers, codec, ids, options):
    """{configuration: (seconds per step, {bptt, round trip, update} per step)}."""
    from .._threads import set_num_threads

    runs = {"one process, 1 thread": (Trainer(options, ids, codec), 1),
            "one process, 2 threads": (Trainer(options, ids, codec), 2)}
    for shared, how in ((True, "shared"), (False, "TCP")):
        for n in (1, 2):
            placement = workers.limited(n, shared=shared).place
            runs[_config(n, how)] = (Trainer(options, ids, codec, placement=placement), 1)
    rounds = {name: [] for name in runs}            # (seconds, {part: seconds}) per step
    try:
        for r in range(ROUNDS + 1):                      # round 0 warms up
            for name, (trainer, threads) in runs.items():
                set_num_threads(threads)
                before = dict(trainer.timing)
                start = time.perf_counter()
                for _ in range(STEPS):
                    trainer.train_step()
                seconds = time.perf_counter() - start
                spent = {k: (trainer.timing[k] - before[k]) / STEPS for k in before}
                if r:
                    rounds[name].append((seconds / STEPS, {
                        "bptt": spent["bptt"], "update": spent["update"],
                        "round trip": spent["gradients"] - spent["bptt"]}))
    finally:
        set_num_threads(1)
        for trainer, _ in runs.values():
            trainer.close()
    return {name: (statistics.median(s for s, _ in times),
                   {part: statistics.median(p[part] for _, p in times)
                    for part in ("bptt", "round trip", "update")})
            for name, times in rounds.items()}


def projection(step_bytes, per_cursor, fixed, per_worker, workers=(8, 64), cursors=32,
               target=0.9):
    """{N: (efficiency with ``cursors`` per worker, cursors per worker for ``target``)}
    on a 10 Gb/s network, where the scheduler's machine sends the model to and receives
    a gradient from each of N workers every step (``step_bytes`` per worker) and handles
    each worker's messages in ``per_worker`` seconds, each worker computes a cursor's step
    in ``per_cursor`` seconds, and ``fixed`` seconds a step (latency, the update) do not
    depend on N. The transfers are counted as if nothing overlapped them."""
    out = {}
    for n in workers:
        overhead = fixed + n * (per_worker + step_bytes / LINK)
        efficiency = cursors * per_cursor / (cursors * per_cursor + overhead)
        need = target / (1 - target) * overhead / per_cursor
        out[n] = (efficiency, int(np.ceil(need)))
    return out


MODELS = {"the default model": {}, "one Elman layer": {"cell": "elman", "layers": 1}}


def run(out=print):
    from ..distributed import Workers

    codec, ids = _corpus()
    with Workers.local(2) as workers:
        same = equality(workers, codec, ids)
        speeds = {name: throughput(workers, codec, ids, TrainOptions(
            batch=64, seq_length=50, hidden=256, dtype="float32", **model))
            for name, model in MODELS.items()}
    out("equality, 2 workers vs one process (max |difference| / max |weight|, per array):")
    for dtype, (two, one) in same.items():
        out(f"  {dtype}: after 30 steps {two:.1e}; resumed on 1 worker, 10 steps more "
            f"{one:.1e}")
    for name, model in MODELS.items():
        _report(out, name, TrainOptions(batch=64, **model), speeds[name], codec, ids)


def _report(out, name, options, speed, codec, ids):
    """The throughput table of one model, its traffic and the projection."""
    from .._resume import describe_model
    from ..distributed import Layout

    base = speed["one process, 1 thread"][0]
    chars = options.batch * options.seq_length
    out(f"\nthroughput of {name} ({describe_model(options)}), B={options.batch} "
        f"T={options.seq_length} float32, median of {ROUNDS} rounds of {STEPS} steps:")
    out(f"  {'':26s} {'ms/step':>8s} {'chars/s':>9s} {'vs 1 process':>12s} "
        f"{'bptt':>6s} {'round trip':>10s} {'update':>6s}")
    for config, (seconds, part) in speed.items():
        out(f"  {config:26s} {1e3 * seconds:8.2f} {chars / seconds:9,.0f} "
            f"{base / seconds:11.2f}x {1e3 * part['bptt']:6.2f} "
            f"{1e3 * part['round trip']:10.2f} {1e3 * part['update']:6.2f}")
    model = Trainer(options, ids[:10_000], codec).params
    step_bytes = 2 * Layout(model).size * np.dtype(options.dtype).itemsize
    one, two = (speed[_config(n, "TCP")][1] for n in (1, 2))
    per_cursor = two["bptt"] / (options.batch // 2)
    per_worker = max(two["round trip"] - one["round trip"], 0.0)
    fixed = one["round trip"] - per_worker + two["update"]
    out(f"  traffic: {step_bytes / 1e6:.2f} MB per step per worker (the model out, its "
        f"gradient back, {step_bytes // 2:,} bytes each); bptt {1e6 * per_cursor:.0f} us "
        f"per cursor; outside bptt {1e3 * fixed:.2f} ms + {1e3 * per_worker:.2f} ms per "
        f"worker (from 1 and 2 workers over TCP here), plus the transfers at 10 Gb/s")
    for n, (efficiency, need) in projection(step_bytes, per_cursor, fixed,
                                            per_worker).items():
        out(f"  {n} workers on 10 Gb/s: {100 * efficiency:.0f}% efficient with 32 cursors "
            f"each; 90% needs {need:,} cursors per worker")
