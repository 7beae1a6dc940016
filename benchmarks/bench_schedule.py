"""Scheduling cost at scale: policies and the lower bound over 100,000 nodes, plus recording
and Plan construction for a recorded graph of the same size.

    python benchmarks/bench_schedule.py [--nodes 100000] [--repeat 5] [--seed 0]

Prints one JSON object. Every timing is the median of `--repeat` calls after one warm-up
call (so numba compilation or cache loading is not counted); a policy's `vs_agenda` is the
median over rounds of its time over agenda's in the same round, the policies taking turns,
so the host's drift cancels. One thread, as in docs/workloads.md. Target: scheduling 100k
nodes in < 50 ms. Recording and Plan construction use the default policy.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hybridbatch_workloads.bench.machine import one_thread  # noqa: E402  (numpy not yet)
from hybridbatch_workloads.cli_args import summary  # noqa: E402

one_thread()

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402
from hybridbatch.record.graph import Growable  # noqa: E402
from hybridbatch.record.signature import SIGS  # noqa: E402
from hybridbatch.runtime.plan import Plan, _gather_specs, _nodes, _write_constants  # noqa: E402
from hybridbatch.runtime.plan_cache import CACHE  # noqa: E402
from hybridbatch.schedule import GraphView, agenda, by_depth, critical_path, lower_bound, tail_last  # noqa: E402

TARGET_MS = 50.0

# Synthetic signatures, shaped like a Tree-LSTM / LSTM minibatch (W1, W5 in docs/workloads.md)
INPUT, LOOKUP, AFFINE_LEAF, SIGMOID, TANH, MUL, CONCAT, AFFINE_CELL, ADD, AFFINE_OUT, LOSS = range(11)
N_SIGS = 11
COST = np.array([0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0], np.int64)     # matmul-like ops cost 1


class _Builder:
    """Appends nodes (sig, operands) in topological order, computing depth as recording does."""

    def __init__(self):
        self.sig, self.depth, self.args, self.arg_ptr = [], [], [], [0]

    def add(self, sig, *operands):
        self.sig.append(sig)
        self.depth.append(0 if sig == INPUT else 1 + max((self.depth[u] for u in operands), default=0))
        self.args.extend(operands)
        self.arg_ptr.append(len(self.args))
        return len(self.sig) - 1

    def leaf(self):
        """Word cell: x = E[w]; a = W x + b; h = sigmoid(a) * tanh(a)."""
        x = self.add(LOOKUP)
        a = self.add(AFFINE_LEAF, x)
        return self.add(MUL, self.add(SIGMOID, a), self.add(TANH, a))

    def cell(self, *children):
        """Internal/recurrent cell: z = U [h_l; h_r] + b; h = sigmoid(z) * tanh(z) + h_l."""
        z = self.add(AFFINE_CELL, self.add(CONCAT, *children))
        m = self.add(MUL, self.add(SIGMOID, z), self.add(TANH, z))
        return self.add(ADD, m, children[0])

    def loss(self, h):
        return self.add(LOSS, self.add(AFFINE_OUT, h))

    def tree(self, rng, n_leaves):
        """A random binary tree (random merges of adjacent subtrees), one loss per node."""
        level = [self.leaf() for _ in range(n_leaves)]
        for h in level:
            self.loss(h)
        while len(level) > 1:
            i = int(rng.integers(len(level) - 1))
            h = self.cell(level[i], level[i + 1])
            self.loss(h)
            level[i:i + 2] = [h]

    def chain(self, length):
        """An LSTM-like chain over words, one loss per step."""
        h = self.add(INPUT)
        for _ in range(length):
            h = self.cell(h, self.leaf())
            self.loss(h)


def synthetic_view(n_nodes, seed):
    """~n_nodes of trees (SST-like sizes) and chains (NMT-like lengths), cut to exactly n_nodes."""
    rng = np.random.default_rng(seed)
    g = _Builder()
    while len(g.sig) < n_nodes:
        if rng.random() < 0.5:
            g.tree(rng, int(np.clip(rng.normal(19, 9), 2, 50)))
        else:
            g.chain(int(np.clip(rng.normal(20, 10), 2, 50)))
    n = n_nodes     # a prefix of a topological order is a DAG; the last instance is cut short
    sig = np.array(g.sig[:n], np.int64)
    arg_ptr = np.array(g.arg_ptr[:n + 1], np.int64)
    args = np.array(g.args[:arg_ptr[-1]], np.int64)
    return GraphView(sig, np.array(g.depth[:n], np.int64), arg_ptr, args, sig != INPUT,
                     np.zeros(N_SIGS, np.bool_), COST.copy())


def timed(fn, repeat):
    """(median ms over `repeat` calls after one warm-up, result of the last call)."""
    out = fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times), out


POLICIES = {"agenda": agenda, "tail-last": tail_last, "critical-path": critical_path, "depth": by_depth}


def vs_agenda(view, repeat):
    """Per policy, the median over `repeat` rounds of its time / agenda's in the same round."""
    rounds = []
    for _ in range(repeat):
        times = {}
        for name, policy in POLICIES.items():
            t0 = time.perf_counter()
            policy(view)
            times[name] = time.perf_counter() - t0
        rounds.append(times)
    return {name: statistics.median(r[name] / r["agenda"] for r in rounds) for name in POLICIES}


def schedule_report(view, repeat):
    lb_ms, lb = timed(lambda: lower_bound(view), repeat)
    report = {"nodes": int(len(view.sig)), "executed_nodes": int(view.executable.sum()),
              "signatures": int(view.n_sigs), "lower_bound": lb, "lower_bound_ms": round(lb_ms, 2),
              "policies": {}}
    for name, policy in POLICIES.items():
        ms, (order, bptr) = timed(lambda: policy(view), repeat)
        report["policies"][name] = {"ms": round(ms, 2), "batches": int(len(bptr) - 1),
                                    "within_target": ms < TARGET_MS}
    for name, ratio in vs_agenda(view, max(repeat, 9)).items():
        report["policies"][name]["vs_agenda"] = round(ratio, 3)
    return report


# --- a recorded graph: the chain model of tests/test_scheduling.py ------------------------
def record_chains(n_nodes, hidden, seed):
    """Record chains h = tanh(W @ concat([h, x]) + b) (lengths 2..40) until the scope holds
    n_nodes nodes; returns (scope, recording seconds, views the policy saw)."""
    rng = np.random.default_rng(seed)
    W = hb.Parameter("bench_W", (hidden, 2 * hidden), rng=rng)
    b = hb.Parameter("bench_b", (hidden,), init="zeros")
    V = hb.Parameter("bench_V", (5, hidden), rng=rng)
    x = rng.standard_normal((64, hidden)).astype(np.float32)   # word vectors, reused
    lengths = rng.integers(2, 41, 1 << 16)
    seen = []

    def capture(view):
        seen.append(view)
        return tail_last(view)

    scope = hb.batching(policy=capture)
    with scope:
        t0 = time.perf_counter()
        k = 0
        while len(scope.graph) < n_nodes:
            h = hb.array(x[0])
            for t in range(int(lengths[k])):
                h = hb.tanh(W @ hb.concat([h, hb.array(x[t])]) + b)
            hb.pick_neg_log_softmax(V @ h, int(k % 5))
            k += 1
        record_s = time.perf_counter() - t0
    return scope, record_s, seen


def plan_ms(scope, repeat):
    """(median ms of Plan(...) for the scope's whole graph, its breakdown by stage).

    The policy does not run in these calls: the schedule cache hits after the warm-up call,
    so this is Plan construction alone. The breakdown times its main stages one by one on
    the same inputs; "other" is the rest (lookup tables, arenas, output locations, ...).
    """
    graph = scope.graph
    # the scope's flush consumed graph.constants; rebuild them from its arenas so each
    # construction writes the same input values again
    p0 = scope.plans[0]
    ex = p0.view.executable
    constants = {int(v): scope.arenas[scope.loc_arena.data[v]][scope.loc_row.data[v]] for v in np.flatnonzero(~ex)}
    last = {}

    def build():
        graph.constants = dict(constants)
        last.update(arenas=[], loc_arena=Growable(np.int64), loc_row=Growable(np.int64), is_const=Growable(np.bool_))
        return Plan(graph, 0, scope.policy, last["arenas"], last["loc_arena"], last["loc_row"], last["is_const"])

    ms, plan = timed(build, repeat)
    assert plan.n_batches == p0.n_batches and (plan.order == p0.order).all()

    sig, _, arg_ptr, args = _nodes(graph.delta(0), 0)
    ragged = np.array([SIGS[s].op.ragged for s in sig.tolist()], np.bool_)
    arenas, loc_arena, loc_row, is_const = last["arenas"], last["loc_arena"], last["loc_row"], last["is_const"]
    stages = {
        "graph_delta": lambda: _nodes(graph.delta(0), 0),
        "schedule_cache_lookup": lambda: CACHE.schedule(scope.policy, plan.view, sig),
        "write_constants": lambda: _write_constants(constants, 0, arenas, 0, loc_arena.view, loc_row.view),
        "gather_specs": lambda: _gather_specs(plan.order, plan.bptr, arg_ptr, args, loc_arena.view,
                                              loc_row.view, is_const.view, ragged, plan.inside),
    }
    # each repeat times a whole build and then every stage, so "other" (the build minus
    # its stages, per repeat) compares timings taken under the same machine load
    parts = {name: [] for name in (*stages, "other")}
    for _ in range(repeat):
        t0 = time.perf_counter()
        build()
        total = time.perf_counter() - t0
        for name, stage in stages.items():
            t0 = time.perf_counter()
            stage()
            parts[name].append(time.perf_counter() - t0)
        parts["other"].append(total - sum(parts[name][-1] for name in stages))
    graph.constants = {}
    return ms, {name: round(statistics.median(v) * 1e3, 2) for name, v in parts.items()}, len(constants)


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--hidden", type=int, default=32, help="hidden size of the recorded chains")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    out = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
           "python": platform.python_version(), "threads": os.environ["NUMBA_NUM_THREADS"],
           "target_ms": TARGET_MS, "repeat": a.repeat}
    out["synthetic"] = schedule_report(synthetic_view(a.nodes, a.seed), a.repeat)

    scope, record_s, seen = record_chains(a.nodes, a.hidden, a.seed)
    n = len(scope.graph)
    st = scope.stats
    rec = schedule_report(seen[0], a.repeat)
    p_ms, p_parts, n_const = plan_ms(scope, a.repeat)
    rec.update({
        "recorded_nodes_incl_inputs": n,
        "record_us_per_node": round(record_s / n * 1e6, 3),
        "record_us_per_executed_node": round(record_s / st.nodes * 1e6, 3),
        "plan_ms": round(p_ms, 2),
        "plan_breakdown_ms": p_parts,
        "plan_input_constants": n_const,
        "first_flush": {"schedule_s": round(st.schedule_seconds, 4), "execute_s": round(st.execute_seconds, 4),
                        "batches": st.batches, "lower_bound": st.lower_bound},
    })
    out["recorded_chains"] = rec
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
