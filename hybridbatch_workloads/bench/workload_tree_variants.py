"""W4 of docs/workloads.md (the ED-Batch tree variants) as benchmark workloads, on the W1 trees.

Data, vocabulary, per-node loss (5 classes on every node, as W1) and root accuracy come from
`TreeWorkload` (workload_treelstm.py); each class here only picks its model and counts its
FLOPs (2 per MAC of the matrix products, as W1):

- W4-TREEGRU: binary Tree-GRU (models/tree_gru.py), embedding = hidden (256);
- W4-2TYPE: W1's Tree-LSTM where each internal node uses one of two weight sets, drawn per
  node with probability 1/2 from `seed` (models/tree_lstm.py);
- W4-MVRNN: MV-RNN (models/mv_rnn.py), d = 64 at the reference hidden 256 (d scales with
  hidden / 256, see `workload.scaled`).
"""
from __future__ import annotations

import numpy as np

from ..models.mv_rnn import MVRNNSentiment
from ..models.tree_gru import TreeGRUSentiment
from ..models.tree_lstm import TwoTypeTreeLSTM, draw_node_types
from .workload import scaled
from .workload_treelstm import CLASSES, TreeWorkload, W1TreeLSTM, tree_counts

__all__ = ["W4TreeGRU", "W4TreeLSTM2Type", "W4MVRNN"]


class W4TreeGRU(TreeWorkload):
    name = "W4-TREEGRU"
    description = "binary Tree-GRU sentiment (SST trees, 5 classes on every node), embedding = hidden"

    def build_model(self):
        return TreeGRUSentiment(self.vocab, embed=self.hidden, hidden=self.hidden, classes=CLASSES,
                                seed=self.seed)

    def forward_flops(self, instance):
        """2 per MAC: per leaf W (2H x E), per internal node U_g (3H x 2H) and U_n (H x 2H),
        per node the output layer (5 x H)."""
        H = E = self.hidden
        leaves, internal = tree_counts(instance)
        macs = leaves * 2 * H * E + internal * 4 * H * 2 * H + (leaves + internal) * CLASSES * H
        return 2 * macs


class W4TreeLSTM2Type(W1TreeLSTM):
    name = "W4-2TYPE"
    description = ("Tree-LSTM sentiment (SST trees) whose internal nodes use one of two weight sets "
                   "(p = 1/2 each), embedding = hidden")

    def __init__(self, hidden=256, data_dir=None, seed=0, **options):
        super().__init__(hidden, data_dir, seed, **options)
        rng = np.random.default_rng(seed + 104729)
        self._types = {t: draw_node_types(t, rng) for t in self._train + self._dev}

    def build_model(self):
        return TwoTypeTreeLSTM(self.vocab, embed=self.embed, hidden=self.hidden, classes=CLASSES,
                               seed=self.seed)

    def node_types(self, tree):
        return self._types[tree]


class W4MVRNN(TreeWorkload):
    name = "W4-MVRNN"

    def __init__(self, hidden=256, data_dir=None, seed=0, dim=None, **sets):
        self.dim = scaled(64, hidden) if dim is None else dim
        self.description = (f"MV-RNN sentiment (SST trees, 5 classes on every node), a vector and a "
                            f"{self.dim}x{self.dim} matrix per word")
        super().__init__(hidden, data_dir, seed, **sets)

    def build_model(self):
        return MVRNNSentiment(self.vocab, dim=self.dim, classes=CLASSES, seed=self.seed)

    @property
    def classifier_input(self):
        return self.dim

    def forward_flops(self, instance):
        """2 per MAC: per internal node B a and A b (d x d each), W (d x 2d) and W_M [A; B]
        (d x 2d times 2d x d); per node the output layer (5 x d). Leaves only look up."""
        d = self.dim
        leaves, internal = tree_counts(instance)
        macs = internal * (2 * d * d + 2 * d * d + 2 * d * d * d) + (leaves + internal) * CLASSES * d
        return 2 * macs
