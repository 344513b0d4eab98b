"""JAX (XLA, CPU) on S1 ... S3 and G1 ... G5: ``lax.scan`` layers under ``jit``.

Each layer projects its inputs for all steps at once (a gather of Uᵀ's rows for token
ids, one matrix product for dense inputs and upper layers), then scans the cell's step
(SPEC.md §6: PyTorch's equations and gate order) over time; the reverse direction is
the same scan with ``reverse=True`` (it reads the steps from the last down and stores
each state at its own step). A model workload is ``jit(value_and_grad)`` of the summed
log_softmax cross-entropy through V; the layer workload (S3) is ``jax.vjp`` of the layer
applied to dh, forward and backward in one jitted function. A call blocks until every
output is ready; gradients come back in `stacks.flatten`'s order.
"""
from __future__ import annotations

import numpy as np

from .jax_peer import pool, start
from .peers import Call
from .stacks import flatten

__all__ = ["make"]


def make(workload, x, y, model, threads=1):
    jax = start(threads)
    import jax.numpy as jnp

    w = workload
    if w.dtype != "float32":
        raise ValueError("the JAX peer runs float32 (JAX's default) only")
    stacked = _layers(jax, w)
    x = np.asarray(x)
    batched = x if x.ndim == (3 if w.inputs == "dense" else 2) else x[None]
    inputs = jnp.asarray(batched.astype(np.float32 if w.inputs == "dense" else np.int32))
    layers = [[(jnp.asarray(layer.U), jnp.asarray(layer.W)) for layer in row]
              for row in model.layers]

    if w.kind == "layer":
        def vjp(layers, inputs, dh):
            h, back = jax.vjp(stacked, layers, inputs)
            return h, back(dh)

        call = jax.jit(vjp)
        dh = jnp.asarray(np.asarray(y, np.float32).reshape(batched.shape[:2] + (-1,)))

        def run():
            h, (grads, dx) = jax.block_until_ready(call(layers, inputs, dh))
            return h.reshape(np.shape(y)), flatten(grads, dx.reshape(x.shape))
    else:
        def loss(weights, inputs, targets):
            layers, V = weights
            log_p = jax.nn.log_softmax(stacked(layers, inputs) @ V.T, axis=-1)
            return -jnp.take_along_axis(log_p, targets[..., None], axis=-1).sum()

        call = jax.jit(jax.value_and_grad(loss))
        weights = (layers, jnp.asarray(model.V))
        targets = jnp.asarray(np.atleast_2d(y).astype(np.int32))

        def run():
            value, (grads, dV) = jax.block_until_ready(call(weights, inputs, targets))
            return float(value), flatten(grads, dV)

    what = "jit(vjp)" if w.kind == "layer" else "jit(value_and_grad)"
    return Call(run, f"{what} of lax.scan layers, XLA on {pool()}")


def _layers(jax, w):
    """``stacked(layers, inputs) -> h`` (B, T, H·directions) of the top layer."""
    import jax.numpy as jnp
    from jax import lax

    step = _steps(jax)[w.cell]
    f = {"tanh": jnp.tanh, "relu": jax.nn.relu, "sigmoid": jax.nn.sigmoid}[w.activation]

    def stacked(layers, inputs):
        below = jnp.swapaxes(inputs, 0, 1)                         # (T, B, ...)
        for l, row in enumerate(layers):
            outputs = []
            for d, (U, W) in enumerate(row):
                if l == 0 and w.inputs == "ids":
                    projected = U.T[below]                         # (T, B, G·H) gather
                else:
                    projected = below @ U.T
                zeros = jnp.zeros((projected.shape[1], w.H), projected.dtype)
                _, hs = lax.scan(lambda carry, a, W=W: step(carry, a, W, f),
                                 (zeros, zeros), projected, reverse=bool(d))
                outputs.append(hs)
            below = jnp.concatenate(outputs, -1) if len(outputs) > 1 else outputs[0]
        return jnp.swapaxes(below, 0, 1)

    return stacked


def _steps(jax):
    """One scan step of each cell: ``((h, c), a_t = U x_t, W, f) -> ((h, c), h)``."""
    import jax.numpy as jnp
    sigmoid = jax.nn.sigmoid

    def elman(carry, a, W, f):
        h = f(a + carry[0] @ W.T)
        return (h, carry[1]), h

    def lstm(carry, a, W, f):
        h, c = carry
        i, g_f, g, o = jnp.split(a + h @ W.T, 4, axis=-1)
        c = sigmoid(g_f) * c + sigmoid(i) * jnp.tanh(g)
        h = sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    def gru(carry, a, W, f):
        h = carry[0]
        a_r, a_z, a_n = jnp.split(a, 3, axis=-1)
        h_r, h_z, h_n = jnp.split(h @ W.T, 3, axis=-1)
        r, z = sigmoid(a_r + h_r), sigmoid(a_z + h_z)
        n = jnp.tanh(a_n + r * h_n)
        h = n + z * (h - n)
        return (h, carry[1]), h

    return {"elman": elman, "lstm": lstm, "gru": gru}
