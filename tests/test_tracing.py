"""Tracing semantics: a hybridized block computes what its un-hybridized forward computes,
or refuses at the call."""
import contextlib

import numpy as np
import pytest

import hybridbatch as hb

MODES = ("eager", "op", "block", "auto")


def _call(mode, fn):
    """fn() as values, eagerly or recorded in a scope of granularity `mode`."""
    if mode == "eager":
        return [o.asnumpy() for o in fn()]
    with hb.batching(granularity=mode):
        outs = fn()
    return [o.asnumpy() for o in outs]


class Flags(hb.HybridBlock):
    """Tests its str and None arguments as Python values, as flags."""

    def forward(self, x, mode, extra):
        y = hb.tanh(x) + 1.0 if mode == "shift" else hb.tanh(x)
        return y if extra is None else y * extra


@pytest.mark.parametrize("mode", MODES)
def test_str_and_none_arguments_are_flags_as_in_forward(mode):
    block = Flags()
    x = np.linspace(-1, 1, 3).astype(np.float32)
    args = [(x, "shift", None), (x, "keep", None), (x, "shift", np.float32(3.0)), (x, "keep", None)]
    want = [block(*a).asnumpy() for a in args]
    block.hybridize()
    got = _call(mode, lambda: [block(*a) for a in args])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


class Row(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.E = hb.Parameter("E", (4, 3), rng=np.random.default_rng(0))

    def forward(self, i):
        return hb.lookup(self.E, i)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("row", [True, np.False_])
def test_a_bool_row_is_refused_as_without_hybridize(mode, row):
    block = Row()
    with pytest.raises(TypeError, match="bool"):
        block(row)
    block.hybridize()
    with pytest.raises(TypeError, match="bool"):
        _call(mode, lambda: [block(row)])


class SumOfList(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.W = hb.Parameter("W", (3, 3), rng=np.random.default_rng(0))

    def forward(self, hs):
        return hb.sum(hb.tanh(self.W @ hb.add_n(list(hs))))


@pytest.mark.parametrize("mode", MODES)
def test_a_list_of_recorded_values_is_refused_not_read_as_a_constant(mode):
    """np.asarray read the values (a flush mid-recording) into a constant: the loss was right
    but no gradient reached the parameters that computed them."""
    block = SumOfList()
    block.hybridize()
    x = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="separate arguments"):
        _call(mode, lambda: [block([block.W @ x, block.W @ x])])
    assert _call(mode, lambda: [block([x, [1.0, 2.0, 3.0]])])[0].shape == ()   # data is a constant


class NoOutputs(hb.HybridBlock):
    def forward(self, x):
        return ()


@pytest.mark.parametrize("mode", MODES)
def test_a_forward_returning_nothing_is_refused_at_the_call(mode):
    """It raised IndexError from inside the composite op's shape inference."""
    block = NoOutputs()
    block.hybridize()
    with pytest.raises(hb.HybridBatchError, match="at least one value"):
        _call(mode, lambda: [block(np.ones(3, np.float32))])


class InitialState(hb.HybridBlock):
    """Returns a learned value as it is: an RNN's initial state."""

    def __init__(self):
        super().__init__()
        self.h0 = hb.Parameter("h0", (3,), init="normal", rng=np.random.default_rng(4))

    def forward(self, x, both):
        return (self.h0, hb.tanh(x)) if both == "both" else self.h0


@pytest.mark.parametrize("mode", MODES)
def test_a_forward_returning_a_parameter_outputs_its_value_and_its_gradient_reaches_it(mode):
    """It was refused: "forward must return values computed with hb ops (got Parameter)"."""
    block = InitialState()
    xs = [np.full(3, k, np.float32) for k in range(4)]

    def run():
        """The first call's outputs and h0's gradient of a loss over every call."""
        block.h0.zero_grad()
        with hb.batching(granularity=mode) if mode != "eager" else contextlib.nullcontext():
            outs = [block(x, "both") + (block(x, None),) for x in xs]
            total = hb.add_n([hb.sum(h0 * t * t) + hb.sum(h * float(k)) for k, (h0, t, h) in enumerate(outs)])
        total.backward()
        return [np.array(o) for o in outs[0]], block.h0.grad.copy()    # not hybridized: h0 itself

    plain_values, plain_grad = run()
    block.hybridize()
    values, grad = run()
    for v, w in zip(values, plain_values):
        np.testing.assert_allclose(v, w, rtol=1e-6)
    np.testing.assert_array_equal(values[0], block.h0.data)
    expected = np.sum([np.tanh(x) ** 2 + k for k, x in enumerate(xs)], axis=0)
    np.testing.assert_allclose(grad, plain_grad, rtol=1e-6)
    np.testing.assert_allclose(grad, expected, rtol=1e-5)
    with hb.batching(granularity="block") if mode != "eager" else contextlib.nullcontext():
        kept = block(xs[0], None)
    before = kept.asnumpy()
    block.h0.data = before + 1.0                 # an update does not reach a value read before it
    np.testing.assert_array_equal(kept.asnumpy(), before)


class ReadsOutside(hb.HybridBlock):
    """Reads a value computed outside forward (a closure would do the same)."""

    def __init__(self, box):
        super().__init__()
        object.__setattr__(self, "box", box)     # a mutable holder, as a closure's cell

    def forward(self, x):
        return hb.sum(x * self.box[0])


def test_a_computed_value_read_from_outside_forward_is_refused():
    """Eagerly, the trace read a Tensor computed from a Parameter as a constant: the
    un-hybridized block's gradient into the Parameter was silently lost."""
    P = hb.Parameter("P", (3,), rng=np.random.default_rng(0))
    box = [hb.tanh(P)]
    block = ReadsOutside(box)
    x = np.arange(3, dtype=np.float32)
    block(x).backward()
    assert np.abs(P.grad).sum() > 0
    block.hybridize()
    with pytest.raises(hb.ScopeError, match="as an argument"):
        block(x)


@pytest.mark.parametrize("mode", ["op", "block"])
def test_a_recorded_value_read_from_outside_forward_says_to_pass_it(mode):
    """The refusal advised .asnumpy(), which would bake the value and lose its gradient."""
    block = ReadsOutside([None])
    block.hybridize()
    with hb.batching(granularity=mode):
        block.box[0] = hb.tanh(hb.array(np.ones(3, np.float32)))
        with pytest.raises(hb.ScopeError, match="as an argument"):
            block(np.ones(3, np.float32))


class ScaleByInt(hb.HybridBlock):
    def forward(self, x, n):
        return x * n


@pytest.mark.parametrize("mode", MODES)
def test_an_integer_argument_used_as_a_value_says_why(mode):
    """It was read as an object-dtype constant: a ShapeError about dtype object."""
    block = ScaleByInt()
    block.hybridize()
    with pytest.raises(TypeError, match="op index"):
        _call(mode, lambda: [block(np.ones(3, np.float32), 2)])


@pytest.mark.parametrize("mode", MODES)
def test_a_shape_error_inside_a_cell_names_the_block_and_its_arguments(mode):
    """The op alone (an affine of shapes (64, 26) and (24,)) does not say whose it is."""
    cell = hb.nn.LSTMCell(16, 10)
    cell.hybridize()
    with pytest.raises(hb.ShapeError, match="inner dimensions 26 and 24 differ") as raised:
        _call(mode, lambda: list(cell(np.zeros(8, np.float32), np.zeros(16, np.float32), np.zeros(16, np.float32))))
    assert "while tracing LSTMCell.forward for arguments ((8,) float32, (16,) float32, (16,) float32)" \
        in raised.value.__notes__


class OptionalProjection(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.proj = hb.nn.Dense(3, 3, seed=0)

    def forward(self, x):
        return self.proj(x) if hasattr(self, "proj") else hb.tanh(x)


def test_deleting_an_attribute_drops_the_traces_and_its_registration():
    """del kept the traces: the hybridized block still applied the deleted child."""
    block = OptionalProjection()
    block.hybridize()
    x = np.linspace(-1, 1, 3).astype(np.float32)
    block(x)
    del block.proj
    np.testing.assert_allclose(block(x).asnumpy(), np.tanh(x), rtol=1e-6)
    assert block.parameters() == [] and block.children() == {}


class _Gain(hb.HybridBlock):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.w = hb.Parameter("w", (3,), init=1.0)

    def forward(self, x):
        return self.w * x * self.config.gain


class _Config(hb.Block):
    def __init__(self, gain):
        super().__init__()
        self.gain = gain


def test_a_block_made_after_the_last_trace_keeps_the_traces():
    """Building any block (a model made while another trained, in any thread) dropped every
    trace in the process: a scope's calls before and after it got two signatures and ran
    apart. No trace can have read a block made after it; one made before still counts."""
    config = _Config(2.0)
    block = _Gain(config)
    block.hybridize()
    x = np.ones(3, np.float32)
    with hb.batching(granularity="block") as scope:
        ys = [block(x)]
        hb.nn.Dense(3, 3)                   # made after the trace: nobody read it
        ys.append(block(x))
    assert scope.stats.batches == 1 and [y.asnumpy().tolist() for y in ys] == [[2.0] * 3] * 2
    config.gain = 5.0                       # read by the trace: it is redone
    np.testing.assert_allclose(block(x).asnumpy(), [5.0] * 3)
    config.__init__(7.0)                    # made again, but read by a trace already
    np.testing.assert_allclose(block(x).asnumpy(), [7.0] * 3)
