"""The ``fastbptt`` command (also ``python -m fastbptt``).

``fastbptt demo`` runs the source documents' example through the kernels and through the
NumPy reference, and prints how well they agree and how much faster the kernels are.
``fastbptt bench`` times the workloads W1-W5 against the documents' loop, PyTorch and JAX
(when installed); measure with ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE``.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from . import reference
from .api import bptt
from .bench.agreement import relative_error
from .bench.timing import measure
from .params import init_params


def demo(args):
    dtype = np.dtype(args.dtype)
    rng = np.random.default_rng(args.seed)
    params = init_params(args.vocab, args.hidden, args.vocab, bias=False, dtype=dtype,
                         seed=rng)
    shape = (args.steps,) if args.batch == 1 else (args.batch, args.steps)
    x = rng.integers(0, args.vocab, size=shape)
    y = rng.integers(0, args.vocab, size=shape)
    options = dict(activation=args.activation, truncate=args.truncate)
    window = "full BPTT" if args.truncate is None else f"{args.truncate}-step window"
    print(f"Elman RNN: {args.vocab} symbols, H={args.hidden}, T={args.steps}, "
          f"B={args.batch}, {args.activation}, softmax, {window}, {dtype.name}")

    start = time.perf_counter()
    fast = bptt(x, y, params, **options)
    first = time.perf_counter() - start
    slow = reference.bptt(x, y, params, **options)
    print(f"first call (compiles, or loads Numba's cache): {first:.2f} s")
    print(f"loss: kernels {fast.loss:.10g}, reference {slow.loss:.10g}")
    worst = 0.0
    for name, g, r in zip(params._fields, fast.grads, slow.grads):
        if r is not None:
            err = relative_error(g, r)
            worst = max(worst, err)
            print(f"  d{name}: max |kernels - reference| / max |reference| = {err:.2e}")

    t_fast = measure(lambda: bptt(x, y, params, **options), repeat=args.repeat).median
    t_slow = measure(lambda: reference.bptt(x, y, params, **options),
                     repeat=max(3, args.repeat // 20)).median
    print(f"median time: kernels {t_fast * 1e3:.3f} ms, the documents' loop "
          f"{t_slow * 1e3:.1f} ms: {t_slow / t_fast:.0f}x faster")
    tolerance = 1e-10 if dtype == np.float64 else 1e-4
    if worst > tolerance:
        print(f"kernels and reference disagree beyond {tolerance:g}", file=sys.stderr)
        return 1
    return 0


def bench(args):
    from .bench import report, runner

    if args.plot:
        report.check_plotting()                 # fail before minutes of measuring
    result = runner.run(names=args.workloads, threads=args.threads, repeat=args.repeat,
                        with_peers=not args.no_peers, reference=args.reference,
                        startup=args.startup)
    print(report.table(result))
    if args.json:
        report.write_json(result, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        report.plot(result, args.plot)
        print(f"wrote {args.plot}")
    wrong = [f"{r.workload.name} {name}" for r in result.results
             for name, entry in r.peers.items() if entry.status == "disagrees"]
    if wrong:
        print(f"peers disagreeing with fastbptt: {', '.join(wrong)}", file=sys.stderr)
        return 1
    return 0


def _workload_names(text):
    from .bench.workloads import WORKLOADS

    names = [n.strip().upper() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown workload(s) {', '.join(unknown) or text!r}; choose from "
            f"{', '.join(WORKLOADS)}, comma-separated")
    return tuple(names)


def _threads(text):
    import os

    n = int(text)
    if not 1 <= n <= (os.cpu_count() or 1):
        raise argparse.ArgumentTypeError(f"threads must lie in [1, {os.cpu_count()}]; got {n}")
    return n


def _positive(text):
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1; got {n}")
    return n


def _truncate(text):
    return None if text.lower() in ("none", "full") else int(text)


def build_parser():
    parser = argparse.ArgumentParser(prog="fastbptt", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command")
    d = commands.add_parser("demo", help="the documents' example: kernels vs reference")
    d.add_argument("--steps", type=int, default=100, help="sequence length T (100)")
    d.add_argument("--hidden", type=int, default=128, help="hidden size H (128)")
    d.add_argument("--vocab", type=int, default=65, help="symbols, in and out (65)")
    d.add_argument("--batch", type=int, default=1, help="sequences per call (1)")
    d.add_argument("--activation", default="sigmoid",
                   choices=["tanh", "sigmoid", "relu", "identity"])
    d.add_argument("--truncate", type=_truncate, default=10,
                   help="window length k, or 'full' (10, as document 003)")
    d.add_argument("--dtype", default="float64", choices=["float32", "float64"])
    d.add_argument("--repeat", type=int, default=200, help="timed calls of the kernels (200)")
    d.add_argument("--seed", type=int, default=0)
    d.set_defaults(run=demo)

    b = commands.add_parser(
        "bench", help="time W1-W5 against the documents' loop, PyTorch and JAX",
        description="Median of repeated calls per workload, all in this process, the same "
                    "thread count for every implementation; peers are checked against "
                    "fastbptt before they are timed. Run it as `env -u OPENBLAS_CORETYPE "
                    "-u OPENBLAS_L2_SIZE fastbptt bench` where those variables are set.")
    b.add_argument("--workloads", type=_workload_names, default=("W1", "W2", "W3", "W4", "W5"),
                   help="comma-separated, e.g. W1,W3 (all)")
    b.add_argument("--threads", type=_threads, default=1,
                   help="threads for every implementation (1)")
    b.add_argument("--repeat", type=_positive, default=50,
                   help="timed calls per measurement, fewer when they would exceed ~2 s (50)")
    b.add_argument("--reference", action="store_true",
                   help="also time the documents' loop on W3 and W4, once each (slow)")
    b.add_argument("--no-peers", action="store_true",
                   help="time fastbptt alone (no documents' loop, PyTorch or JAX)")
    b.add_argument("--startup", action="store_true",
                   help="also measure warm start, cold compile and W5 peak memory")
    b.add_argument("--plot", metavar="FILE.png",
                   help="bar chart of the speed ratios (needs matplotlib)")
    b.add_argument("--json", metavar="FILE", help="write every measurement as JSON")
    b.set_defaults(run=bench)
    return parser


def main(argv=None):
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("demo", "bench", "-h", "--help"):
        argv = ["demo"] + argv                  # demo is the default: `fastbptt --steps 20`
    args = parser.parse_args(argv)
    return args.run(args)
