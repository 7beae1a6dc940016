"""A batch of block calls that all read an embedding lookup at one input runs the lookup inside
the block (runtime/plan.py, Op.with_input_looked_up), so the block's per-word part runs once
per distinct word: values and gradients equal eager mode and the unfolded run, whole or
partial backward, with other readers of the lookups, integer arguments and several outputs."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import hybridbatch as hb
from hybridbatch import nn
from hybridbatch.errors import NumericsError
from hybridbatch.record import signature

WORDS = [3, 1, 3, 0, 7, 1, 3, 3, 9, 0, 1, 7] * 4       # 48 calls, 5 distinct words


class Cell(hb.HybridBlock):
    """A Tree-LSTM leaf in small, written as the library's cells are: it takes the vector x
    (looked up outside), and a state h it gates with."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.w = hb.Parameter("w", (12, 4), init="uniform", rng=rng)
        self.b = hb.Parameter("b", (12,), init="uniform", rng=rng)

    def forward(self, h, x, label=None):
        i, o, u = hb.split(hb.affine(self.w, x, self.b), 3)
        c = hb.sigmoid(i) * hb.tanh(u)
        out = hb.sigmoid(o) * hb.tanh(c) + h
        if label is None:
            return out, c
        return out, x, hb.pick_neg_log_softmax(c[0:3], label)


class Model:
    """Embedding outside the cell, a classifier block and a loss op per call, one add_n."""

    def __init__(self):
        self.emb = nn.Embedding(10, 4, seed=2)
        self.cell = Cell()
        self.out = nn.Dense(3, 4, seed=1)
        self.cell.hybridize()
        self.out.hybridize()

    def params(self):
        return [self.emb.weight, self.cell.w, self.cell.b, self.out.weight, self.out.bias]

    def run(self, words, reached=None, labels=False, also_read=(), computed=()):
        """(loss, per-call outputs): cell(h, emb(word)) per word; the calls in `computed` get
        tanh of their lookup instead; the lookups of `also_read` are read by a sum too."""
        h = hb.array(np.linspace(-1, 1, 4).astype(np.float32))
        outs, losses = [], []
        for k, w in enumerate(words):
            x = self.emb(w)
            if k in computed:
                x = hb.tanh(x)
            if labels:
                y, xo, loss = self.cell(h, x, k % 3)
                outs.append((y, xo))
                losses.append(loss)
            else:
                y, c = self.cell(h, x)
                outs.append((y, c))
            losses.append(hb.pick_neg_log_softmax(self.out(y), w % 3))
            if k in also_read:
                losses.append(hb.sum(x * float(k + 1)))
        keep = range(len(losses)) if reached is None else [i for i in reached if i < len(losses)] or [0]
        return hb.add_n([losses[i] for i in keep]), outs


def _run(mode, fold=True, **kwargs):
    """(loss, every output, gradients, plans) of Model().run(WORDS or words=...) in `mode`."""
    model = Model()
    for p in model.params():
        p.zero_grad()
    words = kwargs.pop("words", WORDS)
    plans = []
    with hb.settings(distinct_rows=fold):
        if mode == "eager":
            loss, outs = model.run(words, **kwargs)
        else:
            with hb.batching(granularity=mode, policy="critical-path") as scope:
                loss, outs = model.run(words, **kwargs)
            plans = scope.plans
        loss.backward()
        values = [np.stack([o[j].asnumpy() for o in outs]) for j in range(2)]
    return loss.item(), values, [p.grad.copy() for p in model.params()], plans


def _assert_same(a, b):
    assert a[0] == pytest.approx(b[0], rel=1e-5)
    for va, vb in zip(a[1], b[1]):
        np.testing.assert_allclose(va, vb, rtol=1e-5, atol=1e-6)
    for ga, gb in zip(a[2], b[2]):
        np.testing.assert_allclose(ga, gb, rtol=1e-4, atol=1e-6)


def _folded(plans):
    return [signature.SIGS[p.run_sig[b]].op.name for p in plans for b in p.folded]


@pytest.mark.parametrize("labels", [False, True])
def test_lookups_read_by_a_cell_run_inside_it_once_per_word(splits, labels):
    folded = _run("block", labels=labels)
    assert _folded(folded[3]) == ["block:Cell"]
    assert splits == [(5, 48)]
    _assert_same(folded, _run("eager", labels=labels))
    unfolded = _run("block", fold=False, labels=labels)
    assert _folded(unfolded[3]) == []
    _assert_same(folded, unfolded)


def test_a_lookup_other_ops_read_too_still_gets_their_gradient():
    also = {0, 3, 4, 9}
    folded = _run("block", also_read=also)
    assert _folded(folded[3]) == ["block:Cell"]
    _assert_same(folded, _run("eager", also_read=also))


def test_backward_reaching_some_calls():
    reached = [0, 1, 2, 5, 11, 40]
    folded = _run("block", reached=reached)
    _assert_same(folded, _run("eager", reached=reached))
    emb_grad = folded[2][0]
    assert not emb_grad[[0, 9]].any() and np.abs(emb_grad[[3, 1, 7]]).min() > 0      # the words reached


def test_a_batch_with_one_computed_input_gathers_every_input():
    folded = _run("block", computed={5})
    assert _folded(folded[3]) == []
    _assert_same(folded, _run("eager", computed={5}))


def test_op_granularity_is_unchanged():
    _assert_same(_run("op"), _run("eager"))


def test_a_lookup_of_an_earlier_flush_is_read_as_a_value():
    model = Model()
    with hb.batching(granularity="block") as scope:
        xs = [model.emb(w) for w in WORDS]
        xs[0].asnumpy()                 # the lookups flush now
        h = hb.array(np.zeros(4, np.float32))
        ys = [model.cell(h, x)[0] for x in xs]
        hb.add_n([hb.sum(y) for y in ys]).backward()
    assert _folded(scope.plans) == []
    got = model.emb.weight.grad.copy()
    model.emb.weight.zero_grad()
    hb.add_n([hb.sum(model.cell(np.zeros(4, np.float32), model.emb(w))[0]) for w in WORDS]).backward()
    np.testing.assert_allclose(got, model.emb.weight.grad, rtol=1e-4, atol=1e-6)


def test_a_folded_batch_counts_as_its_recorded_signature_for_auto_granularity():
    """Two small batches of one block, one folded: one signature as recorded, so "auto" keeps
    the block whole (two would inline it)."""
    model = Model()
    h = hb.array(np.zeros(4, np.float32))
    with hb.batching(granularity="auto", policy="agenda") as scope:
        y, _ = model.cell(h, model.emb(1))
        model.cell(y, hb.tanh(model.emb(2)))     # reads the first: a batch of its own
    (plan,) = scope.plans
    assert len(plan.folded) == 1
    assert len({signature.SIGS[plan.run_sig[b]].id for b in range(plan.n_batches)
                if signature.SIGS[plan.run_sig[b]].op.name == "block:Cell"}) == 2
    assert not model.cell.auto_inline


def test_the_runtime_asks_the_op():
    """A block whose per-word part holds no product is not folded (the plan would only move
    the gather), nor one already keyed on an integer of its own."""
    class Scale(hb.HybridBlock):
        def forward(self, h, x):
            return hb.tanh(x) * h

    class Keyed(hb.HybridBlock):
        def __init__(self):
            super().__init__()
            self.emb = hb.Parameter("emb2", (10, 4), init="uniform", rng=np.random.default_rng(1))
            self.w = hb.Parameter("w2", (4, 4), init="uniform", rng=np.random.default_rng(2))

        def forward(self, x, word):
            return self.w @ (hb.lookup(self.emb, word) + x)

    model = Model()
    for block, call in ((Scale(), lambda b, x: b(hb.array(np.ones(4, np.float32)), x)),
                        (Keyed(), lambda b, x: b(x, 3))):
        block.hybridize()
        with hb.batching(granularity="block") as scope:
            outs = [call(block, model.emb(w)) for w in WORDS]
            outs[0].asnumpy()
        assert _folded(scope.plans) == []


def test_gather_specs_skip_the_positions_looked_up_inside():
    folded = _run("block")
    (plan,) = folded[3]
    (b,) = plan.folded
    gathers = plan.gathers
    assert gathers.first[b + 1] - gathers.first[b] == 1      # h only: x is looked up inside
    assert plan.inside[plan.batch_nodes(b)].tolist() == [2] * plan.sizes[b]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_words_reads_and_reach_match_eager(data):
    n = data.draw(st.integers(1, 40), label="calls")
    words = data.draw(st.lists(st.integers(0, 9), min_size=n, max_size=n), label="words")
    reached = data.draw(st.lists(st.integers(0, 2 * n), min_size=1, max_size=n, unique=True), label="reached")
    also = set(data.draw(st.lists(st.integers(0, n - 1), max_size=3), label="also read"))
    labels = data.draw(st.booleans(), label="labels")
    kwargs = dict(words=words, reached=reached, also_read=also, labels=labels)
    _assert_same(_run("block", **kwargs), _run("eager", **kwargs))


def test_check_numerics_names_the_same_node_and_line_folded_or_not():
    def message(fold):
        model = Model()
        model.cell.w.data[1, 2] = np.nan        # the gates' product: NaN inside the cell
        with hb.settings(distinct_rows=fold), pytest.raises(NumericsError) as err:
            with hb.batching(granularity="block", check_numerics=True) as scope:
                model.run(WORDS)
        return str(err.value), [scope.failed_plan]      # the flush that raised

    folded, plans = message(True)
    assert _folded(plans) == ["block:Cell"]
    assert folded == message(False)[0]
    assert "inside the block: first at affine" in folded


class Scaled(hb.HybridBlock):
    """(W x) / h: the looked-up x first. With h tiny the value is finite but h's gradient,
    -(W x) / h^2, overflows."""

    def __init__(self):
        super().__init__()
        self.w = hb.Parameter("w3", (4, 4), init="uniform", rng=np.random.default_rng(3))

    def forward(self, x, h):
        return (self.w @ x) / h


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")      # the inf is the point
def test_a_bad_gradient_names_its_operand_as_recorded():
    def message(fold):
        model, block = Model(), Scaled()
        block.hybridize()
        with hb.settings(distinct_rows=fold), pytest.raises(NumericsError) as err:
            with hb.batching(granularity="block", check_numerics=True) as scope:
                h = hb.array(np.full(4, 1e-23, np.float32)) * 1.0      # computed: it takes a gradient
                hb.add_n([hb.sum(block(model.emb(w), h)) for w in WORDS]).backward()
        return str(err.value), scope.plans

    folded, plans = message(True)
    assert _folded(plans) == ["block:Scaled"]
    assert folded == message(False)[0]
    assert "gradient for operand 1 " in folded
