"""Scheduling: the policies' batches, ED-Batch's lower bound, and their invariants.

Three layers:
  * the acceptance case (DyNet §3.2): 64 chains of different lengths, one loss each. The
    agenda policy reaches the lower bound and runs all 64 losses as one batch; the depth
    policy cannot (one loss batch per distinct chain length);
  * the lower bound (ED-Batch Eq. 2) on graphs small enough to count by hand, both on
    hand-built GraphViews and through real scopes;
  * property tests on random GraphViews: every policy returns a valid schedule.
"""
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import hybridbatch as hb
from hybridbatch.record import signature
from hybridbatch.schedule import GraphView, agenda, by_depth, get_policy, lower_bound, tail_last
from graphs import (B, H, INPUT, LABELS, LENGTHS, MAX_LEN, MIN_LEN, N_CHAINS, W, XS, chain, chain_loss,
                    check_schedule, graph_views, make_view, run_chains)

POLICIES = {"agenda": agenda, "depth": by_depth, "tail-last": tail_last}



# ---------------------------------------------------------------------------------------
# The acceptance case: 64 chains h = tanh(W @ concat([h, x]) + b), lengths 2..40, one loss each
# ---------------------------------------------------------------------------------------
STEP_OPS = ("concat", "matmul", "add", "tanh")          # four recorded ops per step


def batches_of(plan, op_name):
    """Sizes of the plan's batches whose signature is op `op_name`, in execution order."""
    return [size for sig, size in zip(plan.batch_sig, plan.sizes) if signature.SIGS[sig].op.name == op_name]


def test_chain_lengths_vary_and_cover_both_extremes():
    assert LENGTHS.min() == MIN_LEN and LENGTHS.max() == MAX_LEN
    assert len(set(LENGTHS.tolist())) > 10


def test_agenda_reaches_lower_bound_and_batches_all_losses_once():
    scope, _ = run_chains("agenda")
    st_ = scope.stats
    assert st_.flushes == 1
    assert st_.nodes == 4 * int(LENGTHS.sum()) + N_CHAINS      # inputs are not executed nodes
    assert st_.lower_bound == 4 * MAX_LEN + 1 == 161
    assert st_.batches == st_.lower_bound
    plan = scope.plans[0]
    assert batches_of(plan, "pick_neg_log_softmax") == [N_CHAINS]
    # step k of every chain still running at k is one batch, per op of the step
    expected = [int((LENGTHS >= k).sum()) for k in range(1, MAX_LEN + 1)]
    for name in STEP_OPS:
        assert batches_of(plan, name) == expected, name
    # the losses run last, after every chain has finished
    assert signature.SIGS[plan.batch_sig[-1]].op.name == "pick_neg_log_softmax"


def test_depth_misses_the_lower_bound_by_one_loss_batch_per_extra_length():
    scope, _ = run_chains("depth")
    st_ = scope.stats
    distinct = sorted(Counter(LENGTHS.tolist()).items())     # (length, count), shortest first
    assert st_.lower_bound == 161
    assert st_.batches == 4 * MAX_LEN + len(distinct)
    assert st_.batches > st_.lower_bound
    # a chain of length L ends at depth 4L + 1: one loss batch per distinct length
    assert batches_of(scope.plans[0], "pick_neg_log_softmax") == [count for _, count in distinct]


@pytest.mark.parametrize("policy", ["agenda", "depth"])
def test_batched_losses_and_gradients_equal_eager(policy):
    eager = [chain_loss(x, y) for x, y in zip(XS, LABELS)]
    for p in (W, B):
        p.zero_grad()
    hb.add_n(eager).backward()
    eager_grads = [W.grad.copy(), B.grad.copy()]
    for p in (W, B):
        p.zero_grad()

    with hb.batching(policy=policy) as scope:
        losses = [chain_loss(x, y) for x, y in zip(XS, LABELS)]
        total = hb.add_n(losses)
    total.backward()
    try:
        np.testing.assert_allclose([l.asnumpy() for l in losses], [e.asnumpy() for e in eager], rtol=1e-5)
        for got, want in zip((W.grad, B.grad), eager_grads):   # float32 sums in another order
            assert np.abs(want).max() > 1e-2
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
        assert float(total.asnumpy()) == pytest.approx(sum(float(e.asnumpy()) for e in eager), rel=1e-5)
    finally:
        for p in (W, B):
            p.zero_grad()


# ---------------------------------------------------------------------------------------
# Lower bound on hand-made GraphViews
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("view, expected", [
    pytest.param(make_view([]), 0, id="empty"),
    pytest.param(make_view([(INPUT, [])] * 3), 0, id="inputs only"),
    pytest.param(make_view(chain([1] * 5)), 5, id="chain of one signature"),
    pytest.param(make_view(chain([1, 2, 1, 2, 1])), 3 + 2, id="chain alternating two signatures"),
    pytest.param(make_view(chain([1] * 3) + chain([1] * 5, start=3)), 5, id="two independent chains"),
    pytest.param(make_view(chain([1] * 3) + chain([2] * 4, start=3)), 3 + 4, id="two chains, two signatures"),
    pytest.param(make_view([(INPUT, []), (1, [0]), (1, [0]), (2, [1, 2])]), 2, id="chain from an input"),
    # a -> b, a -> c, (b, c) -> d
    pytest.param(make_view([(1, []), (2, [0]), (2, [0]), (3, [1, 2])]), 3, id="diamond, b and c alike"),
    pytest.param(make_view([(1, []), (2, [0]), (3, [0]), (4, [1, 2])]), 4, id="diamond, b and c differ"),
    pytest.param(make_view([(1, []), (1, [0]), (1, [0]), (1, [1, 2])]), 3, id="diamond, one signature"),
    # a depends on a through another signature: still a chain of two a's
    pytest.param(make_view(chain([1, 2, 1])), 2 + 1, id="dependence through another signature"),
    # balanced tree: leaves L=1 (4), internal I=2 in two levels
    pytest.param(make_view([(1, [-1])] * 4 + [(2, [0, 1]), (2, [2, 3]), (2, [4, 5])]), 1 + 2,
                 id="balanced tree, two types"),
    # left-deep tree of 4 leaves: the internal nodes form a chain of 3
    pytest.param(make_view([(1, [-1])] * 4 + [(2, [0, 1]), (2, [4, 2]), (2, [5, 3])]), 1 + 3,
                 id="left-deep tree, two types"),
    # a leaf-typed node above an internal node: leaves now chain in 2
    pytest.param(make_view([(1, [-1]), (1, [-1]), (2, [0, 1]), (1, [2])]), 2 + 1,
                 id="tree with a leaf type above an internal node"),
    # unbatchable nodes count one each, even when independent and alike
    pytest.param(make_view([(1, [-1]), (1, [-1]), (1, [-1])], unbatchable=[1]), 3, id="3 unbatchable"),
    pytest.param(make_view(chain([1, 2, 1]) + [(2, [-1])], unbatchable=[2]), 2 + 2,
                 id="chain with unbatchable nodes"),
    pytest.param(make_view([(1, [-1]), (1, [-1]), (2, [0]), (2, [1]), (3, [2, 3])], unbatchable=[2]),
                 1 + 2 + 1, id="py_func per instance between batchable ops"),
])
def test_lower_bound_by_hand(view, expected):
    assert lower_bound(view) == expected
    for name, policy in POLICIES.items():
        order, bptr = policy(view)
        assert len(bptr) - 1 >= expected, name


def test_agenda_meets_the_bound_where_depth_cannot():
    # two chains of lengths 1 and 3 of signature 1, each followed by one signature-2 node
    view = make_view(chain([1, 2]) + chain([1, 1, 1, 2], start=2))
    assert lower_bound(view) == 3 + 1
    assert len(agenda(view)[1]) - 1 == 4
    assert len(by_depth(view)[1]) - 1 == 5        # the two 2-nodes sit at depths 2 and 4


def test_agenda_keeps_consumers_of_unbatchable_nodes_together():
    # two instances of x -> f (batchable, sig 1) -> g (unbatchable, sig 2) -> f
    view = make_view([(1, [-1]), (1, [-1]), (2, [0]), (2, [1]), (1, [2]), (1, [3])],
                     unbatchable=[2], cost=[0, 0, 1])
    assert lower_bound(view) == 2 + 2
    assert len(by_depth(view)[1]) - 1 == 4
    assert len(agenda(view)[1]) - 1 == 4      # today: 5, the last f runs as [1], [1]


# ---------------------------------------------------------------------------------------
# Lower bound through real scopes
# ---------------------------------------------------------------------------------------
def _vec(seed, n=H):
    return np.random.default_rng(seed).standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("policy", ["agenda", "depth"])
def test_scope_single_chain(policy):
    with hb.batching(policy=policy) as scope:
        h = hb.array(_vec(0))
        for _ in range(5):
            h = hb.tanh(h)
    assert (scope.stats.nodes, scope.stats.lower_bound, scope.stats.batches) == (5, 5, 5)
    np.testing.assert_allclose(h.asnumpy(), np.tanh(np.tanh(np.tanh(np.tanh(np.tanh(_vec(0)))))), rtol=1e-6)


@pytest.mark.parametrize("policy", ["agenda", "depth"])
def test_scope_two_independent_chains(policy):
    with hb.batching(policy=policy) as scope:
        ends = []
        for n in (3, 6):
            h = hb.array(_vec(n))
            for _ in range(n):
                h = hb.tanh(h)
            ends.append(h)
    assert (scope.stats.nodes, scope.stats.lower_bound, scope.stats.batches) == (9, 6, 6)
    assert scope.plans[0].sizes == [2, 2, 2, 1, 1, 1]


@pytest.mark.parametrize("policy", ["agenda", "depth"])
def test_scope_diamond(policy):
    with hb.batching(policy=policy) as scope:
        a = hb.tanh(hb.array(_vec(0)))
        b, c = hb.tanh(a), hb.tanh(a)         # one signature: one batch
        d = b + c
    assert (scope.stats.nodes, scope.stats.lower_bound, scope.stats.batches) == (4, 3, 3)
    t = np.tanh(np.tanh(_vec(0)))
    np.testing.assert_allclose(d.asnumpy(), 2 * t, rtol=1e-6)


@pytest.mark.parametrize("policy", ["agenda", "depth"])
def test_scope_tree_with_two_node_types(policy):
    # 8 leaves tanh(x); internal nodes l + r: a balanced tree has 3 levels of adds
    with hb.batching(policy=policy) as scope:
        level = [hb.tanh(hb.array(_vec(i))) for i in range(8)]
        while len(level) > 1:
            level = [level[i] + level[i + 1] for i in range(0, len(level), 2)]
    assert (scope.stats.nodes, scope.stats.lower_bound, scope.stats.batches) == (8 + 7, 1 + 3, 4)
    assert scope.plans[0].sizes == [8, 4, 2, 1]
    np.testing.assert_allclose(level[0].asnumpy(), sum(np.tanh(_vec(i)) for i in range(8)), rtol=1e-5)


@pytest.mark.parametrize("policy", ["agenda", "depth"])
def test_scope_py_func_counts_one_per_node(policy):
    def double(x):
        return 2 * x

    with hb.batching(policy=policy) as scope:
        ys = [hb.tanh(hb.py_func(double, hb.tanh(hb.array(_vec(i))), out_shape=(H,))) for i in range(3)]
    plan = scope.plans[0]
    assert (scope.stats.nodes, scope.stats.lower_bound, scope.stats.batches) == (9, 1 + 3 + 1, 5)
    assert batches_of(plan, "py_func") == [1, 1, 1]
    assert batches_of(plan, "tanh") == [3, 3]
    for i, y in enumerate(ys):
        np.testing.assert_allclose(y.asnumpy(), np.tanh(2 * np.tanh(_vec(i))), rtol=1e-6)


def test_scope_lower_bound_sums_over_flushes():
    with hb.batching() as scope:
        h = hb.array(_vec(0))
        for _ in range(3):
            h = hb.tanh(h)
        first = h.asnumpy()                   # flush 1: 3 nodes
        for _ in range(2):
            h = hb.tanh(h)                    # flush 2 reads flush 1's value (operand -1)
    st_ = scope.stats
    assert (st_.flushes, st_.nodes, st_.lower_bound, st_.batches) == (2, 5, 3 + 2, 5)
    assert [p.lower_bound() for p in scope.plans] == [3, 2]
    np.testing.assert_allclose(h.asnumpy(), np.tanh(np.tanh(first)), rtol=1e-6)


def test_custom_policy_callable_is_used_and_unknown_names_rejected():
    seen = []

    def recording_policy(view):
        seen.append(lower_bound(view))
        return by_depth(view)

    assert get_policy(recording_policy) is recording_policy
    with hb.batching(policy=recording_policy) as scope:
        hb.tanh(hb.tanh(hb.array(_vec(0))))
    assert seen == [2] and scope.stats.batches == 2
    with pytest.raises(ValueError, match="unknown batching policy"):
        hb.batching(policy="fastest")
    with pytest.raises(ValueError, match="hb.learn_policy"):      # learned policies are objects
        hb.batching(policy="fsm-sort")
    with pytest.raises(ValueError, match="unknown batching policy"):
        hb.batching(policy=["agenda"])


def _batches_of(view):
    order, bptr = agenda(view)
    return [order[bptr[i]:bptr[i + 1]] for i in range(len(bptr) - 1)]


def _joined(batches):
    return np.concatenate(batches), np.r_[0, np.cumsum([len(b) for b in batches])]


@pytest.mark.parametrize("make, problem", [
    (lambda view: _joined(_batches_of(view)[::-1]), "runs before one of its operands"),
    (lambda view: (agenda(view)[0], np.array([0, len(agenda(view)[0])])), "mixes signatures"),
    (lambda view: _joined(_batches_of(view)[:-1]), "missing from the order"),
    (lambda view: _joined(_batches_of(view) + _batches_of(view)[-1:]), "appears twice"),
    (lambda view: (agenda(view)[0], np.r_[0, agenda(view)[1]]), "rise strictly"),
    (lambda view: (agenda(view)[0].astype(np.float64), agenda(view)[1]), "1-D array of integers"),
    (lambda view: (np.r_[0, agenda(view)[0]], np.r_[0, agenda(view)[1] + 1]), "not an executed node"),
])
def test_a_custom_policy_returning_an_invalid_schedule_is_a_clear_error(make, problem):
    """Arenas start uninitialized: running such a schedule gave wrong values (a chain's batches
    in reverse read rows not yet computed) instead of an error."""
    W = hb.Parameter("bad_policy_W", (3, 3), rng=np.random.default_rng(0))

    def model():
        return hb.sum(hb.tanh(W @ hb.tanh(W @ hb.array(np.ones(3, np.float32)))))

    def broken(view):
        return make(view)

    expected = model().asnumpy()
    for cache_size in (32, 0):
        with hb.settings(plan_cache_size=cache_size):
            with pytest.raises(ValueError, match=f"policy broken returned an invalid schedule: .*{problem}"):
                with hb.batching(policy=broken):
                    model()
    with hb.batching(policy=lambda view: _joined(_batches_of(view))):    # a valid one still runs
        y = model()
    np.testing.assert_allclose(y.asnumpy(), expected, rtol=1e-6)


# ---------------------------------------------------------------------------------------
# Scheduler invariants on random GraphViews
# ---------------------------------------------------------------------------------------
def reference_lower_bound(view):
    """Eq. 2 from its definition: per signature, the longest chain of its executed nodes in
    which each reaches the next (transitive closure), plus one per unbatchable node."""
    n = len(view.sig)
    reach = [set() for _ in range(n)]           # reach[v]: nodes v depends on
    for v in range(n):
        for u in view.args[view.arg_ptr[v]:view.arg_ptr[v + 1]]:
            if u >= 0:
                reach[v] |= reach[u] | {int(u)}
    total = 0
    for s in range(view.n_sigs):
        members = [v for v in range(n) if view.executable[v] and view.sig[v] == s]
        if view.unbatchable[s]:
            total += len(members)
            continue
        longest = {}
        for v in members:
            longest[v] = 1 + max([longest[u] for u in members if u in reach[v] and u in longest], default=0)
        total += max(longest.values(), default=0)
    return total


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(graph_views())
def test_policies_return_valid_schedules_not_below_the_bound(view):
    lb = lower_bound(view)
    assert lb == reference_lower_bound(view)
    for name, policy in POLICIES.items():
        nb = check_schedule(view, *policy(view))
        assert nb >= lb, name


@SETTINGS
@given(graph_views())
def test_depth_batches_are_exactly_the_depth_signature_groups(view):
    ex = np.flatnonzero(view.executable)
    batchable = [v for v in ex if not view.unbatchable[view.sig[v]]]
    groups = {(int(view.depth[v]), int(view.sig[v])) for v in batchable}
    _, bptr = by_depth(view)
    assert len(bptr) - 1 == len(groups) + (len(ex) - len(batchable))


@SETTINGS
@given(graph_views(max_nodes=30))
def test_disjoint_copies_batch_side_by_side(view):
    """Two disjoint copies of a graph run side by side: by depth, in one copy's batches plus
    one per extra unbatchable node; by agenda (all signatures batchable), in exactly one
    copy's batches, since twins become ready together and are never split."""
    n = len(view.sig)
    n_unbatchable = int(view.executable[view.unbatchable[view.sig]].sum())

    def doubled(v):
        return GraphView(np.concatenate([v.sig, v.sig]), np.concatenate([v.depth, v.depth]),
                         np.concatenate([v.arg_ptr[:-1], v.arg_ptr + len(v.args)]),
                         np.concatenate([v.args, np.where(v.args >= 0, v.args + n, -1)]),
                         np.concatenate([v.executable, v.executable]), v.unbatchable, v.cost)

    twice = doubled(view)
    assert lower_bound(twice) == lower_bound(view) + n_unbatchable
    assert check_schedule(twice, *by_depth(twice)) == check_schedule(view, *by_depth(view)) + n_unbatchable
    # agenda's state stays symmetric between the copies when every signature batches
    all_batchable = GraphView(view.sig, view.depth, view.arg_ptr, view.args, view.executable,
                              np.zeros_like(view.unbatchable), view.cost)
    twice = doubled(all_batchable)
    assert check_schedule(twice, *agenda(twice)) == check_schedule(all_batchable, *agenda(all_batchable))
