"""granularity="auto" against both fixed choices on a model that wants each in one place.

The model reads a sentence twice: an LSTM over its words (one signature per call, big
batches: best kept whole) and a child-sum Tree-LSTM over a random n-ary tree of it (arity
1-5: as whole blocks its calls split into one small batch per (arity, level); inlined, the
per-child ops batch across arities). Reports seconds per minibatch (record + schedule +
execute + backward), median of --repeats after warm-up runs (auto decides after its first).

    python benchmarks/bench_auto.py [--batch 32] [--hidden 64] [--json out.json]
"""
import argparse
import json
import os
import statistics
import time

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402
from hybridbatch import nn  # noqa: E402


def random_tree(rng, words):
    """An n-ary tree over `words`: each internal node takes 1-5 consecutive children."""
    nodes = [("leaf", w) for w in words]
    while len(nodes) > 1:
        k = int(min(rng.integers(1, 6), len(nodes)))
        i = int(rng.integers(0, len(nodes) - k + 1))
        nodes[i:i + k] = [("node", tuple(nodes[i:i + k]))]
    return nodes[0]


class Reader(hb.Block):
    def __init__(self, vocab, hidden):
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden, seed=0)
        self.lstm = nn.LSTMCell(hidden, hidden, seed=1)
        self.tree = nn.ChildSumTreeLSTMCell(hidden, hidden, seed=2)
        self.output = nn.Dense(3, 2 * hidden, seed=3)
        self.hidden = hidden

    def encode(self, t):
        if t[0] == "leaf":
            return self.tree(self.embedding(t[1]))
        states = [s for child in t[1] for s in self.encode(child)]
        return self.tree(np.zeros(self.hidden, np.float32), *states)

    def loss(self, words, tree, label):
        h = c = np.zeros(self.hidden, np.float32)
        for w in words:
            h, c = self.lstm(self.embedding(w), h, c)
        root, _ = self.encode(tree)
        return hb.pick_neg_log_softmax(self.output(hb.concat([h, root])), label)


def run(model, data, granularity):
    t0 = time.perf_counter()
    with hb.batching(granularity=granularity) as scope:
        loss = hb.add_n([model.loss(*x) for x in data])
    loss.backward()
    return time.perf_counter() - t0, scope.stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    data = []
    for _ in range(args.batch):
        words = [int(w) for w in rng.integers(0, 500, int(rng.integers(5, 25)))]
        data.append((words, random_tree(rng, words), int(rng.integers(0, 3))))
    model = Reader(500, args.hidden)
    model.hybridize()
    result = {"batch": args.batch, "hidden": args.hidden}
    for granularity in ("block", "op", "auto"):
        for _ in range(2):
            run(model, data, granularity)               # traces, numba cache, auto's decision
        runs = [run(model, data, granularity) for _ in range(args.repeats)]
        stats = runs[0][1]
        result[granularity] = {"seconds": statistics.median(r[0] for r in runs), "nodes": stats.nodes,
                               "batches": stats.batches, "lower_bound": stats.lower_bound}
    result["auto_inlined"] = [name for name, b in model.children().items() if getattr(b, "auto_inline", False)]
    print(json.dumps(result, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            f.write(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
