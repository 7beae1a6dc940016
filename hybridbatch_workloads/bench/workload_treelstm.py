"""W1 of docs/workloads.md as a benchmark workload (the binary Tree-LSTM sentiment classifier), and
`TreeWorkload`, the base of every workload on the W1 trees (W1, W4).

Data: `train.txt` / `dev.txt` (PTB brackets) from `data_dir` (the SST folder, or its parent
holding `sst/`) when given; else `synthetic_sst` trees (`synthetic_train` for training,
`synthetic_dev` more, drawn with another seed, held out). The vocabulary is every word of the
training trees (unknown dev words map to `<unk>`). The W1 model is `TreeLSTMSentiment` with
embedding = hidden (256 for the headline, 32..512 for the size sweep).
"""
from __future__ import annotations

import functools
import os

from ..data.trees import Vocab, read_ptb_trees, synthetic_sst
from ..models.tree_lstm import TreeLSTMSentiment
from ..data.paths import read_data_file
from .workload import Workload

__all__ = ["TreeWorkload", "W1TreeLSTM", "tree_counts", "CLASSES"]

CLASSES = 5


@functools.lru_cache(maxsize=4)
def _load(data_dir, seed, synthetic_train, synthetic_dev):
    """(train trees, dev trees), cached so that a sweep reads / generates the data once."""
    if data_dir is not None:
        return (tuple(read_data_file(data_dir, "sst", "train.txt", read_ptb_trees)),
                tuple(read_data_file(data_dir, "sst", "dev.txt", read_ptb_trees)))
    return (tuple(synthetic_sst(synthetic_train, seed=seed)),
            tuple(synthetic_sst(synthetic_dev, seed=seed + 7919)))


def tree_counts(tree):
    """(leaves, internal nodes) of a binary tree."""
    leaves = tree.n_leaves
    return leaves, leaves - 1


class TreeWorkload(Workload):
    """A `RecursiveTreeModel` on the W1 trees: 5 classes on every node, root accuracy.

    Subclasses implement `build_model()` (called once `self.vocab` exists) and
    `forward_flops`, and may override `node_types` (per-tree argument of the model) and
    `classifier_input` (the size of the classified state).
    `train_trees` / `dev_trees` cut the sets; `synthetic_train` / `synthetic_dev` size them.
    """

    def __init__(self, hidden=256, data_dir=None, seed=0, train_trees=None, dev_trees=None,
                 synthetic_train=2000, synthetic_dev=300):
        super().__init__(hidden, data_dir, seed)
        train, dev = _load(None if data_dir is None else os.fspath(data_dir), seed,
                           synthetic_train, synthetic_dev)
        self._train = list(train if train_trees is None else train[:train_trees])
        self._dev = list(dev if dev_trees is None else dev[:dev_trees])
        self.vocab = Vocab.build(w for t in self._train for w in t.words())
        self.model = self.build_model()

    def build_model(self):
        raise NotImplementedError

    def node_types(self, tree):
        """The model's `types` argument for `tree` (None: one kind of internal node)."""
        return None

    @property
    def classifier_input(self):
        return self.hidden

    @property
    def data_source(self):
        if self.data_dir is not None:
            return f"SST {self.data_dir}"
        return "synthetic_sst"

    def loss(self, instance):
        return self.model.tree_loss(instance, self.node_types(instance))

    def predict(self, instance):
        return [self.model.root_logits(instance, self.node_types(instance))]

    def gold(self, instance):
        return [instance.label]

    def predict_flops(self, instance):
        """FLOPs `predict` executes: `root_logits` runs the whole node block (classifier and
        loss included) at every node, then the output layer once more at the root."""
        return self.forward_flops(instance) + 2 * CLASSES * self.classifier_input


class W1TreeLSTM(TreeWorkload):
    name = "W1"
    description = "binary Tree-LSTM sentiment (SST, 5 classes on every node), embedding = hidden"

    def __init__(self, hidden=256, data_dir=None, seed=0, embed=None, **sets):
        self.embed = hidden if embed is None else embed
        super().__init__(hidden, data_dir, seed, **sets)

    def build_model(self):
        return TreeLSTMSentiment(self.vocab, embed=self.embed, hidden=self.hidden, classes=CLASSES,
                                 seed=self.seed)

    def forward_flops(self, instance):
        """2 per MAC: per leaf W_iou (3H x E), per internal node U (5H x 2H), per node the
        output layer (5 x H). With E = H = 256: 768x256, 1280x512 and 5x256."""
        H, E = self.hidden, self.embed
        leaves, internal = tree_counts(instance)
        macs = leaves * 3 * H * E + internal * 5 * H * 2 * H + (leaves + internal) * CLASSES * H
        return 2 * macs
