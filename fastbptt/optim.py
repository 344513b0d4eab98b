"""Optimizers that update parameters in place: `SGD` (with momentum), `Adagrad`, `Adam`.

``opt.step(params, grads)`` works for every params structure `fastbptt.grad` accepts (a
`Params`, a `Model`, a dict, a tuple or list) and writes into the params' own arrays, so the
caller's structure keeps pointing at the updated weights. Each parameter's state (momentum
buffer, squared-gradient sums, Adam's moments) is kept per name in the params' dtype: the
names of `fastbptt.params.leaves` (U, W, V, b, c; ``layers.<l>.<d>.U``, ..., V, c).
``state_dict()`` returns a flat dict of NumPy arrays and numbers; ``load_state_dict`` restores
it, so a resumed run continues bit for bit.
"""
from __future__ import annotations

import numpy as np

from ._kernels.adam import adam_update
from .params import is_leaf_name, leaves

__all__ = ["SGD", "Adagrad", "Adam", "OPTIMIZERS", "make_optimizer"]


def _pairs(params, grads):
    """(name, param array, grad array) for each parameter present in params."""
    p, g = leaves(params), leaves(grads)
    for name, value in p.items():
        gradient = g.get(name)
        if gradient is None:
            raise ValueError(f"grads has no {name!r} but params does")
        if not isinstance(value, np.ndarray) or not value.flags.writeable:
            raise TypeError(f"params {name!r} must be a writeable NumPy array to update "
                            f"in place; got {type(value).__name__}")
        if np.shape(gradient) != value.shape:
            raise ValueError(f"grads {name!r} is {np.shape(gradient)} but params {name!r} "
                             f"is {value.shape}")
        yield name, value, np.asarray(gradient, dtype=value.dtype)


class Optimizer:
    """Shared state handling; subclasses define `kind`, `_buffers`, `_options` and `_update`."""

    kind = ""
    _buffers: tuple[str, ...] = ()

    def __init__(self, lr):
        if isinstance(lr, (bool, np.bool_)) or not isinstance(lr, (int, float, np.number)):
            raise TypeError(f"lr must be a number; got {type(lr).__name__}")
        if not lr > 0 or not np.isfinite(lr):
            raise ValueError(f"lr must be positive and finite; got {lr}")
        self.lr = float(lr)
        self.t = 0                              # steps taken
        self.state: dict[str, dict[str, np.ndarray]] = {}

    def _options(self):
        return {}

    def _buffer(self, name, key, like):
        slot = self.state.setdefault(name, {})
        if key not in slot:
            slot[key] = np.zeros_like(like)
        return slot[key]

    def step(self, params, grads):
        """Update every array of ``params`` in place from ``grads`` (same structure or any)."""
        pairs = list(_pairs(params, grads))     # every check passes before anything changes
        self.t += 1
        for name, p, g in pairs:
            self._update(name, p, g)

    def _update(self, name, p, g):
        raise NotImplementedError

    def state_dict(self):
        """A flat dict: 'kind', 'lr', 't', the options, and '<buffer>.<name>' arrays."""
        out = {"kind": self.kind, "lr": self.lr, "t": self.t, **self._options()}
        for name, slot in self.state.items():
            for key, value in slot.items():
                out[f"{key}.{name}"] = value.copy()
        return out

    def load_state_dict(self, state):
        """Restore what `state_dict` returned (arrays are copied)."""
        kind = str(state["kind"])
        if kind != self.kind:
            raise ValueError(f"state is for optimizer {kind!r}, not {self.kind!r}")
        self.lr = float(state["lr"])
        self.t = int(state["t"])
        for key in self._options():
            setattr(self, key, type(getattr(self, key))(state[key]))
        self.state = {}
        for key, value in state.items():
            if "." in key:
                buffer, name = key.split(".", 1)
                if buffer not in self._buffers or not is_leaf_name(name):
                    raise ValueError(f"unknown optimizer state entry {key!r}")
                self.state.setdefault(name, {})[buffer] = np.array(value)

    def __repr__(self):
        options = ", ".join(f"{k}={v!r}" for k, v in self._options().items())
        return f"{type(self).__name__}(lr={self.lr!r}{', ' if options else ''}{options})"


class SGD(Optimizer):
    """p -= lr * g, or with momentum m: v = m v + g; p -= lr * v (PyTorch's convention)."""

    kind = "sgd"
    _buffers = ("velocity",)

    def __init__(self, lr=0.1, momentum=0.0):
        super().__init__(lr)
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must lie in [0, 1); got {momentum}")
        self.momentum = float(momentum)

    def _options(self):
        return {"momentum": self.momentum}

    def _update(self, name, p, g):
        if self.momentum:
            v = self._buffer(name, "velocity", p)
            v *= self.momentum
            v += g
            g = v
        p -= p.dtype.type(self.lr) * g


class Adagrad(Optimizer):
    """min-char-rnn's: mem += g²; p -= lr g / sqrt(mem + eps), eps = 1e-8."""

    kind = "adagrad"
    _buffers = ("sum_sq",)

    def __init__(self, lr=0.1, eps=1e-8):
        super().__init__(lr)
        self.eps = float(eps)

    def _options(self):
        return {"eps": self.eps}

    def _update(self, name, p, g):
        mem = self._buffer(name, "sum_sq", p)
        mem += g * g
        step = mem + p.dtype.type(self.eps)
        np.sqrt(step, out=step)
        np.divide(g, step, out=step)
        step *= p.dtype.type(self.lr)
        p -= step


class Adam(Optimizer):
    """Kingma & Ba with bias correction:
    m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g²;
    p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
    """

    kind = "adam"
    _buffers = ("m", "v")

    def __init__(self, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8):
        super().__init__(lr)
        for label, beta in (("beta1", beta1), ("beta2", beta2)):
            if not 0 <= beta < 1:
                raise ValueError(f"{label} must lie in [0, 1); got {beta}")
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)

    def _options(self):
        return {"beta1": self.beta1, "beta2": self.beta2, "eps": self.eps}

    def _update(self, name, p, g):
        # lr_t = lr sqrt(1 - b2^t) / (1 - b1^t) folds both corrections into one scale;
        # eps is scaled to match so the result is the formula above. Contiguous arrays
        # take one pass (`fastbptt._kernels.adam`), others NumPy's passes: the same bits.
        f = p.dtype.type
        m = self._buffer(name, "m", p)
        v = self._buffer(name, "v", p)
        c1 = 1 - self.beta1 ** self.t
        c2 = np.sqrt(1 - self.beta2 ** self.t)
        if all(a.flags.c_contiguous and a.dtype == p.dtype for a in (p, g, m, v)) \
                and p.dtype in (np.float32, np.float64):
            adam_update(p.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1),
                        f(self.beta1), f(1 - self.beta1), f(self.beta2),
                        f(1 - self.beta2), f(self.eps * c2), f(self.lr * c2 / c1))
            return
        m *= f(self.beta1)
        m += f(1 - self.beta1) * g
        v *= f(self.beta2)
        v += f(1 - self.beta2) * (g * g)
        denom = np.sqrt(v)
        denom += f(self.eps * c2)
        np.divide(m, denom, out=denom)
        denom *= f(self.lr * c2 / c1)
        p -= denom


OPTIMIZERS = {"sgd": SGD, "adagrad": Adagrad, "adam": Adam}


def make_optimizer(kind, lr, **options):
    """An optimizer by name ('sgd', 'adagrad', 'adam'); options go to its constructor."""
    try:
        cls = OPTIMIZERS[kind]
    except KeyError:
        raise ValueError(f"unknown optimizer {kind!r}; choose from {', '.join(OPTIMIZERS)}")
    return cls(lr, **options)
