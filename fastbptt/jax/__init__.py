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
hands the callback the operands on the CPU with no copy and copies the results into
XLA's buffers: a few copies of arrays of B T H numbers (measured in the README).

Residuals: the backward rule runs the forward pass again, from the saved inputs, before
``back``. A pure callback may be run more than once, or not at all, so it must not
leave state on the host between the two rules; and the states fastbptt keeps for
``back`` live in its own layout, which the public API does not hand out. Re-running the
forward pass costs one forward pass per gradient (measured in the README); the forward
rule itself keeps nothing.

NaN and inf are not checked: they propagate, as in JAX. Token ids out of range, or
lengths outside [0, T], raise inside the callback, which JAX reports as a runtime error.

Needs JAX: ``pip install 'fastbptt[jax]'``. ``import fastbptt`` does not import it.
"""
try:
    import jax  # noqa: F401
except ImportError:
    raise ImportError("fastbptt.jax needs JAX: pip install 'fastbptt[jax]'") from None

from ._layer import gru, lstm, rnn

__all__ = ["rnn", "gru", "lstm"]
