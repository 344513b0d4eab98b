"""Text from a trained character model: prime it, then draw characters one at a time.

Any unidirectional model samples: one Elman layer with its head (`Params`), or a `Model`
of any cell and number of layers. The prime runs through the layers' kernels
(`fastbptt.layer.forward`); each drawn character then takes one step of every layer
through the readable cells of `fastbptt.reference`. A bidirectional model cannot generate
text: its reverse direction reads the characters that are still to be drawn.
"""
from __future__ import annotations

import numpy as np

from . import layer
from ._inputs import ACTIVATIONS
from ._masks import refuse_masked
from ._params_check import check_model
from ._ranges import finite, shown
from .params import Model, generator, leaves, read_model
from .reference.cells import CELLS, State
from .reference.layer import run
from .text import Codec

__all__ = ["sample", "sample_chunks", "sample_ids", "StatesOverflowed"]


class StatesOverflowed(ValueError):
    """The model's states or outputs became NaN or inf as it ran (weights that are finite
    but far too large, after a learning rate far too large, say): it has no distribution
    to draw from, and no loss."""


def _probabilities(h, V, c, temperature):
    """softmax((V h + c) / temperature) in float64, or None where a logit is not finite
    (the state overflowed: no distribution to draw from).

    The largest logit is subtracted before the division, so every scaled logit is at
    most 0: a temperature so small that a difference overflows (1e-320) gives -inf,
    probability 0, and the draw is greedy, instead of inf - inf = NaN.
    """
    with np.errstate(invalid="ignore", over="ignore"):   # OpenBLAS's spurious flag:
        logits = V.astype(np.float64) @ h.astype(np.float64)     # _blas_flags
        if c is not None:
            logits += c
    if not np.isfinite(logits).all():
        return None
    logits -= logits.max()
    with np.errstate(over="ignore", under="ignore"):       # e^-800 is 0: never drawn
        logits /= temperature
        p = np.exp(logits)
        return p / p.sum()


def _model(params):
    """(Model, stacked) of params that can generate text, or the ValueError saying why not."""
    model, _, stacked = read_model(params)
    if model.directions != 1:
        raise ValueError("a bidirectional model cannot generate text: its reverse direction "
                         "reads the characters that are still to be drawn")
    if model.V is None:
        raise ValueError("params have no output layer (V) to draw characters from")
    model = check_model(params, check_finite=False).model    # shapes, dtypes, as grad's
    L, C = model.layers[0][0].U.shape[1], model.V.shape[0]
    if C != L:
        raise ValueError(f"a model that generates text reads each character it draws: its "
                         f"output size (V {model.V.shape}: {C}) must equal its input size "
                         f"(U {model.layers[0][0].U.shape}: {L})")
    if not all(np.isfinite(a).all() for a in leaves(model).values()):
        raise ValueError("params hold a non-finite value (NaN or inf): a model that "
                         "diverged cannot be sampled")
    return model, stacked


def _start(model, stacked, h0, c0):
    """The layers' states, (layers, H) each (c None but for an LSTM), from h0 and c0 in
    the caller's layout ((H,) for one Elman layer with its head, (layers, H) for a Model)."""
    S, dtype = model.num_layers, model.V.dtype
    H = model.layers[0][0].W.shape[1]
    lstm = model.cell == "lstm"
    if c0 is not None and not lstm:
        raise ValueError(f"c0 is the LSTM's cell state; the {model.cell} cell has none "
                         "(pass c0=None)")
    shape = (S, H) if stacked else (H,)

    def given(state, name):
        if state is None:
            return np.zeros((S, H), dtype)
        value = np.asarray(state)
        if value.dtype.kind not in "fiu" or value.dtype == np.bool_:
            raise TypeError(f"{name} must hold real numbers; got dtype {value.dtype}")
        if value.shape != shape:
            raise ValueError(f"{name} must have shape {shape} (the model's "
                             f"{'(layers, H)' if stacked else '(H,)'}); got {value.shape}")
        if not np.isfinite(value).all():
            raise ValueError(f"{name} holds a non-finite value (NaN or inf)")
        return np.array(value, dtype).reshape(S, H)
    return given(h0, "h0"), given(c0, "c0") if lstm else None


def _prime(prime_ids, size):
    """The prime as a 1-D int64 array of ids below ``size``."""
    refuse_masked("prime_ids", prime_ids)
    ids = np.asarray(prime_ids)
    if ids.size == 0:
        return np.zeros(0, np.int64)
    if ids.dtype.kind not in "iu" or ids.ndim != 1:
        raise TypeError(f"prime_ids must be a 1-D sequence of integer ids; got "
                        f"{ids.ndim}-D {ids.dtype}")
    if ids.min() < 0 or ids.max() >= size:
        raise ValueError(f"prime_ids must lie in [0, {size}); got {ids.min()} ... {ids.max()}")
    return ids.astype(np.int64)


def _check_draw(n, temperature, activation, cell, name="n"):
    """TypeError or ValueError for what no draw can take (``name``: n's, the caller's)."""
    if isinstance(temperature, (bool, np.bool_)) or \
            not isinstance(temperature, (int, float, np.integer, np.floating)):
        raise TypeError(f"temperature must be a number; got {type(temperature).__name__}")
    if not temperature > 0:
        raise ValueError(f"temperature must be positive; got {temperature}")
    if isinstance(temperature, (int, np.integer)) and not finite(temperature):
        raise ValueError(f"temperature must be a number a float can hold; got "
                         f"{shown(temperature)} (float('inf') draws uniformly)")
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"{name} must be an int, the number of "
                        f"{'characters' if name == 'chars' else 'ids'} to draw; got {n!r}")
    if n < 0:
        raise ValueError(f"{name} must be at least 0; got {n}")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose from "
                         f"{', '.join(ACTIVATIONS)}")
    if cell != "elman" and activation != "tanh":
        raise ValueError(f"activation={activation!r} applies to the Elman cell only; the "
                         f"{cell.upper()} cell has its own gates: leave activation at its "
                         "default")


def sample_ids(params, prime_ids, n, *, temperature=1.0, rng=None, activation="tanh",
               h0=None, c0=None):
    """``n`` ids drawn after the ids ``prime_ids`` (may be empty), and the final states.

    Returns ``(ids, h, c)``: h in h0's layout ((H,) for one Elman layer with its head,
    (layers, H) for a `Model`), c likewise for an LSTM and None otherwise. Each next id is
    drawn from softmax(o / temperature) by inverting the cumulative distribution at
    ``rng.random()``, so the same generator state gives the same ids.
    """
    model, stacked = _model(params)
    _check_draw(n, temperature, activation, model.cell)
    rng = generator(rng, "rng")
    h, c = _start(model, stacked, h0, c0)
    prime_ids = _prime(prime_ids, model.layers[0][0].U.shape[1])
    states = _primed(model, prime_ids, activation, h, c)
    out_ids = _draw(model, states, n, temperature, rng, activation, len(prime_ids), 0)
    h = np.stack([s.h for s in states])
    c = None if c is None else np.stack([s.c for s in states])
    return out_ids, (h if stacked else h[0]), (c if stacked or c is None else c[0])


def _primed(model, prime_ids, activation, h, c):
    """The layers' `State`s after reading ``prime_ids`` from h, c ((layers, H) each)."""
    if prime_ids.size:
        out = layer.forward(prime_ids, Model(model.layers), activation=activation, h0=h,
                            c0=c)
        h, c = out.h_final, out.c_final
    return [State(h[l], None if c is None else c[l]) for l in range(model.num_layers)]


def _draw(model, states, n, temperature, rng, activation, primed, before):
    """``n`` ids drawn from the layers' ``states``, which it moves on past them; ``primed``
    and ``before``: the prime's ids and those drawn before these, for the message of an
    overflow."""
    cell, code = CELLS[model.cell], ACTIVATIONS[activation]
    one_hot = np.zeros(model.layers[0][0].U.shape[1], model.V.dtype)
    out_ids = np.empty(n, np.int64)
    C = model.V.shape[0]
    for i in range(n):
        probs = _probabilities(states[-1].h, model.V, model.c, temperature)
        if probs is None:
            raise StatesOverflowed(f"the model's state overflowed after {primed} prime and "
                                   f"{before + i} drawn ids (an output is NaN or inf): it has "
                                   "no distribution to draw from")
        k = int(np.searchsorted(np.cumsum(probs), rng.random() * probs.sum(), side="right"))
        out_ids[i] = k = min(k, C - 1)
        one_hot[:] = 0
        one_hot[k] = 1
        x = one_hot
        with np.errstate(over="ignore", invalid="ignore"):     # overflow: said above
            for l, (weights,) in enumerate(model.layers):
                states[l] = run(weights, cell, code, [x], states[l]).final
                x = states[l].h
    return out_ids


def sample(params, codec, *, prime="", chars=200, temperature=1.0, rng=None,
           activation="tanh"):
    """``chars`` characters continuing ``prime`` (the prime itself is not included).

    Parameters
    ----------
    params : fastbptt.Params or fastbptt.Model
        A model whose inputs and outputs are the characters of ``codec`` (as
        `fastbptt train` saves one: a checkpoint's ``params``).
    codec : fastbptt.Codec
        The characters, in the order of the model's ids.
    prime : str
        Text the model reads first, each of its characters in ``codec``.
    chars : int
        How many characters to draw, 0 or more.
    temperature : float
        Above 0: each next character is drawn from softmax(o / temperature) (below 1
        sharper, above 1 flatter than the model's own distribution).
    rng : None, int or numpy.random.Generator
        One uniform number a character; the same state gives the same text.
    activation : str
        The Elman cell's, as the model was trained with (gated cells: the default).

    TypeError or ValueError for an argument outside these; ValueError if the states
    overflow (saying after how many characters).
    """
    return "".join(sample_chunks(params, codec, prime=prime, chars=chars, chunk=CHUNK,
                                 temperature=temperature, rng=rng, activation=activation))


CHUNK = 10_000       # characters `sample` draws in one call of `sample_ids`


def sample_chunks(params, codec, *, prime="", chars=200, chunk=CHUNK, temperature=1.0,
                  rng=None, activation="tanh"):
    """`sample`'s characters as they are drawn, ``chunk`` at a time (an iterator of
    strings; the arguments are checked before it is returned): for output that shows as
    it comes, or a draw that may stop part-way. Together they are the characters `sample`
    draws, from the same numbers of ``rng`` (one a character)."""
    if isinstance(chunk, (bool, np.bool_)) or not isinstance(chunk, (int, np.integer)):
        raise TypeError(f"chunk must be an int of at least 1; got {chunk!r}")
    if chunk < 1:
        raise ValueError(f"chunk must be an int of at least 1; got {chunk!r}")
    ids = _checked(params, codec, prime)
    _check_draw(chars, temperature, activation, _model(params)[0].cell, "chars")
    return _chunks(params, codec, ids, chars, chunk, temperature, generator(rng, "rng"),
                   activation)


def _chunks(params, codec, ids, chars, chunk, temperature, rng, activation):
    model, stacked = _model(params)
    ids = _prime(ids, model.layers[0][0].U.shape[1])
    states = _primed(model, ids, activation, *_start(model, stacked, None, None))
    for start in range(0, chars, chunk):
        yield codec.decode(_draw(model, states, min(chunk, chars - start), temperature, rng,
                                 activation, len(ids), start))


def _checked(params, codec, prime):
    """The ids of ``prime``, once ``codec`` is known to be the model's."""
    if not isinstance(prime, str):
        raise TypeError(f"prime must be a str; got {type(prime).__name__}")
    if not isinstance(codec, Codec):
        raise TypeError(f"codec must be a fastbptt.Codec (Codec.from_text(text), or a "
                        f"checkpoint's); got {type(codec).__name__}")
    size = _model(params)[0].V.shape[0]
    if size != len(codec):
        raise ValueError(f"the model draws from {size} characters, the codec has "
                         f"{len(codec)}: sample with the codec the model was trained with")
    return codec.encode(prime)
