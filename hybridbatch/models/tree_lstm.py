"""W1: binary Tree-LSTM sentiment classifier (Tai et al. 2015), WORKLOADS.md sizes.

Written per instance: one recursive Python function over one tree. Each tree node is ONE
call of a hybridized block (cell + classifier + the loss of its subtree), so block
granularity records one graph node per tree node; op granularity replays its ~20 primitive
ops. Summing the subtree losses inside the block (instead of an add_n per tree, whose
arity differs from tree to tree) keeps the loss in the same batches as the cells.
"""
import numpy as np

from .. import api as hb
from ..block import Block, HybridBlock
from ..nn import Dense, TreeLSTMCell
from ..parameter import Parameter


class TreeLSTMNode(HybridBlock):
    """Leaf: (word, label); internal: (h_l, c_l, loss_l, h_r, c_r, loss_r, label).

    Returns (h, c, loss of the subtree rooted here).
    """

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
            return h, c, hb.pick_neg_log_softmax(self.output(h), label)
        h_l, c_l, loss_l, h_r, c_r, loss_r, label = args
        h, c = self.cell((h_l, c_l), (h_r, c_r))
        return h, c, hb.add_n([hb.pick_neg_log_softmax(self.output(h), label), loss_l, loss_r])


class TreeLSTMSentiment(Block):
    """W1. `tree_loss(tree)` sums the loss of every node; `root_logits(tree)` classifies it."""

    def __init__(self, vocab, embed=256, hidden=256, classes=5, seed=0):
        super().__init__()
        self.vocab = vocab
        self.node = TreeLSTMNode(len(vocab), embed, hidden, classes, seed)

    def _encode(self, tree):
        """(h, c, subtree loss) of `tree`, one block call per node."""
        if tree.is_leaf:
            return self.node(self.vocab.id(tree.word), tree.label)
        (h_l, c_l, loss_l), (h_r, c_r, loss_r) = (self._encode(child) for child in tree.children)
        return self.node(h_l, c_l, loss_l, h_r, c_r, loss_r, tree.label)

    def tree_loss(self, tree):
        """Sum over every node of -log softmax(W_out h + b_out)[label]."""
        return self._encode(tree)[2]

    def root_logits(self, tree):
        return self.node.output(self._encode(tree)[0])
