"""The ``fastbptt`` command (also ``python -m fastbptt``).

``fastbptt demo`` runs the source documents' example through the kernels and through the
NumPy reference, and prints how well they agree and how much faster the kernels are.
``fastbptt bench`` times the workloads (W1-W5, stacks S1-S3, gated cells G1-G5) against the
documents' loop, PyTorch and JAX (when installed), and with ``--torch``/``--jax`` training
steps through the bridges (T1-T5); measure with ``env -u OPENBLAS_CORETYPE -u
OPENBLAS_L2_SIZE``.
``fastbptt train [TEXT_FILE ...]`` trains a character model (on the standard library's own
source when no file is given) and ``fastbptt sample CHECKPOINT`` prints text from one.
"""
from __future__ import annotations

import argparse
import codecs
import difflib
import io
import os
import re
import sys
import time

from ._command_errors import CommandError, UsageError, interrupted, run_command
from ._ranges import Range

DESCRIPTION = ("exact backpropagation-through-time gradients from Numba kernels: a demo, "
               "benchmarks, and character models to train and sample")   # not __doc__: -OO
MAX_CHARS = 10 ** 8        # characters one sample draws: hours of drawing already


def demo(args):
    import numpy as np

    from . import reference
    from ._preflight import memory
    from .api import bptt
    from .bench.agreement import relative_error
    from .bench.timing import measure
    from .params import init_params

    dtype = np.dtype(args.dtype)
    H, L, B, T = args.hidden, args.vocab, args.batch, args.steps
    memory(dtype.itemsize * (3 * (H * H + 2 * H * L) + 8 * B * T * (H + L)),
           f"--hidden {H} --vocab {L} --batch {B} --steps {T} (weights and gradients of the "
           "kernels and the reference)", "choose smaller sizes")
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
    from . import _preflight
    from .bench import report, runner
    from .bench.workloads import DEFAULT

    default = build_parser().commands["bench"].get_default
    if args.distributed or ((args.torch or args.jax) and not args.workloads):
        what = "--distributed" if args.distributed else " and ".join(
            flag for flag, given in (("--torch", args.torch), ("--jax", args.jax)) if given)
        ignored = [flag for flag, given in (("--workloads", args.distributed and args.workloads),
                                            ("--json", args.distributed
                                             and args.json is not None),
                                            ("--plot", args.plot is not None),
                                            ("--startup", args.startup),
                                            ("--reference", args.reference),
                                            ("--no-peers", args.no_peers),
                                            ("--torch", args.distributed and args.torch),
                                            ("--jax", args.distributed and args.jax),
                                            ("--threads", args.distributed
                                             and args.threads != default("threads")),
                                            ("--repeat", args.distributed
                                             and args.repeat != default("repeat"))) if given]
        if ignored:
            raise UsageError(f"{' and '.join(ignored)} cannot be used with {what}" + (
                " (it prints its own table)" if args.distributed else
                " alone (it prints its own table); add --workloads to time the workloads "
                "as well"))
    if args.distributed:
        from ._train_command import distributed_module
        distributed_module("--distributed")
        from .bench import distributed

        distributed.run()
        return 0

    on_request = runner.REFERENCE_ON_REQUEST
    if args.reference and not set(args.workloads or DEFAULT) & set(on_request):
        raise UsageError(f"--reference times the documents' loop on "
                         f"{' and '.join(on_request)}, and --workloads "
                         f"{','.join(args.workloads)} has neither")
    if args.plot is not None and args.no_peers and not args.reference:
        raise UsageError("--plot draws fastbptt's speed-up against its peers, and --no-peers "
                         "times none (add --reference for the documents' loop on W3, W4)")
    if args.plot is not None:                   # fail before minutes of measuring
        _preflight.plot_file(args.plot)
    if args.json is not None:
        _preflight.output_file(args.json, "--json")
    steps = None                                # the bridges' steps' JSON, where timed
    if args.torch or args.jax:
        import importlib
        import importlib.util

        for bridge in ("torch", "jax"):             # one line naming the extra, status 1
            if getattr(args, bridge):
                if bridge == "jax" and importlib.util.find_spec("jax") is not None:
                    from .bench import jax_peer         # JAX starts on the bench's threads
                    try:                                # before fastbptt.jax imports it
                        jax_peer.start(args.threads)
                    except ImportError:                 # a broken install: fastbptt.jax's
                        pass                            # import below says which extra
                try:
                    importlib.import_module(f"fastbptt.{bridge}")
                except ImportError as error:
                    raise CommandError(f"--{bridge}: {error}") from None
        from .bench import bridge_steps

        names = [n for f in ("torch", "jax") if getattr(args, f)
                 for n in bridge_steps.FRAMEWORKS[f]]
        results = bridge_steps.run(names, threads=args.threads, repeat=args.repeat,
                                   progress=lambda text: print(text, file=sys.stderr))
        print(bridge_steps.table(results, args.threads))
        steps = bridge_steps.as_json(results)
        if not args.workloads:
            if args.json:
                report.write_json(None, args.json, bridge_steps=steps)
                print(f"wrote {args.json}")
            return 0
    result = runner.run(names=args.workloads or DEFAULT, threads=args.threads,
                        repeat=args.repeat, with_peers=not args.no_peers,
                        reference=args.reference, startup=args.startup)
    print(report.table(result))
    if args.json:
        report.write_json(result, args.json, bridge_steps=steps)
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


_MODEL_OPTIONS = ("hidden", "cell", "layers", "seq_length", "batch", "optimizer", "lr",
                  "momentum", "clip_norm", "clip_value", "truncate", "stride", "dtype",
                  "activation", "seed", "val_fraction", "lr_decay", "lr_final", "horizon")


def train(args):
    from ._train_command import run

    given = {name: getattr(args, name) for name in _MODEL_OPTIONS
             if getattr(args, name) is not None}
    for name in ("clip_norm", "clip_value"):
        if given.get(name) == 0:
            given[name] = None                  # 0 turns that clipping off
    return run(args, given)


def sample(args):
    from ._train_command import run_sample

    return run_sample(args)


def _workload_names(text):
    from .bench.workloads import select

    try:
        return select(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _type(check, name):
    """An argparse type from a `fastbptt._ranges` check: its ValueError becomes the
    message argparse prints after the option's name."""
    def parse(text):
        try:
            return check(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    parse.__name__ = name
    return parse


_threads = _type(Range(1, os.cpu_count() or 1, integer=True), "threads")
_seconds = _type(Range(0, low_open=True), "seconds")
_positive = _type(Range(1, integer=True), "positive")
_count = _type(Range(0, integer=True), "count")
_chars = _type(Range(0, MAX_CHARS, integer=True), "chars")
_nonnegative_float = _type(Range(0), "nonnegative")
_temperature = _type(Range(0, low_open=True), "temperature")
_seed = _type(Range(0, integer=True), "seed")
_at_least_two = _type(Range(2, integer=True), "at_least_two")


def _truncate(text):
    return None if text.lower() in ("none", "full") else _positive(text)


def _option_type(field):
    """The argparse type of a `fastbptt.train.TrainOptions` field: its range."""
    from ._train_options import OPTION_RANGES

    return _type(OPTION_RANGES[field], field)


def _checkpoint_every(text):
    """--checkpoint-every: "500" (steps), "30s" (seconds), "500,30s" (whichever comes
    first) or "0" (none): (steps, seconds), None where not given."""
    steps = seconds = None
    parts = text.replace(" ", "").split(",")
    try:
        kinds = ["s" if part.lower().endswith("s") else "n" for part in parts]
        if len(parts) > 2 or len(set(kinds)) < len(kinds):      # "5,7": which one?
            raise ValueError
        for part, kind in zip(parts, kinds):
            if kind == "s":
                seconds = Range(0)(part[:-1])
            else:
                steps = Range(0, integer=True)(part)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be N steps (a whole number), Ts seconds, both as N,Ts, or 0 for none; "
            f"got {text!r}") from None
    if not steps and not seconds:
        return (None, None)
    return (steps or None, seconds or None)


# the schemes of Dask's transports between processes (inproc:// addresses are refused
# later, in words of their own)
SCHEMES = ("tcp", "tls", "ucx", "ws", "wss")


def _address(text):
    """A scheduler's address: scheme://host:port or host:port, a scheme of Dask's
    (`SCHEMES`) and a port in [1, 65535], which Dask's tcp:// and tls:// need."""
    scheme, _, rest = text.rpartition("://")
    if scheme.lower() == "inproc":
        return text
    port = rest.rpartition(":")[2] if ":" in rest and not rest.endswith("]") else None
    if (scheme and scheme.lower() not in SCHEMES) or \
            not (port is not None and port.isdigit() and 0 < int(port) < 65536):
        raise argparse.ArgumentTypeError(f"must be a scheduler's address such as "
                                         f"tcp://host:8786; got {text!r}")
    return text


def _add_train(commands):
    from ._train_options import DEFAULT_CHECKPOINT_EVERY, DEFAULT_TIME, TrainOptions

    d = TrainOptions()
    t = commands.add_parser(
        "train", help="train a character model on text files (default: Python's own source)",
        description="Chunked truncated BPTT over one long character stream: B cursors, T "
                    "steps per call, each call's final state carried into the next call's "
                    "h0. Without TEXT_FILE it trains on the standard library's .py files and "
                    "holds out the last 10% for validation. Ctrl-C, SIGTERM or SIGHUP saves "
                    "a checkpoint and exits with code 130, 143 or 129; so does a run that "
                    "fails, with code 1, keeping the state before the failing step; a run "
                    "that diverges keeps its last checkpoint. --resume continues from a "
                    "checkpoint. Run it as `env -u "
                    "OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE fastbptt train` where those "
                    "variables are set.")
    t.add_argument("files", nargs="*", metavar="TEXT_FILE", help="UTF-8 text to train on")
    g = t.add_argument_group("model and data (fixed for a run; --resume takes them from "
                             "the checkpoint)")
    g.add_argument("--hidden", type=_option_type("hidden"), help=f"hidden size H ({d.hidden})")
    g.add_argument("--cell", choices=["elman", "gru", "lstm"],
                   help=f"recurrent cell (PyTorch's equations) ({d.cell})")
    g.add_argument("--layers", type=_option_type("layers"),
                   help=f"stacked layers, one direction (a model that generates text reads "
                        f"left to right) ({d.layers})")
    g.add_argument("--seq-length", type=_option_type("seq_length"), dest="seq_length",
                   help=f"steps T per call and cursor ({d.seq_length})")
    g.add_argument("--batch", type=_option_type("batch"),
                   help=f"parallel cursors B ({d.batch})")
    g.add_argument("--optimizer", choices=["adam", "adagrad", "sgd"],
                   help=f"({d.optimizer})")
    g.add_argument("--lr", type=_option_type("lr"),
                   help=f"learning rate; may change on --resume ({d.lr:g})")
    g.add_argument("--lr-decay", choices=["linear", "none"], dest="lr_decay",
                   help="linear: the rate falls in equal steps from lr at the first update "
                        "to lr x --lr-final once the decay ends, after --lr-horizon steps "
                        f"({d.lr_decay})")
    g.add_argument("--lr-final", type=_option_type("lr_final"), dest="lr_final",
                   help=f"the decay's final fraction of lr ({d.lr_final:g})")
    g.add_argument("--lr-horizon", type=_option_type("horizon"), dest="horizon", metavar="STEP",
                   help="the steps after which the decay ends (--steps, else estimated from "
                        "the speed of the first 200 steps and --time); may change on --resume")
    g.add_argument("--momentum", type=_option_type("momentum"),
                   help="SGD momentum (0); the other optimizers refuse it")
    g.add_argument("--clip-norm", type=_nonnegative_float, dest="clip_norm",
                   help="clip the global gradient norm to this; 0 = off; may change on "
                        "--resume (off)")
    g.add_argument("--clip-value", type=_nonnegative_float, dest="clip_value",
                   help="clip each gradient entry to [-v, v]; 0 = off; may change on "
                        f"--resume ({d.clip_value:g})")
    g.add_argument("--truncate", type=_option_type("truncate"),
                   help="BPTT window k (T: chunks, min-char-rnn's)")
    g.add_argument("--stride", type=_option_type("stride"),
                   help="stride s, 1 <= s <= k (k: chunks; 1: a window per output)")
    g.add_argument("--dtype", choices=["float32", "float64"], help=f"({d.dtype})")
    g.add_argument("--activation", choices=["tanh", "sigmoid", "relu", "identity"],
                   help=f"the Elman cell's ({d.activation})")
    g.add_argument("--seed", type=_option_type("seed"), help=f"weights and samples ({d.seed})")
    g.add_argument("--val-fraction", type=_option_type("val_fraction"), dest="val_fraction",
                   help=f"last part of the text held out ({d.val_fraction:g})")
    r = t.add_argument_group("this invocation")
    r.add_argument("--steps", type=_positive,
                   help="stop when the run has taken this many steps in all")
    r.add_argument("--time", type=_seconds,
                   help=f"stop after this many seconds of training in this invocation "
                        f"({DEFAULT_TIME:g} when --steps is not given either)")
    r.add_argument("--threads", type=_threads,
                   help="BLAS threads (1, unless OPENBLAS_NUM_THREADS or OMP_NUM_THREADS is "
                        "set; a resumed run: the checkpoint's)")
    r.add_argument("--checkpoint", default="fastbptt-char.npz",
                   help="where to save (and --resume from) (fastbptt-char.npz)")
    r.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    r.add_argument("--overwrite", action="store_true",
                   help="start a new run even where --checkpoint holds an earlier one, "
                        "which it replaces (without this, a new run refuses to)")
    r.add_argument("--checkpoint-every", type=_checkpoint_every, dest="checkpoint_every",
                   metavar="N|Ts|N,Ts",
                   help="also save every N steps and/or T seconds, whichever comes first; 0 = "
                        f"only at the end ({DEFAULT_CHECKPOINT_EVERY[1]:g}s, and never sooner "
                        "than 100 times the last save took)")
    w = t.add_argument_group("more than one process (needs the distributed extra)")
    w.add_argument("--workers", type=_positive, metavar="N",
                   help="train on N Dask worker processes of one thread each, in a local "
                        "cluster on 127.0.0.1; with --scheduler, use N of its workers")
    w.add_argument("--scheduler", type=_address, metavar="ADDRESS",
                   help="train on the workers of the Dask cluster whose scheduler is at "
                        "ADDRESS (e.g. tcp://10.0.0.5:8786; Dask's security settings apply)")
    r.add_argument("--sample-every", type=_count, default=2000, dest="sample_every",
                   help="steps between validation estimates (and samples) during the run; "
                        "0 = none (2000)")
    r.add_argument("--sample-chars", type=_chars, default=300, dest="sample_chars",
                   help="characters per sample, during the run and at its end; 0 = no "
                        "samples (300)")
    r.add_argument("--temperature", type=_temperature, default=0.8,
                   help="of the samples (0.8)")
    r.add_argument("--eval-chars", type=_at_least_two, default=50_000, dest="eval_chars",
                   help="validation characters used for the estimates between samples; the "
                        "final validation loss uses all (50000)")
    r.add_argument("--no-progress", action="store_true", dest="no_progress",
                   help="no progress bar")
    r.add_argument("--plot", metavar="FILE.png", help="save the loss curves (needs matplotlib)")
    t.set_defaults(run=train)

    s = commands.add_parser("sample", help="print text from a checkpoint of fastbptt train")
    s.add_argument("checkpoint", metavar="CHECKPOINT")
    s.add_argument("--chars", type=_chars, default=500, help="characters to draw (500)")
    s.add_argument("--temperature", type=_temperature, default=0.8,
                   help="below 1 sharper, above 1 more random; a tiny one draws the most "
                        "likely character (0.8)")
    s.add_argument("--prime", default="", type=_text,
                   help="text to start from (printed first)")
    s.add_argument("--seed", type=_seed, default=None, help="for reproducible text")
    s.set_defaults(run=sample)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line (no usage block), with status 2.

    ``given`` is the command line it parses, for the hint on a value that begins with
    '-'; ``implicit`` marks demo's parser where the command line named no command.
    """

    given = ()
    implicit = False

    def error(self, message):
        hint = _dash_hint(message, self.given, self._option_string_actions)
        if self.implicit:
            self.exit(2, f"fastbptt: {message}{hint}; without a command fastbptt runs "
                         f"demo: see `fastbptt demo -h`, and `fastbptt -h` for the "
                         f"commands\n")
        self.exit(2, f"{self.prog}: {message}{hint}; see `{self.prog} -h`\n")


def _dash_hint(message, given, options):
    """Where an option got no value because the value begins with '-' (``--time -5m``,
    which argparse reads as an option), how to write it; nothing where the word after
    the option is one of the command's `options` (or an abbreviation of one): then the
    value was left out."""
    found = re.fullmatch(r"argument (\S+?)(?:/\S+)?: expected one argument", message)
    if found is None:
        return ""
    option = found.group(1)
    for i, arg in enumerate(given[:-1]):        # the option as given, or abbreviated
        if (arg == option or arg.startswith("--") and len(arg) > 2 and
                option.startswith(arg)) and given[i + 1].startswith("-"):
            if _names_an_option(given[i + 1], options):
                return ""
            return (f"; a value that begins with '-' is written "
                    f"{arg}={given[i + 1]}")
    return ""


def _names_an_option(word, options):
    name = word.split("=", 1)[0]
    return name in options or (name.startswith("--") and len(name) > 2 and
                               any(o.startswith(name) for o in options))


COMMANDS = ("demo", "bench", "train", "sample")


def build_parser():
    from . import __version__

    parser = _Parser(prog="fastbptt", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"fastbptt {__version__}")
    commands = parser.add_subparsers(dest="command")
    d = commands.add_parser("demo", help="the documents' example: kernels vs reference")
    d.add_argument("--steps", type=_positive, default=100, help="sequence length T (100)")
    d.add_argument("--hidden", type=_positive, default=128, help="hidden size H (128)")
    d.add_argument("--vocab", type=_positive, default=65, help="symbols, in and out (65)")
    d.add_argument("--batch", type=_positive, default=1, help="sequences per call (1)")
    d.add_argument("--activation", default="sigmoid",
                   choices=["tanh", "sigmoid", "relu", "identity"],
                   help="(sigmoid, the documents')")
    d.add_argument("--truncate", type=_truncate, default=10,
                   help="window length k, or 'full' (10, as document 003)")
    d.add_argument("--dtype", default="float64", choices=["float32", "float64"],
                   help="(float64)")
    d.add_argument("--repeat", type=_positive, default=200,
                   help="timed calls of the kernels (200)")
    d.add_argument("--seed", type=_seed, default=0, help="of the weights and data (0)")
    d.set_defaults(run=demo)

    b = commands.add_parser(
        "bench", help="time the workloads against the documents' loop, PyTorch and JAX",
        description="Median of repeated calls per workload, all in this process, the same "
                    "thread count for every implementation; peers are checked against "
                    "fastbptt before they are timed. Run it as `env -u OPENBLAS_CORETYPE "
                    "-u OPENBLAS_L2_SIZE fastbptt bench` where those variables are set. On "
                    "glibc it runs with MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ "
                    "fixed high unless you set either, so that no implementation pays page "
                    "faults for memory freed and mapped again on every call.")
    b.add_argument("--workloads", type=_workload_names, default=None,
                   help="comma-separated names or groups W, S, G, e.g. W1,W3 or S,G3 (all)")
    b.add_argument("--threads", type=_threads, default=1,
                   help="threads for every implementation (1)")
    b.add_argument("--repeat", type=_positive, default=50,
                   help="timed calls per measurement, fewer when they would exceed about 2 s "
                        "(6 s for --torch and --jax steps) (50)")
    b.add_argument("--reference", action="store_true",
                   help="also time the documents' loop on W3 and W4, once each (slow)")
    b.add_argument("--no-peers", action="store_true",
                   help="time fastbptt alone (no documents' loop, PyTorch or JAX)")
    b.add_argument("--startup", action="store_true",
                   help="also measure the warm start of each cell, the cold compile of "
                        "each cell and dtype, and W5 peak memory (about 2 minutes)")
    b.add_argument("--plot", metavar="FILE.png",
                   help="bar chart of the speed ratios (needs matplotlib)")
    b.add_argument("--json", metavar="FILE", help="write every measurement as JSON")
    b.add_argument("--torch", action="store_true",
                   help="time training steps through fastbptt.torch against PyTorch's own "
                        "modules (T1, T1e, T2, T3) instead of the workloads (add --workloads "
                        "for both)")
    b.add_argument("--jax", action="store_true",
                   help="time jit(value_and_grad) through fastbptt.jax against lax.scan "
                        "layers (T4, T5) instead of the workloads (add --workloads for both)")
    b.add_argument("--distributed", action="store_true",
                   help="instead: training on 2 Dask workers against one process, equality "
                        "and speed (needs the distributed extra)")
    b.set_defaults(run=bench)
    _add_train(commands)
    parser.commands = commands.choices          # name -> its parser
    return parser


# the program again, from this very package: `python -m fastbptt` would import a
# fastbptt folder in the current directory first
_AGAIN = ("import sys; sys.path[0] = {root!r}; sys.argv[0] = 'fastbptt'; "
          "from fastbptt._start import main; sys.exit(main())")


def _text(arg):
    """An argument read as text: where the locale could not decode its bytes (Python
    escapes them as surrogates: LC_ALL=C without UTF-8 mode), read as UTF-8 if they are."""
    if not any("\udc80" <= ch <= "\udcff" for ch in arg):
        return arg
    try:
        return os.fsencode(arg).decode("utf-8")
    except UnicodeError:
        return arg


def _escaping_stdout():
    """The program's stdout writes what its encoding cannot (text in an ASCII locale, file
    names' undecodable bytes) as backslash escapes, instead of failing mid-run; UTF-8
    with surrogate escapes (Python's UTF-8 mode) already writes everything."""
    out = sys.stdout
    if isinstance(out, io.TextIOWrapper) and (
            out.errors == "strict" or codecs.lookup(out.encoding).name != "utf-8"):
        out.reconfigure(errors="backslashreplace")


class _NamedOutput:
    """The program's stdout, whose write errors name it: an OSError from writing a stream
    has no file name, so a full disk or ``> /dev/full`` said only "No space left on
    device". Everything else is the stream's own."""

    def __init__(self, stream):
        self._stream = stream

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def _named(self, error):
        if error.filename is not None or isinstance(error, BrokenPipeError) or \
                not error.strerror:
            return error
        return OSError(error.errno, error.strerror, "the standard output")

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as error:
            raise self._named(error) from None

    def flush(self):
        try:
            return self._stream.flush()
        except OSError as error:
            raise self._named(error) from None


def _steady_malloc(argv):
    """Re-execute this program with glibc's malloc thresholds fixed (`bench.allocator`),
    with the interpreter's flags and this package; returns only where there is nothing
    to change."""
    import subprocess

    from .bench.allocator import steady_environment

    environ = steady_environment()
    if environ is not None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, *_interpreter_flags(subprocess),
                                   "-c", _AGAIN.format(root=root), *argv], environ)


def _interpreter_flags(subprocess):
    """The interpreter's flags as ``subprocess`` gives them to a child, and every other
    ``-X`` option (``int_max_str_digits``, ``pycache_prefix``, ...), which it leaves out."""
    flags = subprocess._args_from_interpreter_flags()
    given = {flags[i + 1].split("=")[0] for i, flag in enumerate(flags[:-1]) if flag == "-X"}
    for name, value in sys._xoptions.items():
        if name not in given and name != "dev":         # -X dev: in the flags as dev_mode
            flags += ["-X", name if value is True else f"{name}={value}"]
    return flags


def main(argv=None):
    """Run the command in ``argv`` (default: the program's arguments); its exit status.

    Without ``argv`` this is the program: signals that come after the command has ended
    are ignored until it exits, so they cannot change its status.
    """
    last = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if last:
        _escaping_stdout()
        if sys.stdout is not None:
            sys.stdout = _NamedOutput(sys.stdout)
    if sys.stderr is None:                  # closed (2>&-): say nothing, as 2>/dev/null
        sys.stderr = open(os.devnull, "w")
    if sys.stdout is None:                  # closed (>&-): refused before any work
        print("fastbptt: the standard output is closed; redirect it to a file, or to "
              "/dev/null to discard it", file=sys.stderr)
        return 1
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:
        close = difflib.get_close_matches(argv[0], COMMANDS, n=1)
        print(f"fastbptt: unknown command {argv[0]!r}"
              f"{f' (did you mean {close[0]!r}?)' if close else ''}; the commands are "
              f"{', '.join(COMMANDS)}; see `fastbptt -h`", file=sys.stderr)
        return 2
    implicit = not argv or argv[0] not in COMMANDS + ("-h", "--help", "--version")
    if implicit:
        argv = ["demo"] + argv                  # demo is the default: `fastbptt --steps 20`
    try:                                        # bench's --workloads imports NumPy
        parser = build_parser()
        for each in (parser, *parser.commands.values()):
            each.given = argv
        parser.commands["demo"].implicit = implicit
        args, unknown = parser.parse_known_args(argv)
    except KeyboardInterrupt:
        return interrupted("fastbptt")
    if unknown:         # text files among the options (`train a.txt --hidden 64 b.txt`), or
        command = parser.commands[args.command]     # a mistake, which its parser words
        args = command.parse_intermixed_args(argv[1:],
                                             argparse.Namespace(command=args.command))
    if last and args.command == "bench":
        _steady_malloc(argv)
    return run_command(f"fastbptt {args.command}", args.run, args, last=last)
