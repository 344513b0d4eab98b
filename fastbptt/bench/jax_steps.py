"""T4 (and T5): ``jit(value_and_grad)`` of a JAX loss whose recurrent layer is fastbptt.jax's
or a ``lax.scan`` (`jax_stack`'s layers), on the workload's token ids.

The loss is the layer (no biases, as the workloads), logits h Vᵀ and the summed
log_softmax cross-entropy; both start from the workload's weights. For the bridge's own
cost (`bridge_steps.own_cost`), ``make`` also returns the layer alone through
fastbptt.jax, ``jit`` of its VJP applied to a fixed upstream gradient.
"""
from __future__ import annotations

import numpy as np

from .jax_peer import pool, start
from .jax_stack import _layers
from .workloads import WORKLOADS, make_data

FUNCTIONS = {"elman": "rnn", "lstm": "lstm", "gru": "gru"}


def make(step, threads=1):
    """``(calls, note, layer, owner)`` as `torch_steps.make`."""
    jax = start(threads)
    import jax.numpy as jnp

    import fastbptt
    import fastbptt.jax as fj
    from ..jax import _layer as _layer_module

    w = WORKLOADS[step.workload]
    x, y, params = make_data(w)
    first = params.layers[0][0] if isinstance(params, fastbptt.Model) else params
    U, W = first.U, first.W
    ids = jnp.asarray(np.asarray(x, np.int32))
    targets = jnp.asarray(np.asarray(y, np.int32))
    scan = _layers(jax, w)
    function = getattr(fj, FUNCTIONS[w.cell])

    def ours(layer, inputs):
        return function(fastbptt.Layer(*layer), inputs)[0]

    def theirs(layer, inputs):
        return scan([[layer]], inputs)

    def value_and_grad(layer_fn):
        def loss(weights, inputs, targets):
            layer, V = weights
            log_p = jax.nn.log_softmax(layer_fn(layer, inputs) @ V.T, axis=-1)
            return -jnp.take_along_axis(log_p, targets[..., None], axis=-1).sum()

        call = jax.jit(jax.value_and_grad(loss))
        weights = ((jnp.asarray(U), jnp.asarray(W)), jnp.asarray(params.V))

        def run():
            value, grads = jax.block_until_ready(call(weights, ids, targets))
            run.last = grads
            return float(value)

        names = ("U", "W", "V")
        run.gradients = lambda: dict(zip(names, map(np.asarray, jax.tree.leaves(run.last))))
        return run

    calls = {"native": value_and_grad(theirs), "fastbptt": value_and_grad(ours)}

    dh = jnp.asarray(np.random.default_rng(1).standard_normal((w.B, w.T, w.H)), w.dtype)

    def vjp(layer, dh):                       # h is returned: its forward callback runs
        h, back = jax.vjp(lambda p: ours(p, ids), layer)
        return h, back(dh)

    layer_vjp = jax.jit(vjp)
    weights = (jnp.asarray(U), jnp.asarray(W))

    def layer():
        jax.block_until_ready(layer_vjp(weights, dh))

    note = (f"ids {w.L} -> {FUNCTIONS[w.cell]} H={w.H} -> h Vᵀ ({w.C}) -> summed "
            f"cross-entropy; jit(value_and_grad); B={w.B} T={w.T} float32; XLA on {pool()}")
    return calls, note, layer, _layer_module
