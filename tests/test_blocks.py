"""Blocks: registration, save/load, and block / op / eager granularity agreeing exactly."""
import contextlib
import warnings

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hybridbatch as hb
from hybridbatch import nn
from helpers import _LogOfRelu, recorded


class Highway(hb.HybridBlock):
    """A user-defined hybrid block with two outputs and a constant inside forward."""

    def __init__(self, n):
        super().__init__()
        self.W = hb.Parameter("W", (n, n), rng=np.random.default_rng(3))
        self.T = hb.Parameter("T", (n, n), rng=np.random.default_rng(4))

    def forward(self, x):
        gate = hb.sigmoid(self.T @ x + np.full(x.shape, -1.0, np.float32))
        return gate * hb.relu(self.W @ x) + (1.0 - gate) * x, hb.sum(gate)


def _params(*blocks):
    return [p for b in blocks for p in b.collect_params().values()]


def _run(mode, build, params):
    """Loss value, every output value and parameter grads under one mode."""
    for p in params:
        p.zero_grad()
    if mode == "eager":
        loss, outs = build()
    else:
        with hb.batching(granularity=mode, policy="agenda"):
            loss, outs = build()
    loss.backward()
    return loss.asnumpy(), [o.asnumpy() for o in outs], [p.grad.copy() for p in params]


def _assert_modes_agree(build, params):
    ref = _run("eager", build, params)
    for mode in ("block", "op"):
        got = _run(mode, build, params)
        # the loss sums O(1) values that can cancel: float32 rounding is absolute there
        np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-5)
        for a, b in zip(got[1], ref[1]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        for a, b in zip(got[2], ref[2]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _vecs(rng, n, size):
    return [rng.standard_normal(size).astype(np.float32) for _ in range(n)]


seeds = st.integers(0, 2 ** 31 - 1)


@settings(max_examples=8, deadline=None)
@given(seed=seeds, hidden=st.sampled_from([3, 8]))
def test_lstm_gru_dense_sequential_agree_across_granularities(seed, hidden):
    rng = np.random.default_rng(seed)
    lstm, gru = nn.LSTMCell(hidden, 4, seed=1), nn.GRUCell(hidden, 4, seed=2)
    head = nn.Sequential(nn.Dense(6, hidden, activation="relu", seed=3), nn.Dense(3, 6, seed=4))
    for b in (lstm, gru, head):
        b.hybridize()
    seqs = [_vecs(rng, int(n), 4) for n in rng.integers(1, 6, size=4)]
    labels = rng.integers(0, 3, size=4)

    def build():
        outs, losses = [], []
        for xs, y in zip(seqs, labels):
            h = c = g = np.zeros(hidden, np.float32)
            for x in xs:
                h, c = lstm(x, h, c)
                g = gru(x, g)
            outs += [h, c, g]
            losses.append(hb.pick_neg_log_softmax(head(h + g), int(y)))
        return hb.add_n(losses), outs

    _assert_modes_agree(build, _params(lstm, gru, head))


def _random_tree(rng, n_leaves):
    nodes = [("leaf", int(rng.integers(0, 10))) for _ in range(n_leaves)]
    while len(nodes) > 1:
        i = int(rng.integers(0, len(nodes) - 1))
        nodes[i:i + 2] = [("node", nodes[i], nodes[i + 1])]
    return nodes[0]


@settings(max_examples=6, deadline=None)
@given(seed=seeds)
def test_tree_cells_agree_across_granularities(seed):
    rng = np.random.default_rng(seed)
    emb = nn.Embedding(10, 6, seed=0)
    tree_cell, child_sum, head = nn.TreeLSTMCell(5, 6, seed=1), nn.ChildSumTreeLSTMCell(5, 6, seed=2), nn.Dense(2, 5)
    for b in (tree_cell, child_sum, head):
        b.hybridize()
    trees = [_random_tree(rng, int(rng.integers(1, 7))) for _ in range(4)]

    def binary(t, outs):
        if t[0] == "leaf":
            h, c = tree_cell(emb(t[1]))
        else:
            h, c = tree_cell(binary(t[1], outs), binary(t[2], outs))
        outs.append(h)
        return h, c

    def child(t, outs):
        if t[0] == "leaf":
            h, c = child_sum(emb(t[1]))
        else:
            states = [s for sub in t[1:] for s in child(sub, outs)]
            h, c = child_sum(np.ones(6, np.float32), *states)
        outs.append(c)
        return h, c

    def build():
        outs, losses = [], []
        for t in trees:
            losses.append(hb.pick_neg_log_softmax(head(binary(t, outs)[0] + child(t, outs)[0]), 1))
        return hb.add_n(losses), outs

    _assert_modes_agree(build, _params(emb, tree_cell, child_sum, head))


@settings(max_examples=6, deadline=None)
@given(seed=seeds)
def test_user_hybrid_block_with_two_outputs_agrees(seed):
    rng = np.random.default_rng(seed)
    block = Highway(4)
    block.hybridize()
    xs = _vecs(rng, 5, 4)

    def build():
        outs = [o for x in xs for o in block(block(x)[0])]
        return hb.add_n([hb.sum(o) for o in outs]), outs

    _assert_modes_agree(build, _params(block))


class _ListOut(hb.HybridBlock):
    def forward(self, x):
        return [x * 2.0, x + 1.0]


@pytest.mark.parametrize("granularity", ["eager", "block", "op", "auto"])
def test_a_forward_returning_a_list_returns_a_list_hybridized(granularity):
    """A hybridized call returned a tuple where the un-hybridized forward returned a list
    (`outs.append(...)` then failed only once hybridize() was called)."""
    x = np.arange(3, dtype=np.float32)
    block = _ListOut()
    block.hybridize()
    if granularity == "eager":
        outs = block(hb.array(x))
    else:
        with hb.batching(granularity=granularity):
            outs = block(hb.array(x))
    assert type(outs) is list and len(outs) == 2
    np.testing.assert_array_equal(outs[0].asnumpy(), x * 2)
    np.testing.assert_array_equal(outs[1].asnumpy(), x + 1)


def test_block_granularity_records_one_node_per_call():
    cell = nn.LSTMCell(4, 3)
    cell.hybridize()
    calls = 0
    original = type(cell).forward

    def counting(self, *args):
        nonlocal calls
        calls += 1
        return original(self, *args)

    type(cell).forward = counting
    try:
        with hb.batching(granularity="block") as scope:
            h = c = np.zeros(4, np.float32)
            for _ in range(10):
                h, c = cell(np.ones(3, np.float32), h, c)
    finally:
        type(cell).forward = original
    assert calls == 1                        # traced once, replayed afterwards
    assert scope.stats.nodes == 10           # one executed node per call (+ free extra outputs)
    assert scope.stats.batches == 10


def test_registration_collect_params_repr_and_save_load(tmp_path):
    model = nn.Sequential(nn.Dense(4, 3, activation="tanh"), nn.Dense(2, 4))
    names = list(model.collect_params().keys())
    assert names == ["0.weight", "0.bias", "1.weight", "1.bias"]
    assert "Dense" in repr(model) and "(0)" in repr(model)
    model.save_parameters(tmp_path / "m.npz")
    other = nn.Sequential(nn.Dense(4, 3, activation="tanh"), nn.Dense(2, 4))
    other.load_parameters(tmp_path / "m.npz")
    for p, q in zip(model.collect_params().values(), other.collect_params().values()):
        np.testing.assert_array_equal(p.data, q.data)
    with pytest.raises(ValueError, match="in the file but not in this dict"):
        nn.Dense(4, 3).load_parameters(tmp_path / "m.npz")


def test_save_load_parameters_round_trip_any_file_name(tmp_path):
    """save_parameters writes exactly the path given (np.savez used to append .npz, so
    loading from the same path failed), and a failed load changes nothing."""
    model = nn.Sequential(nn.Dense(4, 3), nn.Dense(2, 4))
    path = tmp_path / "model.params"
    model.save_parameters(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.params"]
    other = nn.Sequential(nn.Dense(4, 3), nn.Dense(2, 4))
    other.load_parameters(path)
    for p, q in zip(model.parameters(), other.parameters()):
        np.testing.assert_array_equal(p.data, q.data)

    wrong = nn.Sequential(nn.Dense(4, 3), nn.Dense(3, 4))      # 1.* shapes differ
    before = [p.data.copy() for p in wrong.parameters()]
    with pytest.raises(ValueError, match="1.weight"):
        wrong.load_parameters(path)
    for p, b in zip(wrong.parameters(), before):
        np.testing.assert_array_equal(p.data, b)


def test_block_without_super_init_fails_clearly():
    class Broken(hb.Block):
        def __init__(self):
            self.W = hb.Parameter("W", (2, 2))

    with pytest.raises(RuntimeError, match="super"):
        Broken()


class NodeWithLoss(hb.HybridBlock):
    """Leaf (word, label) or internal (left, right, label): cell and loss in ONE block call."""

    def __init__(self, n=6):
        super().__init__()
        rng = np.random.default_rng(7)
        self.E = hb.Parameter("E", (10, n), rng=rng)
        self.W = hb.Parameter("W", (n, 2 * n), rng=rng)
        self.V = hb.Parameter("V", (3, n), rng=rng)

    def forward(self, *args):
        if len(args) == 2:
            word, label = args
            h = hb.tanh(hb.lookup(self.E, word))
        else:
            left, right, label = args
            h = hb.tanh(self.W @ hb.concat([left, right]))
        return h, hb.pick_neg_log_softmax(self.V @ h, label)


@settings(max_examples=6, deadline=None)
@given(seed=seeds)
def test_integer_block_arguments_travel_per_call(seed):
    rng = np.random.default_rng(seed)
    block = NodeWithLoss()
    block.hybridize()
    trees = [_random_tree(rng, int(rng.integers(1, 6))) for _ in range(3)]

    def encode(t, losses, outs):
        if t[0] == "leaf":
            h, loss = block(t[1], t[1] % 3)
        else:
            h, loss = block(encode(t[1], losses, outs), encode(t[2], losses, outs), len(losses) % 3)
        losses.append(loss)
        outs.append(h)
        return h

    def build():
        losses, outs = [], []
        for t in trees:
            encode(t, losses, outs)
        return hb.add_n(losses), outs

    _assert_modes_agree(build, _params(block))


def test_integer_block_argument_is_range_checked_at_the_call():
    block = NodeWithLoss()
    block.hybridize()
    with hb.batching(granularity="block"):
        with pytest.raises(IndexError, match="lookup: index 12"):
            block(12, 1)


_VALUE_USES = {
    "truth": lambda k: k,
    "==": lambda k: k == 0,
    "!=": lambda k: k != 0,
    "in a set": lambda k: k in {0, 1},
    "a dict key": lambda k: {0: True}.get(k, False),
    "hash": lambda k: hash(k) == hash(0),
    "str": lambda k: str(k) == "0",
    "f-string": lambda k: f"{k}" == "0",
    "format": lambda k: format(k, "d") == "0",
    "index": lambda k: [True, False][k],
    "<": lambda k: k < 1,
    ">=": lambda k: 1 >= k,
    "+": lambda k: k + 1 == 1,
    "radd": lambda k: 1 + k == 1,
    "neg": lambda k: -k == 0,
    "float": lambda k: float(k) == 0.0,
}


@pytest.mark.parametrize("use", list(_VALUE_USES))
@pytest.mark.parametrize("granularity", [None, "block", "op"])
def test_integer_block_argument_used_as_a_value_raises(use, granularity):
    """An integer (or bool) argument is a trace placeholder: branching on it would bake one
    branch into the program for every later value, so it must fail, not pick a branch. A
    placeholder that hashed by identity matched no key (`k in {0, 1}` was False) and printed
    as an object, and ordering or arithmetic said only that the type does not support it:
    every use of its value raises the library's TypeError."""
    branch = _VALUE_USES[use]

    class Flagged(hb.HybridBlock):
        def forward(self, x, flag):
            return hb.tanh(x) if branch(flag) else x * 2.0

    block = Flagged()
    block.hybridize()
    x = np.ones(3, np.float32)
    for arg in (0, False):
        with pytest.raises(TypeError, match="op index"):
            if granularity is None:
                block(x, arg)
            else:
                with hb.batching(granularity=granularity):
                    block(x, arg)


def test_integer_block_argument_repr_names_its_position():
    """repr stays readable in a debugger or traceback: it is not a value forward can branch on."""
    seen = []

    class Shows(hb.HybridBlock):
        def forward(self, x, k, j):
            seen.append((repr(k), repr(j)))
            return hb.tanh(x)

    block = Shows()
    block.hybridize()
    block(np.ones(3, np.float32), 0, 1)
    assert seen == [("BlockInt(0)", "BlockInt(1)")]


def test_block_called_without_arguments_agrees():
    """A call with neither values nor integers (a learned initial state) has nothing that
    sizes a batch of such calls; it must still run, with the eager value and gradient."""
    class InitialState(hb.HybridBlock):
        def __init__(self):
            super().__init__()
            self.h0 = hb.Parameter("h0", (3,), rng=np.random.default_rng(0))

        def forward(self):
            return hb.tanh(self.h0)

    block = InitialState()
    block.hybridize()
    x = np.arange(3, dtype=np.float32)

    def build():
        outs = [block() * x for _ in range(2)]
        return hb.sum(hb.add_n(outs)), outs

    _assert_modes_agree(build, _params(block))
    with hb.batching(granularity="auto"):
        h = block()
    np.testing.assert_allclose(h.asnumpy(), np.tanh(block.h0.data), rtol=1e-6)


def test_auto_choice_measures_both_modes_of_a_candidate_and_keeps_the_cheaper():
    from hybridbatch.hybrid.granularity import REVISIT, WHOLE_SAMPLES, AutoChoice

    def feed(choice, whole, inline, poorly=True, calls=10):
        """Give the choice one flush's cost in its current mode; returns the mode run."""
        ran = choice.inline
        choice.observe(inline if choice.inline else whole, calls, poorly)
        return ran

    cheap_inline = AutoChoice()
    modes = [feed(cheap_inline, whole=2.0, inline=1.0) for _ in range(WHOLE_SAMPLES + 2)]
    assert modes == [False] * WHOLE_SAMPLES + [True] * 2     # whole first, then the trial, kept
    cheap_whole = AutoChoice()
    modes = [feed(cheap_whole, whole=1.0, inline=2.0) for _ in range(WHOLE_SAMPLES + 2)]
    assert modes == [False] * WHOLE_SAMPLES + [True, False]  # one inlined trial, then back
    never = AutoChoice()                  # batches well whole: never pays for an inlined trial
    assert not any(feed(never, whole=9.0, inline=1.0, poorly=False) for _ in range(REVISIT + 9))
    # the data drifts after the choice: the revisit measures the other mode again and switches
    runs = [feed(cheap_whole, whole=3.0, inline=1.0) for _ in range(REVISIT + 3)]
    assert runs.index(True) == REVISIT and all(runs[REVISIT:]) and cheap_whole.inline


def test_auto_choice_compares_flushes_of_alike_sizes_only():
    """Minibatches of mixed sizes: whole is cheaper at each size, but a 2-call flush whole
    costs more per call than a 128-call one inlined. Only alike sizes are compared, so the
    block stays whole, trying inlined now and then."""
    from hybridbatch.hybrid.granularity import AutoChoice
    per_call = {(False, 2): 28.8, (False, 128): 5.0, (True, 2): 40.0, (True, 128): 16.4}
    choice = AutoChoice()
    ran = []
    for k in range(60):
        calls = (2, 2, 128)[k % 3]
        ran.append(choice.inline)
        choice.observe(per_call[choice.inline, calls], calls, True)
    assert not choice.inline and sum(ran) <= 4
    cheap_inline = {key: (v / 4 if key[0] else v) for key, v in per_call.items()}
    choice = AutoChoice()
    for k in range(30):
        calls = (2, 2, 128)[k % 3]
        choice.observe(cheap_inline[choice.inline, calls], calls, True)
    assert choice.inline
    for pattern in ((128, 128, 128, 128, 2), (2, 2, 2, 2, 128)):      # an epoch's full minibatches and its tail
        choice = AutoChoice()
        ran = []
        for k in range(400):
            calls = pattern[k % 5]
            ran.append(choice.inline)
            choice.observe(per_call[choice.inline, calls], calls, True)
        assert not choice.inline and sum(ran) <= 6, pattern


def test_auto_granularity_tries_inlining_only_blocks_that_batch_poorly():
    from hybridbatch.hybrid.granularity import WHOLE_SAMPLES
    emb = nn.Embedding(20, 4, seed=0)
    lstm, child_sum = nn.LSTMCell(4, 4, seed=1), nn.ChildSumTreeLSTMCell(4, 4, seed=2)
    lstm.hybridize()
    child_sum.hybridize()
    def encode(depth):
        """A chain of child-sum calls whose arity varies along it (one small batch per call)."""
        h, c = child_sum(emb(depth))
        for k in range(depth):
            states = [h, c] + [s for _ in range(k % 3) for s in child_sum(emb(1))]
            h, c = child_sum(np.ones(4, np.float32), *states)
        return h

    def build():
        outs = []
        for n in (6, 6, 6):
            h = c = np.zeros(4, np.float32)
            for t in range(n):
                h, c = lstm(emb(t), h, c)
            outs += [h, encode(n)]
        return hb.add_n([hb.sum(o) for o in outs]), outs

    _assert_modes_agree(build, _params(emb, lstm, child_sum))   # eager == block == op
    nodes = []
    for _ in range(WHOLE_SAMPLES + 1):                          # whole, then an inlined trial
        with hb.batching(granularity="auto") as scope:
            loss, _ = build()
        nodes.append(scope.stats.nodes)
        ref, _ = build()
        np.testing.assert_allclose(loss.asnumpy(), ref.asnumpy(), rtol=1e-5)   # exact either way
    assert nodes[WHOLE_SAMPLES] > nodes[0]          # the trial recorded the child-sum calls' ops
    whole, inlined = (child_sum.auto_choice.samples(mode) for mode in (False, True))
    assert len(whole) == WHOLE_SAMPLES and len(inlined) == 1
    assert child_sum.auto_inline == (min(c for _, c in inlined) < min(c for _, c in whole))
    assert not lstm.auto_inline and not lstm.auto_choice.samples(True)


def test_auto_granularity_leaves_whole_a_block_whose_calls_mostly_batch_well():
    """Rare signatures in small batches do not make a candidate while nearly every call
    shares a big batch: the median batch is small here, but 3 calls of 43 sit in one."""
    from hybridbatch.hybrid.granularity import WHOLE_SAMPLES
    cell = nn.ChildSumTreeLSTMCell(4, 4, seed=2)
    cell.hybridize()
    x = np.ones(4, np.float32)

    def build():
        leaves = [cell(x * i) for i in range(40)]                 # one batch of 40 calls
        tops = [cell(x, *[s for h_c in leaves[i:i + arity] for s in h_c])
                for i, arity in ((0, 1), (3, 2), (6, 3))]          # three arities, one call each
        return hb.add_n([hb.sum(h) for h, _ in tops])

    for _ in range(WHOLE_SAMPLES + 2):
        with hb.batching(granularity="auto") as scope:
            loss = build()
        assert scope.stats.batches == 1 + 3 + 2      # the leaves, a batch per arity, sums, add_n
        np.testing.assert_allclose(loss.asnumpy(), build().asnumpy(), rtol=1e-5)
    assert not cell.auto_inline and not cell.auto_choice.samples(True)


def test_parameters_lists_a_shared_parameter_once():
    class Two(hb.Block):
        def __init__(self):
            super().__init__()
            self.a = hb.nn.Dense(3, 4, seed=0)
            self.b = hb.nn.Dense(3, 4, seed=1)
            self.b.weight = self.a.weight          # tied weights

    net = Two()
    assert len(net.collect_params()) == 4          # a.weight, a.bias, b.weight, b.bias
    params = net.parameters()
    assert [p is net.a.weight for p in params].count(True) == 1 and len(params) == 3
    hb.Trainer(params)                             # the Trainer rejects duplicates; none here


def test_a_trainer_over_collect_params_updates_a_tied_weight_once():
    """collect_params() lists a tied weight under both paths; the Trainer refused it
    ('listed twice'), so the guide's Trainer(model.collect_params()) failed on tied models."""
    class Two(hb.Block):
        def __init__(self):
            super().__init__()
            self.a = hb.nn.Dense(3, 4, seed=0)
            self.b = hb.nn.Dense(3, 4, seed=1)
            self.b.weight = self.a.weight

    net = Two()
    trainer = hb.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.5})
    assert len(trainer.params) == 3
    before = net.a.weight.data.copy()
    net.a.weight.grad = np.ones((3, 4), np.float32)
    trainer.step(1)
    np.testing.assert_array_equal(net.a.weight.data, before - 0.5)    # one update, not two


def _call_in_mode(block, x, mode):
    """block(x) as numpy, eagerly or recorded at a granularity."""
    if mode == "eager":
        return block(x).asnumpy()
    with hb.batching(granularity=mode):
        y = block(x)
    return y.asnumpy()


@pytest.mark.parametrize("mode", ["eager", "op", "block"])
def test_assigning_a_block_attribute_retraces_what_read_it(mode):
    """A trace bakes in what forward read: a replaced Parameter, a changed flag and a
    child's new weight must all show at the next call, not the trace from before."""
    x = np.array([1.0, -2.0], np.float32)
    d = nn.Dense(3, 2, seed=0)
    d.hybridize()
    _call_in_mode(d, x, mode)
    d.weight = hb.Parameter("weight", (3, 2), init="zeros")
    np.testing.assert_array_equal(_call_in_mode(d, x, mode), np.zeros(3, np.float32))

    d = nn.Dense(3, 2, seed=0)
    d.hybridize()
    before = _call_in_mode(d, -x, mode)
    d.activation = "relu"
    np.testing.assert_allclose(_call_in_mode(d, -x, mode), np.maximum(before, 0), rtol=1e-6)

    class Outer(hb.HybridBlock):
        def __init__(self):
            super().__init__()
            self.inner = nn.Dense(3, 2, seed=1)

        def forward(self, v):
            return self.inner(v) * 2.0

    outer = Outer()
    outer.hybridize()
    _call_in_mode(outer, x, mode)
    outer.inner.weight = hb.Parameter("weight", (3, 2), init="zeros")
    np.testing.assert_array_equal(_call_in_mode(outer, x, mode), np.zeros(3, np.float32))


class _IgnoresItsSecondInput(hb.HybridBlock):
    def __init__(self, W):
        super().__init__()
        self.W = W

    def forward(self, x, h):
        return hb.tanh(self.W @ x)          # h does not reach the output


@pytest.mark.parametrize("calls", [1, 5])
def test_a_block_input_its_output_does_not_read_gets_no_gradient(calls):
    """Its gradient came back as None from the block's backward, which the scatter then
    failed on (a dtype('O') add, or NoneType in scatter_add_rows) at block granularity."""
    W = hb.Parameter("W", (3, 3))
    block = _IgnoresItsSecondInput(W)
    block.hybridize()
    xs = [np.full(3, 0.5 * (i + 1), np.float32) for i in range(calls)]

    def loss():
        return hb.add_n([hb.sum(block(x, hb.tanh(W @ x))) for x in xs])

    grads = {}
    for mode in ("eager", "op", "block", "auto"):
        W.zero_grad()
        recorded(mode, loss).backward()
        grads[mode] = W.grad.copy()
    assert np.abs(grads["eager"]).sum() > 0
    for mode in ("op", "block", "auto"):
        np.testing.assert_allclose(grads[mode], grads["eager"], rtol=1e-5, err_msg=mode)


def _assert_gradients_like_eager(blocks, loss, fused=True):
    """Every parameter's gradient of loss() in op and block mode equals eager's (finite),
    the blocks hybridized with fusion on or off (log(0)'s warnings silenced)."""
    params = [p for b in blocks for p in b.collect_params().values()]
    with hb.settings(fusion=fused):
        for b in blocks:
            b.hybridize()
        grads = {}
        with np.errstate(divide="ignore", invalid="ignore"):
            for mode in ("eager", "op", "block"):
                for p in params:
                    p.zero_grad()
                recorded(mode, loss).backward()
                grads[mode] = [p.grad.copy() for p in params]
    assert all(np.isfinite(g).all() for g in grads["eager"])
    for mode in ("op", "block"):
        for got, want in zip(grads[mode], grads["eager"]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, err_msg=mode)


class _OneRunTwoOutputs(_LogOfRelu):
    """Both outputs made by one fused elementwise run (tanh sigmoid mul relu log)."""

    def forward(self, x):
        z = self.U @ x
        return hb.tanh(z) * hb.sigmoid(z) + self.W @ x, hb.log(hb.relu(z))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("read_second", [(), (1,), (1, 2)])
@pytest.mark.parametrize("block_cls", [_LogOfRelu, _OneRunTwoOutputs])
def test_an_output_a_call_does_not_read_puts_no_nan_into_gradients(block_cls, fused, read_second):
    """An output the loss does not read is not differentiated: with a zero gradient, its log's
    inf derivative at 0 would make 0 * inf = NaN in U's gradient. read_second: the calls whose
    second output the loss reads too; call 0's holds -inf and is never read."""
    block = block_cls()
    xs = [np.array(x, np.float32) for x in ([1.0, -2.0, 0.5], [-1.0, 0.0, 0.0], [-1.0, -1.0, -1.0])]
    positive = [bool((block.U.data @ x > 0).all()) for x in xs]
    assert positive == [False, True, True]

    def loss():
        outs = [block(x) for x in xs]
        return hb.add_n([hb.sum(a) for a, _ in outs] + [hb.sum(outs[i][1]) for i in read_second])

    _assert_gradients_like_eager([block], loss, fused)


class _MergeLike(_LogOfRelu):
    """W6's merge step in small: a division whose quotient feeds both outputs."""

    def forward(self, x):
        w = hb.exp(hb.sigmoid(self.W @ x))
        c = w * hb.tanh(self.U @ x) / (w + 1.0)
        return hb.tanh(c) * x, c


def test_zero_seeds_stay_exact_where_every_output_uses_the_division():
    """Only a step that some output does not depend on can be reached from an unread
    output alone; here the division feeds both, so the block keeps the one-group fast
    path (it cost W6 15-21% of a step) and still equals eager."""
    block = _MergeLike()
    xs = [np.array(x, np.float32) for x in ([1.0, -2.0, 0.5], [-1.0, 0.3, 2.0], [0.3, 0.2, -0.1])]

    def loss():
        outs = [block(x) for x in xs]
        return hb.add_n([hb.sum(h) for h, _ in outs] + [hb.sum(outs[0][1])])    # c read once

    _assert_gradients_like_eager([block], loss)
    assert next(iter(block._programs.values())).op.zero_exact
    log_block = _LogOfRelu()
    log_block.hybridize()
    with np.errstate(divide="ignore"):
        log_block(xs[0])
    assert not next(iter(log_block._programs.values())).op.zero_exact


class _PassesOn(hb.HybridBlock):
    def forward(self, h, l):
        return hb.sum(hb.tanh(h)), l * 2.0      # output 1 hands l on; the loss never reads it


class _Ignores(hb.HybridBlock):
    def forward(self, h, l):
        return hb.sum(hb.tanh(h))


class _SinWithoutGradient(_LogOfRelu):
    def forward(self, x):
        u = self.W @ x
        return hb.tanh(u), hb.py_func(np.sin, u, out_shape=(3,))      # no grad_fn


@pytest.mark.parametrize("producer_cls", [_LogOfRelu, _SinWithoutGradient])
@pytest.mark.parametrize("consumer_cls", [_PassesOn, _Ignores])
def test_an_output_only_an_unread_path_of_another_block_uses_is_not_differentiated(producer_cls, consumer_cls):
    """Backward marks only the inputs of a block call that its read outputs use: a producer's
    output that only unread outputs (or none) use is not differentiated with a zero gradient,
    which would give 0 * inf = NaN, or make a py_func without grad_fn raise."""
    producer, consumer = producer_cls(), consumer_cls()
    xs = [np.array(x, np.float32) for x in ([1.0, -2.0, 0.5], [-1.0, 0.0, 0.0], [0.3, 0.2, -0.1])]

    def loss():
        outs = [consumer(*producer(x)) for x in xs]
        return hb.add_n([o[0] if isinstance(o, tuple) else o for o in outs])

    _assert_gradients_like_eager([producer, consumer], loss)


class _RunWithAnUnreadOutput(_LogOfRelu):
    def forward(self, x):
        r = hb.log(hb.relu(self.U @ x))      # only s uses it
        m = self.W @ x
        tm = hb.tanh(m)
        return tm * hb.sigmoid(m), r * tm    # one fused run makes both


@pytest.mark.parametrize("fused", [True, False])
def test_a_fused_run_gives_no_gradient_to_an_input_only_unread_outputs_use(fused):
    """The run's kernel for the read outputs writes no gradient for r, which only the unread
    output uses: r's log(relu) differentiated with a zero gradient would put 0 * inf = NaN
    into U's gradient."""
    block = _RunWithAnUnreadOutput()
    xs = [np.array(x, np.float32) for x in ([1.0, -2.0, 0.5], [-1.0, 0.0, 0.3], [0.3, 0.2, -0.1])]
    _assert_gradients_like_eager([block], lambda: hb.add_n([hb.sum(block(x)[0]) for x in xs]), fused)


class _SquaresItsData(_LogOfRelu):
    def forward(self, x, h):
        return hb.py_func(np.square, x, out_shape=(3,)), self.W @ h      # no grad_fn


def test_a_py_func_on_data_alone_is_not_differentiated():
    """Eager never differentiates it (no Parameter lies behind x), and neither does block
    granularity when the call's other output reaches the loss: no "py_func square has no
    grad_fn"."""
    block = _SquaresItsData()
    x, h = np.array([0.5, -1.0, 2.0], np.float32), np.ones(3, np.float32)

    def loss():
        a, b = block(x, h)
        return hb.sum(a) + hb.sum(b)

    _assert_gradients_like_eager([block], loss)


class _SquaresAComputedValue(_LogOfRelu):
    def forward(self, x, h):
        return hb.py_func(np.square, hb.sigmoid(x), out_shape=(3,)), self.W @ h


@pytest.mark.parametrize("mode", ["eager", "op", "block"])
def test_a_py_func_on_a_computed_value_is_differentiated_as_in_eager(mode):
    """Eager differentiates every op with a computed operand, even one no Parameter is
    behind: a py_func without grad_fn there raises in every mode alike."""
    block = _SquaresAComputedValue()
    block.hybridize()
    x, h = np.array([0.5, -1.0, 2.0], np.float32), np.ones(3, np.float32)

    def loss():
        a, b = block(x, h)
        return hb.sum(a) + hb.sum(b)

    with pytest.raises(NotImplementedError, match="no grad_fn"):
        recorded(mode, loss).backward()


def test_a_container_of_unregistered_blocks_or_parameters_warns():
    """Blocks and Parameters in a list or dict attribute were silently left out of
    collect_params(), so a Trainer never updated them and save_parameters() never saved them."""
    class Holder(hb.Block):
        def __init__(self):
            super().__init__()
            self.W = hb.Parameter("W", (2,))
            self.registered = [self.W]          # already registered: no warning
            self.numbers = [1, 2]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Holder()
    block = Holder()
    with pytest.warns(UserWarning, match=r"Holder.layers holds 2 .* not registered"):
        block.layers = [nn.Dense(2, 2), nn.Dense(2, 2)]
    with pytest.warns(UserWarning, match=r"Holder.extra holds 1 .* not registered"):
        block.extra = {"V": hb.Parameter("V", (2,))}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert list(block.collect_params()) == ["W"]
    assert sorted(str(w.message).split(" holds")[0] for w in caught) == ["Holder.extra", "Holder.layers"]


def test_blocks_appended_to_a_list_after_its_assignment_warn_when_the_tree_is_walked():
    """An empty list assigned, then filled: the assignment saw nothing, and the model ran,
    took gradients and never trained (a Trainer of collect_params() had no parameters)."""
    class Stack(hb.HybridBlock):
        def __init__(self):
            super().__init__()
            self.layers = []
            for i in range(2):
                self.layers.append(nn.Dense(4, 4, seed=i))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    model = Stack()
    for walk in (model.hybridize, model.collect_params, model.parameters):
        with pytest.warns(UserWarning, match=r"Stack.layers holds 2 .* not registered") as caught:
            walk()
        assert caught[0].filename == __file__       # the user's line, not the package's
    with pytest.raises(ValueError, match="no parameters to train.*plain list"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            hb.Trainer(model.collect_params(), "sgd")


class _Gated(hb.HybridBlock):
    """A forward with defaults: a value, an optional value, an int index and a str flag."""

    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(3, 3, seed=0)

    def forward(self, x, h=None, row=0, mode="plain", *, scale=None):
        y = self.dense(x)
        if h is not None:
            y = y + h
        y = y + hb.pick(x, row)
        return y * 2.0 if mode == "double" else y


def test_keyword_arguments_bind_to_their_positions_in_every_mode():
    """Calls with keywords failed with "__call__() got an unexpected keyword argument"."""
    block = _Gated()
    block.hybridize()
    rng = np.random.default_rng(0)
    xs = _vecs(rng, 4, 3)

    def build():
        outs = [block(x, h=hb.tanh(hb.array(x)), mode="double") for x in xs[:2]]
        outs += [block(xs[2], row=2), block(x=xs[3], mode="double", row=1)]
        return hb.sum(hb.concat(outs)), outs

    _assert_modes_agree(build, _params(block))
    with hb.batching(granularity="block") as scope:
        a, b = block(xs[0], None, 1, "double"), block(xs[1], row=1, mode="double")
    assert scope.stats.batches == 1          # one trace key, keywords or positions
    np.testing.assert_allclose(b.asnumpy(), block(xs[1], None, 1, "double").asnumpy(), rtol=1e-6)


def test_keyword_arguments_that_do_not_fit_name_the_block():
    block = _Gated()
    block.hybridize()
    x = np.ones(3, np.float32)
    with pytest.raises(TypeError, match=r"by position, and 'scale' has no position in _Gated.forward"):
        block(x, scale=2.0)
    with pytest.raises(TypeError, match=r"_Gated.forward\(\) got an unexpected keyword argument 'size'"):
        block(x, size=2)
    with pytest.raises(TypeError, match=r"_Gated.forward\(\) .*'x'"):
        block(x, x=x)

    class Plain(hb.Block):
        def forward(self, x, scale=1.0):
            return x * scale

    np.testing.assert_allclose(Plain()(hb.array(x), scale=3.0).asnumpy(), 3 * x)


@pytest.mark.parametrize("mode", ["eager", "op", "block"])
def test_a_list_of_arrays_of_different_shapes_names_the_block_and_the_argument(mode):
    """numpy's "inhomogeneous shape" error named neither."""
    class Parts(hb.HybridBlock):
        def forward(self, x, parts):
            return x + hb.sum(parts[1])

    x = np.ones(3, np.float32)
    ragged = [np.ones(3, np.float32), np.ones(4, np.float32)]
    block = Parts()
    np.testing.assert_allclose(block(x, ragged).asnumpy(), x + 4)     # as written: a list
    block.hybridize()
    expected = r"Parts \(hybridized\): the argument at index 1 \('parts'\) is a list of arrays of different " \
               r"shapes \[\(3,\), \(4,\)\].*Pass each array as its own argument"
    with contextlib.ExitStack() as stack:
        if mode != "eager":
            stack.enter_context(hb.batching(granularity=mode))
        with pytest.raises(ValueError, match=expected):
            block(x, ragged)
        same = block(x, [np.ones(3, np.float32), np.full(3, 2.0, np.float32)])   # one shape: stacked
    np.testing.assert_allclose(same.asnumpy(), x + 6)


def test_keywords_reach_a_forward_that_is_not_hybridized_as_written():
    """Only a hybridized call puts keywords in places: a keyword-only parameter had been
    refused on a HybridBlock never hybridized, which runs forward as a plain Block does."""
    class KeywordOnly(hb.HybridBlock):
        def forward(self, x, *, scale=None):
            return x if scale is None else x * scale

    block = KeywordOnly()
    np.testing.assert_allclose(block(hb.array([1.0, 2.0]), scale=3.0).asnumpy(), [3.0, 6.0])
    block.hybridize()
    with pytest.raises(TypeError, match="'scale' has no position"):
        block(hb.array([1.0, 2.0]), scale=3.0)


def test_a_bool_default_before_a_keyword_given_is_named():
    class Flagged(hb.HybridBlock):
        def forward(self, x, flag=False, h=None):
            return x if h is None else x + h

    block = Flagged()
    block.hybridize()
    x = hb.array([1.0, 2.0])
    np.testing.assert_allclose(block(x).asnumpy(), [1.0, 2.0])
    with pytest.raises(TypeError, match="'flag' comes before a keyword given.*default False by position"):
        block(x, h=x)


@pytest.mark.parametrize("activation", sorted(a for a in nn.basic.ACTIVATIONS if a))
@pytest.mark.parametrize("granularity", ["block", "op"])
def test_dense_activations_apply_their_op_batched_as_eager(activation, granularity):
    layer = nn.Dense(4, 3, activation=activation, seed=0)
    layer.hybridize()
    xs = [np.random.default_rng(k).standard_normal(3).astype(np.float32) for k in range(3)]
    want = [getattr(hb, activation)(hb.affine(layer.weight, hb.array(x), layer.bias)).asnumpy() for x in xs]
    with hb.batching(granularity=granularity):
        got = [layer(x) for x in xs]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.asnumpy(), w, rtol=1e-6, atol=1e-7)
