"""W1 Tree-LSTM: graph construction and scheduling cost per tree node, block vs op granularity.

Records the same 64 synthetic SST-shaped trees (hidden 256) at each granularity and reports
microseconds per tree node for recording and for scheduling (plan construction included),
plus execution and backward for scale. Median of --repeats runs after one warm-up.

    python benchmarks/bench_granularity.py [--trees 64] [--hidden 256] [--json out.json]
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hybridbatch_workloads.bench.machine import one_thread  # noqa: E402  (numpy not yet)
from hybridbatch_workloads.cli_args import summary  # noqa: E402

one_thread()

import hybridbatch as hb  # noqa: E402
from hybridbatch_workloads.data import Vocab, synthetic_sst  # noqa: E402
from hybridbatch_workloads.models import TreeLSTMSentiment  # noqa: E402


def measure(model, trees, granularity):
    t0 = time.perf_counter()
    with hb.batching(granularity=granularity) as scope:
        loss = hb.add_n([model.tree_loss(t) for t in trees])
    t1 = time.perf_counter()
    loss.backward()
    backward = time.perf_counter() - t1
    s = scope.stats
    return dict(graph_nodes=s.nodes, batches=s.batches, lower_bound=s.lower_bound,
                record_s=s.record_seconds, schedule_s=s.schedule_seconds, execute_s=s.execute_seconds,
                backward_s=backward, total_s=time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--trees", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args()
    trees = synthetic_sst(args.trees, seed=1)
    vocab = Vocab.build(w.word for t in trees for w in t.leaves())
    model = TreeLSTMSentiment(vocab, embed=args.hidden, hidden=args.hidden)
    model.hybridize()
    tree_nodes = sum(len(t.nodes()) for t in trees)
    result = {"workload": "W1", "trees": args.trees, "hidden": args.hidden, "tree_nodes": tree_nodes}
    for granularity in ("block", "op"):
        measure(model, trees, granularity)                       # warm-up: traces, numba cache
        runs = [measure(model, trees, granularity) for _ in range(args.repeats)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        med["graph_nodes_per_tree_node"] = med["graph_nodes"] / tree_nodes
        med["record_us_per_tree_node"] = med["record_s"] / tree_nodes * 1e6
        med["schedule_us_per_tree_node"] = med["schedule_s"] / tree_nodes * 1e6
        med["record_plus_schedule_us_per_tree_node"] = med["record_us_per_tree_node"] + med["schedule_us_per_tree_node"]
        result[granularity] = med
    result["op_over_block_record_plus_schedule"] = (result["op"]["record_plus_schedule_us_per_tree_node"]
                                                    / result["block"]["record_plus_schedule_us_per_tree_node"])
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
