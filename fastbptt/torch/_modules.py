"""``RNN``, ``GRU``, ``LSTM``: PyTorch's modules with a forward pass that runs on fastbptt.

Each subclasses its native module, which keeps the constructor's checks, the parameters
(names, shapes, initialisation), ``check_forward_args``, ``permute_hidden`` and the rest;
`_Bridge.forward` replaces ``forward`` with the same semantics: time-major or batch-first
(B, T, F), unbatched (T, F), ``PackedSequence`` in and out, hx in the caller's order,
dropout between layers in training mode.

Integer input (token ids, one axis fewer than float input) stands for one-hot vectors of
``input_size`` features, as ``F.one_hot(ids, input_size)`` converted to floats would,
without building them: the first layer gathers columns of ``weight_ih_l0`` (SPEC.md §1)
and the ids get no gradient.

Layouts: fastbptt takes time-major or batch-first input and gives its output, and takes
the output's gradient, in the same layout (``time_major`` of `fastbptt.layer`), so that
neither is transposed here (fastbptt copies x into its own layout, as it does any input).
A ``PackedSequence`` is unpacked into a zero-padded batch-first tensor and its output
packed again (one copy each way), with sequence lengths passed to fastbptt.
"""
from __future__ import annotations

import numpy as np
import torch
from torch.nn.utils.rnn import PackedSequence

from .._bridge_options import check_truncation
from .._kernels.checks import id_range
from ._function import Config, host, refuse_transforms, run

FLOATS = (torch.float32, torch.float64)


def _check_truncation(module):
    """Validate ``truncate`` and ``stride`` for this module's layers and directions;
    (truncate, stride) as Python ints (a tensor or NumPy int given is not kept)."""
    return check_truncation(module.truncate, module.stride, layers=module.num_layers,
                            directions=2 if module.bidirectional else 1)


def _check_tensors(module, tensors):
    """CPU tensors of float32 or float64, hx of the weights' dtype."""
    name = type(module).__name__
    weights = zip(module._flat_weights_names, module._flat_weights)
    for what, t in [("a tensor", t) for t in tensors] + [(f"{n}", w) for n, w in weights]:
        if not t.is_cpu:
            raise ValueError(f"fastbptt.torch.{name} runs on the CPU; got {what} on "
                             f"{t.device}: move the module and tensors with .cpu(), or use "
                             f"torch.nn.{name} on that device")
    dtype = module._flat_weights[0].dtype
    if dtype not in FLOATS:
        raise TypeError(f"fastbptt.torch.{name} computes in float32 or float64; its weights "
                        f"are {dtype}: convert with .float() or .double(), or use "
                        f"torch.nn.{name}")
    for w_name, w in zip(module._flat_weights_names, module._flat_weights):
        if w.dtype != dtype:
            raise TypeError(f"fastbptt.torch.{name}: {w_name} is {w.dtype} and "
                            f"{module._flat_weights_names[0]} {dtype}: the weights must "
                            "share one dtype (convert the module with .float() or .double())")
    for t in tensors[1:]:
        if t.dtype != dtype:
            raise ValueError(f"hx dtype ({t.dtype}) does not match weight dtype ({dtype})")


def _autocast(module, input, hx):
    """input and hx in the weights' dtype under ``torch.autocast``: fastbptt has no lower
    precision, so there it computes in the weights' (as autocast runs the operations it
    does not list), and returns outputs of that dtype."""
    dtype = module._flat_weights[0].dtype

    def cast(t):
        return t.to(dtype) if t.is_floating_point() and t.dtype != dtype else t
    if isinstance(input, PackedSequence):
        input = PackedSequence(cast(input.data), *input[1:])
    else:
        input = cast(input)
    if hx is not None:
        hx = tuple(map(cast, hx)) if module._cell == "lstm" else cast(hx)
    return input, hx


def _untraced_forward():
    """`_Bridge._forward` behind ``torch.compiler.disable``, made only under
    ``torch.compile`` (where the call is a graph break, so made on each compiled call):
    that imports Dynamo, a second that a program which does not compile need not spend.
    Dynamo cannot trace into Numba, and the frames it resumes after such a break read
    ``.grad`` of the non-leaf tensors they hold, a warning. Not kept from call to call:
    one kept from an earlier trace (across ``torch._dynamo.reset()``, or a failed
    ``torch.export``) no longer stopped Dynamo from tracing into fastbptt."""
    return torch.compiler.disable(_Bridge._forward)


def _exporting():
    """Whether torch.export is tracing (asked here, where Dynamo does not trace: some
    PyTorch versions' Dynamo took ``is_exporting()`` for True under torch.compile too);
    False for a PyTorch without the function."""
    is_exporting = getattr(torch.compiler, "is_exporting", None)
    return is_exporting is not None and is_exporting()


def _check_ids(module, ids, where="input"):
    """ValueError naming the first token id outside [0, input_size), at its index in the
    caller's tensor."""
    n = module.input_size
    refuse_transforms(type(module).__name__, (ids,))    # before NumPy fails on them
    values = host(ids)
    if not values.size:
        return
    low, high = id_range(values.reshape(-1))   # one pass, as fastbptt checks ids
    if low < 0 or high >= n:
        index = tuple(int(i) for i in np.argwhere((values < 0) | (values >= n))[0])
        raise ValueError(f"token ids must lie in [0, input_size={n}); got "
                         f"{int(values[index])} at index {index} of {where}")


def _check_types(input, hx, lstm):
    """TypeError for an input that is not a tensor or a PackedSequence, and for hx that
    is not a tensor (an LSTM's: a tuple (h_0, c_0) of two tensors)."""
    if isinstance(input, torch.fx.Proxy):
        raise TypeError("torch.fx cannot trace into fastbptt.torch's modules (their forward "
                        "calls Numba kernels through NumPy): make them leaves, with a "
                        "torch.fx.Tracer whose is_leaf_module returns True for them")
    if not isinstance(input, (torch.Tensor, PackedSequence)):
        raise TypeError(f"input must be a tensor or a PackedSequence; got "
                        f"{type(input).__name__}")
    if hx is None:
        return
    if lstm and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
        got = type(hx).__name__ + (f" of {len(hx)}" if isinstance(hx, (tuple, list)) else "")
        raise TypeError(f"hx of an LSTM must be a tuple (h_0, c_0) of two tensors; got a {got}")
    for what, t in zip(("h_0", "c_0"), hx) if lstm else (("hx", hx),):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{what} must be a tensor; got {type(t).__name__}")


def _check_kind(input):
    """TypeError for input that is neither floats nor integer token ids."""
    if input.dtype == torch.bool or input.is_complex() or input.is_quantized:
        hint = " (dequantize it first: input.dequantize())" if input.is_quantized else ""
        raise TypeError(f"input must hold floats of the weights' dtype, or integer token "
                        f"ids; got {input.dtype}{hint}")


class _Padding:
    """Where the rows of a ``PackedSequence``'s data sit in a zero-padded batch-first
    (B, T, F) tensor, and the sequences' lengths (in the packed, sorted order)."""

    def __init__(self, batch_sizes):
        T, B = len(batch_sizes), int(batch_sizes[0])
        steps, seqs = torch.arange(T)[:, None], torch.arange(B)[None, :]
        real = seqs < batch_sizes[:, None]                            # (T, B)
        self.rows = (seqs * T + steps)[real]                          # packed order
        self.lengths = real.sum(0).numpy().astype(np.int64)
        self.B, self.T = B, T

    def pad(self, data):
        zeros = data.new_zeros((self.B * self.T,) + data.shape[1:])
        return zeros.index_copy(0, self.rows, data).view((self.B, self.T) + data.shape[1:])

    def pack(self, padded):
        return padded.reshape(self.B * self.T, -1).index_select(0, self.rows)


class _Bridge:
    """The forward pass shared by the three modules."""

    _cell = "elman"
    truncate, stride = None, 1      # where a native module's state becomes this class's

    def _fastbptt_options(self, truncate, stride):
        self.truncate, self.stride = truncate, stride
        self.truncate, self.stride = _check_truncation(self)

    def extra_repr(self):
        s = super().extra_repr()
        if self.truncate is not None:
            s += f", truncate={self.truncate}"
            s += f", stride={self.stride}" if self.stride != 1 else ""
        return s

    def __prepare_scriptable__(self):
        name = type(self).__name__
        raise TypeError(f"fastbptt.torch.{name} cannot be compiled by torch.jit.script: its "
                        "forward calls Numba kernels through NumPy. Call the module as it "
                        "is, or through torch.compile (which runs it between the graphs it "
                        f"compiles); torch.nn.{name} scripts")

    def forward(self, input, hx=None):
        """PyTorch's ``forward``; see ``torch.nn.RNN``, ``GRU``, ``LSTM``. Under
        ``torch.compile`` it runs whole between the graphs compiled."""
        if torch.compiler.is_compiling():
            return _untraced_forward()(self, input, hx)
        return self._forward(input, hx)

    def _forward(self, input, hx):
        """`forward` itself."""
        if torch.jit.is_tracing():
            name = type(self).__name__
            raise TypeError(f"fastbptt.torch.{name} cannot be traced by torch.jit.trace: its "
                            "forward calls Numba kernels through NumPy, which a trace would "
                            "record as constants. Call the module as it is, or through "
                            f"torch.compile; torch.nn.{name} traces")
        if _exporting():
            name = type(self).__name__
            raise TypeError(f"fastbptt.torch.{name} cannot be exported by torch.export: its "
                            "forward calls Numba kernels through NumPy, which an exported "
                            f"graph cannot hold. Use torch.nn.{name} to export")
        self._update_flat_weights()
        _check_truncation(self)
        lstm = self._cell == "lstm"
        _check_types(input, hx, lstm)
        if torch.is_autocast_enabled("cpu"):
            input, hx = _autocast(self, input, hx)
        states = () if hx is None else (tuple(hx) if lstm else (hx,))
        _check_tensors(self, (input.data if isinstance(input, PackedSequence) else input,
                              *states))
        if isinstance(input, PackedSequence):
            data, batch_sizes, sorted_indices, unsorted_indices = input
            if hx is not None:
                hx = self.permute_hidden(hx, sorted_indices)
            self._check_args(data, hx, batch_sizes)
            if not data.is_floating_point():
                _check_ids(self, data, "input.data")
            padding = _Padding(batch_sizes)
            out, hidden = self._layers(padding.pad(data), hx, padding)
            output = PackedSequence(padding.pack(out), batch_sizes, sorted_indices,
                                    unsorted_indices)
            return output, self.permute_hidden(hidden, unsorted_indices)
        _check_kind(input)
        features = int(input.is_floating_point())          # token ids have no feature axis
        if input.dim() not in (1 + features, 2 + features):
            kind = "" if features else (" token ids (integer input, one axis fewer than "
                                        "float features)")
            raise ValueError(f"{type(self).__name__}: Expected input to be {1 + features}D or "
                             f"{2 + features}D{kind}, got {input.dim()}D tensor instead")
        batched = input.dim() == 2 + features
        if input.shape[int(batched and self.batch_first)] == 0:
            raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
        if not features:
            _check_ids(self, input)
        batch_dim = 0 if self.batch_first else 1
        if not batched:
            input = input.unsqueeze(batch_dim)
        if hx is not None:
            want = 3 if batched else 2
            if any(h.dim() != want for h in states):
                raise RuntimeError(f"For {'batched' if batched else 'unbatched'} input, "
                                   f"hx{' and cx' if lstm else ''} should be {want}-D but got "
                                   f"{', '.join(f'{h.dim()}-D' for h in states)}")
            if not batched:
                hx = tuple(h.unsqueeze(1) for h in states) if lstm else hx.unsqueeze(1)
        self._check_args(input, hx, None)
        out, hidden = self._layers(input, hx, None, time_major=not self.batch_first)
        if not batched:
            out = out.squeeze(batch_dim)
            hidden = tuple(h.squeeze(1) for h in hidden) if lstm else hidden.squeeze(1)
        return out, hidden

    def _check_args(self, input, hx, batch_sizes):
        """PyTorch's checks of input and hx; for token ids (integers, no feature axis)
        their dimensions and hx's sizes."""
        if input.is_floating_point():
            if hx is None:
                self.check_input(input, batch_sizes)
            else:
                self.check_forward_args(input, hx, batch_sizes)
            return
        _check_kind(input)
        want = 1 if batch_sizes is not None else 2
        if input.dim() != want:
            raise RuntimeError(f"token ids must have {want} dimensions, got {input.dim()}")
        if hx is not None:
            expected = self.get_expected_hidden_size(input, batch_sizes)
            lstm = self._cell == "lstm"
            for i, h in enumerate(hx if lstm else (hx,)):
                name = f"hidden[{i}]" if lstm else "hidden"
                self.check_hidden_size(h, expected, f"Expected {name} size {{}}, got {{}}")

    def _layers(self, x, hx, padding, time_major=False):
        """(output, h_n or (h_n, c_n)) from x and hx in the batch's order, x and the
        output batch-first ((B, T, ...)) or ``time_major`` ((T, B, ...)): one fastbptt call
        for the whole stack, or one per layer with dropout between them (in training
        mode)."""
        lstm = self._cell == "lstm"
        states = (None, None) if hx is None else (tuple(hx) if lstm else (hx, None))
        D = 2 if self.bidirectional else 1
        per = (4 if self.bias else 2) * D
        dropout = self.dropout if self.training and self.num_layers > 1 else 0.0
        spans = [(l, l + 1) for l in range(self.num_layers)] if dropout else \
            [(0, self.num_layers)]
        lengths = None if padding is None else padding.lengths
        h_n, c_n = [], []
        for a, b in spans:
            cfg = Config(self._cell, "relu" if self.mode == "RNN_RELU" else "tanh", b - a, D,
                         self.bias, lengths, self.truncate, self.stride, time_major)
            h0, c0 = (None if s is None else s[a * D:b * D] for s in states)
            x, h, c = run(cfg, x, h0, c0, self._flat_weights[a * per:b * per])
            h_n.append(h)
            c_n.append(c)
            if dropout and b < self.num_layers:
                x = self._dropout(x, padding, time_major)
        h_n = h_n[0] if len(h_n) == 1 else torch.cat(h_n)
        if not lstm:
            return x, h_n
        return x, (h_n, c_n[0] if len(c_n) == 1 else torch.cat(c_n))

    def _dropout(self, x, padding, time_major):
        """Dropout on a layer's output as PyTorch's own modules apply it: on the time-major
        (T, B, H D) output, or on a ``PackedSequence``'s data, so that the same random
        numbers zero the same entries."""
        drop = torch.nn.functional.dropout
        if padding is not None:
            return padding.pad(drop(padding.pack(x), self.dropout, True))
        if time_major:
            return drop(x, self.dropout, True)
        return drop(x.transpose(0, 1).contiguous(), self.dropout, True).transpose(0, 1)


class RNN(_Bridge, torch.nn.RNN):
    """``torch.nn.RNN`` on fastbptt, plus ``truncate`` and ``stride`` (BPTT(k; s)).

    The constructor takes ``torch.nn.RNN``'s arguments, positional and keyword, and
    checks them as it does; ``nonlinearity`` is "tanh" or "relu".
    """

    def __init__(self, *args, truncate=None, stride=1, **kwargs):
        super().__init__(*args, **kwargs)
        self._fastbptt_options(truncate, stride)


class GRU(_Bridge, torch.nn.GRU):
    """``torch.nn.GRU`` on fastbptt, plus ``truncate`` and ``stride`` (BPTT(k; s)).

    The constructor takes ``torch.nn.GRU``'s arguments, positional and keyword, and
    checks them as it does.
    """

    _cell = "gru"

    def __init__(self, *args, truncate=None, stride=1, **kwargs):
        super().__init__(*args, **kwargs)
        self._fastbptt_options(truncate, stride)


class LSTM(_Bridge, torch.nn.LSTM):
    """``torch.nn.LSTM`` on fastbptt, plus ``truncate`` and ``stride`` (BPTT(k; s)).

    The constructor takes ``torch.nn.LSTM``'s arguments, positional and keyword, and
    checks them as it does; ``proj_size > 0`` (an LSTM with projections) is then refused
    (``NotImplementedError``): use ``torch.nn.LSTM``.
    """

    _cell = "lstm"

    def __init__(self, *args, truncate=None, stride=1, **kwargs):
        super().__init__(*args, **kwargs)
        if self.proj_size:
            raise NotImplementedError(f"fastbptt.torch.LSTM has no projections (proj_size="
                                      f"{self.proj_size}): use torch.nn.LSTM for an LSTM with "
                                      "projections")
        self._fastbptt_options(truncate, stride)
