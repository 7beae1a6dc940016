"""granularity="auto" against both fixed choices, on a model whose parts want different ones.

Each instance is a sentence read twice:
- a small LSTM (hidden 32) over its words: one signature per call and big batches, where
  recording ~15 ops per call costs more than the math, so one node per call (block) wins;
- a wide combiner (1024) over a random n-ary tree of its words: each internal node sums 1-5
  children and applies one wide layer. As whole blocks its calls split by arity into small
  batches of an expensive GEMM; inlined, the GEMMs of all arities at a level batch together.
`auto` measures the combiner whole and inlined over its first minibatches and keeps the
cheaper (hybridbatch/hybrid/granularity.py); the LSTM batches well whole and is never tried. Reports seconds per minibatch (record + schedule + execute +
backward), median of --repeats after two warm-up runs.

    python benchmarks/bench_auto.py [--batch 32] [--json out.json]
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

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402
from hybridbatch import nn  # noqa: E402
from hybridbatch.hybrid.granularity import WHOLE_SAMPLES  # noqa: E402


def random_tree(rng, words):
    """An n-ary tree over `words`: each internal node takes 1-5 consecutive children."""
    nodes = [("leaf", w) for w in words]
    while len(nodes) > 1:
        k = int(min(rng.integers(1, 6), len(nodes)))
        i = int(rng.integers(0, len(nodes) - k + 1))
        nodes[i:i + k] = [("node", tuple(nodes[i:i + k]))]
    return nodes[0]


class Combine(hb.HybridBlock):
    """Any number of children summed through one wide layer (traced once per arity)."""

    def __init__(self, n):
        super().__init__()
        self.W = hb.Parameter("W", (n, n), rng=np.random.default_rng(5))
        self.b = hb.Parameter("b", (n,), init="zeros")

    def forward(self, *children):
        return hb.tanh(hb.affine(self.W, hb.add_n(list(children)), self.b))


class Reader(hb.Block):
    def __init__(self, vocab, small, wide):
        super().__init__()
        self.small_embedding = nn.Embedding(vocab, small, seed=0)
        self.wide_embedding = nn.Embedding(vocab, wide, seed=1)
        self.lstm = nn.LSTMCell(small, small, seed=2)
        self.combine = Combine(wide)
        self.output = nn.Dense(3, small + wide, seed=3)
        self.small = small

    def encode(self, tree):
        if tree[0] == "leaf":
            return self.wide_embedding(tree[1])
        return self.combine(*[self.encode(child) for child in tree[1]])

    def loss(self, words, tree, label):
        h = c = np.zeros(self.small, np.float32)
        for w in words:
            h, c = self.lstm(self.small_embedding(w), h, c)
        return hb.pick_neg_log_softmax(self.output(hb.concat([h, self.encode(tree)])), label)


def run(model, data, granularity):
    t0 = time.perf_counter()
    with hb.batching(granularity=granularity) as scope:
        loss = hb.add_n([model.loss(*x) for x in data])
    loss.backward()
    return time.perf_counter() - t0, scope.stats


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--small", type=int, default=32)
    ap.add_argument("--wide", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    data = []
    for _ in range(args.batch):
        words = [int(w) for w in rng.integers(0, 500, int(rng.integers(5, 25)))]
        data.append((words, random_tree(rng, words), int(rng.integers(0, 3))))
    model = Reader(500, args.small, args.wide)
    model.hybridize()
    result = {"batch": args.batch, "small": args.small, "wide": args.wide}
    for granularity in ("block", "op", "auto"):
        for _ in range(WHOLE_SAMPLES + 1):
            run(model, data, granularity)       # traces, caches, and auto's measurements of both modes
        runs = [run(model, data, granularity) for _ in range(args.repeats)]
        s = runs[0][1]
        result[granularity] = {"seconds": statistics.median(r[0] for r in runs), "nodes": s.nodes,
                               "batches": s.batches, "lower_bound": s.lower_bound,
                               "record_seconds": s.record_seconds, "execute_seconds": s.execute_seconds}
    result["auto_inlined"] = sorted(name for name, b in model.children().items() if getattr(b, "auto_inline", False))
    best_fixed = min(result["block"]["seconds"], result["op"]["seconds"])
    result["auto_speedup_over_best_fixed"] = best_fixed / result["auto"]["seconds"]
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
