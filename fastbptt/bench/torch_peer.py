"""PyTorch (CPU) on W1 ... W5 (one Elman layer), two ways; the faster one is timed.

- "nn.RNN": one-hot float inputs (B, T, L) with weight_ih = U, weight_hh = W, no bias,
  batch_first; then logits = h Vᵀ and ``F.cross_entropy(reduction="sum")``.
- "autograd loop": an embedding gather of Uᵀ's rows, then a Python loop over steps,
  h = f(Uᵀ[x_t] + h Wᵀ), the same output and loss.

Both run forward and ``backward()``. Each is timed during the factory's warm-up and the
faster is returned, with the choice and both times in its ``note``.
"""
from __future__ import annotations

import sys

import numpy as np

from .peers import Call
from .timing import measure

__all__ = ["unavailable", "set_threads", "make", "fastest"]


def unavailable():
    try:
        import torch  # noqa: F401
    except Exception as error:                   # ImportError, or a broken install
        return (f"not installed (pip install 'fastbptt[torch]'; "
                f"{error.__class__.__name__}: {error})")
    return None


def set_threads(n):
    torch = sys.modules.get("torch")
    if torch is not None:                        # otherwise `make` sets it on import
        torch.set_num_threads(n)


def make(workload, x, y, params, threads=1):
    import torch
    import torch.nn.functional as F

    if workload.truncate is not None:
        raise ValueError("the PyTorch peer computes full BPTT only")
    torch.set_num_threads(threads)
    dtype = {"float32": torch.float32, "float64": torch.float64}[workload.dtype]
    ids = torch.from_numpy(np.atleast_2d(x).astype(np.int64))          # (B, T)
    targets = torch.from_numpy(np.atleast_2d(y).astype(np.int64).reshape(-1))
    U, W, V = (torch.from_numpy(np.array(p, dtype=workload.dtype)) for p in params[:3])
    C = V.shape[0]
    variants = {"autograd loop": _loop(torch, F, ids, targets, U, W, V,
                                       workload.activation, C)}
    if workload.activation in ("tanh", "relu"):                        # nn.RNN has only these
        onehot = F.one_hot(ids, workload.L).to(dtype)
        variants["nn.RNN"] = _rnn(torch, F, onehot, targets, U, W, V, workload.activation,
                                  dtype, C)
    return fastest(variants)


def fastest(variants):
    """A `Call` of the variant with the lowest median of 3 calls (after one warm-up), its
    note naming the choice and every variant's time."""
    times = {name: measure(fn, repeat=3).median for name, fn in variants.items()}
    best = min(times, key=times.get)
    note = f"{best} (warm-up: " + ", ".join(f"{n} {t * 1e3:.2f} ms"
                                            for n, t in times.items()) + ")"
    return Call(variants[best], note)


def _rnn(torch, F, onehot, targets, U, W, V, activation, dtype, C):
    L, H = U.shape[1], W.shape[0]
    rnn = torch.nn.RNN(L, H, nonlinearity=activation, bias=False, batch_first=True).to(dtype)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(U)
        rnn.weight_hh_l0.copy_(W)
    V = torch.nn.Parameter(V.clone())

    def run():
        rnn.weight_ih_l0.grad = rnn.weight_hh_l0.grad = V.grad = None
        h, _ = rnn(onehot)                                              # (B, T, H)
        logits = h @ V.T
        loss = F.cross_entropy(logits.reshape(-1, C), targets, reduction="sum")
        loss.backward()
        return loss.item(), (rnn.weight_ih_l0.grad, rnn.weight_hh_l0.grad, V.grad)

    return run


def _loop(torch, F, ids, targets, U, W, V, activation, C):
    f = {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu,
         "identity": lambda a: a}[activation]
    U, W, V = (p.clone().requires_grad_() for p in (U, W, V))
    B, T = ids.shape

    def run():
        U.grad = W.grad = V.grad = None
        inputs = F.embedding(ids, U.T)                                  # (B, T, H)
        h = torch.zeros(B, W.shape[0], dtype=W.dtype)
        Wt, states = W.T, []
        for t in range(T):
            h = f(torch.addmm(inputs[:, t], h, Wt))
            states.append(h)
        logits = torch.stack(states, 1) @ V.T
        loss = F.cross_entropy(logits.reshape(-1, C), targets, reduction="sum")
        loss.backward()
        return loss.item(), (U.grad, W.grad, V.grad)

    return run
