"""The reference against central finite differences, in float64, over the model grid.

Every cell x stack (1-3 layers) x directions x truncation family (windows, chunks and
other strides on one layer; chunks on stacks), with ragged lengths (one of them 0), h0
and c0, ids and dense inputs rotating over the grid (`models.cases`). Truncated
gradients are differences of the SPEC.md §3 surrogate (every layer's state frozen
before lo(t)); the layer VJP's of the §7 surrogate of sum <dh_t, h_t> + <dh_final,
h_final> (+ <dc_final, c_final>), including dx.
"""
import fastbptt
from fastbptt import reference
from fastbptt.params import leaves
from models import IMPLS, SHAPES, Case, cases, params, upstream

TOLERANCE = 1e-6
SIZES = dict(B=3, T=4, L=2, H=2, C=2)
# Through three LSTM layers the first layer's gradients are ~1e-5 of the loss; a step
# larger than check_grad's default keeps the loss's rounding (~1e-19 of it) out of them.
EPS = 1e-5


def grid(head):
    """`models.cases`, with three flag rotations for one layer (where every truncation
    family runs)."""
    one = [shape for shape in SHAPES if shape[:2] == (1, 1)]
    return (cases(head, shapes=[s for s in SHAPES if s not in one]) +
            cases(head, per_shape=3, shapes=one))


def check_bptt(case, rng, impl):
    x, y, p, options = case.data(rng, head=True, **SIZES)
    errors = fastbptt.check_grad(x, y, p, impl=impl, eps=EPS, **options)
    given = {"h0", "c0"} if "dc0" in fastbptt.BPTTResult._fields else {"h0"}
    assert set(errors) == set(leaves(p)) | (given & set(options)), sorted(errors)
    assert all(e <= TOLERANCE for e in errors.values()), errors


def check_vjp(case, rng, impl):
    x, _, p, options = case.data(rng, head=False, **SIZES)
    out, _ = impl(x, p, **options)
    dh, dh_final, dc_final = upstream(rng, out, case.cell)
    errors = fastbptt.check_layer_grad(x, p, dh, dh_final, dc_final, impl=impl, eps=EPS,
                                      **options)
    want = set(leaves(p)) | ({"h0", "c0"} & set(options)) | (set() if case.ids else {"x"})
    assert set(errors) == want, sorted(errors)
    assert all(e <= TOLERANCE for e in errors.values()), errors


@params(grid(head=True))
def test_reference_bptt(rng, case):
    check_bptt(case, rng, reference.bptt)


@params(grid(head=False))
def test_reference_layer_vjp(rng, case):
    check_vjp(case, rng, reference.layer_vjp)


@params(grid(head=True)[::4])
def test_kernels_bptt(rng, case):
    """check_grad on the kernels themselves (a quarter of the grid: the kernels are
    compared with the reference over all of it)."""
    check_bptt(case, rng, IMPLS["kernels"].bptt(case))


@params(grid(head=False)[1::4])
def test_kernels_layer_vjp(rng, case):
    check_vjp(case, rng, IMPLS["kernels"].vjp(case))


def test_check_layer_grad_detects_wrong_gradients(rng):
    """A dx or W gradient off by 0.1%, or a truncated gradient checked against the full
    one, fails the check."""
    case = Case("elman", 1, 1, False, "windows", "tanh", True, True, False, True, True, False)
    x, _, p, options = case.data(rng, head=False, **SIZES)
    dh = upstream(rng, reference.layer_vjp(x, p, **options)[0], case.cell)

    def broken(*args, **kwargs):
        out, back = reference.layer_vjp(*args, **kwargs)

        def wrong(*grads):
            result = back(*grads)
            return result._replace(dx=result.dx * 1.001,
                                   grads=result.grads._replace(W=result.grads.W * 1.001))
        return out, wrong

    def untruncated(x, p, **kwargs):
        return reference.layer_vjp(x, p, **{**kwargs, "truncate": None, "stride": 1})

    errors = fastbptt.check_layer_grad(x, p, *dh, impl=broken, eps=EPS, **options)
    assert errors["x"] > 1e-4 and errors["W"] > 1e-4 and errors["U"] <= TOLERANCE
    errors = fastbptt.check_layer_grad(x, p, *dh, impl=untruncated, eps=EPS, **options)
    assert errors["W"] > 1e-4
