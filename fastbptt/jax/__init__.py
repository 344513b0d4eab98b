"""One recurrent layer as a JAX function with its VJP, computed by fastbptt on the host.

``h, h_final = fastbptt.jax.rnn(params, x)`` (also `gru`; `lstm` returns ``h, h_final,
c_final``) works under ``jax.jit``, ``jax.grad`` and ``jax.value_and_grad``: a
``jax.custom_vjp`` whose forward and backward rules call `fastbptt.layer` through
``jax.pure_callback``. Stack layers, or run a reverse direction beside a forward one, by
composing calls in JAX.

Why ``pure_callback`` and not XLA's FFI: fastbptt's kernels are Numba functions driven by
Python (validation, workspace, layout choices); an FFI handler is a C function with
XLA's call frame, and reaching Python from one would mean a C shim that takes the GIL,
i.e. a callback again, plus a compiled extension to build and ship. ``pure_callback``
passes the operands to the host function and copies its results into XLA's buffers; the
README gives the cost (about 0.9 ms per forward and backward of a B 32, T 100, H 128
layer, the copies of B T H numbers in and out included).

Residuals: the forward rule's callback runs `fastbptt.layer.vjp` and keeps its ``back``
(which holds the states) on the host under a key, returned as a residual beside the
inputs; the backward rule's callback takes ``back`` by that key (`_kept`). Where it is
gone, the backward callback runs the forward pass again from the saved inputs, so JAX's
freedom with pure callbacks (running one twice, merging two, leaving one out) cannot make
a gradient wrong; it costs one forward pass then (a third of the layer's time). The
primal call, without differentiation, runs `fastbptt.layer.forward` and keeps nothing.

NaN and inf are not checked: they propagate, as in JAX. Token ids out of range, or
lengths outside [0, T], raise inside the callback, which JAX reports as a runtime error.

Needs JAX: ``pip install 'fastbptt[jax]'``. ``import fastbptt`` does not import it.
"""
try:
    import jax  # noqa: F401
except ImportError:
    raise ModuleNotFoundError("fastbptt.jax needs JAX: pip install 'fastbptt[jax]'") from None

from ._layer import gru, lstm, rnn

__all__ = ["rnn", "gru", "lstm"]
