"""A gated graph neural network (Li et al. 2016) classifying random graphs, written per graph.

Each graph has its own nodes and typed, directed edges. Every node starts from its feature
vector (a tanh layer); each of `--steps` propagation steps sends a message along every edge
(one linear map per edge type), sums each node's incoming messages, applies dropout, and
updates the node with a GRUCell followed by LayerNorm. A gated sum over the nodes
(sigmoid(gate(h)) * tanh(proj(h))) feeds the classifier. The label is the feature class of
the node with the most incoming edges, which a node learns only from its neighbours.

The code handles one graph with plain Python loops over its nodes and edges; inside
`hb.batching()` the edges, cells and readouts of every graph of the minibatch batch together,
whatever the graphs' sizes. `--compare` trains eagerly and batched from one seed (the same
dropout masks) and says whether they agree.

    python examples/ggnn.py [--mode eager] [--compare] [--steps 3] [--hidden 64]
"""
from typing import NamedTuple

from common import example_parser, train_classifier, summary  # noqa: E402

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402
from hybridbatch import nn  # noqa: E402
from hybridbatch_workloads.cli_args import int_at_least  # noqa: E402


class Graph(NamedTuple):
    features: list          # one float32 vector per node
    edges: list             # (source, target, edge type)
    label: int


def random_graphs(n, features=8, classes=3, edge_types=2, min_nodes=3, max_nodes=12, seed=0):
    """`n` graphs of min_nodes..max_nodes nodes, each node with 1-3 outgoing edges of random
    types to other nodes, labeled by the argmax over the first `classes` features of the node
    with the most incoming edges (the first such node)."""
    rng = np.random.default_rng(seed)
    graphs = []
    for _ in range(n):
        size = int(rng.integers(min_nodes, max_nodes + 1))
        feats = [rng.normal(size=features).astype(np.float32) for _ in range(size)]
        edges = [(u, int(v), int(rng.integers(edge_types)))
                 for u in range(size)
                 for v in rng.choice([w for w in range(size) if w != u], int(rng.integers(1, 4)) if size > 3 else 1,
                                     replace=False)]
        indegree = np.bincount([v for _, v, _ in edges], minlength=size)
        graphs.append(Graph(feats, edges, int(np.argmax(feats[int(np.argmax(indegree))][:classes]))))
    return graphs


class Readout(hb.HybridBlock):
    """A node's share of the graph vector: sigmoid(gate(h)) * tanh(proj(h))."""

    def __init__(self, hidden, seed):
        super().__init__()
        self.gate = nn.Dense(hidden, hidden, activation="sigmoid", seed=seed)
        self.proj = nn.Dense(hidden, hidden, activation="tanh", seed=seed + 1)

    def forward(self, h):
        return self.gate(h) * self.proj(h)


class GGNN(hb.Block):
    """`loss(graph)` and `logits(graph)` of one graph."""

    def __init__(self, features, hidden, classes, edge_types=2, steps=3, dropout=0.2, seed=0):
        super().__init__()
        self.hidden, self.steps = hidden, steps
        self.embed = nn.Dense(hidden, features, activation="tanh", seed=seed)
        for t in range(edge_types):
            setattr(self, f"edge{t}", nn.Dense(hidden, hidden, use_bias=False, seed=seed + 1 + t))
        self.cell = nn.GRUCell(hidden, hidden, seed=seed + 1 + edge_types)
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(hidden)
        self.readout = Readout(hidden, seed=seed + 2 + edge_types)
        self.classifier = nn.Dense(classes, hidden, seed=seed + 4 + edge_types)

    def edge(self, t):
        return getattr(self, f"edge{t}")

    def logits(self, graph):
        h = [self.embed(x) for x in graph.features]
        silent = np.zeros(self.hidden, np.float32)          # the message of a node without in-edges
        for _ in range(self.steps):
            incoming = [[] for _ in h]
            for u, v, t in graph.edges:
                incoming[v].append(self.edge(t)(h[u]))
            h = [self.norm(self.cell(self.drop(hb.add_n(m)) if m else silent, hv)) for m, hv in zip(incoming, h)]
        return self.classifier(hb.add_n([self.readout(hv) for hv in h]))

    def loss(self, graph):
        return hb.pick_neg_log_softmax(self.logits(graph), graph.label)


def main():
    ap = example_parser(summary(__doc__), epochs=3, batch=32, hidden=64, limit=1024, dev=256, lr=1e-3,
                        what="graphs", lr_help="Adam's learning rate")
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--steps", type=int_at_least(1), default=3, help="propagation steps")
    args = ap.parse_args()
    train = random_graphs(args.limit, seed=args.seed)
    dev = random_graphs(args.dev, seed=args.seed + 1)
    print(f"GGNN: {args.steps} steps of {args.hidden}, {args.limit} training / {args.dev} held-out random graphs",
          flush=True)
    train_classifier(lambda: GGNN(len(train[0].features[0]), args.hidden, 3, steps=args.steps,
                                  dropout=args.dropout, seed=args.seed), train, dev, args)


if __name__ == "__main__":
    main()
