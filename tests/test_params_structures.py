"""Every params structure goes in and comes back out as itself; init_params; bad structures."""
import re
from typing import NamedTuple

import numpy as np
import pytest

import fastbptt
from fastbptt import reference
from fastbptt.params import read_structure

L, H, C, T = 5, 7, 3, 6
NAMES = ("U", "W", "V", "b", "c")


def arrays(bias, seed=0):
    return list(fastbptt.init_params(L, H, C, bias=bias, dtype=np.float64, seed=seed))[
        : 5 if bias else 3]


STRUCTURES = {
    "dict3": lambda a: dict(zip(NAMES, a[:3])),
    "dict5": lambda a: dict(zip(NAMES, a)),
    "tuple3": lambda a: tuple(a[:3]),
    "tuple5": lambda a: tuple(a),
    "list5": lambda a: list(a),
    "Params3": lambda a: fastbptt.Params(*a[:3]),
    "Params5": lambda a: fastbptt.Params(*a),
}


def has_bias(name):
    return name.endswith("5")


def entries(structure):
    """{name: array} of a gradient structure, whatever its kind (missing biases left out)."""
    if isinstance(structure, dict):
        return dict(structure)
    return {k: v for k, v in zip(NAMES, structure) if v is not None}


def data(seed=1):
    rng = np.random.default_rng(seed)
    return rng.integers(0, L, T), rng.integers(0, C, T)


def call(fn, params):
    x, y = data()
    if fn == "grad":
        return fastbptt.grad(x, y, params, truncate=3)
    if fn == "value_and_grad":
        loss, grads = fastbptt.value_and_grad(x, y, params, truncate=3)
        assert type(loss) is float
        return grads
    if fn == "reference":
        return reference.grad(x, y, params, truncate=3)
    return fastbptt.bptt(x, y, params, truncate=3).grads


@pytest.mark.parametrize("fn", ["grad", "value_and_grad", "bptt", "reference"])
@pytest.mark.parametrize("name", STRUCTURES)
def test_structure_round_trip(name, fn):
    a = arrays(has_bias(name))
    params = STRUCTURES[name](a)
    grads = call(fn, params)
    assert type(grads) is type(params)
    if isinstance(params, dict):
        assert list(grads) == list(params)
    else:
        assert len(grads) == len(params)
    if isinstance(params, fastbptt.Params) and not has_bias(name):
        assert grads.b is None and grads.c is None
    got = entries(grads)
    assert list(got) == list(NAMES[: len(a)])
    for (key, g), p in zip(got.items(), a):
        assert g.shape == p.shape and g.dtype == p.dtype, key
        assert np.abs(g).max() > 0, key


@pytest.mark.parametrize("bias", [False, True])
def test_structures_agree(bias):
    a = arrays(bias)
    results = {name: entries(fastbptt.grad(*data(), make(a), truncate=3))
               for name, make in STRUCTURES.items() if has_bias(name) == bias}
    first = next(iter(results.values()))
    for name, got in results.items():
        assert got.keys() == first.keys(), name
        for key in got:
            assert np.array_equal(got[key], first[key]), (name, key)


def test_bias_changes_gradients():
    """The biased structures really use b and c (guards the comparison above)."""
    a = arrays(True)
    with_bias = fastbptt.grad(*data(), tuple(a))
    without = fastbptt.grad(*data(), tuple(a[:3]))
    assert not np.allclose(with_bias[0], without[0])


def test_read_structure_kinds():
    a = arrays(True)
    for kind in (tuple, list):
        value, rebuild = read_structure(kind(a))
        assert isinstance(value, fastbptt.Params)
        assert all(v is p for v, p in zip(value, a))
        assert type(rebuild(value)) is kind and len(rebuild(value)) == 5
        value, rebuild = read_structure(kind(a[:3]))
        assert value.b is None and value.c is None
        assert type(rebuild(value)) is kind and len(rebuild(value)) == 3


def test_dict_keys_in_any_order():
    a = arrays(True)
    shuffled = {"c": a[4], "V": a[2], "U": a[0], "b": a[3], "W": a[1]}
    grads = fastbptt.grad(*data(), shuffled)
    want = fastbptt.grad(*data(), tuple(a))
    assert list(grads) == list(shuffled)        # the caller's key order
    for key, w in zip(NAMES, want):
        assert np.array_equal(grads[key], w), key


# init_params -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_init_params_shapes_and_dtype(dtype):
    p = fastbptt.init_params(L, H, C, dtype=dtype, seed=0)
    assert isinstance(p, fastbptt.Params)
    assert [a.shape for a in p] == [(H, L), (H, H), (C, H), (H,), (C,)]
    assert all(a.dtype == dtype for a in p)
    assert p.sizes == (L, H, C)
    bound = 1 / np.sqrt(H)
    assert all(np.abs(a).max() <= bound for a in p)
    assert np.abs(p.W).max() > bound / 2          # actually spread over the range


def test_init_params_defaults_and_no_bias():
    p = fastbptt.init_params(L, H, C)
    assert p.U.dtype == np.float32
    q = fastbptt.init_params(L, H, C, bias=False, seed=0)
    assert q.b is None and q.c is None
    assert q.sizes == (L, H, C)
    assert [a.shape for a in q[:3]] == [(H, L), (H, H), (C, H)]


def test_init_params_seed():
    same = [fastbptt.init_params(L, H, C, seed=42) for _ in range(2)]
    other = fastbptt.init_params(L, H, C, seed=43)
    from_gen = fastbptt.init_params(L, H, C, seed=np.random.default_rng(42))
    for k in NAMES:
        assert np.array_equal(getattr(same[0], k), getattr(same[1], k))
        assert np.array_equal(getattr(same[0], k), getattr(from_gen, k))
        assert not np.array_equal(getattr(same[0], k), getattr(other, k))


@pytest.mark.parametrize("options,error,message", [
    ({"bias": "no"}, TypeError, "bias must be True or False; got 'no'"),
    ({"bidirectional": 1}, TypeError, "bidirectional must be True or False; got 1"),
    ({"seed": -1}, ValueError, "seed must be None, a non-negative int seed or a numpy Generator; "
                               "got -1"),
    ({"seed": "a"}, TypeError, "seed must be None"),
    ({"num_layers": 0}, ValueError, "num_layers must be at least 1; got 0"),
    ({"dtype": "foo"}, TypeError, "dtype must be float32 or float64 (np.float32, 'float64', "
                                  "...); got 'foo'"),
    ({"dtype": None}, TypeError, "dtype must be float32 or float64 (np.float32, 'float64', "
                                 "...); got None"),
    ({"dtype": np.float16}, TypeError, "dtype must be float32 or float64"),
])
def test_init_params_refusals(options, error, message):
    with pytest.raises(error, match=re.escape(message)):
        fastbptt.init_params(L, H, C, **options)


def test_params_sizes():
    U, W, V = np.zeros((H, L)), np.zeros((H, H)), np.zeros((C, H))
    assert fastbptt.Params(U, W, V).sizes == (L, H, C)


# bad structures ----------------------------------------------------------------------------

@pytest.mark.parametrize("extra", ["X", "bias"])
def test_unknown_dict_key(extra):
    params = dict(zip(NAMES, arrays(True)), **{extra: np.zeros(H)})
    with pytest.raises(ValueError) as info:
        fastbptt.grad(*data(), params)
    assert repr(extra) in str(info.value)


@pytest.mark.parametrize("missing", ["U", "W", "V"])
def test_missing_dict_key(missing):
    params = {k: v for k, v in zip(NAMES, arrays(True)) if k != missing}
    with pytest.raises(ValueError) as info:
        fastbptt.grad(*data(), params)
    message = str(info.value)
    assert "missing" in message and repr(missing) in message.split(";")[0]


@pytest.mark.parametrize("params", ["UWV", 3, None, np.zeros((3, 3))],
                         ids=["str", "int", "None", "ndarray"])
def test_not_a_structure(params):
    with pytest.raises(TypeError):
        fastbptt.grad(*data(), params)


@pytest.mark.parametrize("n", [2, 4, 6])
def test_wrong_sequence_length(n):
    a = arrays(True) + [np.zeros(H)]
    with pytest.raises(ValueError):
        fastbptt.grad(*data(), tuple(a[:n]))


@pytest.mark.parametrize("stacked", [False, True])
def test_layer_without_input_columns(stacked):
    layer = fastbptt.Layer(np.zeros((H, 0)), np.zeros((H, H)))
    params = fastbptt.Model(((layer,),)) if stacked else layer
    where = "params layers[0][0] U" if stacked else "params U"
    with pytest.raises(ValueError, match=re.escape(f"{where} must have input_size >= 1 "
                                                   f"columns") + rf".*got \({H}, 0\)"):
        fastbptt.layer.vjp(np.zeros((2, 3, 0)), params)


class Head(NamedTuple):                 # the caller's record: fields by name, any order
    W: np.ndarray
    V: np.ndarray
    U: np.ndarray
    c: np.ndarray
    b: np.ndarray


class Cell(NamedTuple):
    W: np.ndarray
    U: np.ndarray
    b: np.ndarray


def test_a_namedtuple_is_read_by_its_field_names():
    """A NamedTuple of the caller's is read by field name, not by position (here W, V
    and U swapped places, and L = H = C so that their shapes agree), and its gradients
    come back as the same NamedTuple."""
    n = 4
    p = fastbptt.init_params(n, n, n, dtype=np.float64, seed=3)
    x = np.random.default_rng(3).integers(0, n, (2, T))
    record = Head(W=p.W, V=p.V, U=p.U, c=p.c, b=p.b)
    want = fastbptt.value_and_grad(x, x, p)
    got = fastbptt.value_and_grad(x, x, record)
    assert got[0] == want[0] and type(got[1]) is Head
    assert all(np.array_equal(getattr(got[1], k), getattr(want[1], k)) for k in NAMES)
    assert fastbptt.params.leaves(record).keys() == fastbptt.params.leaves(p).keys()

    layer = fastbptt.Layer(p.U, p.W, p.b)
    xd = np.random.default_rng(4).normal(size=(2, T, n))
    out, back = fastbptt.layer.vjp(xd, Cell(W=p.W, U=p.U, b=p.b))
    want_out, want_back = fastbptt.layer.vjp(xd, layer)
    assert np.array_equal(out.h, want_out.h)
    grads, want_grads = back(out.h).grads, want_back(out.h).grads
    assert type(grads) is Cell
    assert all(np.array_equal(getattr(grads, k), getattr(want_grads, k)) for k in "UWb")
    assert list(fastbptt.params.leaves(Cell(W=p.W, U=p.U, b=p.b))) == ["U", "W", "b"]


def test_a_namedtuple_with_a_field_of_another_name_is_refused():
    Extra = NamedTuple("Extra", [("U", np.ndarray), ("W", np.ndarray), ("scale", float)])
    p = fastbptt.init_params(L, H, C, dtype=np.float64, seed=0)
    with pytest.raises(ValueError, match="unknown key.*'scale'"):
        fastbptt.layer.forward(np.zeros((T, L)), Extra(p.U, p.W, 1.0))


def test_a_models_properties_read_every_layer_form():
    """Model.cell raised AttributeError for dict and tuple layers, which bptt takes."""
    p = fastbptt.init_params(3, 4, 3, cell="gru", seed=0, num_layers=2, bidirectional=True)
    as_dicts = p._replace(layers=tuple(tuple(layer._asdict() for layer in pair)
                                       for pair in p.layers))
    as_tuples = p._replace(layers=tuple(tuple(tuple(layer) for layer in pair)
                                        for pair in p.layers))
    for model in (p, as_dicts, as_tuples):
        assert (model.cell, model.num_layers, model.directions) == ("gru", 2, 2)
    with pytest.raises(ValueError, match="the model has no layers"):
        fastbptt.Model(layers=()).cell


def test_a_layer_given_for_a_model_says_what_to_pass():
    """A `Layer` is a tuple of four: not read as (U, W, V, b), and not refused as a
    sequence of the wrong length, but named, with the model it belongs in."""
    p = fastbptt.init_params(5, 4, 5, dtype=np.float64, seed=0)
    layer = fastbptt.Layer(p.U, p.W, p.b)
    for call in (lambda q: fastbptt.grad([[1, 2]], [[1, 2]], q),
                 lambda q: fastbptt.forward([[1, 2]], q)):
        with pytest.raises(ValueError, match=r"^params is a fastbptt\.Layer, one recurrent "
                                             r"layer without an output layer \(V, c\): pass "
                                             r"fastbptt\.Model\(\(\(layer,\),\), V, c\)"):
            call(layer)
    model = fastbptt.Model(((layer,),), p.V, p.c)
    assert fastbptt.loss([[1, 2]], [[1, 2]], model) == fastbptt.loss([[1, 2]], [[1, 2]], p)
