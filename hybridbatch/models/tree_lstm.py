"""W1: binary Tree-LSTM sentiment classifier (Tai et al. 2015), WORKLOADS.md sizes.

Written per instance: one recursive Python function over one tree. Each tree node is ONE
call of a hybridized block (cell + classifier + the node's loss), so block granularity
records one graph node per tree node; op granularity replays its ~20 primitive ops.
"""
import numpy as np

from .. import api as hb
from ..block import Block, HybridBlock
from ..nn import Dense, TreeLSTMCell
from ..parameter import Parameter


class TreeLSTMNode(HybridBlock):
    """(word, label) for a leaf or (h_l, c_l, h_r, c_r, label) for an internal node -> (h, c, loss)."""

    def __init__(self, vocab_size, embed=256, hidden=256, classes=5, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.embedding = Parameter("embedding", (vocab_size, embed), init="uniform", rng=rng)
        self.cell = TreeLSTMCell(hidden, embed, seed=seed + 1)
        self.output = Dense(classes, hidden, seed=seed + 2)

    def forward(self, *args):
        if len(args) == 2:
            word, label = args
            h, c = self.cell(hb.lookup(self.embedding, word))
        else:
            h_l, c_l, h_r, c_r, label = args
            h, c = self.cell((h_l, c_l), (h_r, c_r))
        return h, c, hb.pick_neg_log_softmax(self.output(h), label)


class TreeLSTMSentiment(Block):
    """W1. `tree_loss(tree)` sums the loss of every node; `root_logits(tree)` classifies it."""

    def __init__(self, vocab, embed=256, hidden=256, classes=5, seed=0):
        super().__init__()
        self.vocab = vocab
        self.node = TreeLSTMNode(len(vocab), embed, hidden, classes, seed)

    def _encode(self, tree, losses):
        if tree.is_leaf:
            h, c, loss = self.node(self.vocab.id(tree.word), tree.label)
        else:
            (h_l, c_l), (h_r, c_r) = (self._encode(child, losses) for child in tree.children)
            h, c, loss = self.node(h_l, c_l, h_r, c_r, tree.label)
        losses.append(loss)
        return h, c

    def tree_loss(self, tree):
        losses = []
        self._encode(tree, losses)
        return hb.add_n(losses)

    def root_logits(self, tree):
        h, _ = self._encode(tree, [])
        return self.node.output(h)
