"""The batching scope: laziness, flushes, incremental recording, errors at the recording line."""
import contextlib
import inspect
import re

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch import nn


@pytest.fixture
def cell():
    rng = np.random.default_rng(0)
    W = hb.Parameter("W", (3, 5), rng=rng)
    b = hb.Parameter("b", (3,), init="normal", rng=rng)
    return W, b


def step(W, b, h, x):
    return hb.tanh(W @ hb.concat([h, x]) + b)


def test_futures_are_lazy_until_a_flush(cell):
    W, b = cell
    with hb.batching() as scope:
        y = step(W, b, np.zeros(3, np.float32), np.ones(2, np.float32))
        assert isinstance(y, hb.Future)
        assert y.shape == (3,) and y.dtype == np.float32
        assert scope.flushed == 0 and scope.plans == []
    assert len(scope.plans) == 1
    expected = np.tanh(W.data @ np.r_[np.zeros(3), np.ones(2)].astype(np.float32) + b.data)
    np.testing.assert_allclose(y.asnumpy(), expected, rtol=1e-6)


def test_reading_a_value_flushes_every_pending_node(cell):
    W, b = cell
    with hb.batching() as scope:
        ys = [step(W, b, np.zeros(3, np.float32), np.full(2, i, np.float32)) for i in range(4)]
        ys[0].asnumpy()
        assert scope.flushed == len(scope.graph)
        # all four instances ran in the same batches: one batch per op
        assert scope.stats.batches == 4
        assert scope.stats.nodes == 16


def test_incremental_flush_runs_only_the_delta(cell):
    W, b = cell
    x = np.arange(2, dtype=np.float32)
    eager = step(W, b, step(W, b, np.zeros(3, np.float32), x), x).asnumpy()
    with hb.batching() as scope:
        h = step(W, b, np.zeros(3, np.float32), x)
        first = h.asnumpy()
        h2 = step(W, b, h, x)
    assert scope.stats.flushes == 2
    assert [p.n_executed for p in scope.plans] == [4, 4]
    np.testing.assert_allclose(first, np.tanh(W.data @ np.r_[np.zeros(3), x] + b.data), rtol=1e-6)
    np.testing.assert_allclose(h2.asnumpy(), eager, rtol=1e-6)


def test_backward_across_flushes_matches_eager(cell):
    W, b = cell
    x = np.arange(2, dtype=np.float32)
    loss = hb.pick_neg_log_softmax(step(W, b, step(W, b, np.zeros(3, np.float32), x), x), 2)
    loss.backward()
    gW, gb = W.grad.copy(), b.grad.copy()
    W.zero_grad()
    b.zero_grad()
    with hb.batching():
        h = step(W, b, np.zeros(3, np.float32), x)
        h.asnumpy()
        loss = hb.pick_neg_log_softmax(step(W, b, h, x), 2)
    loss.backward()
    np.testing.assert_allclose(W.grad, gW, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b.grad, gb, rtol=1e-5, atol=1e-7)


def test_values_stay_readable_after_the_scope(cell):
    W, b = cell
    with hb.batching():
        y = step(W, b, np.zeros(3, np.float32), np.ones(2, np.float32))
    assert np.isfinite(y.asnumpy()).all()
    assert float(hb.sum(y.asnumpy())) == pytest.approx(float(y.asnumpy().sum()), rel=1e-6)


def test_shape_error_names_op_and_shapes_at_the_recording_call(cell):
    W, _ = cell
    with pytest.raises(hb.ShapeError, match=r"matmul.*\(3, 5\).*\(4,\)"):
        with hb.batching():
            W @ hb.array(np.zeros(4, np.float32))
    with pytest.raises(hb.ShapeError, match=r"add.*\(3,\).*\(4,\)"):
        hb.array(np.zeros(3, np.float32)) + hb.array(np.zeros(4, np.float32))


@pytest.mark.parametrize("mode", ["eager", "batched"])
def test_a_float64_input_to_float32_parameters_names_the_dtypes_and_the_cast(mode):
    """numpy's default float64 meeting a float32 layer is a dtype error, said as one."""
    layer = hb.nn.Dense(4, 3, seed=0)
    x = np.random.default_rng(0).standard_normal(3)
    with pytest.raises(hb.ShapeError, match=r"affine: .*\(3,\) float64.*must share one dtype.*astype\(np.float32\)"):
        if mode == "eager":
            layer(x)
        else:
            with hb.batching():
                layer(x)
    with pytest.raises(hb.ShapeError, match=r"\(3,\) float32 and \(3,\) int32 must share one dtype; cast one"):
        hb.array(np.zeros(3, np.float32)) + hb.array(np.zeros(3, np.int32))


def test_future_used_after_its_scope_is_refused(cell):
    W, b = cell
    with hb.batching():
        y = step(W, b, np.zeros(3, np.float32), np.ones(2, np.float32))
    with pytest.raises(hb.ScopeError, match="outside its batching scope"):
        hb.tanh(y)
    with hb.batching():
        with pytest.raises(hb.ScopeError, match="another batching scope"):
            hb.tanh(y)


def test_abandoned_scope_refuses_reads_with_the_cause(cell):
    W, b = cell
    with pytest.raises(KeyError):
        with hb.batching():
            y = step(W, b, np.zeros(3, np.float32), np.ones(2, np.float32))
            raise KeyError("user bug")
    with pytest.raises(hb.ScopeError, match="abandoned.*KeyError"):
        y.asnumpy()


def test_scopes_do_not_nest():
    with hb.batching():
        with pytest.raises(hb.ScopeError, match="nest"):
            with hb.batching():
                pass


def test_a_scope_left_open_by_a_paused_generator_is_named_by_the_line_that_entered_it(cell):
    W, _ = cell

    def outputs(xs):
        with hb.batching():
            for x in xs:
                yield hb.tanh(W @ x)

    entered = inspect.getsourcelines(outputs)[1] + 1
    held = outputs([np.ones(5, np.float32)] * 2)
    next(held)
    with pytest.raises(hb.ScopeError, match="do not nest") as info:
        with hb.batching():
            pass
    assert f"entered at {__file__}:{entered};" in str(info.value)
    assert "generator" in str(info.value)
    held.close()
    with hb.batching():
        y = hb.tanh(W @ np.ones(5, np.float32))
    np.testing.assert_allclose(y.asnumpy(), np.tanh(W.data @ np.ones(5, np.float32)), rtol=1e-6)


@pytest.mark.filterwarnings("ignore:invalid value encountered in log:RuntimeWarning")   # the NaN is the point
def test_check_numerics_names_the_op_and_the_recording_line():
    x = hb.Parameter("x", (3,), init=-1.0)
    with pytest.raises(hb.NumericsError) as info:
        with hb.batching(check_numerics=True):
            hb.log(x * 1.0)   # log of a negative number
    message = str(info.value)
    assert "log" in message and "test_scope.py" in message


def test_unbatchable_ops_run_one_by_one():
    def double(v):
        return 2 * v

    with hb.batching() as scope:
        ys = [hb.py_func(double, np.full(2, i, np.float32), out_shape=(2,)) for i in range(3)]
    assert scope.stats.batches == 3 and scope.stats.lower_bound == 3
    for i, y in enumerate(ys):
        np.testing.assert_array_equal(y.asnumpy(), np.full(2, 2 * i))


def test_only_parameters_as_operands(cell):
    W, _ = cell
    expected = np.tanh(W.data)
    with hb.batching():
        ys = [hb.tanh(W) for _ in range(3)]
    for y in ys:
        np.testing.assert_allclose(y.asnumpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(hb.tanh(W).asnumpy(), expected, rtol=1e-6)


@pytest.mark.parametrize("granularity", ["op", "block"])
def test_a_parameter_sliced_at_every_call_is_read_once_a_flush(granularity):
    """W[i*2:(i+1)*2] @ h per step: each call had recorded a read of the whole of W and a
    slice of it (a copy of W per call: training slower than eager). Calls still pending share
    one node; values and gradients are eager's."""
    rng = np.random.default_rng(0)
    W = hb.Parameter("W", (4, 2), init="uniform", rng=rng)
    xs = [rng.standard_normal(2).astype(np.float32) for _ in range(5)]

    def loss(x):
        h = hb.array(x)
        for i in (0, 1, 0):
            h = hb.tanh(W[i * 2:(i + 1) * 2] @ h)
        return hb.sum(h)

    hb.add_n([loss(x) for x in xs]).backward()
    eager = W.grad.copy()
    W.zero_grad()
    with hb.batching(granularity=granularity) as scope:
        total = hb.add_n([loss(x) for x in xs])
    total.backward()
    assert scope.stats.nodes == 1 + 2 + 5 * (3 * 2 + 1) + 1     # one read of W, two slices (inputs uncounted)
    np.testing.assert_allclose(total.asnumpy(), sum(loss(x).asnumpy() for x in xs), rtol=1e-6)
    np.testing.assert_allclose(W.grad, eager, rtol=1e-5, atol=1e-7)


def test_a_parameter_read_after_a_flush_reads_its_new_numbers():
    """The shared node of pending calls is not reused past the flush that computed it: W
    may change between flushes of one scope (an optimizer step inside it)."""
    W = hb.Parameter("W", (3,), init=1.0)
    with hb.batching():
        first = hb.tanh(W)
        first.asnumpy()
        W.data[...] = 2.0
        second = hb.tanh(W)
        np.testing.assert_allclose(second.asnumpy(), np.tanh(2.0), rtol=1e-6)
        np.testing.assert_allclose(first.asnumpy(), np.tanh(1.0), rtol=1e-6)


def test_stats_split_time():
    W = hb.Parameter("W", (4, 4))
    with hb.batching() as scope:
        h = hb.array(np.ones(4, np.float32))
        for _ in range(10):
            h = hb.tanh(W @ h)
    s = scope.stats
    assert s.nodes == 20 and s.batches == 20 and s.lower_bound == 20
    assert s.record_seconds > 0 and s.schedule_seconds > 0 and s.execute_seconds > 0


def test_identical_structure_reuses_its_schedule(cell):
    W, b = cell

    def minibatch(offset):
        with hb.batching() as scope:
            ys = [step(W, b, np.zeros(3, np.float32), np.full(2, i + offset, np.float32)) for i in range(5)]
        return scope, [y.asnumpy() for y in ys]

    with hb.settings(plan_cache_size=32):
        first, _ = minibatch(0.0)
        again, values = minibatch(1.0)          # same structure, other values
        with hb.batching() as other:            # a different structure misses
            step(W, b, step(W, b, np.zeros(3, np.float32), np.ones(2, np.float32)), np.ones(2, np.float32))
    assert again.stats.plan_cache_hits == 1 and again.stats.plan_cache_hit_rate == 1.0
    np.testing.assert_allclose(values[0], np.tanh(W.data @ np.r_[np.zeros(3), np.full(2, 1.0)] + b.data), rtol=1e-6)
    assert other.stats.plan_cache_hits == 0
    with hb.settings(plan_cache_size=0):
        disabled, _ = minibatch(0.0)
    assert disabled.stats.plan_cache_hits == 0


@pytest.mark.parametrize("mode", ["eager", "op", "block"])
def test_arrays_are_read_when_recorded_not_when_flushed(mode):
    """A caller that reuses its numpy buffer after passing it (h *= 0.5) must not change
    what was recorded: the values and W's gradient are those of the arrays at each call."""
    W = hb.Parameter("W", (3, 3), rng=np.random.default_rng(0))
    step = hb.nn.Dense(3, 3, activation="tanh", seed=1)
    step.hybridize()
    h = np.ones(3, np.float32)
    outs = []
    with (hb.batching(granularity=mode) if mode != "eager" else contextlib.nullcontext()):
        for _ in range(3):
            outs.append(hb.tanh(W @ h) + step(h) + hb.array(h))
            h *= 0.5
        loss = hb.sum(hb.add_n(outs))
    loss.backward()
    hs = [np.full(3, 0.5 ** t, np.float32) for t in range(3)]
    Wd, Sw, Sb = W.data, step.weight.data, step.bias.data
    expected = [np.tanh(Wd @ x) + np.tanh(Sw @ x + Sb) + x for x in hs]
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5)
    dW = sum(np.outer(1 - np.tanh(Wd @ x) ** 2, x) for x in hs)
    np.testing.assert_allclose(W.grad, dW, rtol=1e-5)


def test_a_recorded_array_is_not_held_by_the_scope():
    """The scope records a copy of an array and keeps no reference to it: a view's base is
    freed with its last user reference, and the array can be resized in place, as eagerly."""
    import gc
    import weakref
    big = np.ones(1 << 20, np.float32)
    base = weakref.ref(big)
    buffer = np.zeros(3, np.float32)
    with hb.batching():
        loss = hb.sum(hb.array(big[:4]))
        doubled = hb.array(buffer) * 2.0
        buffer.resize(5, refcheck=True)
        del big
        gc.collect()
        assert base() is None
    assert loss.item() == 4.0
    np.testing.assert_array_equal(doubled.asnumpy(), [0.0, 0.0, 0.0])


@pytest.mark.parametrize("mode", ["eager", "batched"])
def test_len_is_the_first_axis_and_a_0d_value_has_none(mode):
    with (hb.batching() if mode == "batched" else contextlib.nullcontext()):
        m = hb.array(np.ones((4, 2), np.float32))
        s = hb.sum(m)
        assert isinstance(m, hb.Future if mode == "batched" else hb.Tensor)
        assert len(m) == 4 and s.shape == ()
        with pytest.raises(TypeError, match=r"^len\(\) of a 0-d value$"):
            len(s)


def _nan_gradient(x, y, gy):
    return (gy * np.nan,)


@pytest.mark.parametrize("granularity", ["op", "block"])
def test_check_numerics_names_the_node_whose_gradient_turned_nan(granularity):
    """Forward is finite; the py_func's gradient is NaN. The backward must stop there, naming
    the recording line, instead of leaving NaN in W.grad."""
    W = hb.Parameter("W", (3, 3))

    class Cell(hb.HybridBlock):
        def forward(self, x):
            return hb.tanh(W @ x)

    cell = Cell()
    cell.hybridize()
    x = np.ones(3, np.float32)
    with hb.batching(check_numerics=True, granularity=granularity):
        hs = [hb.py_func(np.copy, cell(x), out_shape=(3,), grad_fn=_nan_gradient) for _ in range(2)]
        loss = hb.sum(hs[0]) + hb.sum(hs[1])
        assert np.isfinite(loss.asnumpy())
        with pytest.raises(hb.NumericsError, match=r"py_func gave a NaN/inf gradient for operand 0 .*test_scope\.py"):
            loss.backward()


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")   # the overflow is the point
@pytest.mark.parametrize("granularity", ["op", "block"])
def test_check_numerics_names_the_parameter_whose_gradient_turned_inf(granularity):
    """Forward is finite (b = 0); d(2 sum(b x))/db = 2 x overflows float32. At block
    granularity the parameter's gradient is accumulated inside the block's program: checked
    too."""
    b = hb.Parameter("b", (3,), init=0.0)

    class Scale(hb.HybridBlock):
        def forward(self, x):
            return b * x

    block = Scale()
    block.hybridize()
    big = np.full(3, 3e38, np.float32)
    with hb.batching(check_numerics=True, granularity=granularity):
        loss = hb.sum(block(big)) * 2.0
        assert loss.item() == 0.0
        with pytest.raises(hb.NumericsError, match=r"gradient for parameter 'b' .*test_scope\.py"):
            loss.backward()


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_check_numerics_catches_a_weight_gradient_that_overflows_only_when_summed():
    """dW = G^T X runs once per weight after the reverse pass: its factors (2 and 3e38) are
    finite, their product is not."""
    W = hb.Parameter("W", (3, 3), init=0.0)
    with hb.batching(check_numerics=True):
        loss = hb.sum(W @ hb.array(np.full(3, 3e38, np.float32))) * 2.0
        with pytest.raises(hb.NumericsError, match="parameter 'W', summed over its batches"):
            loss.backward()


def test_without_check_numerics_backward_does_not_check():
    W = hb.Parameter("W", (3,))
    with hb.batching():
        loss = hb.sum(hb.py_func(np.copy, W * 1.0, out_shape=(3,), grad_fn=_nan_gradient))
    loss.backward()
    assert np.isnan(W.grad).all()


@pytest.mark.filterwarnings("ignore:invalid value encountered in log:RuntimeWarning")
def test_check_numerics_points_inside_a_block_at_block_granularity():
    """A NaN in a block call's output names the call's line and, rerunning the block's
    steps on the bad row, the op and line inside forward where it first appeared (after a
    split and a constant, so the trace's lines must stay aligned with its steps)."""
    W = hb.Parameter("W", (4, 3))

    class Cell(hb.HybridBlock):
        def forward(self, x, scale):
            a, b = hb.split(W @ x, 2)
            c = hb.tanh(a) + hb.array(np.ones(2, np.float32)) * scale
            bad = hb.log(c - 3.0)                      # tanh(a) + scale - 3 < 0: NaN
            return hb.sum(bad) + hb.sum(b)

    cell = Cell()
    cell.hybridize()
    line = inspect.getsourcelines(Cell.forward)[1] + 3
    x = np.ones(3, np.float32)
    with pytest.raises(hb.NumericsError) as info:
        with hb.batching(check_numerics=True, granularity="block"):
            cell(x, np.zeros(2, np.float32))
            cell(x, np.ones(2, np.float32))
    message = str(info.value)
    assert message.startswith("block:Cell produced NaN/inf (inside the block: first at log, ")
    assert f"test_scope.py:{line})" in message


@pytest.mark.filterwarnings("ignore:invalid value encountered in log:RuntimeWarning")
def test_check_numerics_points_inside_a_block_at_op_granularity():
    """At op granularity a block's steps are nodes of their own: the NaN's node names the
    call's line and the line in forward that recorded its step."""
    class Cell(hb.HybridBlock):
        def forward(self, x):
            y = hb.tanh(x)
            return hb.log(y - 3.0)                     # tanh(x) - 3 < 0: NaN

    cell = Cell()
    cell.hybridize()
    line = inspect.getsourcelines(Cell.forward)[1] + 2
    with pytest.raises(hb.NumericsError) as info:
        with hb.batching(check_numerics=True, granularity="op"):
            call = inspect.currentframe().f_lineno + 1
            cell(np.ones(3, np.float32))
    message = str(info.value)
    assert message.startswith("log produced NaN/inf")
    assert message.endswith(f"test_scope.py:{call} (inside Cell, at {__file__}:{line})")


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")   # the overflow is the point
def test_check_numerics_counts_a_shared_parameter_among_the_operands():
    """W @ x with x = 0: forward is 0, but x's gradient W^T (2, 2, 2) overflows. x is the
    matmul's operand 1 (W, shared, is operand 0), and the error must say so."""
    W = hb.Parameter("W", (3, 3), init=3e38)
    x = np.zeros(3, np.float32)
    with hb.batching(check_numerics=True, granularity="op"):
        hs = [hb.tanh(x) for _ in range(2)]
        loss = hb.add_n([hb.sum(W @ h) * 2.0 for h in hs])
        assert np.isfinite(loss.asnumpy())
        with pytest.raises(hb.NumericsError, match=r"matmul.*operand 1"):
            loss.backward()


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")   # the overflow is the point
@pytest.mark.parametrize("granularity", ["op", "block"])
def test_backward_from_one_loss_ignores_batch_rows_it_does_not_reach(granularity):
    """Two instances batched together; the first overflows to inf. Differentiating only the
    second must give the eager gradient (0 from the first), not 0 * inf = NaN summed into
    the shared parameter from the rows of the first."""
    W = hb.Parameter("W", (4,), init=1.0)

    class Cell(hb.HybridBlock):
        def forward(self, x):
            return hb.sum(hb.exp(x * W))

    cell = Cell()
    cell.hybridize()
    xs = [np.array([0, -1, 1e30, 100], np.float32), np.array([0.5, 0, -2, 1], np.float32)]
    eager = cell(xs[1])
    eager.backward()
    expected = W.grad.copy()
    W.zero_grad()
    with hb.batching(granularity=granularity):
        losses = [cell(x) for x in xs]
        losses[1].backward()
    np.testing.assert_allclose(W.grad, expected, rtol=1e-6)


def test_array_of_a_future_of_the_same_scope_says_so():
    with hb.batching():
        x = hb.array(np.ones(2, np.float32))
        with pytest.raises(hb.ScopeError, match="already a recorded value"):
            hb.array(x)


def test_an_eager_value_computed_from_a_parameter_is_refused_in_a_scope():
    """Inside the scope it would be a constant: W's gradient through it would be lost
    silently. A value computed from data only is still a constant, as documented."""
    W = hb.Parameter("W", (3, 3), rng=np.random.default_rng(0))
    x = np.ones(3, np.float32)
    h = W @ x
    data = hb.tanh(hb.array(x))
    with hb.batching():
        with pytest.raises(hb.ScopeError, match="computed from Parameter 'W'"):
            hb.sum(h * h)
        loss = hb.sum(data * 2.0)
        np.testing.assert_allclose(loss.asnumpy(), 2 * np.tanh(1.0) * 3, rtol=1e-6)
        frozen = hb.sum(hb.array(h.asnumpy()) * 2.0)
        assert np.isfinite(frozen.asnumpy())


def test_hb_array_of_an_eager_value_computed_from_a_parameter_is_refused_eagerly_too():
    W = hb.Parameter("W", (3, 3), rng=np.random.default_rng(0))
    h = W @ np.ones(3, np.float32)
    with pytest.raises(TypeError, match="computed from Parameter 'W': as a constant .* gradient would be lost"):
        hb.array(h)
    np.testing.assert_array_equal(hb.array(h.asnumpy()).asnumpy(), h.asnumpy())
    np.testing.assert_array_equal(hb.array(hb.tanh(hb.array([1.0]))).asnumpy(), np.tanh([1.0]).astype(np.float32))


@pytest.mark.parametrize("in_scope", [False, True])
def test_a_list_holding_values_is_refused_as_a_constant(in_scope):
    """hb.array([h0, h1]) or h * [h0, h1] read the entries into a constant array: W's
    gradient through them was lost, in both modes."""
    W = hb.Parameter("W", (2, 2), rng=np.random.default_rng(0))
    x = np.ones(2, np.float32)

    def go():
        h = W @ x
        with pytest.raises(TypeError, match="separate arguments"):
            hb.array([h[0], h[1]])
        with pytest.raises(TypeError, match="separate arguments"):
            h * [h[0], h[1]]
        assert hb.array([1.0, 2.0]).shape == (2,)      # data is still a constant

    if in_scope:
        with hb.batching():
            go()
    else:
        go()


@pytest.mark.parametrize("granularity", ["op", "block"])
def test_check_numerics_names_a_nan_that_was_there_before_the_op(granularity):
    """A NaN in a parameter or a constant array was blamed on the op that read it."""
    W = hb.Parameter("W", (3, 3), init=0.5)
    data = W.data.copy()
    data[1, 1] = np.nan
    W.data = data
    dense = nn.Dense(3, 3, seed=0)
    dense.hybridize()
    dense.weight.data = np.where(np.eye(3) > 0, np.inf, dense.weight.data)
    cases = [(lambda: hb.tanh(W @ np.ones(3, np.float32)), "matmul read NaN/inf already in parameter 'W'"),
             (lambda: hb.array(np.array([1, np.nan], np.float32)) * 2.0, "read NaN/inf already in its operand 0"),
             (lambda: dense(np.ones(3, np.float32)), "read NaN/inf already in parameter 'weight'")]
    for record, message in cases:
        with pytest.raises(hb.NumericsError, match=re.escape(message)):
            with hb.batching(check_numerics=True, granularity=granularity):
                record()


class _TwoLayers(hb.HybridBlock):
    """sqrt at 0 between two layers: a finite forward, an infinite gradient."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Dense(4, 4, seed=0), nn.Dense(2, 4, seed=1)

    def forward(self, x):
        return hb.sum(self.b(hb.sqrt(self.a(x) * self.a(x))))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_check_numerics_names_a_blocks_parameter_by_its_path():
    """Both children have a 'bias': the bare name did not say which."""
    block = _TwoLayers()
    block.hybridize()
    with pytest.raises(hb.NumericsError, match=r"NaN/inf gradient for parameter 'a\.bias'"):
        with hb.batching(granularity="block", check_numerics=True):
            total = hb.add_n([block(np.zeros(4, np.float32)) for _ in range(3)])
        total.backward()
