"""The ``fastbptt`` command (also ``python -m fastbptt``).

``fastbptt demo`` runs the source documents' example through the kernels and through the
NumPy reference, and prints how well they agree and how much faster the kernels are.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from . import reference
from .api import bptt
from .params import init_params


def _median_seconds(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _relative_error(actual, expected):
    scale = np.abs(expected).max(initial=0.0)
    return float(np.abs(actual - expected).max(initial=0.0) / (scale or 1.0))


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
            err = _relative_error(g, r)
            worst = max(worst, err)
            print(f"  d{name}: max |kernels - reference| / max |reference| = {err:.2e}")

    t_fast = _median_seconds(lambda: bptt(x, y, params, **options), args.repeat)
    t_slow = _median_seconds(lambda: reference.bptt(x, y, params, **options),
                             max(3, args.repeat // 20))
    print(f"median time: kernels {t_fast * 1e3:.3f} ms, the documents' loop "
          f"{t_slow * 1e3:.1f} ms: {t_slow / t_fast:.0f}x faster")
    tolerance = 1e-10 if dtype == np.float64 else 1e-4
    if worst > tolerance:
        print(f"kernels and reference disagree beyond {tolerance:g}", file=sys.stderr)
        return 1
    return 0


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
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["demo"] + list(argv if argv is not None else sys.argv[1:]))
    return args.run(args)
