"""Every op's kernels take operands of any memory layout and never write into them.

Inside a block program a kernel gets what the step before it made: a slice is a strided view
of its operand, a parameter read a broadcast, and one gradient array may reach the backward
of several ops (add hands its output's gradient to both operands); eager mode hands over
the user's layout (a transposed array stays Fortran-ordered). So each kernel, forward and backward, runs here on operands, values and
output gradients that are strided, reversed, transposed or offset views, all read-only (a
write raises), and must give what it gives on C-contiguous copies.

The cases come from the spec table of test_ops_gradcheck.py (one or more entries per public
op, checked there to cover every registered op): a new op's entry there is checked here too.
"""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.ops import OuterGrad, RowGrad
from hybridbatch.record import signature
from op_specs import SPECS, SPEC_IDS, draw, layouts, make_param

VIEWS = ("strided", "reversed", "transposed", "offset")


def _view(x, how):
    """x's values in a read-only view laid out `how` (not C-contiguous for two or more elements,
    but for an offset vector, which only starts one element into its buffer)."""
    x = np.asarray(x)
    if x.ndim == 0:
        v = x.copy()
    elif how == "transposed" and x.ndim >= 2:
        v = np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)
    elif how == "reversed":
        v = np.ascontiguousarray(x[..., ::-1])[..., ::-1]
    elif how == "offset":
        buf = np.empty(x.shape[:-1] + (x.shape[-1] + 1,), x.dtype)
        buf[..., 1:] = x
        v = buf[..., 1:]
    else:       # strided (and a transposed vector)
        buf = np.empty(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
        buf[..., ::2] = x
        v = buf[..., ::2]
    v.flags.writeable = False
    return v


def _recorded(spec_, layout, rng):
    """(sig, dims, per-node operand counts, the node's integer, the scope) of the op a spec
    records in a scope, its operands Parameters ("shared") or constants ("inst") as the
    layout says. The scope holds what the integer names (a py_func's functions)."""
    d = spec_.dims(rng)
    arrays = [draw(rng, shape, dom, np.float32) for shape, dom in zip(spec_.shapes(d), spec_.doms())]
    with hb.batching() as scope:
        xs = [make_param(x, np.float32) if mode == "shared" else hb.array(x) for mode, x in zip(layout, arrays)]
        out = spec_.call(xs, d, spec_.aux(rng, d) if spec_.aux else None)
        g = scope.graph
        sig = signature.SIGS[g.sig[out.id]]
        count = g.arg_end[out.id] - (g.arg_end[out.id - 1] if out.id else 0)   # a ragged node's operands
    return sig, d, count, g.aux[out.id], scope


def _batch(spec_, sig, d, count, recorded_aux, rows, rng):
    """Kernel operands and aux for `rows` nodes of sig: a batched operand (rows,) + shape
    (a ragged op's node by node, `count` each), a shared one whole; values of both signs.
    The aux is drawn per node where the spec draws it, else the recorded node's (the
    numbers a spec's `x * 1.5` packs)."""
    def values(shape, dtype):
        if dtype == np.bool_:
            return rng.random(shape) < 0.5
        return (rng.choice([-1.0, 1.0], shape) * rng.uniform(0.5, 2.0, shape)).astype(dtype)

    lead = rows * count if sig.op.ragged else rows
    xs = [values(shape if shared else (lead,) + shape, dtype)
          for shape, dtype, shared in zip(sig.in_shapes, sig.in_dtypes, sig.shared)]
    if sig.op.ragged:
        aux = np.full(rows, count, np.int64)
    elif sig.op.uses_aux:
        aux = np.array([spec_.aux(rng, d) if spec_.aux else recorded_aux for _ in range(rows)], np.int64)
    else:
        aux = None
    return xs, aux


def _assert_same(got, want, what):
    if isinstance(want, OuterGrad):
        got, want = got.left.T @ got.right, want.left.T @ want.right
    if isinstance(want, RowGrad):
        np.testing.assert_array_equal(got.rows, want.rows, err_msg=what)
        got, want = got.values, want.values
    if want is None:
        assert got is None, what
        return
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("spec_", SPECS, ids=SPEC_IDS)
def test_kernels_take_any_layout_and_write_no_operand(spec_):
    rng = np.random.default_rng(4000 + SPEC_IDS.index(spec_.id))
    for layout in layouts(spec_):
        sig, d, count, recorded_aux, _scope = _recorded(spec_, layout, rng)
        op = sig.op
        for rows in (1, 3):         # an eager call, a batch
            xs, aux = _batch(spec_, sig, d, count, recorded_aux, rows, rng)
            needs = (True,) * len(xs)
            with np.errstate(all="ignore"):
                y = op.forward(np, sig, xs, aux)
                gy = rng.normal(size=np.shape(y)).astype(sig.out_dtype)
                grads = op.backward(np, sig, xs, aux, y, gy, needs)
                for how in VIEWS:
                    where = f"{spec_.id} {sig.describe()} rows={rows} {how} views"
                    views = [_view(x, how) for x in xs]
                    _assert_same(op.forward(np, sig, views, aux), y, f"{where}: forward")
                    got = op.backward(np, sig, views, aux, _view(y, how), _view(gy, how), needs)
                    for i, (g, want) in enumerate(zip(got, grads)):
                        _assert_same(g, want, f"{where}: gradient of operand {i}")
                    for i, (v, x) in enumerate(zip(views, xs)):
                        assert np.array_equal(v, x, equal_nan=True), f"{where}: operand {i} changed"


@pytest.mark.parametrize("spec_", SPECS, ids=SPEC_IDS)
def test_strided_read_only_constants_give_the_reference_in_both_modes(spec_):
    """The user's arrays as constants, laid out every way: eager and batched values equal
    the numpy reference, and the arrays are left as they were."""
    rng = np.random.default_rng(5000 + SPEC_IDS.index(spec_.id))
    d = spec_.dims(rng)
    arrays = [draw(rng, shape, dom, np.float32) for shape, dom in zip(spec_.shapes(d), spec_.doms())]
    aux = spec_.aux(rng, d) if spec_.aux else None
    want = spec_.ref([x.astype(np.float64) for x in arrays], d, aux)
    tables = [make_param(x, np.float32) if dom == "table" else None for x, dom in zip(arrays, spec_.doms())]
    for how in VIEWS:
        views = [_view(x, how) for x in arrays]
        xs = [t if t is not None else v for t, v in zip(tables, views)]
        if not any(isinstance(x, hb.Parameter) for x in xs):
            xs[0] = hb.array(xs[0])         # an op needs at least one hybridbatch operand
        eager = spec_.call(xs, d, aux).asnumpy()
        with hb.batching():
            batched = [spec_.call(xs, d, aux) for _ in range(2)]
        for got in [eager] + [b.asnumpy() for b in batched]:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{spec_.id} {how} views")
        for v, x in zip(views, arrays):
            np.testing.assert_array_equal(v, x)
