"""Optimizers against hand-computed updates, for every params structure, and their state."""
import numpy as np
import pytest

import fastbptt
from fastbptt.optim import SGD, Adagrad, Adam, make_optimizer
from fastbptt.params import leaves

P0 = {"U": [[1.0, -2.0]], "W": [[0.5]], "V": [[2.0], [-1.0]], "b": [0.0], "c": [1.0, 3.0]}
G1 = {"U": [[0.5, 1.0]], "W": [[-2.0]], "V": [[0.0], [4.0]], "b": [1.0], "c": [-0.5, 0.25]}
G2 = {"U": [[-1.0, 0.5]], "W": [[1.0]], "V": [[3.0], [-2.0]], "b": [0.0], "c": [2.0, -1.0]}
KEYS = ("U", "W", "V", "b", "c")


def arrays(d, dtype=np.float64):
    return {k: np.array(d[k], dtype) for k in KEYS}


def as_structure(d, kind):
    if kind == "Params":
        return fastbptt.Params(*(d[k] for k in KEYS))
    if kind == "dict":
        return dict(d)
    if kind == "tuple":
        return tuple(d[k] for k in KEYS)
    if kind == "list":
        return [d[k] for k in KEYS]
    if kind == "tuple3":
        return tuple(d[k] for k in KEYS[:3])
    raise AssertionError(kind)


def expected(kind, **opts):
    """Two steps of each rule, written out entry by entry in float64."""
    p, g1, g2 = arrays(P0), arrays(G1), arrays(G2)
    out = {}
    for k in KEYS:
        x = p[k].copy()
        if kind == "sgd":
            m, lr = opts.get("momentum", 0.0), opts["lr"]
            v = g1[k]
            x = x - lr * v
            v = m * v + g2[k]
            x = x - lr * v
        elif kind == "adagrad":
            lr = opts["lr"]
            mem = g1[k] ** 2
            x = x - lr * g1[k] / np.sqrt(mem + 1e-8)
            mem = mem + g2[k] ** 2
            x = x - lr * g2[k] / np.sqrt(mem + 1e-8)
        elif kind == "adam":
            lr, b1, b2, eps = opts["lr"], 0.9, 0.999, 1e-8
            m = np.zeros_like(x)
            v = np.zeros_like(x)
            for t, g in ((1, g1[k]), (2, g2[k])):
                m = b1 * m + (1 - b1) * g
                v = b2 * v + (1 - b2) * g * g
                mhat, vhat = m / (1 - b1 ** t), v / (1 - b2 ** t)
                x = x - lr * mhat / (np.sqrt(vhat) + eps)
        out[k] = x
    return out


CASES = [("sgd", {"lr": 0.1}), ("sgd", {"lr": 0.1, "momentum": 0.9}),
         ("adagrad", {"lr": 0.1}), ("adam", {"lr": 0.01})]
STRUCTURES = ["Params", "dict", "tuple", "list", "tuple3"]


@pytest.mark.parametrize("structure", STRUCTURES)
@pytest.mark.parametrize("kind, opts", CASES, ids=lambda c: str(c))
def test_two_steps_match_hand_computed(kind, opts, structure):
    p = arrays(P0)
    params = as_structure(p, structure)
    ids = {k: id(v) for k, v in p.items()}
    opt = make_optimizer(kind, **opts)
    opt.step(params, as_structure(arrays(G1), structure))
    opt.step(params, as_structure(arrays(G2), structure))
    want = expected(kind, **opts)
    names = KEYS[:3] if structure == "tuple3" else KEYS
    for i, k in enumerate(names):
        got = params[k] if structure == "dict" else params[i]
        assert id(got) == ids[k]                         # updated in place
        np.testing.assert_allclose(got, want[k], rtol=1e-12, atol=1e-14, err_msg=k)


@pytest.mark.parametrize("kind, opts", CASES, ids=lambda c: str(c))
def test_state_dict_round_trip_continues_identically(kind, opts):
    a_params = fastbptt.Params(*arrays(P0, np.float32).values())
    b_params = fastbptt.Params(*(v.copy() for v in a_params))
    a = make_optimizer(kind, **opts)
    a.step(a_params, arrays(G1, np.float32))
    b = make_optimizer(kind, **opts)
    b.step(b_params, arrays(G1, np.float32))
    state = b.state_dict()
    fresh = make_optimizer(kind, lr=123.0)
    fresh.load_state_dict(state)
    assert fresh.lr == opts["lr"] and fresh.t == 1
    a.step(a_params, arrays(G2, np.float32))
    fresh.step(b_params, arrays(G2, np.float32))
    for x, y in zip(a_params, b_params):
        assert x.dtype == np.float32
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_in_one_pass_gives_numpys_bits(dtype):
    """Contiguous arrays take the one-pass kernel, Fortran-order and strided ones NumPy's
    passes: six steps of each, on gradients from 1e-6 to 1e2, agree bit for bit."""
    rng = np.random.default_rng(3)
    shapes = {"U": (5, 33), "W": (40, 33), "V": (3, 33), "b": (33,), "c": (3,)}
    one = {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}
    other = {}
    for k, a in one.items():
        if a.ndim == 2:
            other[k] = np.asfortranarray(a)
        else:
            other[k] = np.zeros(2 * a.size, dtype)[::2]
            other[k][:] = a
    assert not any(a.flags.c_contiguous for a in other.values())
    start = {k: a.copy() for k, a in one.items()}
    a, b = Adam(3e-3), Adam(3e-3)
    for _ in range(6):
        grads = {k: (rng.standard_normal(s) * 10.0 ** rng.integers(-6, 3)).astype(dtype)
                 for k, s in shapes.items()}
        a.step(one, grads)
        b.step(other, {k: np.asfortranarray(g) for k, g in grads.items()})
    for k in shapes:
        assert one[k].tobytes() == np.ascontiguousarray(other[k]).tobytes(), k
        for buffer in ("m", "v"):
            np.testing.assert_array_equal(a.state[k][buffer], b.state[k][buffer])
    assert all(not np.array_equal(one[k], start[k]) for k in shapes)     # both moved


def test_state_dict_is_a_copy_and_checks_kind():
    params = arrays(P0)
    opt = Adam(0.1)
    opt.step(params, arrays(G1))
    state = opt.state_dict()
    state["m.U"][...] = 99
    assert not (opt.state["U"]["m"] == 99).any()
    with pytest.raises(ValueError, match="adam"):
        SGD(0.1).load_state_dict(state)


def test_bad_arguments():
    with pytest.raises(ValueError, match="lr"):
        Adam(0.0)
    with pytest.raises(ValueError, match="momentum"):
        SGD(0.1, momentum=1.0)
    with pytest.raises(ValueError, match="unknown optimizer"):
        make_optimizer("rmsprop", 0.1)
    params = arrays(P0)
    grads = arrays(G1)
    grads["W"] = np.zeros((2, 2))
    with pytest.raises(ValueError, match="'W'"):
        Adagrad(0.1).step(params, grads)
    frozen = arrays(P0)
    frozen["U"].setflags(write=False)
    with pytest.raises(ValueError, match="params 'U' is read-only, and the update writes "
                                         "into it"):
        SGD(0.1).step(frozen, arrays(G1))


def test_awkward_numbers_and_arrays_are_named():
    """Ints beyond any float, a list as the kind, keys that are no names, entries of no
    optimizer and big-endian params got NumPy's or Python's own errors, or were taken."""
    for make in (lambda: SGD(lr=10**400), lambda: Adam(eps=10**400)):
        with pytest.raises(ValueError, match="must be positive and finite; got an int of "
                                             "401 digits"):
            make()
    with pytest.raises(TypeError, match="kind must be an optimizer's name"):
        make_optimizer(["sgd"], 0.1)
    state = Adam(0.1).state_dict()
    for bad, words in [({"t": 10**400}, "step count t must be a whole number >= 0; got an "
                                        "int of 401 digits"),
                       ({3: 5}, "state's keys are names"),
                       ({"momentum": 0.9}, "unknown optimizer state entry 'momentum'")]:
        with pytest.raises(ValueError, match=words):
            Adam(0.1).load_state_dict({**state, **bad})
    swapped = {k: v.astype(v.dtype.newbyteorder()) for k, v in arrays(P0).items()}
    with pytest.raises(TypeError, match="in this machine's byte order .* got >f8 .*astype"):
        SGD(0.1).step(swapped, arrays(G1))


def test_updates_the_arrays_grad_returns_for():
    """A step on real gradients lowers the loss (same structure in, same out)."""
    rng = np.random.default_rng(0)
    params = dict(fastbptt.init_params(5, 8, 5, dtype=np.float64, seed=1)._asdict())
    x = rng.integers(0, 5, size=(4, 10))
    y = np.roll(x, -1, axis=1)
    before, grads = fastbptt.value_and_grad(x, y, params)
    assert isinstance(grads, dict)
    Adam(0.01).step(params, grads)
    assert fastbptt.loss(x, y, params) < before


def test_a_bad_step_changes_nothing():
    """Every parameter is checked before any is updated."""
    params = fastbptt.init_params(3, 4, 2, dtype=np.float64, seed=0)
    before = [a.copy() for a in params]
    grads = params._replace(W=np.ones((4, 5)))            # U passes, W does not
    opt = fastbptt.optim.Adam(1e-2)
    with pytest.raises(ValueError, match="grads 'W' is"):
        opt.step(params, grads)
    assert opt.t == 0 and all(np.array_equal(a, b) for a, b in zip(params, before))


@pytest.mark.parametrize("lr,error", [("0.1", TypeError), (0, ValueError),
                                      (float("nan"), ValueError), (True, TypeError)])
def test_learning_rate_is_checked(lr, error):
    with pytest.raises(error, match="lr must be"):
        fastbptt.optim.SGD(lr)


@pytest.mark.parametrize("kind,opts", [("adam", {}), ("adagrad", {}),
                                       ("sgd", {"momentum": 0.9})])
def test_a_state_of_other_shapes_is_refused_before_anything_changes(kind, opts):
    """State kept for one model, then params of another (a step, or a state loaded from
    another run): ValueError naming the buffer and both shapes, nothing written (Adam's
    one-pass kernel would otherwise run past its buffers)."""
    small = fastbptt.init_params(5, 4, 5, seed=0)
    opt = make_optimizer(kind, 1e-3, **opts)
    opt.step(small, fastbptt.init_params(5, 4, 5, seed=1))
    for other in (opt, make_optimizer(kind, 1e-3, **opts)):
        if other is not opt:
            other.load_state_dict(opt.state_dict())
        big = fastbptt.init_params(5, 64, 5, seed=0)
        before = [a.copy() for a in big]
        with pytest.raises(ValueError, match=r"the optimizer's \w+\.U is \(4, 5\) but params "
                                             r"'U' is \(64, 5\): its state is another model's"):
            other.step(big, fastbptt.init_params(5, 64, 5, seed=1))
        assert other.t == 1 and all(np.array_equal(a, b) for a, b in zip(big, before))


def test_adam_refuses_parameters_that_join_after_its_first_steps():
    """Adam's bias correction counts the optimizer's steps: a parameter without moments
    after t steps (a 1-layer model's state stepping a 2-layer one moved layer 1 by 2.5 lr
    instead of lr; biases frozen, then not) is refused before anything changes. Params
    the state has and a step leaves out (frozen) are no mistake."""
    one = fastbptt.init_params(5, 4, 5, cell="gru", seed=0)
    two = fastbptt.init_params(5, 4, 5, cell="gru", num_layers=2, seed=0)
    elman = fastbptt.init_params(5, 4, 5, seed=0)
    frozen = {k: v for k, v in elman._asdict().items() if k not in ("b", "c")}
    for first, then, joining in ((one, two, "layers.1.0.U"), (one, elman, "U"),
                                 (frozen, elman, "b")):
        opt = Adam(1e-3)
        opt.step(first, first)
        for other in (opt, Adam(1e-3)):
            if other is not opt:
                other.load_state_dict(opt.state_dict())
            before = [a.copy() for a in leaves(then).values()]
            with pytest.raises(ValueError, match=rf"^params {joining!r} has no Adam moments "
                                                 r"in this optimizer, which has taken 1 "
                                                 r"steps: .* would move too far"):
                other.step(then, then)
            assert other.t == 1
            assert all(np.array_equal(a, b) for a, b in zip(leaves(then).values(), before))
    opt = Adam(1e-3)
    opt.step(two, two)
    opt.step(one, one)                          # layer 1 frozen for a step: runs
    assert opt.t == 2


@pytest.mark.parametrize("kind", ["sgd", "adagrad"])
def test_sgd_and_adagrad_start_a_joining_parameter_as_a_new_optimizer_would(kind):
    """Their buffers start at zero, which their steps do not scale by the step count."""
    elman = fastbptt.init_params(5, 4, 5, seed=0)
    grads = fastbptt.init_params(5, 4, 5, seed=1)
    frozen = {k: v for k, v in elman._asdict().items() if k not in ("b", "c")}
    opts = {"momentum": 0.9} if kind == "sgd" else {}
    opt = make_optimizer(kind, 0.1, **opts)
    opt.step(frozen, grads._asdict())
    opt.step(elman, grads)
    again = fastbptt.init_params(5, 4, 5, seed=0)
    make_optimizer(kind, 0.1, **opts).step(again, grads)       # b's first step
    np.testing.assert_array_equal(elman.b, again.b)
    assert not np.array_equal(elman.U, again.U)                 # U's second


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "adam"])
def test_params_that_are_not_floats_or_grads_that_are_not_real_are_refused(kind):
    ints = fastbptt.Params(np.ones((4, 5), int), np.ones((4, 4), int), np.ones((5, 4), int))
    grads = fastbptt.init_params(5, 4, 5, seed=1)
    opt = make_optimizer(kind, 0.5)
    with pytest.raises(TypeError, match=r"params 'U' must hold float32 or float64 to be "
                                        r"updated; got int64"):
        opt.step(ints, grads)
    assert opt.t == 0 and opt.state == {} and (ints.U == 1).all()
    params = fastbptt.init_params(5, 4, 5, seed=0)
    with pytest.raises(TypeError, match=r"grads 'U' must hold real numbers; got complex64"):
        opt.step(params, grads._replace(U=grads.U + 1j))


@pytest.mark.parametrize("kind", ["adagrad", "adam"])
def test_an_eps_that_is_zero_in_the_params_dtype_is_refused(kind):
    """eps 1e-50 is 0 in float32, where a zero gradient would give 0 / 0 = NaN weights;
    in float64 it is a number."""
    p32 = fastbptt.init_params(5, 4, 5, seed=0)
    zeros = p32._replace(**{k: np.zeros_like(v) for k, v in p32._asdict().items()})
    opt = make_optimizer(kind, 0.1, eps=1e-50)
    with pytest.raises(ValueError, match=r"eps 1e-50 is 0 in float32 .* use eps of at least "):
        opt.step(p32, zeros)
    assert opt.t == 0
    p64 = fastbptt.init_params(5, 4, 5, dtype=np.float64, seed=0)
    opt.step(p64, p64._replace(**{k: np.zeros_like(v) for k, v in p64._asdict().items()}))
    assert all(np.isfinite(a).all() for a in p64)


def test_a_state_saved_with_numpy_loads_and_a_state_without_kind_is_refused(tmp_path):
    opt = Adam(1e-3)
    params = fastbptt.init_params(5, 4, 5, seed=0)
    opt.step(params, fastbptt.init_params(5, 4, 5, seed=1))
    np.savez(tmp_path / "opt.npz", **opt.state_dict())
    with np.load(tmp_path / "opt.npz") as saved:
        again = Adam(1e-2)
        again.load_state_dict(dict(saved))
    assert (again.t, again.lr, again.kind) == (1, 1e-3, "adam")
    np.testing.assert_array_equal(again.state["U"]["m"], opt.state["U"]["m"])
    with pytest.raises(ValueError, match="state has no 'kind'"):
        Adam(1e-3).load_state_dict({})
    with pytest.raises(TypeError, match="state must be a dict from state_dict"):
        Adam(1e-3).load_state_dict(None)


@pytest.mark.parametrize("gates,bias", [(1, False), (1, True), (3, True)])
def test_layers_given_as_tuples_step_and_clip(gates, bias):
    """A layer as (U, W), (U, W, b) or a GRU's (U, W, b, bh), as fastbptt.layer takes it:
    its gradients come back as the same tuple, and the optimizers and clipping read its
    entries by their names (b is not the head's V)."""
    rng = np.random.default_rng(3)
    H = 4
    layer = [rng.normal(size=(gates * H, 3)), rng.normal(size=(gates * H, H))]
    if bias:
        layer.append(rng.normal(size=gates * H))
        if gates == 3:
            layer.append(rng.normal(size=gates * H))
    layer = tuple(layer)
    out, back = fastbptt.layer.vjp(rng.normal(size=(2, 5, 3)), layer)
    grads = back(rng.normal(size=(2, 5, H))).grads
    names = ["U", "W", "b", "bh"][:len(layer)]
    assert list(fastbptt.params.leaves(grads)) == names
    before = [a.copy() for a in layer]
    fastbptt.clip_grads(grads, max_norm=1.0)
    opt = Adam(0.01)
    opt.step(layer, grads)
    assert sorted(k for k in opt.state_dict() if k.startswith("m.")) == \
        sorted(f"m.{n}" for n in names)
    assert all(not np.array_equal(a, b) for a, b in zip(layer, before))


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_grads_of_the_wrong_structure_are_called_grads_in_the_message(kind):
    params = fastbptt.init_params(3, 4, 5, seed=0)
    no_W = {"U": np.zeros((4, 3), np.float32), "V": np.zeros((5, 4), np.float32)}
    stack = fastbptt.init_params(3, 4, 5, cell="gru", num_layers=2, seed=0)
    for p, g, phrase in ((params, no_W, r"^grads is missing key\(s\) 'W'"),
                         (params, 3.0, r"^grads must be a fastbptt.Params"),
                         (stack, {"layers": (), "V": stack.V}, r"^grads layers must be")):
        with pytest.raises((TypeError, ValueError), match=phrase):
            make_optimizer(kind, 0.1).step(p, g)
        with pytest.raises((TypeError, ValueError), match=phrase):
            fastbptt.clip_grads(g, max_norm=1.0)
