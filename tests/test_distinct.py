"""A block's integer-keyed part runs once per distinct key (hybridbatch/distinct.py): values
and gradients equal the per-row run and eager mode, whole or partial backward, fused or not."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import hybridbatch as hb
from hybridbatch.hybrid import distinct
from hybridbatch import nn
from hybridbatch.errors import NumericsError

WORDS = [3, 1, 3, 0, 7, 1, 3, 3, 9, 0, 1, 7] * 4       # 48 calls, 5 distinct words


class Leaf(hb.HybridBlock):
    """W1's leaf in small: the word's embedding through a layer (keyed by the word), then a
    loss on the call's label (not keyed)."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.emb = hb.Parameter("emb", (10, 4), init="uniform", rng=rng)
        self.w = hb.Parameter("w", (6, 4), init="uniform", rng=rng)
        self.b = hb.Parameter("b", (6,), init="uniform", rng=rng)
        self.out = nn.Dense(3, 6, seed=1)

    def forward(self, word, label):
        h = hb.tanh(hb.affine(self.w, hb.lookup(self.emb, word), self.b))
        return h, hb.pick_neg_log_softmax(self.out(h), label)


def _run(mode, reached=None, shared=True, fused=True, words=WORDS):
    """(loss, per-call h, gradients) of the calls on `words`; reached: the calls the loss reads."""
    block = Leaf()
    block.hybridize()
    params = list(block.collect_params().values())
    reached = range(len(words)) if reached is None else reached
    with hb.settings(distinct_rows=shared, fusion=fused):
        if mode == "eager":
            outs = [block(w, i % 3) for i, w in enumerate(words)]
            loss = hb.add_n([outs[i][1] + hb.sum(outs[i][0] * (1.0 + i)) for i in reached])
        else:
            with hb.batching(granularity="block"):
                outs = [block(w, i % 3) for i, w in enumerate(words)]
                loss = hb.add_n([outs[i][1] + hb.sum(outs[i][0] * (1.0 + i)) for i in reached])
        loss.backward()
        hs = np.stack([h.asnumpy() for h, _ in outs])
    return loss.item(), hs, [p.grad.copy() for p in params]


def _assert_same(a, b):
    assert a[0] == pytest.approx(b[0], rel=1e-5)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-5, atol=1e-6)
    for ga, gb in zip(a[2], b[2]):
        np.testing.assert_allclose(ga, gb, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("fused", [True, False])
def test_shared_rows_give_the_per_row_values_and_gradients(splits, fused):
    shared = _run("block", fused=fused)
    assert splits == [(5, 48)]
    _assert_same(shared, _run("block", shared=False, fused=fused))
    _assert_same(shared, _run("eager"))


def test_negative_words_count_from_the_end_and_share_rows_with_their_positive_ones(splits):
    """hb.lookup of a block's negative int argument raised "out of range"."""
    negative = [w - 10 if k % 2 else w for k, w in enumerate(WORDS)]
    shared = _run("block", words=negative)
    assert splits == [(5, 48)]             # -7 and 3 are one key, as rows of the 10-row table
    _assert_same(shared, _run("block", words=WORDS))
    _assert_same(shared, _run("block", shared=False, words=negative))
    _assert_same(shared, _run("eager", words=negative))


def test_backward_reaching_some_calls_keeps_only_their_keys(splits):
    reached = [0, 1, 2, 5, 6]      # words 3 and 1 only: the other keys get no gradient
    shared = _run("block", reached)
    assert splits == [(5, 48)]
    _assert_same(shared, _run("block", reached, shared=False))
    _assert_same(shared, _run("eager", reached))
    emb_grad = shared[2][0]
    assert np.abs(emb_grad[[3, 1]]).min() > 0 and not emb_grad[[0, 7, 9]].any()


def test_the_keyed_part_is_the_words_layers_not_the_labels_loss():
    block = Leaf()
    block.hybridize()
    with hb.batching(granularity="block"):
        block(3, 1)
    program = next(iter(block._programs.values()))
    part = program.op.keyed_part(program.op.units(np))
    assert part.column == 0
    # the classifier and its loss are one folded step, which reads the label: not keyed
    assert [u[1].op.name for u in part.rest] == ["affine_pick_neg_log_softmax"]
    assert len(part.boundary) == 1        # h: an output, and the folded loss reads it


def test_few_rows_or_mostly_distinct_keys_run_every_row():
    part = distinct.KeyedPart([], [], set(), (), 0)
    few = hb.settings.distinct_min_rows - 1
    assert part.split(np.zeros(few, np.int64), few) is None
    assert part.split(np.arange(40), 40) is None
    first, inverse = part.split(np.array([5, 2, 5, 5] * 8), 32)
    assert list(first) == [0, 1] and list(inverse[:4]) == [0, 1, 0, 0]     # keys in first-row order


def test_a_part_without_a_product_is_not_split():
    class Embed(hb.HybridBlock):
        def __init__(self):
            super().__init__()
            self.emb = hb.Parameter("emb", (10, 4), init="uniform", rng=np.random.default_rng(0))

        def forward(self, word):
            return hb.tanh(hb.lookup(self.emb, word))

    block = Embed()
    block.hybridize()
    with hb.batching(granularity="block"):
        block(1)
    program = next(iter(block._programs.values()))
    assert program.op.keyed_part(program.op.units(np)) is None


def test_nan_from_a_shared_row_names_its_first_call():
    def message(shared):
        block = Leaf()
        block.hybridize()
        block.emb.data[7] = np.nan          # word 7: calls 4, 11, ...
        with hb.settings(distinct_rows=shared), pytest.raises(NumericsError) as err:
            with hb.batching(granularity="block", check_numerics=True):
                [block(w, i % 3) for i, w in enumerate(WORDS)]
        return str(err.value)

    assert message(True) == message(False)
    assert "node 8 " in message(True)       # call 4's node: two nodes (h, loss) per call


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_keys_and_reached_calls_match_every_row_run(data):
    """Any repetition pattern (all one word, all distinct, around distinct_min_rows and distinct_max_share)
    and any reached subset: shared rows give what running every row gives."""
    n = data.draw(st.integers(1, 40), label="calls")
    words = data.draw(st.lists(st.integers(0, 9), min_size=n, max_size=n), label="words")
    reached = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True), label="reached")
    _assert_same(_run("block", reached, words=words), _run("block", reached, shared=False, words=words))


class Reciprocal(hb.HybridBlock):
    """1 / (W e_word): a word whose embedding is tiny gives a finite value but an inf
    gradient (d/dv 1/v = -1/v^2 overflows float32)."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(0)
        self.emb = hb.Parameter("emb", (10, 4), init="uniform", rng=rng)
        self.w = hb.Parameter("w", (4, 4), init="uniform", rng=rng)

    def forward(self, word):
        return 1.0 / (self.w @ hb.lookup(self.emb, word))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                            "ignore:invalid value encountered:RuntimeWarning")     # the inf is the point
@pytest.mark.parametrize("bad, node", [([7], 4), ([0, 1], 1)])    # word 1 at call 1, word 0 at call 3
@pytest.mark.parametrize("reached", [None, [0, 1, 2, 3, 4, 6]])
def test_inf_gradient_from_a_shared_row_names_its_first_call(bad, node, reached):
    """check_numerics in backward names the first call whose gradient is NaN/inf, as when
    every row runs: the keyed part's gradients have one row per key, not per call."""
    def message(shared):
        block = Reciprocal()
        block.hybridize()
        block.emb.data[bad] = 1e-20
        with hb.settings(distinct_rows=shared), pytest.raises(NumericsError) as err:
            with hb.batching(granularity="block", check_numerics=True):
                outs = [block(w) for w in WORDS]
                hb.add_n([hb.sum(outs[i]) for i in (reached or range(len(WORDS)))]).backward()
        return str(err.value)

    assert message(True) == message(False)
    assert f"node {node} " in message(True)


@pytest.mark.parametrize("override, shared", [
    ({}, [(5, 48)]),
    ({"distinct_rows": False}, []),
    ({"distinct_min_rows": 49}, []),          # 48 rows: too few
    ({"distinct_max_share": 0.1}, []),        # 5 of 48 rows distinct: more than a tenth
    ({"distinct_min_rows": 48, "distinct_max_share": 0.11}, [(5, 48)]),
])
def test_distinct_row_settings_decide_the_split(splits, override, shared):
    block = Leaf()
    block.hybridize()
    with hb.settings(**override), hb.batching(granularity="block"):
        hs = [block(w, w % 3)[0] for w in WORDS]
    assert splits == shared
    eager = [block(w, w % 3)[0].asnumpy() for w in WORDS]
    np.testing.assert_allclose([h.asnumpy() for h in hs], eager, rtol=1e-6)
