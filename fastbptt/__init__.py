"""Exact backpropagation-through-time gradients for recurrent networks (Elman, LSTM and
GRU cells, stacks, both directions), from Numba kernels.

``fastbptt.grad(x, y, params)`` returns the gradients of the summed loss of the model
h_t = f(U x_t + W h_{t-1} + b), o_t = V h_t + c (or a gated cell's h_t, SPEC.md §6),
with optional truncation, in the structure of ``params``; `fastbptt.layer` gives the
recurrence alone with its vector-Jacobian product, under any loss. `fastbptt.reference`
computes the same numbers with readable NumPy loops.

For training loops: `fastbptt.optim` (SGD, Adagrad, Adam, updating params in place),
`clip_grads`, `fastbptt.text` (a character codec and a stream batcher for chunked training),
`sample`, `fastbptt.checkpoint`, the `fastbptt.train` trainer behind the ``fastbptt train``
command, and data-parallel training on Dask (`import fastbptt.distributed`, an optional
extra).

``import fastbptt`` imports neither NumPy nor Numba: each name below loads its module on
first use (``fastbptt.grad`` loads the engine), so that the ``fastbptt`` command answers
signals and ``-h`` from its first moment.
"""
import os as _os
from typing import TYPE_CHECKING

_WHY_COMPILED = ("its kernels call vector intrinsics and BLAS symbols that exist only in "
                 "compiled code")
_DISABLED_JIT = (f"fastbptt cannot run with NUMBA_DISABLE_JIT=1: {_WHY_COMPILED}; unset "
                 "NUMBA_DISABLE_JIT")
_DISABLED_JIT_CONFIG = (f"fastbptt cannot run with Numba's JIT disabled (disable_jit in a "
                        f".numba_config.yaml, or numba.config.DISABLE_JIT set): {_WHY_COMPILED}; "
                        "remove that setting, or override it with NUMBA_DISABLE_JIT=0")


class JitDisabledError(ImportError):
    """Numba's JIT is switched off, and fastbptt's kernels cannot run as Python."""


class CacheUnavailableWarning(RuntimeWarning):
    """Numba can write its cache nowhere: kernels compile on every new process."""


def _jit_disabled_by_environment():
    """NUMBA_DISABLE_JIT as Numba reads it (an integer; anything else is ignored)."""
    try:
        return int(_os.environ.get("NUMBA_DISABLE_JIT", "") or 0) != 0
    except ValueError:
        return False


def _refuse_disabled_jit(message):
    """Raise `JitDisabledError`. Where the fastbptt command is starting (its script, or
    ``python -m fastbptt``: Python sets argv[0] to "-m" while it imports the package),
    before its own error handling, the error left uncaught is said in one line instead of
    a traceback; the status is Python's 1 either way."""
    import sys

    if sys.argv and (sys.argv[0] == "-m" or
                     _os.path.basename(sys.argv[0]).partition(".")[0] == "fastbptt"):
        previous = sys.excepthook

        def one_line(kind, error, traceback):
            if isinstance(error, JitDisabledError):      # its message names fastbptt
                print(f"fastbptt: {str(error).removeprefix('fastbptt ')}", file=sys.stderr)
            else:
                previous(kind, error, traceback)

        sys.excepthook = one_line
    raise JitDisabledError(message)


if _jit_disabled_by_environment():      # set in Numba's configuration: `_kernels` refuses it
    _refuse_disabled_jit(_DISABLED_JIT)

_WHERE = {
    "BPTTResult": "_results", "ForwardResult": "_results",
    "bptt": "api", "forward": "api", "grad": "api", "loss": "api", "value_and_grad": "api",
    "check_grad": "gradcheck", "check_layer_grad": "gradcheck",
    "from_torch": "interchange", "to_torch": "interchange",
    "get_num_threads": "_threads", "set_num_threads": "_threads",
    "clear_workspace": "_workspace",
    "Layer": "params", "Model": "params", "Params": "params", "init_params": "params",
    "clip_grads": "clip",
    "SGD": "optim", "Adagrad": "optim", "Adam": "optim",
    "sample": "sampling",
    "Codec": "text", "StreamBatcher": "text",
}
_SUBMODULES = ("api", "checkpoint", "clip", "corpus", "gradcheck", "interchange", "layer",
               "optim", "params", "reference", "sampling", "text", "train")

__all__ = [
    "BPTTResult", "ForwardResult", "Layer", "Model", "Params", "bptt", "check_grad",
    "check_layer_grad", "clear_workspace", "forward", "from_torch", "to_torch",
    "get_num_threads", "grad", "init_params", "loss", "set_num_threads", "value_and_grad",
    "Adagrad", "Adam", "Codec", "SGD", "StreamBatcher", "checkpoint", "clip_grads", "optim",
    "sample", "text", "layer", "JitDisabledError", "CacheUnavailableWarning",
]
__version__ = "0.1.0"


def __getattr__(name):
    from importlib import import_module

    if name in _WHERE:
        value = getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    elif name in _SUBMODULES:
        value = import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE) | set(_SUBMODULES))


if TYPE_CHECKING:
    from . import api, checkpoint, clip, gradcheck, interchange, layer, optim, params
    from . import corpus, reference, sampling, text, train
    from ._results import BPTTResult, ForwardResult
    from ._threads import get_num_threads, set_num_threads
    from ._workspace import clear_workspace
    from .api import bptt, forward, grad, loss, value_and_grad
    from .clip import clip_grads
    from .gradcheck import check_grad, check_layer_grad
    from .interchange import from_torch, to_torch
    from .optim import SGD, Adagrad, Adam
    from .params import Layer, Model, Params, init_params
    from .sampling import sample
    from .text import Codec, StreamBatcher
