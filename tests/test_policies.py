"""Scheduling policies beyond agenda/depth: ED-Batch's frontier heuristic and learned FSMs,
the critical path, and our phase-aware FSM.

  * ED-Batch Fig. 1 (internal I, output O, reduction R): the FSM runs every O in one batch,
    depth and agenda do not;
  * the lower bound by hand, and which policies reach it;
  * valid schedules on random DAGs, batched = eager through hb.batching(policy=...);
  * a saved policy gives the same schedules in a new process;
  * learning reaches the bound on chains and trees, in well under 10 s;
  * lattice and two-type tree shapes (synthetic views): where ED-Batch's FSM struggles;
  * clear errors, and graceful fallback on types never seen.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import hybridbatch as hb
from hybridbatch import nn
from hybridbatch.record import signature
from hybridbatch.schedule import POLICIES, agenda, get_policy, lower_bound
from hybridbatch.schedule.frontier import critical_path, greedy_frontier
from hybridbatch.schedule.fsm import FSMPolicy
from hybridbatch.schedule.learn import learn_views
from hybridbatch.schedule.offline.bounds import grouped_bound, path_bound, tight_lower_bound
from hybridbatch.schedule.offline.search import rollout_search
from graphs import (LABELS, XS, build, chain, chain_loss, check_schedule, graph_views, make_view, n_batches,
                    optimum, run_chains)

ENCODINGS = ("base", "max", "sort", "phase")
H = 8


def named(view):
    """The view with a stable key per signature (hand-made views have none)."""
    view.sig_keys = tuple(f"t{s}" for s in range(view.n_sigs))
    return view


# ---------------------------------------------------------------------------------------
# ED-Batch Fig. 1, as hybridized blocks of three signatures
# ---------------------------------------------------------------------------------------
class Internal(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.weight = hb.Parameter("fig1_internal", (H, 2 * H), rng=np.random.default_rng(1))

    def forward(self, left, right):
        return hb.tanh(self.weight @ hb.concat([left, right]))


class Output(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.weight = hb.Parameter("fig1_output", (H, H), rng=np.random.default_rng(2))

    def forward(self, h):
        return hb.sum(hb.tanh(self.weight @ h))


class Reduce(hb.HybridBlock):
    def forward(self, *xs):
        return hb.add_n(xs)


INTERNAL, OUTPUT, REDUCE = Internal(), Output(), Reduce()
for _block in (INTERNAL, OUTPUT, REDUCE):
    _block.hybridize()


def fig1_tree(leaves):
    """The left-deep tree of Fig. 1(a) over 4 leaves: I nodes at depths 1-3, an O on every
    leaf and I node (depths 1, 1, 1, 1, 2, 3, 4), one R over the 7 O's."""
    xs = [hb.array(x) for x in leaves]
    h, hs = xs[0], []
    for x in xs[1:]:
        h = INTERNAL(h, x)
        hs.append(h)
    return REDUCE(*[OUTPUT(v) for v in xs + hs])


def fig1_samples(n, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(H).astype(np.float32) for _ in range(4)] for _ in range(n)]


@pytest.fixture(scope="module")
def fig1_policy():
    return hb.learn_policy(fig1_tree, fig1_samples(2), encoding="sort", progress=False)


def run_fig1(policy, samples):
    with hb.batching(policy=policy, granularity="block") as scope:
        roots = [fig1_tree(x) for x in samples]
    return scope, [float(r.asnumpy()) for r in roots]


def output_batches(scope):
    return [size for sig, size in zip(scope.plans[0].batch_sig, scope.plans[0].sizes)
            if signature.SIGS[sig].op.name == "block:Output"]


def test_fig1_fsm_runs_all_outputs_in_one_batch_where_depth_and_agenda_cannot(fig1_policy):
    samples = fig1_samples(5, seed=3)
    scope, _ = run_fig1(fig1_policy, samples)
    assert output_batches(scope) == [7 * 5]
    assert scope.stats.batches == scope.stats.lower_bound == 5      # I, I, I, O, R
    for policy in ("depth", "agenda"):
        scope, _ = run_fig1(policy, samples)
        assert len(output_batches(scope)) > 1, policy
        assert scope.stats.batches == 8, policy


def test_fig1_keys_name_blocks_not_interned_ids():
    with hb.batching(policy=agenda, granularity="block") as scope:
        fig1_tree(fig1_samples(1)[0])
    keys = scope.plans[0].view.sig_keys
    assert len(keys) == len(set(keys)) == scope.plans[0].view.n_sigs
    assert "block:Internal()(float32[8], float32[8])" in keys
    assert "block:Output()(float32[8])" in keys


def test_input_and_extra_output_keys_name_their_type_not_its_interned_id():
    """Input and extra-output signatures carry an interned type id in their attrs: their keys
    named it ('input(0)()'), which differs between processes that interned types in another
    order (the saved policy's new-process check failed after other tests ran first)."""
    class Pair(hb.HybridBlock):
        def forward(self, x):
            return x * 2, hb.tanh(x)

    pair = Pair()
    pair.hybridize()
    signature.type_id((7, 1), np.dtype(np.float16))     # a type no earlier test interned
    with hb.batching(policy=agenda, granularity="block") as scope:
        hb.array(np.zeros((7, 1), np.float16))
        pair(np.zeros(3, np.float32))
    keys = set(scope.plans[0].view.sig_keys)
    assert keys == {"input->float16[7, 1]", "input->float32[3]", "output(1)->float32[3]",
                    "block:Pair()(float32[3])"}


def test_two_instances_of_one_block_are_told_apart_by_parameter_age():
    older, newer = Internal(), Internal()          # TreeLSTM-2Type's two cells, in miniature
    older.hybridize()
    newer.hybridize()
    x = np.ones(H, np.float32)
    for first, second in ((older, newer), (newer, older)):     # whichever the flush meets first
        with hb.batching(policy=agenda, granularity="block") as scope:
            first(x, x)
            second(x, x)
        plan = scope.plans[0]
        name = {signature.SIGS[g].op.owner_block: plan.view.sig_keys[plan.view.sig[plan.order[b]]]
                for g, b in zip(plan.batch_sig, plan.bptr[:-1])}
        assert name[older] == "block:Internal()(float32[8], float32[8])"
        assert name[newer] == name[older] + "#2"


# ---------------------------------------------------------------------------------------
# The lower bound by hand, and who reaches it
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("nodes, bound, reached_by", [
    pytest.param(chain(["a"] * 6), 6, ("greedy-frontier", "critical-path"), id="chain"),
    pytest.param(chain(["a"] * 3) + chain(["a"] * 5, start=3), 5, ("greedy-frontier", "critical-path"),
                 id="two chains, one type"),
    pytest.param(chain(["a", "b"] * 3), 6, ("greedy-frontier", "critical-path"),
                 id="chain, two types alternating"),
    # two chains a b a b / b a b a: 'ab' interleavings need one more batch than each alone
    pytest.param(chain(["a", "b", "a", "b"]) + chain(["b", "a", "b", "a"], start=4), 4, (),
                 id="two types interleaved in opposite orders"),
    pytest.param([("a", [-1]), ("b", [0]), ("b", [0]), ("c", [1, 2])], 3,
                 ("greedy-frontier", "critical-path"), id="diamond"),
    pytest.param([("a", [-1]), ("b", [0]), ("c", [0]), ("a", [1, 2])], 2 + 1 + 1,
                 ("greedy-frontier", "critical-path"), id="diamond, sides differ, same type at both ends"),
    # a short chain of a's next to a long chain ending in one: the a's must wait
    pytest.param(chain(["a", "c"]) + chain(["b", "b", "b", "a", "c"], start=2), 1 + 3 + 1,
                 ("greedy-frontier", "critical-path"), id="one type at different depths"),
])
def test_lower_bound_by_hand_and_policies_reaching_it(nodes, bound, reached_by):
    view = build(nodes)
    assert lower_bound(view) == bound
    for name in ("agenda", "depth", "greedy-frontier", "critical-path"):
        got = n_batches(POLICIES[name], view)
        assert got >= bound, name
        if name in reached_by:
            assert got == bound, name
    policy = learn_views([view], "sort", episodes=50, progress=False)
    assert n_batches(policy, view) == policy.batches >= bound


def test_opposite_interleavings_need_one_batch_over_the_bound():
    view = build(chain(["a", "b", "a", "b"]) + chain(["b", "a", "b", "a"], start=4))
    # the shortest common supersequence of abab and baba has 5 letters
    for name in ("agenda", "greedy-frontier", "critical-path"):
        assert n_batches(POLICIES[name], view) == 5, name


# ---------------------------------------------------------------------------------------
# Valid schedules on random DAGs; batched equals eager
# ---------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_views(), graph_views(max_nodes=30))
def test_every_policy_returns_a_valid_schedule_not_below_the_bound(view, other):
    view, other = named(view), named(other)
    policies = {name: POLICIES[name] for name in ("greedy-frontier", "critical-path")}
    for encoding in ENCODINGS:         # learned on one graph, applied to both
        policies[encoding] = learn_views([view], encoding, episodes=3, progress=False)
    for target in (view, other):
        lb = lower_bound(target)
        for name, policy in policies.items():
            assert n_batches(policy, target) >= lb, name


@pytest.mark.parametrize("policy", ["tail-last", "greedy-frontier", "critical-path", "search", "fsm"])
def test_batched_values_and_gradients_equal_eager(policy, fig1_policy):
    policy = fig1_policy if policy == "fsm" else policy
    samples = fig1_samples(6, seed=5)
    weights = (INTERNAL.weight, OUTPUT.weight)
    for p in weights:
        p.zero_grad()
    eager = [fig1_tree(x) for x in samples]
    hb.add_n(eager).backward()
    want = [p.grad.copy() for p in weights]
    for p in weights:
        p.zero_grad()
    try:
        with hb.batching(policy=policy, granularity="block"):
            roots = [fig1_tree(x) for x in samples]
            total = hb.add_n(roots)
        total.backward()
        np.testing.assert_allclose([r.asnumpy() for r in roots], [e.asnumpy() for e in eager], rtol=1e-5)
        for p, w in zip(weights, want):
            np.testing.assert_allclose(p.grad, w, rtol=1e-4, atol=1e-6)
    finally:
        for p in weights:
            p.zero_grad()


def test_chain_losses_equal_eager_under_a_learned_policy():
    policy = hb.learn_policy(lambda xy: chain_loss(*xy), list(zip(XS[:8], LABELS[:8])), granularity="op",
                             progress=False)
    scope, losses = run_chains(policy)
    eager = [chain_loss(x, y) for x, y in zip(XS, LABELS)]
    np.testing.assert_allclose([l.asnumpy() for l in losses], [e.asnumpy() for e in eager], rtol=1e-5)
    assert scope.stats.batches == scope.stats.lower_bound


# ---------------------------------------------------------------------------------------
# Save / load
# ---------------------------------------------------------------------------------------
CHILD = """
import json, sys
import hybridbatch as hb
import test_policies as t
policy = hb.FSMPolicy.load(sys.argv[1])
scope, values = t.run_fig1(policy, t.fig1_samples(5, seed=3))
plan = scope.plans[0]
print(json.dumps([plan.order.tolist(), plan.bptr.tolist(), list(plan.view.sig_keys)]))
"""


def test_saved_policy_gives_identical_schedules_in_a_new_process(fig1_policy, tmp_path):
    path = tmp_path / "fig1.json"
    fig1_policy.save(path)
    loaded = hb.FSMPolicy.load(path)
    assert loaded.to_json() == fig1_policy.to_json() == json.loads(path.read_text())
    scope, _ = run_fig1(fig1_policy, fig1_samples(5, seed=3))
    plan = scope.plans[0]
    path_var = os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path_var)
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, env=env,
                         timeout=300, check=True)
    order, bptr, keys = json.loads(out.stdout.strip().splitlines()[-1])
    assert keys == list(plan.view.sig_keys)
    assert order == plan.order.tolist() and bptr == plan.bptr.tolist()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_round_trip_keeps_the_schedule_for_every_encoding(encoding, tmp_path):
    view = lattice_view(12, seed=0)
    policy = learn_views([view], encoding, episodes=20, progress=False)
    policy.save(tmp_path / "p.json")
    loaded = hb.FSMPolicy.load(tmp_path / "p.json")
    for target in (view, lattice_view(12, seed=1)):
        for a, b in zip(policy.schedule(target), loaded.schedule(target)):
            np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------------------
# Learning reaches the bound on chains and trees, fast
# ---------------------------------------------------------------------------------------
def random_trees(n_trees, seed):
    """Random binary trees of Fig. 1's blocks: leaves are inputs, an O on every node."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_trees):
        level = [rng.standard_normal(H).astype(np.float32) for _ in range(int(rng.integers(2, 12)))]
        out.append(level)
    return out


def tree_model(leaves):
    rng = np.random.default_rng(len(leaves))
    nodes = [hb.array(x) for x in leaves]
    outs = [OUTPUT(v) for v in nodes]
    while len(nodes) > 1:
        i = int(rng.integers(len(nodes) - 1))
        nodes[i:i + 2] = [INTERNAL(nodes[i], nodes[i + 1])]
        outs.append(OUTPUT(nodes[i]))
    return REDUCE(*outs)


@pytest.mark.parametrize("workload", ["chains", "trees"])
@pytest.mark.parametrize("encoding", ["sort", "phase"])
def test_learning_reaches_the_lower_bound_quickly(workload, encoding):
    if workload == "chains":
        model, samples, granularity = (lambda xy: chain_loss(*xy)), list(zip(XS, LABELS)), "op"
    else:
        model, samples, granularity = tree_model, random_trees(32, seed=0), "block"
    learn_views([build(chain(["a", "b"]))], encoding, episodes=1, progress=False)     # compiled
    start = time.perf_counter()
    policy = hb.learn_policy(model, samples, encoding=encoding, granularity=granularity, progress=False)
    assert time.perf_counter() - start < 10
    assert policy.batches == policy.lower_bound
    with hb.batching(policy=policy, granularity=granularity) as scope:       # another minibatch
        if workload == "chains":
            [chain_loss(x, y) for x, y in zip(XS[::-1], LABELS[::-1])]
        else:
            [tree_model(x) for x in random_trees(32, seed=1)]
    assert scope.stats.batches == scope.stats.lower_bound


def test_learning_shows_progress_on_stderr(capsys):
    learn_views([build(chain(["a", "b"] * 3))], "sort", episodes=5)
    assert "learn_policy[sort]" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------
# Where ED-Batch's FSM struggles: lattices and two-type trees (synthetic views)
# ---------------------------------------------------------------------------------------
def lattice_view(n_sentences, seed, mean_len=24):
    """Lattice LSTM shapes: per sentence a chain of character cells, typed by how many word
    cells end there (c0, c1, c2), word cells w reading the character where they start, and a
    chained output o per character."""
    rng = np.random.default_rng(seed)
    nodes = []
    for _ in range(n_sentences):
        length = max(3, int(rng.normal(mean_len, mean_len / 3)))
        starts = {}
        for _ in range(rng.binomial(length, 0.6)):
            b = int(rng.integers(0, length - 2))
            starts.setdefault(b, []).append(min(length - 1, b + int(rng.integers(2, 4))))
        ending, char, out = {}, -1, -1
        for j in range(length):
            words = ending.pop(j, [])[:2]
            nodes.append((f"c{len(words)}", [char] + words))
            char = len(nodes) - 1
            nodes.append(("o", [char, out]))
            out = len(nodes) - 1
            for end in starts.get(j, []):
                nodes.append(("w", [char]))
                ending.setdefault(end, []).append(len(nodes) - 1)
    return build(nodes)


def two_type_tree_view(n_trees, seed):
    """TreeLSTM-2Type shapes: leaves l, internal nodes of type a or b at random."""
    rng = np.random.default_rng(seed)
    nodes = []
    for _ in range(n_trees):
        level = []
        for _ in range(int(rng.integers(3, 30))):
            nodes.append(("l", [-1]))
            level.append(len(nodes) - 1)
        while len(level) > 1:
            i = int(rng.integers(len(level) - 1))
            nodes.append(("a" if rng.random() < 0.5 else "b", level[i:i + 2]))
            level[i:i + 2] = [len(nodes) - 1]
    return build(nodes)


@pytest.mark.parametrize("make", [lattice_view, two_type_tree_view], ids=["lattice", "two-type trees"])
def test_learned_policies_beat_the_frontier_heuristic_and_agenda(make):
    train, held_out = make(32, seed=0), make(32, seed=1)
    fsm = {enc: learn_views([train], enc, episodes=100, progress=False) for enc in ("sort", "phase")}
    fewer = 1.5 if make is lattice_view else 1.2
    for view in (train, held_out):
        got = {name: n_batches(p, view) for name, p in fsm.items()}
        assert min(got.values()) <= n_batches(greedy_frontier, view)
        assert got["phase"] <= n_batches(critical_path, view)
        assert n_batches(agenda, view) >= fewer * max(got.values())


def test_frontier_ratio_heuristic_beats_agenda_on_lattices():
    view = lattice_view(32, seed=2)
    assert n_batches(agenda, view) >= 1.5 * n_batches(greedy_frontier, view)


# ---------------------------------------------------------------------------------------
# Errors and fallbacks
# ---------------------------------------------------------------------------------------
def test_unknown_encoding_is_rejected():
    with pytest.raises(ValueError, match="unknown state encoding 'fancy'"):
        hb.learn_policy(fig1_tree, fig1_samples(1), encoding="fancy")
    with pytest.raises(ValueError, match="unknown state encoding"):
        hb.FSMPolicy(["t0"], "fancy", [], [])


@pytest.mark.parametrize("text, why", [
    ("{not json", "not a saved FSM policy"),
    ('{"format": "something else"}', "format"),
    ('{"format": "hybridbatch.fsm-policy/1", "encoding": "sort", "types": ["a"]}', "states"),
    ('{"format": "hybridbatch.fsm-policy/1", "encoding": "sort", "types": ["a"], "states": [[0]], '
     '"actions": [3]}', "whose action is one of its ready types"),
    ('{"format": "hybridbatch.fsm-policy/1", "encoding": "sort", "types": ["a", "b"], "states": [[1.5]], '
     '"actions": [1]}', "must hold integers"),      # was read as state [1]: int() truncated it
    ('{"format": "hybridbatch.fsm-policy/1", "encoding": "sort", "types": ["a"], "states": [[0]], '
     '"actions": [0.0]}', "must hold integers"),
    ('[1, 2]', "not a saved FSM policy"),
])
def test_loading_a_malformed_file_names_it(tmp_path, text, why):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="bad.json") as info:
        hb.FSMPolicy.load(path)
    assert why in str(info.value)


def test_types_never_seen_fall_back_to_the_heuristic():
    policy = learn_views([build(chain(["a", "b"] * 4))], "sort", episodes=10, progress=False)
    strange = build(chain(["x", "y", "x"]) + chain(["y", "x"], start=3))
    order, bptr, fallbacks = policy.schedule(strange)
    # every step falls back to the frontier ratio, but those whose signature is ready in
    # full (see the next test)
    assert 0 < fallbacks < check_schedule(strange, order, bptr) == n_batches(greedy_frontier, strange)
    mixed = build(chain(["a", "b", "z", "a", "z", "b"]))       # known types, and an unknown one among them
    order, bptr, fallbacks = policy.schedule(mixed)
    assert check_schedule(mixed, order, bptr) == 6 and 0 < fallbacks < 6


def test_signatures_ready_in_full_need_no_state():
    """One sum per chain, each of its own arity (a signature of its own, unseen in training),
    as per-sentence loss sums are: the table never falls back for them."""
    policy = learn_views([build(chain(["a", "b"] * 3))], "sort", episodes=10, progress=False)
    nodes = chain(["a", "b"] * 3) + chain(["a", "b"] * 2, start=6)
    nodes += [("sum1", [5]), ("sum2", [9]), ("total", [10, 11])]
    view = build(nodes)
    order, bptr, fallbacks = policy.schedule(view)
    assert fallbacks == 0
    assert check_schedule(view, order, bptr) == lower_bound(view) == 9


def test_an_unseen_state_backs_off_to_the_longest_known_state_inside_it():
    """Chains a-b and c-d learned apart; run side by side, every state ({a, c}, {b, d}, ...)
    is new, but each holds states the table knows."""
    learned = learn_views([build(chain(["a", "b"] * 3)), build(chain(["c", "d"] * 3))], "base", episodes=10,
                          progress=False)
    assert learned.backoff                # no fewer batches without it on the samples: kept
    view = build(chain(["a", "b"] * 3) + chain(["c", "d"] * 3, start=6))
    order, bptr, fallbacks = learned.schedule(view)
    assert fallbacks == 0
    assert check_schedule(view, order, bptr) == n_batches(greedy_frontier, view) == 12
    assert learned.with_backoff(False).schedule(view)[2] > 0  # without it, the fallback rule decides


def test_backoff_is_saved_and_older_files_back_off(tmp_path):
    policy = FSMPolicy(["a", "b"], "sort", [[0, 4]], [1], backoff=False)
    policy.save(tmp_path / "p.json")
    assert FSMPolicy.load(tmp_path / "p.json").backoff is False
    data = policy.to_json()
    del data["backoff"]
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert FSMPolicy.load(tmp_path / "old.json").backoff is True


def test_capture_needs_samples_and_a_positive_batch_size():
    with pytest.raises(ValueError, match="recorded nothing"):
        hb.learn_policy(fig1_tree, [], encoding="sort", progress=False)
    with pytest.raises(ValueError, match="batch_size must be a positive"):
        hb.learn_policy(fig1_tree, fig1_samples(2), encoding="sort", progress=False, batch_size=0)


def test_capture_sees_every_minibatch_even_of_a_structure_seen_before():
    """The plan cache served the second and third minibatch (same structure, same capturing
    policy) without calling the policy: 1 view was captured for 3 minibatches."""
    from hybridbatch.schedule.learn import capture_views
    W = hb.Parameter("capture_W", (4, 4), rng=np.random.default_rng(0))

    def chain(n):
        h = hb.array(np.ones(4, np.float32))
        for _ in range(n):
            h = hb.tanh(W @ h)
        return hb.sum(h)

    assert len(capture_views(chain, [3, 5] * 3, batch_size=2)) == 3


def test_learning_needs_named_types():
    view = make_view(chain([1, 2]))
    with pytest.raises(ValueError, match="sig_key"):
        learn_views([view], "sort", episodes=1, progress=False)
    assert check_schedule(view, *learn_views([build(chain(["a"]))], "sort", episodes=1, progress=False)(view))


def test_policies_are_registered_by_name():
    assert get_policy("greedy-frontier") is greedy_frontier
    assert get_policy("critical-path") is critical_path


# ---------------------------------------------------------------------------------------
# The path-pair bound: tighter where types interleave, never above the optimum
# ---------------------------------------------------------------------------------------
def test_path_bound_sees_opposite_interleavings():
    view = build(chain(["a", "b", "a", "b"]) + chain(["b", "a", "b", "a"], start=4))
    assert lower_bound(view) == 4
    assert path_bound(view) == tight_lower_bound(view) == 5     # |SCS(abab, baba)|


def test_grouped_bound_sees_interleavings_beside_an_output_chain():
    """A lattice in miniature: two chains with types in opposite orders, and a chain of
    outputs reading the first. Eq. 2 counts a, b and o apart (2 + 2 + 4); the path pairs
    mix the outputs into the a/b sequences; grouping {a, b} apart from {o} gives
    |SCS(abab, baba)| + 4 = 9, which the optimum reaches."""
    nodes = chain(["a", "b", "a", "b"]) + chain(["b", "a", "b", "a"], start=4)
    prev = -1
    for j in range(4):
        nodes.append(("o", [j, prev]))
        prev = len(nodes) - 1
    view = build(nodes)
    assert lower_bound(view) == 8
    assert grouped_bound(view) == tight_lower_bound(view) == optimum(view) == 9
    assert path_bound(view) < 9


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_views(max_nodes=14))
def test_tight_bound_never_exceeds_the_optimum(view):
    best = optimum(view)
    assert lower_bound(view) <= tight_lower_bound(view) <= best
    for name in ("tail-last", "agenda", "critical-path", "search"):
        assert n_batches(POLICIES[name], view) >= best


# ---------------------------------------------------------------------------------------
# Search: looks ahead where the ready set alone misleads
# ---------------------------------------------------------------------------------------
def test_search_finds_the_supersequence_critical_path_misses():
    """Chains bbaa and abbb: both paths are 4 long, and critical path's tie-break runs b
    first (7 batches). One step of look-ahead finds abbbaa, the shortest common supersequence."""
    view = build(chain(list("bbaa")) + chain(list("abbb"), start=4))
    assert n_batches(POLICIES["critical-path"], view) == 7
    assert optimum(view) == 6
    for width in (1, 4):
        assert n_batches(lambda v: rollout_search(v, width), view) == 6, width


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_views())
def test_search_is_valid_and_never_behind_the_heuristics(view):
    best = min(n_batches(POLICIES[name], view) for name in ("critical-path", "tail-last", "agenda", "greedy-frontier"))
    for width in (1, 3):
        assert lower_bound(view) <= n_batches(lambda v: rollout_search(v, width), view) <= best, width


def test_search_width_must_be_positive():
    with pytest.raises(ValueError, match="width must be at least 1"):
        rollout_search(build(chain(["a"])), 0)


def test_backoff_must_be_a_boolean(tmp_path):
    data = FSMPolicy(["a"], "sort", [[0]], [0]).to_json()
    data["backoff"] = "false"
    (tmp_path / "p.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not a saved FSM policy: backoff must be true or false"):
        FSMPolicy.load(tmp_path / "p.json")


def test_critical_path_runs_losses_summed_by_a_running_total_after_the_recurrence():
    """`sum(losses)` chains the per-step losses: the output layer then looked as critical as
    the recurrence and ran once per step beside it (13 batches where the bound is 11)."""
    rng = np.random.default_rng(0)
    emb, cell, out = nn.Embedding(7, 3, seed=0), nn.LSTMCell(4, 3, seed=1), nn.Dense(7, 4, seed=2)
    cell.hybridize()
    out.hybridize()

    def loss(words):
        h = c = np.zeros(4, np.float32)
        losses = []
        for w, following in zip(words[:-1], words[1:]):
            h, c = cell(emb(w), h, c)
            losses.append(hb.pick_neg_log_softmax(out(h), following))
        return sum(losses)

    sentences = [[int(w) for w in rng.integers(0, 7, n)] for n in rng.integers(2, 6, 6)]
    with hb.batching(policy="critical-path") as scope:
        hb.add_n([loss(s) for s in sentences])
    assert scope.stats.batches == scope.stats.lower_bound == 11
