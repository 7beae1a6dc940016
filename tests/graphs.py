"""Graphs shared by the scheduling tests: the 64 chains recorded through a scope, hand-made and
random GraphViews, the check that a schedule is valid, and the fewest batches by brute force."""
import numpy as np
from hypothesis import strategies as st

import hybridbatch as hb
from hybridbatch.schedule import GraphView


# ---------------------------------------------------------------------------------------
# 64 chains h = tanh(W @ concat([h, x]) + b), lengths 2..40, one loss each
# ---------------------------------------------------------------------------------------
N_CHAINS, H, X, MIN_LEN, MAX_LEN = 64, 16, 8, 2, 40


def _chain_data(seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(MIN_LEN, MAX_LEN + 1, N_CHAINS)
    lengths[rng.choice(N_CHAINS, 2, replace=False)] = (MIN_LEN, MAX_LEN)   # both extremes present
    xs = [[rng.standard_normal(X).astype(np.float32) for _ in range(n)] for n in lengths]
    labels = rng.integers(0, H, N_CHAINS)
    return lengths, xs, labels


LENGTHS, XS, LABELS = _chain_data()
W = hb.Parameter("sched_W", (H, H + X), rng=np.random.default_rng(1))
B = hb.Parameter("sched_b", (H,), init="uniform", rng=np.random.default_rng(2))


def chain_loss(xs, label):
    h = hb.array(np.zeros(H, np.float32))
    for x in xs:
        h = hb.tanh(W @ hb.concat([h, hb.array(x)]) + B)
    return hb.pick_neg_log_softmax(h, int(label))


def run_chains(policy):
    with hb.batching(policy=policy) as scope:
        losses = [chain_loss(x, y) for x, y in zip(XS, LABELS)]
    return scope, losses


# ---------------------------------------------------------------------------------------
# Hand-made GraphViews
# ---------------------------------------------------------------------------------------
INPUT = 0     # signature 0 of every hand-made view: non-executed inputs


def make_view(nodes, unbatchable=(), n_sigs=None, cost=None, not_executed=(INPUT,)):
    """A GraphView from [(sig, [operand ids]), ...] in topological order.

    Nodes of signature INPUT (or of `not_executed`) are not executed; operand -1 is a value from an earlier
    flush. Depth = 1 + deepest operand (inputs 0), as recording computes it.
    """
    n = len(nodes)
    sig = np.array([s for s, _ in nodes], np.int64)
    n_sigs = n_sigs if n_sigs is not None else (int(sig.max()) + 1 if n else 1)
    arg_ptr = np.zeros(n + 1, np.int64)
    args, depth = [], np.zeros(n, np.int64)
    for v, (s, operands) in enumerate(nodes):
        assert all(-1 <= u < v for u in operands), "operands must come first"
        args.extend(operands)
        arg_ptr[v + 1] = len(args)
        if s != INPUT:
            depth[v] = 1 + max([int(depth[u]) for u in operands if u >= 0], default=0)
    ub = np.zeros(n_sigs, np.bool_)
    ub[list(unbatchable)] = True
    return GraphView(sig, depth, arg_ptr, np.array(args, np.int64), ~np.isin(sig, not_executed), ub,
                     np.asarray(cost if cost is not None else np.zeros(n_sigs), np.int64))


def chain(sigs, first_operand=-1, start=0):
    """A chain of nodes with these signatures, each reading the previous one."""
    out, prev = [], first_operand
    for k, s in enumerate(sigs):
        out.append((s, [prev] if prev is not None else []))
        prev = start + k
    return out


def build(nodes):
    """A named GraphView from [(type name, [operand ids]), ...] in topological order, every
    node executed; operand -1 is a value from an earlier flush."""
    names = sorted({t for t, _ in nodes})
    index = {t: i for i, t in enumerate(names)}
    sig = np.array([index[t] for t, _ in nodes], np.int64)
    arg_ptr = np.cumsum([0] + [len(ops) for _, ops in nodes]).astype(np.int64)
    args = np.array([u for _, ops in nodes for u in ops], np.int64)
    depth = np.zeros(len(nodes), np.int64)
    for v, (_, ops) in enumerate(nodes):
        depth[v] = 1 + max([int(depth[u]) for u in ops if u >= 0], default=0)
    n_sigs = len(names)
    return GraphView(sig, depth, arg_ptr, args, np.ones(len(nodes), np.bool_), np.zeros(n_sigs, np.bool_),
                     np.zeros(n_sigs, np.int64), tuple(names))


def rotations():
    """Chains abc, bca, cab: any two fit in 4 batches (abca), all three need 5 (abcab)."""
    return build(chain(list("abc")) + chain(list("bca"), start=3) + chain(list("cab"), start=6))


# ---------------------------------------------------------------------------------------
# Random GraphViews
# ---------------------------------------------------------------------------------------
OUTPUT = 1    # in random views: a multi-output node's extra output (not executed)


@st.composite
def graph_views(draw, max_nodes=60):
    """Random DAGs: sig 0 = inputs and sig 1 = extra outputs (neither executed), sigs 2..
    each with a fixed arity, some unbatchable; operands are earlier nodes or -1 (a value
    from an earlier flush). As in Plan's views, an extra output reads its producer and
    consumers read the producer instead of it."""
    n_sigs = draw(st.integers(3, 7))
    arity = [0, 1] + [draw(st.integers(0, 3)) for _ in range(n_sigs - 2)]
    unbatchable = [False, False] + [draw(st.booleans()) and draw(st.booleans()) for _ in range(n_sigs - 2)]
    cost = [0, 0] + [draw(st.integers(0, 1)) for _ in range(n_sigs - 2)]
    n = draw(st.integers(0, max_nodes))
    nodes, depth, producer = [], [], []
    for v in range(n):
        kind = draw(st.integers(0, 7))
        if kind == 0:
            nodes.append((INPUT, []))
            depth.append(0)
            producer.append(v)
            continue
        if kind == 1 and v and nodes[v - 1][0] > OUTPUT:
            nodes.append((OUTPUT, [v - 1]))
            depth.append(depth[v - 1])
            producer.append(v - 1)
            continue
        s = draw(st.integers(2, n_sigs - 1))
        # bias towards recent nodes so chains get long
        ops = [draw(st.integers(-1, v - 1)) if v and draw(st.booleans()) else
               (v - 1 - draw(st.integers(0, min(v, 4) - 1)) if v else -1) for _ in range(arity[s])]
        ops = [producer[u] if u >= 0 else -1 for u in ops]
        nodes.append((s, ops))
        producer.append(v)
        earlier = draw(st.integers(0, 5)) if -1 in ops else 0     # depth of an earlier flush's value
        depth.append(1 + max([depth[u] for u in ops if u >= 0] + [earlier]))
    view = make_view(nodes, unbatchable=[s for s in range(n_sigs) if unbatchable[s]], n_sigs=n_sigs, cost=cost,
                     not_executed=(INPUT, OUTPUT))
    view.depth = np.array(depth, np.int64)
    return view


# ---------------------------------------------------------------------------------------
# Schedules: valid ones, and the fewest batches
# ---------------------------------------------------------------------------------------
def check_schedule(view, order, bptr):
    order, bptr = np.asarray(order), np.asarray(bptr)
    executable = np.flatnonzero(view.executable)
    # every executed node exactly once, and nothing else
    assert sorted(order.tolist()) == executable.tolist()
    assert bptr[0] == 0 and bptr[-1] == len(order)
    assert (np.diff(bptr) > 0).all(), "empty batch"
    batch_of = np.full(len(view.sig), -1)
    for b in range(len(bptr) - 1):
        members = order[bptr[b]:bptr[b + 1]]
        sigs = set(view.sig[members].tolist())
        assert len(sigs) == 1, f"batch {b} mixes signatures {sigs}"
        if view.unbatchable[sigs.pop()]:
            assert len(members) == 1
        batch_of[members] = b
    for v in executable:
        for u in view.args[view.arg_ptr[v]:view.arg_ptr[v + 1]]:
            if u >= 0 and view.executable[u]:
                assert batch_of[u] < batch_of[v], f"node {v} runs before its operand {u}"
    return len(bptr) - 1


def n_batches(policy, view):
    return check_schedule(view, *policy(view))


def optimum(view):
    """Fewest batches by breadth-first search over executed sets (tiny graphs): each step
    runs every ready node of one batchable type, or one ready unbatchable node."""
    n = len(view.sig)
    ex = [v for v in range(n) if view.executable[v]]
    pos = {v: i for i, v in enumerate(ex)}
    deps = []
    for v in ex:
        d = 0
        for e in range(view.arg_ptr[v], view.arg_ptr[v + 1]):
            stack = [int(view.args[e])]
            while stack:                  # operands that are not executed pass their own on
                u = stack.pop()
                if u < 0:
                    continue
                if view.executable[u]:
                    d |= 1 << pos[u]
                else:
                    stack += [int(view.args[k]) for k in range(view.arg_ptr[u], view.arg_ptr[u + 1])]
        deps.append(d)
    full, frontier, seen, steps = (1 << len(ex)) - 1, {0}, {0}, 0
    while full not in frontier:
        nxt = set()
        for done in frontier:
            ready = [i for i in range(len(ex)) if not done >> i & 1 and deps[i] & done == deps[i]]
            for s in {int(view.sig[ex[i]]) for i in ready}:
                group = [i for i in ready if view.sig[ex[i]] == s]
                for batch in ([[i] for i in group] if view.unbatchable[s] else [group]):
                    state = done | sum(1 << i for i in batch)
                    if state not in seen:
                        seen.add(state)
                        nxt.add(state)
        frontier, steps = nxt, steps + 1
    return steps
