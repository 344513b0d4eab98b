"""Recurrent layers with their vector-Jacobian product: any loss on top (SPEC.md §7, §8).

``out, back = fastbptt.layer.vjp(x, params)`` runs one layer, or a stack, forward and
returns its states and a function that takes dL/dh for every step (the gradient of
whatever the caller computes from the states) and returns the gradients of the layer's
weights, of dense inputs, and of the initial state::

    out, back = fastbptt.layer.vjp(x, fastbptt.Layer(U, W, b))
    logits = out.h_final @ V.T                       # e.g. a label from the last state
    dh_final = ...                                    # dL/dh_final of the caller's loss
    r = back(np.zeros_like(out.h), dh_final)
    r.grads.U, r.grads.W, r.grads.b, r.dx, r.dh0

``back`` may be called any number of times. It keeps the forward pass's states, and what
else it needs, in arrays of its own: about (T + 1) B H numbers per layer and direction,
plus the gates of a gated cell, a copy of dense inputs (reordered for reverse directions)
and, on most paths, padded copies of W, one to two times its size. Later calls of other
fastbptt functions do not change them. The params it has not copied (U and the biases,
and W on some paths, such as narrow batches of gated cells) ``back`` reads as they are
when it runs, so change them (an optimizer step) only after it; a change in between
gives the gradients of neither the old values nor the new. ``back.nbytes`` is the number
of bytes it holds of its own.
`fastbptt.bptt` is the output layer of SPEC.md §1 on top of the same engine.
"""
from __future__ import annotations

import numpy as np

from . import _compile_ahead as compile_ahead
from ._kernels.batch_steps import batch_from_steps
from ._inputs import _array, _check_finite, _for_kernels, _in_dtype, prepare_layer
from ._results import LayerGrads, LayerOutput, given_states
from ._stack import forward_pass, run_forward
from ._workspace import fresh, workspace
from .params import Layer, Model

__all__ = ["vjp", "forward", "LayerOutput", "LayerGrads"]


def _outputs(problem, fw):
    """`LayerOutput` in the caller's layout: h (B, T, H D) zero at padding steps, or
    (T, B, H D) time-major, or (T, H D) for one sequence; h_final (B, H), or
    (S, B, H) for a stack (S = layers x directions), without the batch axis for one
    sequence."""
    B, T = problem.B, problem.T
    H = problem.sizes[1]
    width = H * problem.directions
    time_major = problem.time_major
    if B and T:
        top = fw.top()
        if fw.plan.narrow and time_major:
            h = top.reshape(T, B, width).copy()
        elif fw.plan.narrow:
            h = np.empty((B, T, width), problem.dtype)
            batch_from_steps(top.reshape(T, B, width), h)
        else:
            order = (1, 2, 0) if time_major else (2, 1, 0)
            h = np.array(top.reshape(width, T, B).transpose(order), order="C")
        h_final, c_final = fw.h_final, fw.c_final
    else:
        h = np.zeros((T, B, width) if time_major else (B, T, width), problem.dtype)
        h_final, c_final = problem.h0.copy(), problem.c0
    c_final = _caller_states(problem, c_final) if problem.cell == "lstm" else None
    if problem.single:
        h = h[0]
    return LayerOutput(h, _caller_states(problem, h_final), c_final)


def _caller_states(problem, array):
    """(S, B, H) -> the caller's layout of h0 (see `_outputs`)."""
    if not problem.stacked:
        array = array[0]
        return array[0] if problem.single else array
    return array[:, 0] if problem.single else array


_OF = {"dh": "h", "dh_final": "h_final", "dc_final": "c_final"}


def _upstream(name, value, problem, shape, check_finite):
    """dh, dh_final or dc_final as an array of the compute dtype and the caller's
    ``shape`` (dh (T, B, H D) time-major). dh's padding steps (past a sequence's
    length) are not checked, as x's are not: `_Back.__call__` injects zeros there,
    whatever they hold."""
    arr = _array(name, value, "floats")
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must hold floats, the gradient of the loss with respect to "
                        f"the layer's {'states' if name == 'dh' else 'final states'}; got "
                        f"dtype {arr.dtype}; cast with .astype(np.{problem.dtype})")
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, that of out.{_OF[name]}; got "
                         f"{arr.shape}")
    mask = None
    if name == "dh" and arr.size and (problem.lengths < problem.T).any():
        mask = problem.padding_mask()
        if problem.time_major:
            mask = mask.T
        arr = arr.reshape(mask.shape + (-1,))          # as the mask, one sequence or not
    _check_finite(name, arr, check_finite, mask, shape=shape)
    # contiguous and writable, as the kernels are compiled for: a read-only, strided or
    # Fortran-order dh (PyTorch's expanded gradient of a .sum(), JAX's read-only buffers)
    # would compile another set of them
    return _for_kernels(_in_dtype(name, arr, problem.dtype, check_finite, shape,
                                  mask).reshape(shape))


def _laid_out_as(old, new):
    """``new``'s numbers with ``old``'s strides, starting at ``old``'s address modulo 64
    bytes: ``new`` itself where it is so, else a copy."""
    if not old.size or (new.strides == old.strides and
                        new.ctypes.data % 64 == old.ctypes.data % 64):
        return new
    span = sum((n - 1) * abs(k) for n, k in zip(old.shape, old.strides)) + old.itemsize
    buf = np.empty(span + 64, np.uint8)
    start = (old.ctypes.data - buf.ctypes.data) % 64
    out = np.ndarray(old.shape, old.dtype, buffer=buf, offset=start, strides=old.strides)
    out[...] = new
    return out


def _views_of(a):
    return None if a is None else a.view()


def _views(model):
    """``model`` with each array a view of its own of the same numbers: back reads the
    params' values as they are when it runs, but through views whose shape, strides and
    dtype the caller cannot change in place (``U.shape = ...`` between vjp and back sent
    the kernels past the ends of their arrays)."""
    layers = tuple(tuple(layer._replace(**{k: _views_of(v) for k, v in layer._asdict().items()})
                         for layer in directions) for directions in model.layers)
    return model._replace(layers=layers, V=_views_of(model.V), c=_views_of(model.c))


class _Back:
    """``back(dh, dh_final=None, dc_final=None)`` of one `vjp` call."""

    def __init__(self, problem, fw, out, check_finite, helper=None):
        self._problem, self._fw = problem, fw
        self._helper = helper   # the compile helper the forward pass started, until a call
        # out's shapes, not out: the caller's h (B T H D numbers) is not kept alive
        self._shapes = (out.h.shape, out.h_final.shape,
                        None if out.c_final is None else out.c_final.shape)
        self._check_finite = check_finite

    def __call__(self, dh, dh_final=None, dc_final=None):
        """The gradients of a loss L from dh = dL/dh (the shape of ``out.h``) and,
        optionally, dh_final = dL/dh_final (the shape of ``out.h_final``) and, for the
        LSTM, dc_final = dL/dc_final.

        Returns a `LayerGrads`: ``grads`` (the layer's params in the caller's structure),
        ``dx`` (dL/dx for dense inputs, x's shape; None for token ids), ``dh0`` (the shape
        of h_final; zeros when h0 was not given) and ``dc0`` (the LSTM's, zeros when c0
        was not given; None for other cells).
        """
        p, fw = self._problem, self._fw
        if dc_final is not None and p.cell != "lstm":
            raise ValueError(f"dc_final is the LSTM's cell-state gradient; the {p.cell} cell "
                             "has no cell state (pass dc_final=None)")
        h_shape, final_shape, cells_shape = self._shapes
        dh = _upstream("dh", dh, p, h_shape, self._check_finite)
        final = cells = None
        if dh_final is not None:
            final = _upstream("dh_final", dh_final, p, final_shape,
                              self._check_finite).reshape(p.h0.shape)
        if dc_final is not None:
            cells = _upstream("dc_final", dc_final, p, cells_shape,
                              self._check_finite).reshape(p.h0.shape)
        B, T = p.B, p.T
        H = p.sizes[1]
        if not (B and T):
            return self._empty(final, cells)
        width = H * p.directions
        g = dh.reshape((T, B, width) if p.time_major else (B, T, width))
        # the forward pass's compile helper goes on, if it started; none starts here (a
        # helper runs the forward pass again, from x, which the problem no longer holds)
        helper, self._helper = self._helper, None
        outer = compile_ahead.begin(p, "vjp", helper, start=False)
        try:
            fw.convert_states()
            if fw.plan.back_tm:
                fw.inject_rows(g)
            else:
                G = workspace.get("G", (width, T * B), p.dtype)
                G.reshape(width, T, B)[:] = g.transpose((2, 0, 1) if p.time_major else
                                                        (2, 1, 0))
                G.reshape(width, T, B)[:, ~p.padding_mask().T] = 0
                fw.inject(G)
            layers, dh0, dc0, dx = fw.backward(dh_final=final, dc_final=cells,
                                               need_dx=not p.ids)
        finally:
            fw.forget_views()
            compile_ahead.end(outer)
        return self._grads(layers, dh0, dc0, dx)

    @property
    def nbytes(self):
        """The bytes of the arrays it holds of its own: the forward pass's states, gates,
        copies of the inputs and of W (not the caller's params, which it reads)."""
        return 0 if self._fw is None else self._fw.nbytes()

    def _read_weights_from(self, layers, where):
        """Read U and W from ``layers`` (``layers[l][d]``: a (U, W) pair of arrays of the
        shapes and dtype `vjp` was given) from now on, where the forward pass read the
        caller's own arrays at the addresses ``where[l][d]`` (a pair of ints): for a
        caller whose weights' memory may have moved since, the same numbers elsewhere
        (the PyTorch bridge: ``share_memory_``, FSDP's freed and gathered parameters).
        Arrays the forward pass had copied are kept. The new ones are read in the
        layout and alignment the forward pass's had (`_laid_out_as`), which chose the
        kernels' paths and which of W's padded copies they made."""
        p, fw = self._problem, self._fw
        model = p.model
        rows = []
        for l, directions in enumerate(model.layers):
            row = []
            for d, layer in enumerate(directions):
                now = {}
                for name, old, new, at in zip(("U", "W"), layer[:2], layers[l][d], where[l][d]):
                    if old.ctypes.data != at:
                        continue                # a copy of fastbptt's own
                    if new.shape != old.shape or new.dtype != old.dtype:
                        raise RuntimeError(
                            f"layer {l} direction {d}: {name} is {new.shape} {new.dtype} "
                            f"now, {old.shape} {old.dtype} in the forward pass; its backward "
                            "pass needs the weights the forward pass read")
                    now[name] = _laid_out_as(old, new)
                row.append(layer._replace(**now))
            rows.append(tuple(row))
        p.model = model._replace(layers=tuple(rows))
        if fw is not None:
            for row, layers_now in zip(fw.dirs, p.model.layers):
                for direction, layer in zip(row, layers_now):
                    direction.layer = layer

    def _grads(self, layers, dh0, dc0, dx):
        """`LayerGrads` in the caller's structure and layouts (dh0 zeros when h0 was not
        given, dc0 when c0 was not: `given_states`)."""
        p = self._problem
        lstm = p.cell == "lstm"
        dh0, dc0 = given_states(p, dh0, dc0)
        if dx is not None and p.single:
            dx = dx[0]
        return LayerGrads(p.rebuild(Model(layers)), dx, _caller_states(p, dh0),
                          _caller_states(p, dc0) if lstm else None)

    def _empty(self, final, cells):
        """The gradients of a call with no steps: h_final is h0 (c_final c0)."""
        p = self._problem
        layers = tuple(tuple(Layer(*(None if a is None else np.zeros_like(a) for a in d))
                             for d in directions) for directions in p.model.layers)
        starts = p.h0_given or p.c0_given
        dh0 = np.zeros_like(p.h0) if starts else None
        dc0 = np.zeros_like(p.h0) if starts and p.cell == "lstm" else None
        if final is not None and dh0 is not None:
            dh0 += final
        if cells is not None and dc0 is not None:
            dc0 += cells
        shape = (p.T, p.B) if p.time_major else (p.B, p.T)
        dx = None if p.ids else np.zeros(shape + (p.sizes[0],), p.dtype)
        return self._grads(layers, dh0, dc0, dx)


def vjp(x, params, *, cell=None, activation="tanh", h0=None, c0=None, lengths=None,
        reverse=False, truncate=None, stride=1, check_finite=True, time_major=False):
    """Run a layer (or a stack) forward; return ``(out, back)``.

    Parameters
    ----------
    x : array_like
        Integer token ids, (T,) or (B, T), or dense floats, (T, L) or (B, T, L).
    params : fastbptt.Layer, dict, tuple, or a stack
        One layer: U (G H, L), W (G H, H) and optionally b (G H,), and for a GRU bh
        (G H,) = bias_hh apart (a `Layer`, a dict with keys U, W, b, bh or a tuple
        (U, W[, b[, bh]])). A stack: a `Model` or a dict with
        ``layers`` (``layers[l][d]``, d = 0 forward, 1 reverse); its head, if any, is not
        used. All float32 or all float64: the compute dtype.
    cell : {"elman", "gru", "lstm"} or None
        None reads the cell off W's shape; given, it must agree.
    activation : {"tanh", "sigmoid", "relu", "identity"}
        Elman only.
    h0 : array_like, optional
        Initial state: (H,) or (B, H) for one layer, (S, H) or (S, B, H) for a stack
        (S = layers x directions, PyTorch's order). Zeros when omitted.
    lengths : array_like, optional
        (B,) sequence lengths: steps t >= lengths[b] are padding.
    reverse : bool
        One layer only: read each sequence from its last real step back to its first.
    truncate, stride : int or None, int
        BPTT(k; s) (SPEC.md §3; None: nothing is cut): the gradient ``back`` injects at
        step t (dh[t], and dh_final at the last real step) flows back through steps
        t ... lo(t) only.
        Windows (stride < truncate) need one layer; no truncation with reverse directions.
    check_finite : bool
        Raise ValueError for NaN or inf in params, x, h0 (and in ``back``'s arguments).
    time_major : bool
        A batch is time-major: x (T, B) or (T, B, L), and likewise h, dh and dx, as
        ``torch.nn.RNN`` without ``batch_first`` and ``lax.scan`` have them; one sequence
        is the same either way. It saves the caller a transposed copy of h and dh.

    Returns
    -------
    out : LayerOutput
        ``h``: the top layer's states, (B, T, H D) (``time_major``: (T, B, H D)) or
        (T, H D), zero at padding steps;
        ``h_final``: each sequence's last real state, shaped like h0; ``c_final``: the
        LSTM's last cell state, likewise (None for other cells).
    back : callable
        ``back(dh, dh_final=None, dc_final=None)`` -> `LayerGrads`. It reads the params
        it has not copied as they are when it runs: change them (an optimizer step) only
        after it.
    """
    problem = prepare_layer(x, params, cell=cell, activation=activation, h0=h0, c0=c0,
                            lengths=lengths, reverse=reverse, truncate=truncate, stride=stride,
                            check_finite=check_finite, time_major=time_major)
    return run_vjp(problem, check_finite)


def run_vjp(problem, check_finite):
    """`vjp` of a validated problem."""
    problem.model = _views(problem.model)
    fw = helper = None
    if problem.B and problem.T:
        outer = compile_ahead.begin(problem, "vjp")   # a first call's compiles: two processes
        try:
            fw = run_forward(problem, store=fresh)
        finally:
            helper = compile_ahead.end(outer, keep=True)  # for back's compiles
        fw.forget_views()
    problem.x = None        # the caller's array, maybe: the forward pass copied what back reads
    out = _outputs(problem, fw)
    return out, _Back(problem, fw, out, check_finite, helper)


def forward(x, params, *, cell=None, activation="tanh", h0=None, c0=None, lengths=None,
            reverse=False, check_finite=True, time_major=False):
    """`vjp`'s ``out`` alone (nothing is kept for a backward pass)."""
    problem = prepare_layer(x, params, cell=cell, activation=activation, h0=h0, c0=c0,
                            lengths=lengths, reverse=reverse, check_finite=check_finite,
                            time_major=time_major)
    if not (problem.B and problem.T):
        return _outputs(problem, None)
    with forward_pass(problem) as fw:
        return _outputs(problem, fw)
