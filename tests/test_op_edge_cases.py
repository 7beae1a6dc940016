"""Edge cases where batched (op and block granularity) and eager must agree with each other and
with numpy: dtype promotion, bool and integer values, unusual indices, kernels' dtypes."""
import contextlib

import numpy as np
import pytest

import hybridbatch as hb
from helpers import BOOLS, MODES, _Fn, _assert_like_numpy, _raises_at_the_call, _values


@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.int32, np.uint8])
@pytest.mark.parametrize("axis", [None, 0])
def test_sum_of_small_integers_and_bools_promotes_like_numpy(dtype, axis):
    instances = [(np.array([100, 100, 0]).astype(dtype),), (np.array([2 ** 31 - 1, 2 ** 31 - 1, 7]).astype(dtype),)]
    _assert_like_numpy(lambda x: hb.sum(x, axis=axis), lambda x: np.sum(x, axis=axis), instances)


@pytest.mark.parametrize("fn", [lambda x: -x, lambda x: x + 1, lambda x: 2 * x, lambda x: 1 - x, lambda x: x - x],
                         ids=["neg", "plus_one", "times_two", "one_minus", "sub"])
def test_bool_arithmetic_numpy_promotes_or_refuses_raises_at_the_call(fn):
    """-x of a bool was x itself and x + 1 was True (numpy: an error, and 2); x - x failed at
    the flush inside numpy."""
    _raises_at_the_call(fn, BOOLS, match="bool")


def test_bool_ops_numpy_keeps_as_bool_agree():
    _assert_like_numpy(lambda x: x + x * x, lambda x: x + x * x, [BOOLS, (~BOOLS[0],)])


@pytest.mark.parametrize("fn", [lambda x: x + 200, lambda x: x * 1000, lambda x: x - 129],
                         ids=["add", "mul", "sub"])
def test_integer_scalar_out_of_the_dtypes_range_raises_at_the_call(fn):
    """numpy refuses int8 + 200 (OverflowError); the batch used to fail at the flush."""
    _raises_at_the_call(fn, (np.array([1, 2], np.int8),), match="int8")


def test_relu_keeps_its_operands_dtype_in_every_mode():
    """Eager relu of bools returned int64 while a batch wrote bools into its arena."""
    _assert_like_numpy(hb.relu, lambda x: x, [BOOLS])
    _assert_like_numpy(hb.relu, lambda x: np.maximum(x, np.int8(0)), [(np.array([-3, 0, 5], np.int8),)])


def test_picked_softmax_loss_of_float16_logits_runs_in_every_mode():
    """The numba kernel has no float16: a batch failed with NotImplementedError at the flush."""
    x = np.array([1.0, 2.0, 3.5], np.float16)
    ref = -(x - np.log(np.exp(x.astype(np.float64)).sum()))[1]
    for mode in MODES:
        (got,) = _values(lambda v: hb.pick_neg_log_softmax(v, 1), [(x,)], mode)
        assert got.dtype == np.float16, mode
        np.testing.assert_allclose(got, ref, rtol=1e-3, err_msg=mode)


def test_picked_softmax_loss_gradient_of_float16_logits():
    W = hb.Parameter("W", (3,), init=1.0, dtype=np.float16)
    x = np.array([1.0, 2.0, 3.5], np.float16)
    p = np.exp(x.astype(np.float64)) / np.exp(x.astype(np.float64)).sum()
    for mode in ("eager", "op"):
        W.zero_grad()
        if mode == "eager":
            hb.pick_neg_log_softmax(W * x, 1).backward()
        else:
            with hb.batching(granularity=mode):
                loss = hb.pick_neg_log_softmax(W * x, 1)
            loss.backward()
        np.testing.assert_allclose(W.grad, (p - np.eye(3)[1]) * x, rtol=1e-2, atol=1e-3, err_msg=mode)


@pytest.mark.parametrize("key", [True, False, (0, True)], ids=["true", "false", "int_true"])
def test_bool_index_raises_at_the_call(key):
    """x[True] read row 1 (a bool is an int); numpy reads a bool index as a mask, adding an axis."""
    _raises_at_the_call(lambda x: x[key], (np.arange(6, dtype=np.float32).reshape(2, 3),), TypeError, "bool")


@pytest.mark.parametrize("fn", [lambda x: hb.reshape(x, (3.5, 2)), lambda x: hb.sum(x, axis=True),
                                lambda x: hb.concat([x, x], axis=True), lambda x: hb.split(x, 3, axis=True),
                                lambda x: hb.reshape(x, True)],
                         ids=["reshape_float", "sum_bool_axis", "concat_bool_axis", "split_bool_axis", "reshape_bool"])
def test_non_integer_shape_or_axis_raises_at_the_call(fn):
    """int() made a (3.5, 2) shape (3, 2), and a bool axis True axis 1; numpy refuses both."""
    _raises_at_the_call(fn, (np.arange(6, dtype=np.float32).reshape(2, 3),), TypeError)


def test_float16_parameter_gradients_in_every_mode():
    """The numba row scatter-add and outer-product kernels have no float16: eager backward of
    a float16 weight times a vector, and lookups from a float16 table, failed inside numba."""
    W = hb.Parameter("W", (3, 4), init="uniform", dtype=np.float16, rng=np.random.default_rng(0))
    E = hb.Parameter("E", (5, 4), init="uniform", dtype=np.float16, rng=np.random.default_rng(1))
    rows = [0, 2, 2]
    want_W = np.outer(np.ones(3), E.data[rows].astype(np.float64).sum(axis=0))
    want_E = np.zeros((5, 4))
    for r in rows:
        want_E[r] += W.data.astype(np.float64).sum(axis=0)
    for mode in MODES:
        W.zero_grad()
        E.zero_grad()
        block = _Fn(lambda i: hb.sum(W @ hb.lookup(E, i)))
        if mode == "eager":
            for r in rows:
                block(r).backward()
        else:
            with hb.batching(granularity=mode):
                total = hb.add_n([block(r) for r in rows])
            total.backward()
        np.testing.assert_allclose(W.grad, want_W, rtol=1e-2, atol=1e-2, err_msg=mode)
        np.testing.assert_allclose(E.grad, want_E, rtol=1e-2, atol=1e-2, err_msg=mode)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # 0 * inf is the point
@pytest.mark.parametrize("c", [float("inf"), float("-inf"), float("nan")])
def test_fused_run_with_a_non_finite_python_scalar(c):
    """The fused kernel's source spelled the scalar with repr: `F(inf)` named nothing, and
    numba failed to compile the block at the flush."""
    from hybridbatch.kernels.fused import FusedRun
    W = hb.Parameter("W", (3,), init=0.5)
    block = _Fn(lambda x: hb.sum(hb.tanh(x * W * c + 1.0) + hb.sigmoid(x - c)))
    xs = [np.array([0.0, -1.0, 2.0], np.float32), np.array([3.0, 0.5, -0.25], np.float32)]
    results = []
    for mode in MODES:
        W.zero_grad()
        if mode == "eager":
            losses = [block(x) for x in xs]
            total = hb.add_n(losses)
        else:
            with hb.batching(granularity=mode):
                losses = [block(x) for x in xs]
                total = hb.add_n(losses)
        total.backward()
        results.append(([loss.asnumpy() for loss in losses], W.grad.copy()))
    assert any(isinstance(u, FusedRun) for p in block._programs.values() for u in p.op._units or ())
    for values, grad in results[1:]:
        np.testing.assert_allclose(values, results[0][0], rtol=1e-5, equal_nan=True)
        np.testing.assert_allclose(grad, results[0][1], rtol=1e-5, equal_nan=True)


def test_fused_division_gradient_does_not_square_the_divisor():
    """The fused kernel took d(a/b)/db as -a / (b * b): b * b underflowed to 0 (b = 1e-25) or
    overflowed (b = 1e20) in float32, giving -inf or 0 where eager's -(g / b) * a / b is finite."""
    W = hb.Parameter("W", (3,), init=1.0)
    block = _Fn(lambda a, b: hb.sum(hb.tanh(a / (b * W) * 1e-20) * 2.0))
    a = np.array([1e-30, 1e30, 3.0], np.float32)
    b = np.array([1e-25, 1e20, 7.0], np.float32)
    grads = []
    for mode in MODES:
        W.zero_grad()
        if mode == "eager":
            block(a, b).backward()
        else:
            with hb.batching(granularity=mode):
                loss = block(a, b)
            loss.backward()
        grads.append(W.grad.copy())
    assert np.isfinite(grads[0]).all()
    for g in grads[1:]:
        np.testing.assert_allclose(g, grads[0], rtol=1e-5)


def test_iterating_a_0d_value_raises_and_a_vector_yields_its_elements():
    """The __getitem__ protocol made iter() of a 0-d value an empty loop (x[0] raises
    IndexError at once), where numpy raises TypeError."""
    _raises_at_the_call(lambda x: list(x), (np.float32(2.0),), TypeError, "0-d")
    _assert_like_numpy(lambda x: hb.add_n(list(x)), lambda x: x.sum(), [(np.arange(3, dtype=np.float32),)])


@pytest.mark.parametrize("key", [np.s_[-10::-1], np.s_[-5:-10:-1], np.s_[-5::-2], np.s_[-10::-1, 1], np.s_[1:-9:-1]],
                         ids=["back_from_before_front", "back_both_before_front", "step2", "2d", "stop_before_front"])
def test_backward_slice_starting_before_the_front_is_empty(key):
    """slice(-10, None, -1) resolves to start -1 ("before the front"), which the normalized
    slice read as "the last element": x[-10::-1] was the whole vector reversed, not empty."""
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    _assert_like_numpy(lambda v: v[key] * 1.0, lambda v: v[key] * np.float32(1.0), [(x,)])


def test_log_softmax_of_an_empty_axis_raises_at_the_call():
    """It was recorded, then numpy's 'zero-size array to reduction operation maximum' came
    from inside the op at the flush (and eagerly)."""
    _raises_at_the_call(lambda x: hb.log_softmax(x), (np.zeros(0, np.float32),), match="needs values along axis 0")


@pytest.mark.parametrize("fn, match", [
    (lambda x: hb.topk(x, 5), r"topk: .*\(2, 4\).*k = 5 needs 1 <= k <= 4"),
    (lambda x: hb.transpose(x, (0,)), r"transpose: .*\(2, 4\).*not a permutation"),
    (lambda x: hb.max(x[:, 0:0], axis=1), r"max: .*\(2, 0\).*axis of length 0 has no value"),
], ids=["topk_k", "transpose_axes", "max_empty"])
def test_new_op_shape_errors_name_the_shapes_at_the_call(fn, match):
    _raises_at_the_call(fn, (np.ones((2, 4), np.float32),), match=match)


@pytest.mark.parametrize("mode", ["eager", "scope"])
def test_max_shares_the_gradient_among_ties_and_where_gives_cond_none(mode):
    """max over [1, 3, 3] sends half to each 3, as maximum does on a tie; where's condition,
    a value computed from W, gets no gradient."""
    W = hb.Parameter("ties", (3,), init=0.0)
    W.data = np.array([1.0, 3.0, 3.0], np.float32)

    def go():
        cond = hb.cast(W - 2.0, bool)           # all true: nonzero
        loss = hb.max(W) + hb.sum(hb.maximum(W, 3.0)) + hb.sum(hb.where(cond, W * 0.0, W))
        loss.backward()
        return loss.item()

    if mode == "eager":
        value = go()
    else:
        with hb.batching():
            value = go()
    assert value == pytest.approx(3.0 + 9.0)
    np.testing.assert_array_equal(W.grad, [0.0, 1.0, 1.0])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int64, np.bool_])
@pytest.mark.parametrize("part", [0, 1], ids=["values", "indices"])
def test_topk_of_integers_orders_where_negating_would_wrap(dtype, part):
    """Descending order where negating would wrap: unsigned values, the signed minimum."""
    info = np.iinfo(dtype) if dtype is not np.bool_ else None
    low = info.min if info else False
    high = info.max if info else True
    instances = [(np.array([0, 7, 6, 5, 0]).astype(dtype),), (np.array([low, 5, high, 3, low]).astype(dtype),)]

    def reference(x):
        order = np.argsort(~x if x.dtype.kind != "f" else -x, kind="stable")[:2]
        return x[order] if part == 0 else order.astype(np.int64)

    _assert_like_numpy(lambda x: hb.topk(x, 2)[part], reference, instances)
    if part == 0:
        want = [np.array([7, 6]).astype(dtype), np.array([high, 5]).astype(dtype)]
        for got, w in zip(_values(lambda x: hb.topk(x, 2)[0], instances, "eager"), want):
            np.testing.assert_array_equal(got, w)


@pytest.mark.parametrize("mode", ["eager", "block", "op"])
def test_the_derivative_of_x_to_the_power_zero_is_zero_at_zero(mode):
    """x ** 0 is 1 everywhere, so its derivative is 0, at x = 0 too (not 0 * 0 ** -1), for
    both powers."""
    x = hb.Parameter("x", (3,), dtype=np.float64, init="zeros")
    x.data = np.array([0.0, 2.0, -1.0])
    zero = hb.Parameter("zero", (3,), dtype=np.float64, init="zeros")

    def loss():
        return hb.sum(x ** 0) + hb.sum(x ** zero)

    if mode == "eager":
        value = loss()
    else:
        with hb.batching(granularity=mode):
            value = loss()
    with np.errstate(divide="ignore", invalid="ignore"):
        value.backward()
    assert value.item() == 6.0
    np.testing.assert_array_equal(x.grad, np.zeros(3))


class _PowersOfAWeight(hb.HybridBlock):
    """w ** 0 and w ** z inside a block: the fused kernels' derivative rules."""

    def __init__(self):
        super().__init__()
        self.w = hb.Parameter("w", (3,), init="zeros")

    def forward(self, x, z):
        return hb.sum(hb.tanh(x) * (self.w ** 0) + self.w ** z)


def test_the_fused_derivative_of_w_to_the_power_zero_is_zero_at_zero():
    block = _PowersOfAWeight()
    block.w.data = np.array([0.0, 2.0, -1.0], np.float32)
    block.hybridize()
    xs = [np.full(3, v, np.float32) for v in (0.5, -0.5, 1.0, 2.0)]
    z = np.zeros(3, np.float32)
    with hb.batching(granularity="block") as scope:
        loss = hb.add_n([block(x, z) for x in xs])
    with np.errstate(divide="ignore", invalid="ignore"):
        loss.backward()
    assert scope.stats.batches <= 3
    np.testing.assert_array_equal(block.w.grad, np.zeros(3))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
@pytest.mark.parametrize("fn", [lambda x: -x, lambda x: x - 1, lambda x: 3 - x, lambda x: x * 2, lambda x: x + 250],
                         ids=["neg", "minus_one", "three_minus", "times_two", "plus_250"])
def test_integer_scalars_wrap_unsigned_values_as_numpy(dtype, fn):
    """-x, x - 1 and 3 - x of unsigned values wrap around, as numpy's."""
    _assert_like_numpy(fn, fn, [(np.array([0, 3, 200]).astype(dtype),), (np.array([1, 255, 7]).astype(dtype),)])


@pytest.mark.parametrize("fn", [lambda x: x - (-128), lambda x: -x, lambda x: 100 - x, lambda x: x - 127],
                         ids=["minus_minimum", "neg", "hundred_minus", "minus_maximum"])
def test_integer_scalars_wrap_signed_values_as_numpy(fn):
    _assert_like_numpy(fn, fn, [(np.array([0, 3, -128, 127]).astype(np.int8),)])


@pytest.mark.parametrize("fn", [lambda x: x + 300, lambda x: x - 256, lambda x: x * -1, lambda x: x + -1,
                                lambda x: x - (-1)],
                         ids=["plus_300", "minus_256", "times_minus_one", "plus_minus_one", "minus_minus_one"])
def test_an_integer_scalar_out_of_an_unsigned_range_is_refused(fn):
    """As numpy refuses a Python int its dtype cannot hold (it wraps only -x, x - n, n - x)."""
    _raises_at_the_call(fn, (np.array([1, 2], np.uint8),), match="fit in uint8")


@pytest.mark.parametrize("mode", ["eager", "block", "op"])
def test_a_float16_mean_sums_in_float32_as_numpy_does(mode):
    """The float16 sum overflowed past 65504 (inf), and a count past it made the mean NaN
    and its gradient 0."""
    big = np.full(4096, 20, np.float16)
    ones = hb.Parameter("ones", (70000,), init=1.0, dtype=np.float16)

    def means():
        return hb.mean(hb.array(big)), hb.mean(ones)

    if mode == "eager":
        a, b = means()
    else:
        with hb.batching(granularity=mode):
            a, b = means()
    assert a.item() == np.mean(big) == 20.0 and b.item() == 1.0
    b.backward()
    np.testing.assert_array_equal(ones.grad, np.full(70000, np.float16(1 / 70000)))


@pytest.mark.parametrize("mode", ["eager", "op"])
def test_topk_counts_nan_as_largest_as_max_and_argmax_do(mode):
    """NaN sorted last: topk(x, 1) gave 2.0 where max gave NaN, and check_numerics saw nothing."""
    x = np.array([1.0, np.inf, np.nan, 2.0, np.nan], np.float32)

    def picks():
        return hb.topk(hb.array(x), 3), hb.argmax(hb.array(x))

    if mode == "eager":
        (values, indices), first = picks()
    else:
        with hb.batching(granularity=mode):
            (values, indices), first = picks()
    assert indices.asnumpy().tolist() == [2, 4, 1] and int(first) == 2 == int(np.argmax(x))
    assert np.isnan(values.asnumpy()[:2]).all() and values.asnumpy()[2] == np.inf


@pytest.mark.parametrize("mode", ["eager", "op"])
def test_values_have_numpys_reshape_sum_mean_max_min_and_unary_plus(mode):
    """Code written against arrays: x.reshape(3, 2), x.sum(axis=0), +x and hb.reshape(x, 6)
    failed ('int' object is not iterable, no attribute 'sum', bad operand for unary +)."""
    data = np.arange(6, dtype=np.float32).reshape(2, 3)

    def values():
        x = hb.array(data)
        return [hb.reshape(x, 6), x.reshape(3, 2), x.reshape((3, 2)), x.reshape(-1), +x, x.sum(), x.sum(axis=0),
                x.mean(axis=1, keepdims=True), x.max(), x.min(axis=0)]

    if mode == "eager":
        got = [v.asnumpy() for v in values()]
    else:
        with hb.batching(granularity=mode):
            pending = values()
        got = [v.asnumpy() for v in pending]
    want = [data.reshape(6), data.reshape(3, 2), data.reshape(3, 2), data.reshape(-1), data, data.sum(),
            data.sum(axis=0), data.mean(axis=1, keepdims=True), data.max(), data.min(axis=0)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)
    x = hb.array(data)
    with pytest.raises(TypeError):
        x.sum(0, np.float32)        # numpy's second argument is a dtype: keepdims is by keyword
    with pytest.raises(TypeError, match="needs the new shape"):
        x.reshape()


@pytest.mark.parametrize("dtype", ["U3", object, "M8[s]", "m8[s]", "V4", "S2"])
@pytest.mark.parametrize("mode", ["eager", "batched"])
def test_cast_to_a_dtype_no_op_takes_is_refused_at_the_call(dtype, mode):
    """A cast to strings or dates used to be recorded, carried through concat, and fail later
    inside numpy (or never)."""
    x = np.arange(3, dtype=np.float32)
    with hb.batching() if mode == "batched" else contextlib.nullcontext():
        with pytest.raises(TypeError, match="hb.cast to .*values are numbers"):
            hb.cast(hb.array(x), dtype)


def test_dates_are_not_values():
    with pytest.raises(TypeError, match="is not a value"):
        hb.array(np.array(["2026-01-01"], "M8[D]"))


NEW_AXIS_KEYS = [(Ellipsis, -1), (None,), (slice(None), None, slice(1, None)), (0, Ellipsis), Ellipsis, None,
                 (None, Ellipsis, None), (1, None, 2, Ellipsis), (Ellipsis, 1, None), (0, 1, 2, Ellipsis)]


def test_ellipsis_and_new_axes_index_as_numpy_with_gradients_batched_as_eager():
    """x[None], x[:, None] and x[..., i] raised "int and slice indices only"."""
    W = hb.Parameter("new_axes_W", (2, 3, 4), rng=np.random.default_rng(0))
    weights = [np.random.default_rng(k).standard_normal(W.data[key].shape).astype(np.float32)
               for k, key in enumerate(NEW_AXIS_KEYS)]

    def record():
        v = W * 1.0
        parts = [v[key] for key in NEW_AXIS_KEYS]
        total = hb.add_n([hb.sum(part * w) for part, w in zip(parts, weights)])
        total.backward()
        return [part.asnumpy() for part in parts], total.item()

    eager, eager_total = record()
    want = W.grad.copy()
    W.zero_grad()
    with hb.batching():
        batched, batched_total = record()
    by_hand = np.zeros_like(W.data)
    for key, w in zip(NEW_AXIS_KEYS, weights):
        view = np.zeros_like(W.data)
        view[key] += w
        by_hand += view
    for key, e, b in zip(NEW_AXIS_KEYS, eager, batched):
        np.testing.assert_array_equal(e, W.data[key])
        np.testing.assert_array_equal(b, W.data[key])
    np.testing.assert_allclose(batched_total, eager_total, rtol=1e-6)
    np.testing.assert_allclose(want, by_hand, rtol=1e-6)
    np.testing.assert_allclose(W.grad, want, rtol=1e-6)
    with pytest.raises(IndexError, match="single ellipsis"):
        W[Ellipsis, Ellipsis]
    with pytest.raises(IndexError, match="too many indices"):
        (W * 1.0)[0, 0, 0, 0, None]


@pytest.mark.parametrize("granularity", ["block", "op"])
def test_new_axes_inside_a_hybridized_block_as_eager(granularity):
    class Outer(hb.HybridBlock):
        def forward(self, a, b):
            return hb.sum(a[:, None] * b[None, ...])     # an outer product by broadcasting

    block = Outer()
    block.hybridize()
    pairs = [(np.arange(3, dtype=np.float32) + k, np.arange(4, dtype=np.float32) - k) for k in range(3)]
    want = [float(np.sum(np.outer(a, b))) for a, b in pairs]
    with hb.batching(granularity=granularity):
        got = [block(a, b) for a, b in pairs]
    np.testing.assert_allclose([g.item() for g in got], want, rtol=1e-6)
    np.testing.assert_allclose([block(a, b).item() for a, b in pairs], want, rtol=1e-6)
