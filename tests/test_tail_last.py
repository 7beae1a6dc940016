"""tail-last: agenda with the graph's tail (the signatures that no
recurrence reads: per-node outputs, their losses and sums) after everything else.

  * Eq. 2 exactly on random trees with an output per node and on chains with a loss per
    step, where agenda's average depth runs the outputs early and often (ED-Batch Fig. 1);
  * on random DAGs: a valid schedule (schedule/check.py) and never more batches than agenda;
  * through a scope, under the default policy too (critical path): a Tree-LSTM written the
    natural way (leaf, internal and classifier blocks, a loss per node, one add_n per tree)
    runs Eq. 2 batches, with values and gradients equal to eager mode's.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import hybridbatch as hb
from hybridbatch.schedule import DEFAULT_POLICY, POLICIES, agenda, lower_bound, tail_last
from hybridbatch.schedule.check import checked
from graphs import build, check_schedule, graph_views

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def trees_with_outputs(draw):
    """GraphViews of a few random binary trees. Leaf cells read an embedding (or an earlier
    flush's value), internal cells their two children; every node, or every internal node,
    has an output, the output a loss, each tree one sum of its losses, and maybe one sum of
    those (a minibatch's total: a sum reading sums). Returns (view, Eq. 2 counted by
    construction)."""
    embed, leaf_outputs, total = draw(st.booleans()), draw(st.booleans()), draw(st.booleans())
    nodes, tallest, sums = [], 0, []

    def add(kind, operands):
        nodes.append((kind, operands))
        return len(nodes) - 1

    for _ in range(draw(st.integers(1, 5))):
        n_leaves = draw(st.integers(1, 12))
        losses = []

        def output(v):
            losses.append(add("loss", [add("out", [v])]))

        level = []                      # (subtree's root, its height in internal cells)
        for _ in range(n_leaves):
            leaf = add("leaf", [add("embed", [-1])] if embed else [-1])
            level.append((leaf, 0))
            if leaf_outputs or n_leaves == 1:
                output(leaf)
        while len(level) > 1:           # merge adjacent subtrees in random order
            i = draw(st.integers(0, len(level) - 2))
            (left, hl), (right, hr) = level[i], level[i + 1]
            cell = add("cell", [left, right])
            output(cell)
            level[i:i + 2] = [(cell, 1 + max(hl, hr))]
        tallest = max(tallest, level[0][1])
        sums.append(add("sum", losses))
    if total:
        add("sum", sums)
    bound = int(embed) + 1 + tallest + 3 + total    # embed, leaf, cells, out, loss, sums
    return build(nodes), bound


@st.composite
def chains_with_losses(draw):
    """GraphViews of a few chains (per-token taggers): a step reads the previous step and
    its token's embedding, every step has an output and a loss, and each chain one sum.
    With `token_outputs`, the embeddings have outputs too (Fig. 1's leaves); maybe one sum
    of the chains' sums. Returns (view, Eq. 2 counted by construction)."""
    token_outputs, total = draw(st.booleans()), draw(st.booleans())
    nodes, sums = [], []

    def add(kind, operands):
        nodes.append((kind, operands))
        return len(nodes) - 1

    longest = 0
    for _ in range(draw(st.integers(1, 6))):
        length = draw(st.integers(1, 15))
        longest = max(longest, length)
        h, losses = -1, []
        for _ in range(length):
            x = add("embed", [-1])
            if token_outputs:
                losses.append(add("loss", [add("out", [x])]))
            h = add("step", [h, x])
            losses.append(add("loss", [add("out", [h])]))
        sums.append(add("sum", losses))
    if total:
        add("sum", sums)
    return build(nodes), 1 + longest + 3 + total    # embed, steps, out, loss, sums


@SETTINGS
@given(trees_with_outputs(), chains_with_losses())
def test_trees_and_chains_with_an_output_per_node_reach_the_lower_bound(tree, chain):
    for view, bound in (tree, chain):
        assert lower_bound(view) == bound
        assert check_schedule(view, *tail_last(view)) == bound


def test_agenda_runs_fig1_outputs_early_where_tail_last_waits():
    """Two left-deep trees of Fig. 1(a) (4 leaves, an output on every node): agenda's
    average depth puts the outputs (1.85) before the internal nodes (2), tail-last
    runs them once, after the internal nodes."""
    nodes = []
    for _ in range(2):
        xs = [len(nodes) + i for i in range(4)]
        nodes += [("x", [-1])] * 4
        h, hs = xs[0], []
        for x in xs[1:]:
            nodes.append(("I", [h, x]))
            h = len(nodes) - 1
            hs.append(h)
        outs = []
        for v in xs + hs:
            nodes.append(("O", [v]))
            outs.append(len(nodes) - 1)
        nodes.append(("R", outs))
    view = build(nodes)
    assert lower_bound(view) == 1 + 3 + 1 + 1
    assert check_schedule(view, *agenda(view)) > 6
    order, bptr = tail_last(view)
    assert check_schedule(view, order, bptr) == 6
    assert [view.sig_keys[view.sig[order[b]]] for b in bptr[:-1]] == ["x", "I", "I", "I", "O", "R"]


@SETTINGS
@given(graph_views())
def test_valid_on_random_dags_and_never_more_batches_than_agenda(view):
    order, bptr = checked(tail_last, view, tail_last(view))
    assert lower_bound(view) <= len(bptr) - 1 <= check_schedule(view, *agenda(view))


def test_a_cycle_through_two_signatures_keeps_them_out_of_the_tail():
    """a -> b -> a across two instances (never a path from an a-node to another): the
    signature graph has a cycle, so neither joins the tail, and a schedule that ran each
    once at the end would not exist. The output c, read by nothing, is the tail."""
    view = build([("a", [-1]), ("b", [0]), ("b", [-1]), ("a", [2]), ("c", [1]), ("c", [3])])
    order, bptr = tail_last(view)
    assert check_schedule(view, order, bptr) == 4 == lower_bound(view) + 1
    assert view.sig_keys[view.sig[order[bptr[-2]]]] == "c"


# ---------------------------------------------------------------------------------------
# Through a scope, as the default: a Tree-LSTM written the natural way
# ---------------------------------------------------------------------------------------
H, CLASSES = 8, 5
RNG = np.random.default_rng(7)
EMBED = hb.Parameter("tail_embed", (20, H), rng=RNG)


class Leaf(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.weight = hb.Parameter("tail_leaf", (2 * H, H), rng=RNG)

    def forward(self, x):
        i, u = hb.split(self.weight @ x, 2)
        c = hb.sigmoid(i) * hb.tanh(u)
        return hb.tanh(c), c


class Internal(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.weight = hb.Parameter("tail_internal", (3 * H, 2 * H), rng=RNG)

    def forward(self, h_l, c_l, h_r, c_r):
        i, f, u = hb.split(self.weight @ hb.concat([h_l, h_r]), 3)
        c = hb.sigmoid(i) * hb.tanh(u) + hb.sigmoid(f) * (c_l + c_r)
        return hb.tanh(c), c


class Classifier(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.weight = hb.Parameter("tail_classifier", (CLASSES, H), rng=RNG)

    def forward(self, h):
        return self.weight @ h


LEAF, INTERNAL, CLASSIFIER = Leaf(), Internal(), Classifier()
for _block in (LEAF, INTERNAL, CLASSIFIER):
    _block.hybridize()
WEIGHTS = (EMBED, LEAF.weight, INTERNAL.weight, CLASSIFIER.weight)


def tree_loss(tree):
    """tree: a word id (leaf) or a pair of trees; every node is classified (label: its
    size mod CLASSES), and the tree's loss is one add_n of all of them."""
    losses = []

    def encode(t):
        if isinstance(t, tuple):
            (h_l, c_l, n_l), (h_r, c_r, n_r) = encode(t[0]), encode(t[1])
            h, c = INTERNAL(h_l, c_l, h_r, c_r)
            size = n_l + n_r
        else:
            h, c = LEAF(hb.lookup(EMBED, t))
            size = 1
        losses.append(hb.pick_neg_log_softmax(CLASSIFIER(h), size % CLASSES))
        return h, c, size

    encode(tree)
    return hb.add_n(losses)


def random_trees(n, seed):
    rng = np.random.default_rng(seed)
    trees = []
    for _ in range(n):
        level = [int(w) for w in rng.integers(0, 20, rng.integers(1, 9))]
        while len(level) > 1:
            i = int(rng.integers(len(level) - 1))
            level[i:i + 2] = [(level[i], level[i + 1])]
        trees.append(level[0])
    return trees


def grads_of(run):
    """(what run() returns, the weights' gradients after it) from zeroed gradients, zeroed
    again afterwards."""
    for p in WEIGHTS:
        p.zero_grad()
    try:
        return run(), [p.grad.copy() for p in WEIGHTS]
    finally:
        for p in WEIGHTS:
            p.zero_grad()


@pytest.mark.parametrize("policy", [None, "tail-last"])     # None: hb.batching's default
def test_a_natural_tree_lstm_runs_in_the_lower_bound_with_eager_values_and_gradients(policy):
    trees = random_trees(12, seed=3)
    scopes = []

    def eager():
        losses = [tree_loss(t) for t in trees]
        hb.add_n(losses).backward()
        return [x.asnumpy() for x in losses]

    def batched():
        with hb.batching(granularity="block", **({} if policy is None else {"policy": policy})) as scope:
            losses = [tree_loss(t) for t in trees]
            total = hb.add_n(losses)                        # a sum of the trees' sums
        total.backward()
        scopes.append(scope)
        return [x.asnumpy() for x in losses]

    (want_values, want_grads), (values, grads) = grads_of(eager), grads_of(batched)
    assert scopes[0].policy is POLICIES[policy or DEFAULT_POLICY]
    assert scopes[0].stats.batches == scopes[0].stats.lower_bound
    np.testing.assert_allclose(values, want_values, rtol=1e-5)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    with hb.batching(policy="agenda", granularity="block") as scope:
        hb.add_n([tree_loss(t) for t in trees])
    assert scope.stats.batches > scope.stats.lower_bound
