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
from ._masks import refuse_masked
from ._ranges import finite, shown
from .params import is_leaf_name, leaves

_REAL = (int, float, np.integer, np.floating)       # numbers an option may be (not complex)

__all__ = ["SGD", "Adagrad", "Adam", "OPTIMIZERS", "make_optimizer"]


def _fraction(label, value):
    """A number in [0, 1) (a momentum or a decay rate), as float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, _REAL):
        raise TypeError(f"{label} must be a number; got {type(value).__name__}")
    if not 0 <= value < 1:
        raise ValueError(f"{label} must lie in [0, 1); got {value}")
    return float(value)


def _epsilon(value):
    """eps: a finite number above 0, as float."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, _REAL):
        raise TypeError(f"eps must be a number; got {type(value).__name__}")
    if not (value > 0 and finite(value)):
        raise ValueError(f"eps must be positive and finite; got {shown(value)}")
    return float(value)


def _eps_in(value, dtype, eps=None):
    """ValueError when eps (as the update uses it: ``value``) is 0 in ``dtype``, where a
    zero gradient would then divide 0 by 0."""
    if not dtype.type(value) > 0:
        eps = value if eps is None else eps
        raise ValueError(f"eps {eps:g} is 0 in {dtype} and a zero gradient would make the "
                         f"weights NaN: use eps of at least {float(np.finfo(dtype).tiny):g} "
                         "for these params (1e-8 is the usual value)")


_SQUARES = ("sum_sq", "v")       # buffers that sum squares: never negative


def _buffer_value(key, value):
    """A copy of a loaded buffer, or ValueError unless it holds finite floats (>= 0 for
    sums of squares)."""
    value = np.array(value)
    if value.dtype not in (np.float32, np.float64):
        raise ValueError(f"the optimizer's {key} holds {value.dtype}, not float32 or float64")
    if not np.isfinite(value).all():
        raise ValueError(f"the optimizer's {key} holds NaN or inf")
    if key.split(".", 1)[0] in _SQUARES and (value < 0).any():
        raise ValueError(f"the optimizer's {key} holds a negative value, which a sum of "
                         "squares cannot")
    return value


def _pairs(params, grads):
    """(name, param array, grad array) for each parameter present in params."""
    p, g = leaves(params), leaves(grads, "grads")
    for name, value in p.items():
        gradient = g.get(name)
        if gradient is None:
            raise ValueError(f"grads has no {name!r} but params does")
        refuse_masked(f"params {name!r}", value)
        if not isinstance(value, np.ndarray):
            raise TypeError(f"params {name!r} must be a NumPy array to update in place; "
                            f"got {type(value).__name__}")
        if not value.flags.writeable:
            raise ValueError(f"params {name!r} is read-only, and the update writes into it; "
                             f"give the optimizer writeable arrays (np.array(...) copies)")
        if value.dtype.newbyteorder("=") not in (np.float32, np.float64):
            raise TypeError(f"params {name!r} must hold float32 or float64 to be updated; "
                            f"got {value.dtype}")
        if not value.dtype.isnative:
            raise TypeError(f"params {name!r} must hold float32 or float64 in this machine's "
                            f"byte order to be updated in place; got {value.dtype.str} "
                            f"(convert the params once: .astype(np.float32) or np.float64)")
        if np.shape(gradient) != value.shape:
            raise ValueError(f"grads {name!r} is {np.shape(gradient)} but params {name!r} "
                             f"is {value.shape}")
        refuse_masked(f"grads {name!r}", gradient)
        gradient = np.asarray(gradient)
        if gradient.dtype.kind not in "iuf":
            raise TypeError(f"grads {name!r} must hold real numbers; got {gradient.dtype}")
        yield name, value, np.asarray(gradient, dtype=value.dtype)


class Optimizer:
    """Shared state handling; subclasses define `kind`, `_buffers`, `_options` and `_update`."""

    kind = ""
    _buffers: tuple[str, ...] = ()

    def __init__(self, lr):
        if isinstance(lr, (bool, np.bool_)) or not isinstance(lr, _REAL):
            raise TypeError(f"lr must be a number; got {type(lr).__name__}")
        if not lr > 0 or not finite(lr):
            raise ValueError(f"lr must be positive and finite; got {shown(lr)}")
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
        for name, p, _ in pairs:
            for key, buffer in self.state.get(name, {}).items():
                if buffer.shape != p.shape:
                    raise ValueError(
                        f"the optimizer's {key}.{name} is {buffer.shape} but params {name!r} "
                        f"is {p.shape}: its state is another model's (give these params a "
                        f"new optimizer, or load_state_dict the state saved with them)")
            self._check_dtype(p.dtype)
        self._check_joining([name for name, _, _ in pairs])
        self.t += 1
        with np.errstate(under="ignore"):      # tiny gradients' squares round to 0, rightly
            for name, p, g in pairs:
                self._update(name, p, g)

    def _check_dtype(self, dtype):
        """ValueError when an option would round to nothing in ``dtype``."""

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
        """Restore what `state_dict` returned (arrays are copied; numbers may come as 0-d
        arrays, as after ``np.savez`` and ``np.load``). ValueError, with nothing
        changed, for a state this optimizer could not have written: another kind, an
        option out of its range, a step count that is not a whole number >= 0, a buffer
        that is not finite floats (or negative where it sums squares)."""
        if not hasattr(state, "items"):
            raise TypeError(f"state must be a dict from state_dict(); got "
                            f"{type(state).__name__}")
        odd = next((key for key in state if not isinstance(key, str)), None)
        if odd is not None:
            raise ValueError(f"state's keys are names (str); got {odd!r}")
        state = {key: value.item() if isinstance(value, np.ndarray) and value.ndim == 0
                 and "." not in key else value for key, value in state.items()}
        if "kind" not in state:
            raise ValueError("state has no 'kind': it is not an optimizer's state_dict()")
        kind = str(state["kind"])
        if kind != self.kind:
            raise ValueError(f"state is for optimizer {kind!r}, not {self.kind!r}")
        missing = [key for key in ("lr", "t", *self._options()) if key not in state]
        if missing:
            raise ValueError(f"the {kind} state has no {', '.join(map(repr, missing))}")
        lr = state["lr"]          # the rate last used: a decay may have brought it to 0
        if isinstance(lr, (bool, np.bool_)) or not isinstance(lr, _REAL) \
                or not (lr >= 0 and finite(lr)):
            raise ValueError(f"the {kind} state's lr must be a finite number >= 0; got "
                             f"{shown(lr)}")
        unknown = [key for key in state
                   if "." not in key and key not in ("kind", "lr", "t", *self._options())]
        if unknown:
            raise ValueError(f"unknown optimizer state entry {unknown[0]!r} for {kind}")
        try:                                   # the constructor's checks of every option
            fresh = type(self)(lr=1.0, **{k: state[k] for k in self._options()})
        except (TypeError, ValueError) as error:
            raise ValueError(f"the {kind} state's {error}") from None
        fresh.lr = float(lr)
        t = state["t"]
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, _REAL) or not finite(t) \
                or not float(t).is_integer() or t < 0:
            raise ValueError(f"the {kind} state's step count t must be a whole number >= 0; "
                             f"got {shown(t)}")
        buffers = {}
        for key, value in state.items():
            if "." in key:
                buffer, name = key.split(".", 1)
                if buffer not in self._buffers or not is_leaf_name(name):
                    raise ValueError(f"unknown optimizer state entry {key!r}")
                buffers.setdefault(name, {})[buffer] = _buffer_value(key, value)
        self.lr, self.t, self.state = fresh.lr, int(t), buffers
        for key in self._options():
            setattr(self, key, getattr(fresh, key))

    def check_complete(self, names):
        """ValueError unless, after t > 0 steps, each parameter in ``names`` has every
        buffer the updates keep (a state that lost some would restart them at zero)."""
        lacking = self._lacking(names)
        if lacking is not None:
            name, key = lacking
            raise ValueError(f"the optimizer's {key}.{name} is missing, which {self.t} steps "
                             f"of {self.kind} have made")

    def _lacking(self, names):
        """After t > 0 steps, the first (name, buffer) of ``names`` whose buffer the updates
        keep is not in the state; else None."""
        if not self.t:
            return None
        return next(((name, key) for name in names for key in self._kept()
                     if key not in self.state.get(name, {})), None)

    def _check_joining(self, names):
        """ValueError where a parameter in ``names`` that no step has updated yet would be
        updated wrongly now (Adam's); SGD's and Adagrad's buffers start at zero for it
        as for a new optimizer's, which is right."""

    def _kept(self):
        return self._buffers

    def __repr__(self):
        options = ", ".join(f"{k}={v!r}" for k, v in self._options().items())
        return f"{type(self).__name__}(lr={self.lr!r}{', ' if options else ''}{options})"


class SGD(Optimizer):
    """p -= lr * g, or with momentum m: v = m v + g; p -= lr * v (PyTorch's convention)."""

    kind = "sgd"
    _buffers = ("velocity",)

    def __init__(self, lr=0.1, momentum=0.0):
        super().__init__(lr)
        self.momentum = _fraction("momentum", momentum)

    def _options(self):
        return {"momentum": self.momentum}

    def _kept(self):
        return self._buffers if self.momentum else ()

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
        self.eps = _epsilon(eps)

    def _options(self):
        return {"eps": self.eps}

    def _check_dtype(self, dtype):
        _eps_in(self.eps, dtype)

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
        self.beta1, self.beta2 = _fraction("beta1", beta1), _fraction("beta2", beta2)
        self.eps = _epsilon(eps)

    def _options(self):
        return {"beta1": self.beta1, "beta2": self.beta2, "eps": self.eps}

    def _check_dtype(self, dtype):
        _eps_in(self.eps * np.sqrt(1 - self.beta2 ** (self.t + 1)), dtype, self.eps)

    def _check_joining(self, names):
        # the bias correction counts this optimizer's steps, not each parameter's: moments
        # that start at zero after t steps would be scaled as t steps' (a 1-layer model's
        # state stepping a 2-layer one moved layer 1 by 2.5 lr, Adam's first step lr)
        lacking = self._lacking(names)
        if lacking is not None:
            raise ValueError(
                f"params {lacking[0]!r} has no Adam moments in this optimizer, which has "
                f"taken {self.t} steps: its bias correction counts them for every parameter, "
                f"so one that joins now would move too far (give these params a new "
                f"optimizer, or load_state_dict the state saved with them)")

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
    if not isinstance(kind, str):
        raise TypeError(f"kind must be an optimizer's name, a str ({', '.join(OPTIMIZERS)}); "
                        f"got {type(kind).__name__}")
    try:
        cls = OPTIMIZERS[kind]
    except KeyError:
        raise ValueError(f"unknown optimizer {kind!r}; choose from {', '.join(OPTIMIZERS)}")
    return cls(lr, **options)
