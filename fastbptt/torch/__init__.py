"""PyTorch modules that run on fastbptt: ``RNN``, ``GRU`` and ``LSTM``.

Swap one import: ``from fastbptt.torch import LSTM`` in place of ``torch.nn.LSTM``. The
constructor, the parameters (names, shapes, initialisation, so ``load_state_dict`` works
both ways with the native modules), ``forward(input, hx=None)`` and its outputs are
PyTorch's; the forward pass and the gradients come from `fastbptt.layer.vjp`. Two keywords
no PyTorch module has, ``truncate=`` and ``stride=``, set BPTT(k; s) (SPEC.md §3) on the
gradient flowing back from every output step.

The modules subclass ``torch.nn.RNN``, ``torch.nn.GRU`` and ``torch.nn.LSTM`` (so code
that checks ``isinstance(m, nn.LSTM)`` treats them alike) and replace only ``forward``.
Refused: ``proj_size > 0``, tensors on a device other than the CPU, dtypes other than
float32 and float64, and double backward (``create_graph=True``).

Needs PyTorch: ``pip install 'fastbptt[torch]'``. ``import fastbptt`` does not import it.
"""
try:
    import torch  # noqa: F401
except ImportError:
    raise ModuleNotFoundError("fastbptt.torch needs PyTorch: pip install "
                              "'fastbptt[torch]'") from None

from ._modules import GRU, LSTM, RNN

__all__ = ["RNN", "GRU", "LSTM"]
