"""Attention pooling over variable-length sets (nn.Attention), written per set.

Each set holds 2 to 24 vectors: a few near one of `classes` prototypes, the rest noise. Every
element goes through a relu layer; a learned query attends over the set (`nn.Attention`,
multi-head) to pool it into one vector, which dropout and LayerNorm feed to the classifier.
The label is the prototype's class, so the model must learn to attend to the elements near
a prototype and ignore the noise.

The code handles one set, a Python list of any length; inside `hb.batching()` the sets of
every size batch together (the attention's softmax and weighted sum are the ragged list
ops). `--compare` trains eagerly and batched from one seed (the same dropout masks) and says
whether they agree.

    python examples/attention_pooling.py [--mode eager] [--compare] [--heads 4]
"""
from typing import NamedTuple

from common import example_parser, train_classifier, summary  # noqa: E402

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402
from hybridbatch import nn  # noqa: E402
from hybridbatch_workloads.cli_args import int_at_least  # noqa: E402


class LabeledSet(NamedTuple):
    elements: list          # float32 vectors
    label: int


def random_sets(n, dim=16, classes=4, min_size=2, max_size=24, seed=0):
    """`n` sets of min_size..max_size vectors: 1-3 of them a class prototype plus noise (sd
    0.3), the others plain noise (sd 1). The prototypes depend on the sizes only, so sets
    drawn with two seeds share them."""
    prototypes = 2 * np.random.default_rng([dim, classes]).standard_normal((classes, dim))
    rng = np.random.default_rng(seed)
    sets = []
    for _ in range(n):
        size, label = int(rng.integers(min_size, max_size + 1)), int(rng.integers(classes))
        near = int(rng.integers(1, min(3, size) + 1))
        elements = [prototypes[label] + 0.3 * rng.standard_normal(dim) for _ in range(near)]
        elements += [rng.standard_normal(dim) for _ in range(size - near)]
        order = rng.permutation(size)
        sets.append(LabeledSet([elements[i].astype(np.float32) for i in order], label))
    return sets


class AttentionPooling(hb.Block):
    """`loss(s)` and `logits(s)` of one set."""

    def __init__(self, dim, hidden, classes, heads=2, dropout=0.1, seed=0):
        super().__init__()
        self.embed = nn.Dense(hidden, dim, activation="relu", seed=seed)
        self.query = hb.Parameter("query", (hidden,), init="normal", rng=np.random.default_rng(seed + 1))
        self.attend = nn.Attention(hidden, hidden, hidden, heads=heads, seed=seed + 2)
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(hidden)
        self.classifier = nn.Dense(classes, hidden, seed=seed + 6)

    def logits(self, s):
        pooled = self.attend(self.query, [self.embed(x) for x in s.elements])
        return self.classifier(self.norm(self.drop(pooled)))

    def loss(self, s):
        return hb.pick_neg_log_softmax(self.logits(s), s.label)


def main():
    ap = example_parser(summary(__doc__), epochs=3, batch=32, hidden=64, limit=2048, dev=256, lr=1e-3,
                        what="sets", lr_help="Adam's learning rate")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--heads", type=int_at_least(1), default=2, help="attention heads (must divide --hidden)")
    args = ap.parse_args()
    if args.hidden % args.heads:
        ap.error("--heads must divide --hidden")
    train, dev = random_sets(args.limit, seed=args.seed), random_sets(args.dev, seed=args.seed + 1)
    print(f"attention pooling: {args.heads} heads over {args.hidden}, {args.limit} training / {args.dev} held-out "
          f"sets of 2-24 vectors", flush=True)
    train_classifier(lambda: AttentionPooling(len(train[0].elements[0]), args.hidden, 4, heads=args.heads,
                                              dropout=args.dropout, seed=args.seed), train, dev, args)


if __name__ == "__main__":
    main()
