"""Dropout's masks, train/eval modes and LayerNorm.

A mask is drawn per call, inside hybridized blocks too, from the stream hb.seed restarts; it
must not depend on how nodes are batched: one seed gives eager and batched runs (op, block
and "auto" granularity) the same masks, so the same losses and gradients. eval() makes
nn.Dropout the identity. The op's registry-wide checks (finite differences, batched ==
eager, strided operands, random DAGs) come from its entries in op_specs.py.
"""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch import nn
from helpers import central_differences

GRANULARITIES = ("op", "block", "auto")
HIDDEN = 6


class Cell(hb.HybridBlock):
    """A recurrent step with dropout and LayerNorm inside, traced whole."""

    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(HIDDEN, HIDDEN, activation="tanh", seed=1)
        self.drop = nn.Dropout(0.4)
        self.norm = nn.LayerNorm(HIDDEN)

    def forward(self, x, h):
        return self.norm(self.drop(self.dense(x + h)))


class Model(hb.Block):
    """The cell over a sequence, then dropout outside any trace and a classifier loss."""

    def __init__(self):
        super().__init__()
        self.cell = Cell()
        self.drop = nn.Dropout(0.3)
        self.out = hb.Parameter("out", (3, HIDDEN), rng=np.random.default_rng(2))

    def forward(self, seq, label):
        h = np.zeros(HIDDEN, np.float32)
        for x in seq:
            h = self.cell(x, h)
        return hb.pick_neg_log_softmax(self.out @ self.drop(h), label)


class Drop(hb.HybridBlock):
    """hb.dropout alone in a traced block."""

    def forward(self, x):
        return hb.dropout(x, 0.5)


def sequences(n=6, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.normal(size=HIDDEN).astype(np.float32) for _ in range(rng.integers(1, 5))] for _ in range(n)]


def run(model, data, granularity=None, seed=7):
    """(losses, gradients) of the minibatch, eagerly (granularity None) or batched."""
    params = model.parameters()
    for p in params:
        p.zero_grad()
    hb.seed(seed)
    if granularity is None:
        losses = [model(seq, i % 3) for i, seq in enumerate(data)]
        hb.add_n(losses).backward()
    else:
        with hb.batching(granularity=granularity):
            losses = [model(seq, i % 3) for i, seq in enumerate(data)]
            hb.add_n(losses).backward()
    return np.array([loss.item() for loss in losses]), [p.grad.copy() for p in params]


def assert_same_run(got, want, where):
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6, err_msg=where)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=where)
        np.testing.assert_array_equal(g == 0, w == 0, err_msg=f"{where}: dropped weights differ")


@pytest.fixture
def model():
    m = Model()
    m.cell.hybridize()
    return m


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_one_seed_gives_eager_and_batched_runs_the_same_masks(model, granularity):
    data = sequences()
    eager = run(model, data)
    assert_same_run(run(model, data, granularity), eager, granularity)
    assert_same_run(run(model, data, granularity), eager, f"{granularity}, again")


def test_hybridized_and_plain_blocks_draw_the_same_masks(model):
    """A block call draws its keys in the order its forward draws them."""
    data = sequences()
    hybrid = run(model, data, "block")
    model.cell.hybridize(False)
    assert_same_run(run(model, data, "op"), hybrid, "plain forward")
    assert_same_run(run(model, data), hybrid, "plain forward, eager")


def test_seeds_and_calls_give_different_masks(model):
    data = sequences()
    first, other = run(model, data, "block", seed=1), run(model, data, "block", seed=2)
    assert not np.allclose(first[0], other[0])


@pytest.mark.parametrize("granularity", [None, *GRANULARITIES])
def test_every_call_of_a_traced_block_draws_its_own_mask(granularity):
    drop = Drop()
    drop.hybridize()
    x = np.ones(64, np.float32)
    hb.seed(0)
    if granularity is None:
        outs = [drop(x).asnumpy() for _ in range(8)]
    else:
        with hb.batching(granularity=granularity) as scope:
            futures = [drop(x) for _ in range(8)]
        outs = [f.asnumpy() for f in futures]
        assert scope.stats.batches == 1
    assert len({o.tobytes() for o in outs}) == len(outs)
    assert set(np.unique(outs)) == {0.0, 2.0}


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_map_instances_draw_the_same_masks_however_their_reads_interleave(model, granularity):
    """Each instance reads its state after a data-dependent number of steps, so batched
    instances record in turns while eager mode runs them one after another."""
    pytest.importorskip("greenlet")
    data = sequences(n=5, seed=3)

    def instance(i):
        h = np.zeros(HIDDEN, np.float32)
        steps = 0
        for x in data[i]:
            h = model.cell(x, h)
            steps += 1
            if float(h[0]) > 0 or steps > 2:       # a read: the instance suspends here (not hb.sum(h):
                break                               # LayerNorm's output sums to 0 up to rounding)
        return hb.pick_neg_log_softmax(model.out @ model.drop(h), i % 3)

    def run_map(granularity):
        for p in model.parameters():
            p.zero_grad()
        hb.seed(11)
        if granularity is None:
            losses = hb.map(instance, range(len(data)))
            hb.add_n(losses).backward()
        else:
            with hb.batching(granularity=granularity):
                losses = hb.map(instance, range(len(data)))
                hb.add_n(losses).backward()
        return np.array([loss.item() for loss in losses]), [p.grad.copy() for p in model.parameters()]

    assert_same_run(run_map(granularity), run_map(None), granularity)


class MapsInside(hb.HybridBlock):
    """Dropout in an hb.map over the rows, and in a map nested in it, beside plain draws."""

    def forward(self, x):
        first = hb.dropout(x, 0.5)
        rows = hb.map(lambda k: hb.add_n(hb.map(lambda j: hb.dropout(x * float(k + j), 0.5), [1, 2])), [1, 2, 3])
        return hb.concat([first, *rows, hb.dropout(x, 0.5)])


def call_then_draw(block_type, granularity, hybridize, seed):
    """(block_type()(x), a dropout mask drawn after the call) as values, run plainly
    (granularity None) or in a scope: a hybridized block must give what its plain forward
    gives, and leave the stream where its plain forward leaves it."""
    pytest.importorskip("greenlet")
    x = np.ones(16, np.float32)
    block = block_type()
    block.hybridize(hybridize)
    hb.seed(seed)
    if granularity is None:
        return block(x).asnumpy(), hb.dropout(hb.array(x), 0.5).asnumpy()
    with hb.batching(granularity=granularity):
        y, later = block(x), hb.dropout(hb.array(x), 0.5)
    return y.asnumpy(), later.asnumpy()


@pytest.mark.parametrize("granularity", [None, *GRANULARITIES])
def test_a_traced_forward_mapping_instances_draws_as_its_plain_forward(granularity):
    """hb.map gives its instances streams of their own; a trace had made its map a plain
    loop drawing from the block's stream, so the hybridized block's masks, and every draw
    after its call, differed from the plain forward's."""
    plain, hybrid = (call_then_draw(MapsInside, granularity, h, 3) for h in (False, True))
    np.testing.assert_array_equal(hybrid[0], plain[0])
    np.testing.assert_array_equal(hybrid[1], plain[1])
    assert len({hybrid[0][16 * k:16 * (k + 1)].tobytes() for k in range(5)}) == 5


class MapsWithoutDrawing(hb.HybridBlock):
    """An hb.map with no draw inside: its split still advances the block's stream."""

    def forward(self, x):
        return hb.add_n(hb.map(lambda k: x * float(k), [1, 2]))


@pytest.mark.parametrize("granularity", [None, *GRANULARITIES])
def test_a_traced_forward_mapping_without_draws_advances_the_stream_as_its_plain_forward(granularity):
    """The plain forward's map splits the stream (one key) even where no instance draws, so
    the draws after the hybridized block's call are the plain forward's only if each call
    splits it too."""
    plain, hybrid = (call_then_draw(MapsWithoutDrawing, granularity, h, 5) for h in (False, True))
    np.testing.assert_array_equal(hybrid[0], plain[0])
    np.testing.assert_array_equal(hybrid[1], plain[1])


class CatchesAMapError(hb.HybridBlock):
    """An hb.map whose second instance raises, caught inside forward, then a draw."""

    def forward(self, x):
        def instance(k):
            if k == 2:
                raise ValueError("instance 2")
            return hb.dropout(x * float(k), 0.5)

        try:
            hb.map(instance, [1, 2, 3])
        except ValueError as e:
            rows = [r for r in e.map_results if r is not None]
        return hb.concat([*rows, hb.dropout(x, 0.5)])


@pytest.mark.parametrize("granularity", [None, *GRANULARITIES])
def test_a_traced_map_whose_instance_raises_runs_the_rest_and_draws_as_its_plain_forward(granularity):
    """The plain forward's map runs every instance and then raises the failing one's error:
    the trace's map does the same, and ends its instances' streams, so the draws inside and
    after it are the plain forward's."""
    plain, hybrid = (call_then_draw(CatchesAMapError, granularity, h, 9) for h in (False, True))
    assert hybrid[0].shape == (48,)
    np.testing.assert_array_equal(hybrid[0], plain[0])
    np.testing.assert_array_equal(hybrid[1], plain[1])


def test_eval_makes_dropout_the_identity_and_train_restores_it(model):
    data = sequences()
    trained = run(model, data, "block")
    x = hb.array(np.arange(1.0, 5.0, dtype=np.float32))
    model.eval()
    assert model.drop(x) is x
    # the same model without dropout layers
    plain = Model()
    plain.cell.hybridize()
    plain.cell.drop, plain.drop = nn.Dropout(0.0), nn.Dropout(0.0)     # p = 0: x itself
    for mine, theirs in zip(model.parameters(), plain.parameters()):
        theirs.data = mine.data
    without = run(plain, data)
    for granularity in (None, *GRANULARITIES):
        assert_same_run(run(model, data, granularity), without, f"eval, {granularity}")
    model.train()
    assert_same_run(run(model, data, "block"), trained, "train again")


def test_modes_keep_their_traces(model):
    """Switching modes between epochs traces each mode once; a child in eval() mode inside
    a parent in training mode gets its own trace."""
    data = sequences()
    run(model, data, "block")
    train_programs = dict(model.cell._programs)
    model.eval()
    run(model, data, "block")
    eval_programs = dict(model.cell._programs)
    assert set(eval_programs.values()).isdisjoint(train_programs.values())
    model.train()
    run(model, data, "block")
    assert model.cell._programs == train_programs
    model.cell.drop.eval()                  # only the cell's dropout off
    mixed = run(model, data, "block")
    assert set(model.cell._programs.values()).isdisjoint([*train_programs.values(), *eval_programs.values()])
    assert_same_run(run(model, data), mixed, "a child in eval mode, eager")


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5, float("nan")])
def test_a_rate_outside_zero_to_one_is_refused(p):
    with pytest.raises(ValueError, match=r"dropout's p must be in \[0, 1\)"):
        hb.dropout(hb.array(np.ones(3, np.float32)), p)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        nn.Dropout(p)


@pytest.mark.parametrize("p", ["0.5", True, None])
def test_a_rate_that_is_not_a_number_is_refused(p):
    with pytest.raises(TypeError, match="dropout's p must be a number"):
        hb.dropout(hb.array(np.ones(3, np.float32)), p)


def test_seed_must_be_an_integer():
    for bad in (1.5, "3", True):
        with pytest.raises(TypeError, match="seed must be an integer"):
            hb.seed(bad)


def test_dropout_refuses_integer_operands():
    with pytest.raises(hb.ShapeError, match="^dropout: .*int64"):
        hb.dropout(hb.array(np.array([1, 2, 3])), 0.5)


@pytest.mark.parametrize("in_scope", [False, True])
def test_a_zero_rate_returns_x_and_a_rate_near_one_keeps_few_scaled_up(in_scope):
    def check():
        v = hb.array(np.ones(20_000, np.float32))
        assert hb.dropout(v, 0) is v
        y = hb.dropout(v, 0.999).asnumpy()
        kept = y[y != 0]
        np.testing.assert_allclose(kept, 1 / (1 - 0.999), rtol=1e-6)
        assert 0 < kept.size < 100           # about 20

    if in_scope:
        with hb.batching():
            check()
    else:
        check()


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_masks_keep_one_minus_p_of_the_elements_independently(p):
    hb.seed(3)
    n = 200_000
    y = hb.dropout(hb.array(np.ones(n, np.float32)), p).asnumpy()
    keep = y != 0
    assert abs(keep.mean() - (1 - p)) < 4 * np.sqrt(p * (1 - p) / n)
    # neighbours are independent: P(both kept) = (1 - p)^2
    both = (keep[:-1] & keep[1:]).mean()
    assert abs(both - (1 - p) ** 2) < 4 * np.sqrt((1 - p) ** 2 * (1 - (1 - p) ** 2) / n)
    # the expected value is kept
    assert abs(y.mean() - 1) < 4 * np.sqrt(p / (1 - p) / n)


# ---------------------------------------------------------------------------------------
# LayerNorm
# ---------------------------------------------------------------------------------------
def layer_norm_np(x, gain, bias, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gain + bias


@pytest.mark.parametrize("shape", [(5,), (3, 5)])
def test_layer_norm_matches_numpy_and_its_gradients_finite_differences(shape):
    rng = np.random.default_rng(0)
    norm = nn.LayerNorm(shape[-1], eps=1e-3)
    x, norm.gain, norm.bias = (hb.Parameter(name, size, init=0.0, dtype=np.float64)     # float64 for
                               for name, size in (("x", shape), ("gain", shape[-1:]), ("bias", shape[-1:])))
    params = norm.parameters() + [x]                                           # finite differences
    for p in params:
        p.data = rng.normal(size=p.shape)
    weights = rng.normal(size=shape)
    np.testing.assert_allclose(norm(x * 1.0).asnumpy(), layer_norm_np(x.data, norm.gain.data, norm.bias.data, 1e-3),
                               rtol=1e-10)

    def loss():
        return hb.sum(norm(x * 1.0) * hb.array(weights))

    for p in params:
        p.zero_grad()
    loss().backward()
    for p in params:
        np.testing.assert_allclose(p.grad, central_differences(loss, p), rtol=1e-5, atol=1e-7, err_msg=p.name)


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_layer_norm_batched_equals_eager(granularity):
    rng = np.random.default_rng(1)
    norm = nn.LayerNorm(4)
    norm.hybridize()
    for p in norm.parameters():
        p.data = rng.normal(size=p.shape).astype(np.float32)
    xs = [rng.normal(size=(2, 4)).astype(np.float32) * rng.uniform(0.5, 3) for _ in range(5)]
    weights = [rng.normal(size=(2, 4)).astype(np.float32) for _ in xs]

    def losses():
        return [hb.sum(norm(x) * w) for x, w in zip(xs, weights)]

    def grads():
        return [p.grad.copy() for p in norm.parameters()]

    eager = losses()
    hb.add_n(eager).backward()
    want = grads()
    for p in norm.parameters():
        p.zero_grad()
    with hb.batching(granularity=granularity) as scope:
        got = losses()
        hb.add_n(got).backward()
    np.testing.assert_allclose([g.item() for g in got], [e.item() for e in eager], rtol=1e-5, atol=1e-6)
    for g, w in zip(grads(), want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert scope.stats.batches < scope.stats.nodes


def test_layer_norm_names_a_wrong_last_axis():
    with pytest.raises(hb.ShapeError, match=r"LayerNorm\(4\) .* shape \(5,\)"):
        nn.LayerNorm(4)(hb.array(np.ones(5, np.float32)))
    with pytest.raises(ValueError, match="eps must be positive"):
        nn.LayerNorm(4, eps=0)


def test_a_thread_drawing_from_a_stream_of_its_own_leaves_other_threads_draws_alone():
    """hb.map gives its instances streams of their own (random.use); in a serving worker
    thread that must not move the stream another thread draws from."""
    import threading
    from hybridbatch.ops import random as stream_keys

    def fresh():
        hb.seed(3)
        return stream_keys.split(1)[0]

    fresh()
    process_keys = stream_keys.next_keys(3)
    stream_keys.use(fresh())
    own_keys = stream_keys.next_keys(2)
    stream_keys.use(None)
    own = fresh()
    switched, drawn, seen = threading.Event(), threading.Event(), []

    def worker():
        stream_keys.use(own)
        switched.set()
        drawn.wait(10)
        seen.append(stream_keys.next_keys(2))
        stream_keys.use(None)

    thread = threading.Thread(target=worker)
    thread.start()
    switched.wait(10)
    here = stream_keys.next_keys(3)     # while the worker holds its own stream
    drawn.set()
    thread.join(10)
    assert here == process_keys and seen == [own_keys]
