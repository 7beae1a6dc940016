"""Python operators and numpy interplay on every value handle (eager Tensor, Future, Parameter):
numpy must never silently take over an expression, and conversions must agree with numpy."""
import numpy as np
import pytest

import hybridbatch as hb
from helpers import BOOLS, MODES, _assert_like_numpy, _raises_at_the_call, _values


def _handles():
    """One eager Tensor, one Future of an open scope and one Parameter, each of shape (3,)."""
    P = hb.Parameter("P", (3,), init=0.5)
    yield hb.array(np.arange(3, dtype=np.float32))
    with hb.batching():
        yield hb.array(np.arange(3, dtype=np.float32))
    yield P


def test_size_and_ndim_are_numpys_on_every_handle_without_a_read():
    for x in _handles():
        for v in (x, x.reshape(3, 1) if not isinstance(x, hb.Parameter) else x):
            assert (v.size, v.ndim) == (np.zeros(v.shape).size, np.zeros(v.shape).ndim)
    with hb.batching() as scope:
        y = hb.sum(hb.array(np.ones((2, 3), np.float32)), axis=0)
        assert (y.size, y.ndim, scope.flushed) == (3, 1, 0)      # known at recording: nothing ran


@pytest.mark.parametrize("ufunc", [np.tanh, np.exp, np.sum, lambda x: np.maximum(x, 0), lambda x: np.dot(x, x),
                                   lambda x: np.concatenate([x, x]), lambda x: np.allclose(x, 0)],
                         ids=["tanh", "exp", "sum", "maximum", "dot", "concatenate", "allclose"])
def test_numpy_function_on_a_handle_raises_instead_of_detaching(ufunc):
    """np.tanh(W @ x) returned a plain array (W's gradient silently lost), np.sum(W)
    returned W itself, and np.dot / np.concatenate computed on the numbers."""
    for x in _handles():
        with pytest.raises(TypeError, match="gradient|ufunc"):
            ufunc(x)


def test_a_ufunc_on_a_handle_names_the_hb_op_and_an_array_updated_in_place_is_refused():
    """np.tanh(h) names hb.tanh, np.abs(h) hb.abs; `acc += h` and `acc[0] += h` would store
    h's numbers into the array, its gradient lost; `array == Parameter` is False, by identity."""
    for x in _handles():
        name = type(x).__name__
        with pytest.raises(TypeError, match=rf"numpy's tanh on a {name} would .*use hb\.tanh"):
            np.tanh(x)
        with pytest.raises(TypeError, match=r"numpy's absolute .*use hb\.abs"):
            np.abs(x)
        with pytest.raises(TypeError, match=r"numpy's add\.reduce .*use the hb op"):
            np.add.reduce(x)
        acc = np.ones((2, 3), np.float32)
        with pytest.raises(TypeError, match=r"updated in place .* write acc = acc \+ h"):
            acc[0] += x
        row = np.ones(3, np.float32)
        with pytest.raises(TypeError, match=r"updated in place"):
            row += x
        np.testing.assert_array_equal((row + x).asnumpy(), 1 + np.asarray(x))
        if isinstance(x, hb.Parameter):
            assert (row == x) is False and (row != x) is True and x in [row, x]


def test_numpy_shape_functions_read_no_numbers_and_work():
    for x in _handles():
        assert np.shape(x) == (3,) and np.ndim(x) == 1 and np.size(x) == 3 and np.size(x, 0) == 3
        assert np.result_type(x, 1.0) == np.float32 and np.result_type(x, np.float64) == np.float64


def test_numpy_reads_the_numbers_when_asked():
    for x in _handles():
        want = [0.5] * 3 if isinstance(x, hb.Parameter) else [0.0, 1.0, 2.0]
        got = np.asarray(x)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)
    P = hb.Parameter("P", (3,), init=0.5)
    np.asarray(P)[0] = 7.0                      # a copy: the Parameter keeps its numbers
    np.testing.assert_array_equal(P.data, [0.5] * 3)


def test_ndarray_operators_defer_to_the_handle():
    """`array op value` records the op (the handle's reflected operator), never a numpy result."""
    W = hb.Parameter("W", (3, 3))
    M = np.arange(9, dtype=np.float32).reshape(3, 3)
    x = np.array([1.0, -2.0, 3.0], np.float32)
    y = M @ (W @ x) - np.float32(2) * (np.ones(3, np.float32) / (W @ x))
    hb.sum(y).backward()
    want = W.grad.copy()
    W.zero_grad()
    with hb.batching():
        h = W @ x
        f = M @ h - np.float32(2) * (np.ones(3, np.float32) / h)
        loss = hb.sum(f)
    assert isinstance(y, hb.Tensor) and isinstance(f, hb.Future)
    loss.backward()
    np.testing.assert_allclose(f.asnumpy(), y.asnumpy(), rtol=1e-6)
    np.testing.assert_allclose(W.grad, want, rtol=1e-5)
    assert np.abs(want).sum() > 0


@pytest.mark.parametrize("compare", [lambda x: x == 0.0, lambda x: x != x, lambda x: np.ones(3, np.float32) == x,
                                     lambda x: x == hb.Parameter("Q", (3,), init=0.0)],
                         ids=["eq_number", "ne_itself", "ndarray_eq", "eq_parameter"])
def test_comparing_values_raises_instead_of_comparing_handles(compare):
    """`x == 0.0` was False and `x != x` False whatever the numbers (handle identity), where
    numpy compares element by element; a Parameter, a named weight, keeps identity."""
    for x in _handles():
        if isinstance(x, hb.Parameter):
            assert (x == x) and not (x != x) and not (x == hb.Parameter("R", (3,)))
            continue
        with pytest.raises(TypeError, match="compare the handles"):
            compare(x)
        assert {x: 1}[x] == 1 and x in {x} and x in [x]     # hashing and identity still work


@pytest.mark.parametrize("value", [0.0, 2.0], ids=["zero", "two"])
def test_truth_value_of_an_eager_tensor_is_numpys(value):
    """A Tensor had no __bool__: a one-element vector holding 0 was True (its len), and a 0-d
    one raised "len() of a 0-d value"."""
    assert bool(hb.array(np.float32(value))) == bool(value)
    assert bool(hb.array(np.array([value], np.float32))) == bool(value)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(hb.array(np.zeros(3, np.float32)))


@pytest.mark.parametrize("mode", MODES)
def test_a_format_spec_and_round_read_a_0d_value_as_numpy_does(mode):
    """f"{loss:.4f}" and round(loss, 2) failed with Python's generic TypeError."""
    W = hb.Parameter("W_format", (3,), init=0.4123)

    def values():
        return hb.sum(W * np.ones(3, np.float32)), W * 1.0

    if mode == "batched":
        with hb.batching() as scope:
            loss, vector = values()
            assert f"{loss:.4f}" == "1.2369" and scope.flushed == len(scope.graph)    # a read: it flushed
    else:
        loss, vector = values()
    expected = np.array(1.2369, np.float32)
    assert f"{loss:.4f}" == f"{expected:.4f}" and f"{loss:>9.2e}" == f"{expected:>9.2e}"
    assert round(loss, 2) == round(expected[()], 2) and type(round(loss, 2)) is type(round(expected[()], 2))
    assert round(loss) == 1 and type(round(loss)) is int
    assert f"{loss}" == str(loss) and f"{vector}" == str(vector)
    with pytest.raises(TypeError, match=r"0-d value.*\(3,\)"):
        f"{vector:.2f}"
    with pytest.raises(TypeError, match=r"0-d value.*\(3,\)"):
        round(vector, 2)


@pytest.mark.parametrize("scalar", [np.uint8(3), np.int8(-128)], ids=["uint8", "int8_min"])
def test_subtracting_a_numpy_integer_scalar_is_numpys_difference(scalar):
    """x - b was x + (-b) with -b computed in b's own dtype: -np.uint8(3) wraps to 253 and
    -np.int8(-128) stays -128, so x - np.uint8(3) was x + 253."""
    _assert_like_numpy(lambda x: x - scalar, lambda x: x - scalar, [(np.array([10.0, 20.0], np.float32),)])


BIG = 2 ** 60 + 1      # not a float64: float(BIG) rounds it to 2**60


@pytest.mark.parametrize("fn", [lambda x: x + BIG, lambda x: x * BIG, lambda x: BIG - x, lambda x: x - np.int64(BIG)],
                         ids=["add", "mul", "rsub", "sub_int64"])
def test_int64_arithmetic_with_a_large_integer_is_exact(fn):
    """The scalar went through float(): int64 x + (2**60 + 1) was one off, silently."""
    _assert_like_numpy(fn, fn, [(np.array([1, 2, -3], np.int64),)])


@pytest.mark.parametrize("fn", [lambda x: -x, lambda x: x - 1, lambda x: 1 - x, lambda x: x * 2, lambda x: sum([x, x]),
                                lambda x: x * True],
                         ids=["neg", "sub", "rsub", "mul", "python_sum", "mul_bool"])
def test_integer_values_with_integer_scalars_stay_integers_like_numpy(fn):
    """The scalars behind -x, x - 1 and x + y's sum() start are ints, so they keep the
    value's integer dtype (and wrap as numpy does), where a float scalar is refused."""
    _assert_like_numpy(fn, fn, [(np.array([100, -100, 3], np.int8),)])


def test_a_float_scalar_is_refused_on_integers_after_the_equal_int_was_recorded():
    """Signatures are interned by attrs equality, and 2 == 2.0: once int8 x * 2 had been
    recorded, x * 2.0 found its signature and wrapped in int8 instead of being refused."""
    for mode in MODES:
        _values(lambda x: x * 2, [(np.array([100, 3], np.int8),)], mode)
        _raises_at_the_call(lambda x: x * 2.0, (np.array([100, 3], np.int8),), match="floating-point")


@pytest.mark.parametrize("c", [0.0, -0.0], ids=["zero", "negative_zero"])
def test_adding_a_signed_zero_keeps_numpys_sign(c):
    """x + 0.0 was skipped as adding nothing, and shared x + -0.0's signature (0.0 == -0.0):
    -0.0 + 0.0 stayed -0.0 where numpy gives 0.0."""
    x = np.array([-0.0, 0.0, 1.5], np.float32)
    for mode in MODES:
        (got,) = _values(lambda v: v + c, [(x,)], mode)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(x + np.float32(c)), err_msg=mode)


@pytest.mark.parametrize("scalar", [np.float16(3), np.float16(0.1)], ids=["3", "0.1"])
def test_dividing_by_a_float16_scalar_is_as_exact_as_numpys_quotient(scalar):
    """x / b was x * (1.0 / b) with the reciprocal rounded to float16: 2.4e-4 off in float32."""
    x = np.array([1.0, 2.0, 3.0], np.float32)
    for mode in MODES:
        (got,) = _values(lambda x: x / scalar, [(x,)], mode)
        np.testing.assert_allclose(got, x / scalar, rtol=1e-6, err_msg=mode)


def test_python_sum_of_bool_values_raises_as_bool_arithmetic_does():
    """sum() starts at 0, and 0 + x returned x itself: sum([b, b]) of bools was b OR b
    ([True, False, True]) where numpy counts ([2, 0, 2]); 1 + b already raised."""
    _raises_at_the_call(lambda x: sum([x, x]), BOOLS, match="bool")


@pytest.mark.parametrize("bad", [None, "abc", [1, None], np.array([None])])
def test_none_strings_and_objects_are_refused_as_operands_in_both_modes(bad):
    x = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="is not a value"):
        hb.add_n([hb.array(x), bad])
    with hb.batching(), pytest.raises(TypeError, match="is not a value"):
        hb.add_n([hb.array(x), bad])


@pytest.mark.parametrize("zero", [0, 0.0, -0.0, np.float32(0)])
def test_division_by_a_zero_number_gives_numpys_inf_and_nan(zero):
    v = np.array([1.0, 0.0, -2.0], np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = v / np.float32(zero)
        got_eager = (hb.array(v) / zero).asnumpy()
        with hb.batching():
            got = (hb.array(v) / zero)
        got = got.asnumpy()
    np.testing.assert_array_equal(got_eager, want)
    np.testing.assert_array_equal(got, want)


class _LabelLoss(hb.HybridBlock):
    """-log_softmax(W x)[label], the label an int argument of the block."""

    def __init__(self):
        super().__init__()
        self.out = hb.nn.Dense(5, 4, seed=0)

    def forward(self, x, label):
        return -hb.log_softmax(self.out(x))[label]


@pytest.mark.parametrize("granularity", ["block", "op"])
def test_an_int_index_of_a_vector_is_per_node_data_in_and_out_of_blocks(granularity):
    """z[i] of a vector picks element i as hb.pick does: indices 0..4 (and -1) batch in one
    batch per op, a block's int argument may be the index, and values and gradients are
    eager's."""
    block = _LabelLoss()
    block.hybridize()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(4).astype(np.float32) for _ in range(10)]
    labels = [0, 1, 2, 3, 4, -1, 4, 3, 2, 1]

    def losses():
        outside = [-hb.log_softmax(block.out(x))[y] for x, y in zip(xs, labels)]
        inside = [block(x, y) for x, y in zip(xs, labels)]
        return hb.add_n(outside + inside)

    eager = losses()
    eager.backward()
    want = {k: p.grad.copy() for k, p in block.collect_params().items()}
    for p in block.collect_params().values():
        p.zero_grad()
    with hb.batching(granularity=granularity) as scope:
        batched = losses()
    batched.backward()
    assert "slice" not in str(scope.explain())
    np.testing.assert_allclose(batched.item(), eager.item(), rtol=1e-6)
    for k, p in block.collect_params().items():
        np.testing.assert_allclose(p.grad, want[k], rtol=1e-5, atol=1e-7)
    logits = [np.asarray(block.out(x)) for x in xs]
    by_numpy = sum(np.log(np.exp(z).sum()) - z[y] for z, y in zip(logits, labels))
    np.testing.assert_allclose(eager.item(), 2 * by_numpy, rtol=1e-5)


@pytest.mark.parametrize("granularity", ["block", "op"])
def test_an_int_index_of_a_matrix_picks_its_row_and_of_a_parameter_looks_it_up(granularity):
    """m[i] of a value of rank 2 (a block's int argument too) and W[i] of a Parameter batch
    across i, with eager's values and gradients (W's as rows, as hb.lookup's)."""
    class Row(hb.HybridBlock):
        def __init__(self):
            super().__init__()
            self.table = hb.Parameter("table", (4, 3), rng=np.random.default_rng(1))

        def forward(self, m, i):
            return hb.sum(hb.tanh(m)[i] * self.table[i])

    block = Row()
    block.hybridize()
    rng = np.random.default_rng(0)
    ms = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(6)]
    rows = [0, 3, 1, 2, 1, 3]

    def loss():
        return hb.add_n([block(m, i) for m, i in zip(ms, rows)] + [hb.sum(block.table[i - 4]) for i in rows])

    eager = loss()
    eager.backward()
    want = block.table.grad.copy()
    block.table.zero_grad()
    with hb.batching(granularity=granularity) as scope:
        batched = loss()
    batched.backward()
    assert "slice" not in str(scope.explain())
    np.testing.assert_allclose(batched.item(), eager.item(), rtol=1e-6)
    np.testing.assert_allclose(block.table.grad, want, rtol=1e-5, atol=1e-7)
    by_numpy = sum(float(np.sum(np.tanh(m)[i] * block.table.data[i])) + float(np.sum(block.table.data[i - 4]))
                   for m, i in zip(ms, rows))
    np.testing.assert_allclose(eager.item(), by_numpy, rtol=1e-5)


@pytest.mark.parametrize("granularity", ["block", "op", "auto"])
def test_a_negative_row_of_a_parameter_counts_from_the_end_in_every_path(granularity):
    """hb.lookup(W, -1) and a block's self.table[i] with i < 0 raised "index -1 out of range"
    where W[-1] worked."""
    class Row(hb.HybridBlock):
        def __init__(self):
            super().__init__()
            self.table = hb.Parameter("neg_table", (4, 4), rng=np.random.default_rng(1))

        def forward(self, x, i):
            return hb.sum(hb.tanh(x * self.table[i]) * hb.lookup(self.table, i)) + hb.pick(x, i)

    block = Row()
    block.hybridize()
    table = block.table
    xs = [np.linspace(-1, 1, 4, dtype=np.float32) * k for k in range(6)]
    rows = [-1, 3, -4, 0, -2, 2]

    def loss():
        calls = [block(x, i) for x, i in zip(xs, rows)]
        direct = [hb.sum(hb.lookup(table, i) * float(k)) for k, i in enumerate(rows)]
        return hb.add_n(calls + direct + [hb.sum(hb.lookup(table, np.int64(-3)))])

    eager = loss()
    eager.backward()
    want = table.grad.copy()
    table.zero_grad()
    with hb.batching(granularity=granularity):
        batched = loss()
    batched.backward()
    by_numpy = sum(float(np.sum(np.tanh(x * table.data[i]) * table.data[i]) + x[i]) for x, i in zip(xs, rows)) \
        + sum(float(np.sum(table.data[i])) * k for k, i in enumerate(rows)) + float(np.sum(table.data[-3]))
    np.testing.assert_allclose(eager.item(), by_numpy, rtol=1e-5)
    np.testing.assert_allclose(batched.item(), eager.item(), rtol=1e-6)
    np.testing.assert_allclose(table.peek_grad(), want, rtol=1e-5, atol=1e-7)
    assert table.grad_rows().tolist() == [0, 1, 2, 3]    # the rows a sparse step updates, as numbers >= 0
    for bad in (-5, 4):
        with pytest.raises(IndexError, match=f"lookup: index {bad} out of range for a table of 4 rows"):
            hb.lookup(table, bad)
        with pytest.raises(IndexError, match=f"index {bad} out of range"):
            block(xs[0], bad)
        with hb.batching(granularity=granularity), pytest.raises(IndexError, match=f"index {bad} out of range"):
            block(xs[0], bad)


@pytest.mark.parametrize("granularity", ["block", "op", "auto"])
def test_a_negative_int_argument_indexing_axes_of_different_lengths_reads_each_from_its_end(granularity):
    """-1 names row 5 of the table and element 2 of the vector: no one value of the call's
    integer serves both, so such a call records its steps one by one."""
    class Both(hb.HybridBlock):
        def __init__(self):
            super().__init__()
            self.table = hb.Parameter("both_table", (6, 3), rng=np.random.default_rng(2))

        def forward(self, x, i):
            return hb.sum(self.table[i] * x) + hb.pick(x, i)

    block = Both()
    block.hybridize()
    xs = [np.array([1.0, 2.0, 3.0], np.float32) * k for k in range(1, 5)]
    rows = [1, -1, -3, 2]

    def loss():
        return hb.add_n([block(x, i) for x, i in zip(xs, rows)])

    eager = loss()
    eager.backward()
    want = block.table.grad.copy()
    block.table.zero_grad()
    with hb.batching(granularity=granularity):
        batched = loss()
    batched.backward()
    by_numpy = sum(float(block.table.data[i] @ x + x[i]) for x, i in zip(xs, rows))
    np.testing.assert_allclose(eager.item(), by_numpy, rtol=1e-6)
    np.testing.assert_allclose(batched.item(), eager.item(), rtol=1e-6)
    np.testing.assert_allclose(block.table.grad, want, rtol=1e-6)
    with pytest.raises(IndexError, match="pick: index -4 out of range for an axis of length 3"):
        block(xs[0], -4)


def test_builtin_abs_records_hb_abs():
    for x in _handles():
        got = abs(-1.0 * x)
        assert not isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got.asnumpy(), np.abs(np.asarray(x)))
