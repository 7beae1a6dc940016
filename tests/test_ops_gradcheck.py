"""Every op, checked the same way (Chainer's shared test case).

`op_specs.SPECS` is a table with one or more entries per public op: how to draw random operand shapes
and values, how to call the op, and a plain-numpy reference. From each entry we generate:

  (a) eager forward == numpy reference (float64 rtol 1e-5; float32 too), each operand either a
      shared Parameter or a constant, every combination; the op the spec names is the op recorded;
  (b) eager gradients == central finite differences (float64), each operand either a shared
      Parameter or a per-instance value (`P * 1.0`), every combination;
  (c) batched == eager, both policies: several instances with different values recorded in
      one scope, every operand in every mode ("shared" Parameter, per-instance "inst"
      Parameter passed through an op, per-instance "const" = numpy constant * Parameter);
      outputs and every parameter gradient match (float32, rtol 1e-4), and the op's nodes
      really ran as one batch (a batch per node for the unbatchable py_func).

`test_specs_cover_every_registered_op` fails when an op is registered without an entry.
Error tests at the end: shape mismatches raise ShapeError at the recording call (naming the
op and the shapes), lookup/pick indices out of range raise IndexError at record time.
"""
import contextlib

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.record import signature
from hybridbatch.api import UNARY
from hybridbatch.ops import OPS
from helpers import central_differences
from op_specs import INTERNAL, SPEC_IDS, SPECS, draw, float_loss_term, layouts, make_param, modes_for, root_op

POLICIES = ("agenda", "depth")
N_INST = 4

# ---------------------------------------------------------------------------------------
# coverage
# ---------------------------------------------------------------------------------------
def test_specs_cover_every_registered_op():
    registered = {op.name for op in OPS} - INTERNAL
    covered = {s.op for s in SPECS}
    assert registered - covered == set(), f"ops registered without a gradcheck spec: {registered - covered}"
    assert covered - registered == set(), f"specs name ops that are not registered: {covered - registered}"


def test_internal_ops_are_not_user_ops():
    # the exclusions above are only for ops users never call directly
    names = {op.name for op in OPS}
    assert {"input", "param"} <= names
    for name in INTERNAL & names:
        assert not hasattr(hb, name), f"{name} is public; give it a spec instead of excluding it"


# ---------------------------------------------------------------------------------------
# (a) eager forward == numpy
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec_", SPECS, ids=SPEC_IDS)
def test_eager_forward_matches_numpy(spec_):
    rng = np.random.default_rng(1000 + SPEC_IDS.index(spec_.id))
    for _ in range(3):
        d = spec_.dims(rng)
        arrays = [draw(rng, shp, dom) for shp, dom in zip(spec_.shapes(d), spec_.doms())]
        aux = spec_.aux(rng, d) if spec_.aux else None
        expected = np.asarray(spec_.ref(arrays, d, aux))
        for layout in layouts(spec_):
            for dtype, rtol, atol in ((np.float64, 1e-5, 1e-12), (np.float32, 1e-4, 1e-5)):
                # per-instance operands here are constants: raw numpy arrays or hb.array
                xs = [make_param(x, dtype) if mode == "shared" else
                      (hb.array(x.astype(dtype)) if j % 2 else x.astype(dtype))
                      for j, (mode, x) in enumerate(zip(layout, arrays))]
                if all(not isinstance(x, (hb.Parameter, hb.Tensor)) for x in xs):
                    xs[0] = hb.array(xs[0])      # an op needs at least one hybridbatch operand
                out = spec_.call(xs, d, aux)
                where = f"{layout} {np.dtype(dtype).name} {d} aux={aux}"
                assert isinstance(out, hb.Tensor), where
                assert root_op(out) == spec_.op, (where, root_op(out))
                assert out.shape == expected.shape, (where, out.shape, expected.shape)
                assert out.dtype == (spec_.out_dtype or dtype), where
                np.testing.assert_allclose(out.asnumpy(), expected, rtol=rtol, atol=atol, err_msg=where)


# ---------------------------------------------------------------------------------------
# (b) gradients == central finite differences (float64)
# ---------------------------------------------------------------------------------------
def _loss(spec_, params, layout, d, aux, weights):
    xs = [p if mode == "shared" else p * 1.0 for p, mode in zip(params, layout)]
    out = spec_.call(xs, d, aux)
    return hb.sum(float_loss_term(out, np.float64) * hb.array(weights))


@pytest.mark.parametrize("spec_", SPECS, ids=SPEC_IDS)
def test_gradients_match_finite_differences(spec_):
    rng = np.random.default_rng(2000 + SPEC_IDS.index(spec_.id))
    eps = 1e-6
    for _ in range(2):
        d = spec_.dims(rng)
        arrays = [draw(rng, shp, dom) for shp, dom in zip(spec_.shapes(d), spec_.doms())]
        aux = spec_.aux(rng, d) if spec_.aux else None
        weights = rng.normal(size=np.shape(spec_.ref(arrays, d, aux)))
        for layout in layouts(spec_):
            params = [make_param(x, np.float64) for x in arrays]
            _loss(spec_, params, layout, d, aux, weights).backward()
            for j, p in enumerate(params):
                numeric = central_differences(lambda: _loss(spec_, params, layout, d, aux, weights), p, eps)
                np.testing.assert_allclose(p.grad, numeric, rtol=1e-5, atol=1e-7,
                                           err_msg=f"operand {j} layout={layout} {d} aux={aux}")

            # a second backward accumulates
            grads = [p.grad.copy() for p in params]
            _loss(spec_, params, layout, d, aux, weights).backward()
            for p, g in zip(params, grads):
                np.testing.assert_allclose(p.grad, 2 * g, rtol=1e-12, atol=1e-15)


# ---------------------------------------------------------------------------------------
# (c) batched == eager, every operand mode, both policies
# ---------------------------------------------------------------------------------------
class Case:
    """N_INST instances of one spec with operands in the given modes (float32)."""

    def __init__(self, spec_, modes, rng, n_inst=N_INST):
        self.spec, self.modes = spec_, modes
        d = self.d = spec_.dims(rng)
        self.params = []
        self.shared = {}
        self.per = [dict() for _ in range(n_inst)]
        for j, (mode, shape, dom) in enumerate(zip(modes, spec_.shapes(d), spec_.doms())):
            if mode in ("shared", "const"):
                self.shared[j] = self._param(draw(rng, shape, dom))
            if mode == "const":     # value_i = c_i * S: per instance, gradient into a shared S
                for per in self.per:
                    per[j] = rng.uniform(0.5, 1.5, shape).astype(np.float32)
            elif mode == "inst":    # value_i = P_i * 1.0: per instance, its own Parameter
                for per in self.per:
                    per[j] = self._param(draw(rng, shape, dom))
        self.aux = [spec_.aux(rng, d) if spec_.aux else None for _ in range(n_inst)]
        self.weights = None
        self.rng = rng

    def _param(self, value):
        p = make_param(value, np.float32)
        self.params.append(p)
        return p

    def operands(self, i):
        xs = []
        for j, mode in enumerate(self.modes):
            if mode == "shared":
                xs.append(self.shared[j])
            elif mode == "const":
                c = self.per[i][j]
                xs.append(c * self.shared[j] if i % 2 else hb.array(c) * self.shared[j])
            else:
                xs.append(self.per[i][j] * 1.0)
        return xs

    def record(self):
        outs, losses = [], []
        for i in range(len(self.per)):
            out = self.spec.call(self.operands(i), self.d, self.aux[i])
            if self.weights is None or len(self.weights) <= i:
                self.weights = (self.weights or []) + [self.rng.normal(size=out.shape).astype(np.float32)]
            outs.append(out)
            losses.append(hb.sum(float_loss_term(out, np.float32) * self.weights[i]))
        return outs, losses

    def zero_grad(self):
        for p in self.params:
            p.zero_grad()


def batch_of(scope):
    """Global node id -> (flush, batch) for every executed node of the scope."""
    where = {}
    for f, plan in enumerate(scope.plans):
        for b in range(plan.n_batches):
            for v in plan.batch_nodes(b):
                where[plan.start + int(v)] = (f, b)
    return where


def check_batched_equals_eager(case, policy):
    case.zero_grad()
    outs, losses = case.record()                        # eager, one instance at a time
    eager_out = [o.asnumpy() for o in outs]
    for loss in losses:
        loss.backward()
    eager_grads = [p.grad.copy() for p in case.params]

    case.zero_grad()
    with hb.batching(policy=policy) as scope:
        outs, losses = case.record()
        assert all(isinstance(o, hb.Future) for o in outs)
        hb.add_n(losses).backward()
    msg = f"{case.spec.id} modes={case.modes} d={case.d} policy={policy}"
    for i, (o, e) in enumerate(zip(outs, eager_out)):
        assert o.shape == e.shape and o.dtype == e.dtype == (case.spec.out_dtype or np.float32), msg
        np.testing.assert_allclose(o.asnumpy(), e, rtol=1e-4, atol=1e-5, err_msg=f"{msg} instance {i}")
    for p, e in zip(case.params, eager_grads):
        np.testing.assert_allclose(p.grad, e, rtol=1e-4, atol=1e-5, err_msg=f"{msg} grad of {p}")

    # the op under test really ran batched: one batch for all instances (py_func: one each)
    where = batch_of(scope)
    assert all(signature.SIGS[scope.graph.sig[o.id]].op.name == case.spec.recorded_op for o in outs), msg
    batches = {where[o.id] for o in outs}
    assert len(batches) == (1 if case.spec.batchable else len(outs)), (msg, batches)
    st = scope.stats
    assert st.batches < st.nodes, (msg, st)
    assert st.lower_bound <= st.batches, (msg, st)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("spec_", SPECS, ids=SPEC_IDS)
def test_batched_matches_eager(spec_, policy):
    rng = np.random.default_rng(3000 + SPEC_IDS.index(spec_.id))
    for _ in range(2):
        for modes in modes_for(spec_):
            check_batched_equals_eager(Case(spec_, modes, rng), policy)


@pytest.mark.parametrize("policy", POLICIES)
def test_batched_mixed_shapes_in_one_scope(policy):
    """Instances of one op with different shapes and modes in one scope: each group batches apart."""
    rng = np.random.default_rng(7)
    specs = [s for s in SPECS if s.op in ("matmul", "add", "affine", "concat", "py_func", "lookup")]
    cases = [Case(s, m, rng, n_inst=2) for s in specs for m in modes_for(s)[:4]]
    eager = []
    for c in cases:
        c.zero_grad()
    for c in cases:
        outs, losses = c.record()
        eager.append([o.asnumpy() for o in outs])
        for loss in losses:
            loss.backward()
    eager_grads = [[p.grad.copy() for p in c.params] for c in cases]
    for c in cases:
        c.zero_grad()
    with hb.batching(policy=policy) as scope:
        recorded = [c.record() for c in cases]
        for _, losses in recorded:
            for loss in losses:
                loss.backward()          # many backward calls in one scope; the first flushes
    for c, (outs, _), e_outs, e_grads in zip(cases, recorded, eager, eager_grads):
        for o, e in zip(outs, e_outs):
            np.testing.assert_allclose(o.asnumpy(), e, rtol=1e-4, atol=1e-5, err_msg=c.spec.id)
        for p, e in zip(c.params, e_grads):
            np.testing.assert_allclose(p.grad, e, rtol=1e-4, atol=1e-5, err_msg=f"{c.spec.id} {c.modes}")
    assert scope.stats.batches < scope.stats.nodes


# ---------------------------------------------------------------------------------------
# errors at the recording call
# ---------------------------------------------------------------------------------------
def _f32(*shape):
    return np.ones(shape, np.float32)


SHAPE_ERRORS = [
    ("add", lambda a, b: a + b, (3,), (4,)),
    ("sub", hb.sub, (2, 3), (2,)),
    ("mul", lambda a, b: a * b, (2, 3), (3, 2)),
    ("div", hb.div, (5,), (2, 4)),
    ("matmul", lambda a, b: a @ b, (2, 3), (4,)),
    ("matmul", hb.matmul, (3,), (2, 3)),
    ("concat", lambda a, b: hb.concat([a, b], axis=1), (2, 3), (3, 3)),
    ("add_n", lambda a, b: hb.add_n([a, b, a]), (3,), (1, 3)),
    ("affine", lambda a, b: hb.affine(a, b, np.zeros(4, np.float32)), (2, 3), (3,)),
    ("reshape", lambda a, b: hb.reshape(a, b.shape), (2, 3), (5,)),
    ("maximum", hb.maximum, (3,), (4,)), ("minimum", hb.minimum, (2, 3), (2,)),
    ("pow", lambda a, b: a ** b, (2, 3), (3, 2)), ("where", lambda a, b: hb.where(np.ones(3, bool), a, b), (3,), (4,)),
    ("stack", lambda a, b: hb.stack([a, b]), (3,), (2,)), ("max_n", lambda a, b: hb.max([a, b, a]), (3,), (2,)),
    ("logsumexp_n", lambda a, b: hb.softmax([a, b]), (3,), (1, 3)),
]


def _shape_strings(*shapes):
    return [str(tuple(s)) for s in shapes]


@pytest.mark.parametrize("where", ["eager", "scope", "params"])
@pytest.mark.parametrize("case", SHAPE_ERRORS, ids=[f"{c[0]}{i}" for i, c in enumerate(SHAPE_ERRORS)])
def test_shape_mismatch_raises_at_the_call(case, where):
    name, fn, sa, sb = case
    if where == "params":
        a = make_param(_f32(*sa), np.float32)
        b = make_param(_f32(*sb), np.float32)
        with pytest.raises(hb.ShapeError) as err:
            fn(a, b)
    elif where == "eager":
        with pytest.raises(hb.ShapeError) as err:
            fn(hb.array(_f32(*sa)), hb.array(_f32(*sb)))
    else:
        with hb.batching() as scope:
            a, b = hb.tanh(hb.array(_f32(*sa))), hb.tanh(hb.array(_f32(*sb)))
            n = len(scope.graph)
            with pytest.raises(hb.ShapeError) as err:
                fn(a, b)
            assert scope.stats.flushes == 0, "the error must come at record time, not at a flush"
            added = {signature.SIGS[s].op.name for s in scope.graph.sig[n:]}
            assert added <= {"input"}, f"a failed call must not leave an op node behind: {added}"
            ok = hb.sum(a)                  # the scope is still usable
        assert ok.item() == pytest.approx(np.tanh(1.0) * int(np.prod(sa)), rel=1e-6)
    msg = str(err.value)
    assert msg.startswith(name), msg
    for s in _shape_strings(sa, sb):
        assert s in msg, (s, msg)
    assert isinstance(err.value, ValueError) and isinstance(err.value, hb.HybridBatchError)


def in_mode(in_scope, go):
    """go() eagerly, or inside a batching scope (reading values there flushes it)."""
    if not in_scope:
        return go()
    with hb.batching():
        return go()


@pytest.mark.parametrize("in_scope", [False, True])
@pytest.mark.parametrize("shape", [(-1, -1), (-1, 4), (0, -1)])
def test_reshape_refuses_a_minus_one_it_cannot_infer(in_scope, shape):
    def go():
        with pytest.raises(hb.ShapeError, match=r"reshape: .*\(2, 3\).*-1 stands for the one dimension"):
            hb.reshape(hb.array(_f32(2, 3)), shape)
    in_mode(in_scope, go)


@pytest.mark.parametrize("in_scope", [False, True])
def test_dtype_mismatch_is_a_shape_error(in_scope):
    def go():
        with pytest.raises(hb.ShapeError, match="add.*float64.*float32|add.*float32.*float64"):
            hb.array(np.ones(3)) + hb.array(_f32(3))
    in_mode(in_scope, go)


# every float-only unary op (hb.tanh, hb.log, ...: read off the ops), then the others
_FLOAT_ONLY = {op.name for op in OPS if getattr(op, "public", False) and getattr(op, "float_only", False)}
INT_OPERAND_ERRORS = [
    *[(name, fn) for name, fn in UNARY.items() if name in _FLOAT_ONLY],
    ("div", lambda i: i / i), ("div", lambda i: 1 / i),
    ("log_softmax", lambda i: hb.log_softmax(i)), ("pick_neg_log_softmax", lambda i: hb.pick_neg_log_softmax(i, 0)),
    ("scalar_affine", lambda i: i * 0.5), ("scalar_affine", lambda i: i / 2), ("scalar_affine", lambda i: i + 0.5),
    # a whole-number float too: numpy's int array * 2.0 is float64; int8 [100] * 2.0 wrapped to -56
    ("scalar_affine", lambda i: i * 2.0), ("scalar_affine", lambda i: i / 1), ("scalar_affine", lambda i: i - 100.0),
    ("scalar_affine", lambda i: 0.0 + i),
    ("mean", lambda i: hb.mean(i)), ("softmax", lambda i: hb.softmax(i)), ("logsumexp", lambda i: hb.logsumexp(i)),
    ("scalar_pow", lambda i: i ** 2), ("pow", lambda i: i ** i), ("logsumexp_n", lambda i: hb.softmax([i, i])),
]


@pytest.mark.parametrize("in_scope", [False, True])
@pytest.mark.parametrize("name, fn", INT_OPERAND_ERRORS, ids=[f"{c[0]}{i}" for i, c in enumerate(INT_OPERAND_ERRORS)])
def test_float_ops_reject_integer_operands(name, fn, in_scope):
    """Eagerly numpy would return floats, while a batch writes into an arena of the integer
    dtype (truncating), and x * 0.5 truncated in both modes: a ShapeError at the call instead."""
    def go():
        with pytest.raises(hb.ShapeError, match=f"^{name}: .*int64"):
            fn(hb.array(np.array([1, 2, 3])))
    in_mode(in_scope, go)


@pytest.mark.parametrize("in_scope", [False, True])
def test_integer_operands_keep_exact_integer_ops(in_scope):
    def go():
        i = hb.array(np.array([1, 2, 3]))
        return [v.asnumpy() for v in (i * 2, -i, i - 1, hb.relu(i - 2), hb.sum(i * i))]
    got = in_mode(in_scope, go)
    for value, expected in zip(got, ([2, 4, 6], [-1, -2, -3], [0, 1, 2], [0, 0, 1], 14)):
        assert value.dtype.kind == "i"
        np.testing.assert_array_equal(value, expected)


AXIS_ERRORS = [
    (lambda m: hb.sum(m, axis=2), "sum axis 2"), (lambda m: hb.sum(m, axis=-3), "sum axis -3"),
    (lambda m: hb.split(m, 2, axis=2), "split axis 2"), (lambda m: hb.split(m, 0), "split into 0"),
    (lambda m: hb.concat([hb.sum(m), hb.sum(m)]), "concat axis 0 .* 0-D"),
    (lambda m: hb.max(m, axis=(1, -1)), "max: axis .* repeats an axis"),
    (lambda m: hb.mean(m, axis=(0, 2)), "mean axis 2"),
    (lambda m: hb.argmax(m, axis=-3), "argmax axis -3"), (lambda m: hb.softmax(m, axis=2), "softmax axis 2"),
    (lambda m: hb.transpose(m, (0, 2)), "transpose axis 2"), (lambda m: hb.stack([m, m], axis=3), "stack axis 3"),
    (lambda m: hb.topk(m, 2, axis=2), "topk axis 2"),
]


@pytest.mark.parametrize("in_scope", [False, True])
@pytest.mark.parametrize("fn, match", AXIS_ERRORS, ids=[c[1].split(" .*")[0] for c in AXIS_ERRORS])
def test_bad_axis_or_sections_raise_at_the_call(fn, match, in_scope):
    """An axis past the value's rank used to wrap around silently (sum over another axis),
    and 0 sections or 0-D concat operands died in a ZeroDivisionError."""
    def go():
        with pytest.raises(ValueError, match=match):
            fn(hb.array(_f32(2, 4)))
    in_mode(in_scope, go)


@pytest.mark.parametrize("in_scope", [False, True])
def test_a_loss_needs_a_vector_and_pick_a_value_with_an_axis(in_scope):
    def go():
        with pytest.raises(hb.ShapeError, match=r"\(2, 3\)"):
            hb.pick_neg_log_softmax(hb.array(_f32(2, 3)), 0)
        with pytest.raises(hb.ShapeError, match=r"pick: .*\(\).*needs a value with at least one axis"):
            hb.pick(hb.array(np.float32(1.0)), 0)
    in_mode(in_scope, go)


PV = hb.Parameter("pv", (4,), init="normal")
INDEX_ERRORS = [
    ("lookup_high", lambda E, v: hb.lookup(E, 5)),
    ("lookup_negative", lambda E, v: hb.lookup(E, -6)),
    ("pick_high", lambda E, v: hb.pick(v, 4)),
    ("pick_negative", lambda E, v: hb.pick(v, -5)),
    ("pick_param", lambda E, v: hb.pick(PV, 4)),
    ("pnls_high", lambda E, v: hb.pick_neg_log_softmax(v, 4)),
    ("pnls_negative", lambda E, v: hb.pick_neg_log_softmax(v, -5)),
    ("slice_elem", lambda E, v: v[4]),
    ("slice_row", lambda E, v: E[5]),
    ("slice_too_many", lambda E, v: v[0, 0]),
]


@pytest.mark.parametrize("in_scope", [False, True])
@pytest.mark.parametrize("case", INDEX_ERRORS, ids=[c[0] for c in INDEX_ERRORS])
def test_index_out_of_range_raises_at_record_time(case, in_scope):
    _, fn = case
    E = hb.Parameter("E", (5, 3), init="normal")
    if not in_scope:
        with pytest.raises(IndexError):
            fn(E, hb.array(_f32(4)))
        return
    with hb.batching() as scope:
        v = hb.tanh(hb.array(_f32(4)))
        with pytest.raises(IndexError):
            fn(E, v)
        assert scope.stats.flushes == 0, "the error must come at record time, not at a flush"
        ok = hb.lookup(E, 4) + hb.pick(v, 3)
    np.testing.assert_allclose(ok.asnumpy(), E.data[4] + np.tanh(1.0), rtol=1e-6)


NON_INTEGER_INDICES = [
    ("lookup", lambda E, v: hb.lookup(E, 1.5)), ("pick", lambda E, v: hb.pick(v, 2.7)),
    ("pick_neg_log_softmax", lambda E, v: hb.pick_neg_log_softmax(v, np.float32(1.0))),
]


@pytest.mark.parametrize("in_scope", [False, True])
@pytest.mark.parametrize("name, fn", NON_INTEGER_INDICES, ids=[c[0] for c in NON_INTEGER_INDICES])
def test_non_integer_index_is_refused(name, fn, in_scope):
    """int() would truncate 1.5 to 1 and read another row: a TypeError naming the op."""
    E = hb.Parameter("E", (5, 3), init="normal")
    with (hb.batching() if in_scope else contextlib.nullcontext()):
        with pytest.raises(TypeError, match=f"^{name}: .*integer"):
            fn(E, hb.array(_f32(4)))


def test_scope_keeps_temporary_parameters_alive():
    with hb.batching():
        y = hb.tanh(hb.Parameter("temporary", (3,), init=0.5))
        z = hb.sum(y)
    assert z.item() == pytest.approx(3 * np.tanh(0.5), rel=1e-6)


@pytest.mark.parametrize("numerator, dtype", [(1, np.float32), (1.0, np.float64)], ids=["int_f32", "float_f64"])
def test_python_number_divided_by_value(numerator, dtype):
    x = make_param(np.array([0.5, 2.0, -4.0]), dtype)
    y = numerator / x
    assert y.dtype == dtype
    np.testing.assert_allclose(y.asnumpy(), numerator / x.data, rtol=1e-6)


def test_picked_softmax_loss_kernel_is_stable_and_keeps_nan_like_numpy():
    from hybridbatch.kernels.softmax import pick_neg_log_softmax, pick_neg_log_softmax_grad
    x = np.array([[1000.0, 0.0, -1000.0], [1000.0, 0.0, -1000.0], [np.nan, 0.0, 1.0], [np.inf, 0.0, 1.0]],
                 np.float32)
    labels = np.array([0, 1, 1, 1], np.int64)
    with np.errstate(invalid="ignore"):
        loss = pick_neg_log_softmax(x, labels)
        grad = pick_neg_log_softmax_grad(x, labels, np.ones(4, np.float32))
    np.testing.assert_allclose(loss[:2], [0.0, 1000.0])
    np.testing.assert_allclose(grad[:2], [[0.0, 0.0, 0.0], [1.0, -1.0, 0.0]], atol=1e-6)
    assert np.isnan(loss[2:]).all() and np.isnan(grad[2:]).all()


def _doubled(x):
    return x * 2


def _summed_grad(x, y, gy):       # the gradient of a (3,) operand, wrongly as one number
    return (np.float32(2 * gy.sum()),)


@pytest.mark.parametrize("in_scope", [False, True])
def test_py_func_gradient_of_the_wrong_shape_is_an_error(in_scope):
    """grad_fn's result was broadcast into the operand's gradient: a scalar for a 3-vector
    silently tripled the gradient of W, in both modes."""
    W = make_param(np.eye(3), np.float32)

    def go():
        loss = hb.sum(hb.py_func(_doubled, hb.tanh(W @ _f32(3)), out_shape=(3,), grad_fn=_summed_grad))
        with pytest.raises(ValueError, match=r"_summed_grad returned a gradient of shape \(\) for operand 0, "
                                             r"whose shape is \(3,\)"):
            loss.backward()

    in_mode(in_scope, go)
    assert not W.grad.any()


@pytest.mark.parametrize("in_scope", [False, True])
@pytest.mark.parametrize("call, match", [
    (lambda x: hb.sum(x, axis=3), "sum axis 3 out of range for 2-D operands"),
    (lambda x: hb.split(x, 2, axis=1), "cannot split an axis of length 3 into 2 equal parts"),
    (lambda x: hb.stack([x, x], axis=4), "stack axis 4 out of range"),
    (lambda x: hb.squeeze(x, 0), r"squeeze axis 0 has length 2, not 1"),
    (lambda x: hb.reshape(x, (4,)), r"reshape: cannot reshape a value of shape \(2, 3\) \(6 elements\) into \(4,\): "
                                     "the element counts differ")])
def test_operands_whose_shapes_do_not_fit_raise_shape_error(in_scope, call, match):
    """An axis out of range or an uneven split raised a plain ValueError, which
    `except hb.ShapeError` missed (ShapeError is still a ValueError)."""
    def go():
        with pytest.raises(hb.ShapeError, match=match):
            call(hb.array(_f32(2, 3)))
    in_mode(in_scope, go)
