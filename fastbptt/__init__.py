"""Exact backpropagation-through-time gradients for Elman RNNs, from Numba kernels.

``fastbptt.grad(x, y, params)`` returns the gradients of the summed loss of the model
h_t = f(U x_t + W h_{t-1} + b), o_t = V h_t + c, with optional truncation, in the
structure of ``params``. `fastbptt.reference` computes the same numbers with readable
NumPy loops.

For training loops: `fastbptt.optim` (SGD, Adagrad, Adam, updating params in place),
`clip_grads`, `fastbptt.text` (a character codec and a stream batcher for chunked training),
`sample`, `fastbptt.checkpoint`, the `fastbptt.train` trainer behind the ``fastbptt train``
command, and data-parallel training on Dask (`fastbptt.distributed`, an optional extra).
"""
import numba as _numba

if _numba.config.DISABLE_JIT:
    raise ImportError("fastbptt cannot run with NUMBA_DISABLE_JIT=1: its kernels call vector "
                      "intrinsics and BLAS symbols that exist only in compiled code; unset "
                      "NUMBA_DISABLE_JIT")

from ._results import BPTTResult, ForwardResult
from .api import bptt, forward, grad, loss, value_and_grad
from .gradcheck import check_grad, check_layer_grad
from .interchange import from_torch, to_torch
from ._threads import get_num_threads, set_num_threads
from ._workspace import clear_workspace
from .params import Layer, Model, Params, init_params
from . import checkpoint, layer, optim, text
from .clip import clip_grads
from .optim import SGD, Adagrad, Adam
from .sampling import sample
from .text import Codec, StreamBatcher

__all__ = [
    "BPTTResult", "ForwardResult", "Layer", "Model", "Params", "bptt", "check_grad",
    "check_layer_grad", "clear_workspace", "forward", "from_torch", "to_torch",
    "get_num_threads", "grad", "init_params", "loss", "set_num_threads", "value_and_grad",
    "Adagrad", "Adam", "Codec", "SGD", "StreamBatcher", "checkpoint", "clip_grads", "optim",
    "sample", "text", "layer",
]
__version__ = "0.1.0"
