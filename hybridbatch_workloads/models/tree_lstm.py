"""W1: binary Tree-LSTM sentiment classifier (Tai et al. 2015), and W4's TreeLSTM-2Type.

Written per instance: one recursive Python function over one tree (recursive_tree.py). Each
tree node is ONE call of a hybridized block (cell + classifier + the loss of its subtree),
so block granularity records one graph node per tree node; op granularity replays its ~20
primitive ops.

W4 TreeLSTM-2Type is W1 where every internal node uses one of two sets of composition
weights (U, b), drawn per node with probability 1/2; the embedding, the leaf weights and the
classifier are shared. The two internal blocks are two signatures, so the scheduler sees two
interleaved kinds of internal nodes.
"""
import numpy as np

from hybridbatch import api as hb
from hybridbatch.hybrid.block import HybridBlock
from hybridbatch.nn import Dense, TreeLSTMCell
from hybridbatch.train.parameter import Parameter
from .recursive_tree import RecursiveTreeModel


class TreeLSTMNode(HybridBlock):
    """Leaf: (word, label); internal: (h_l, c_l, loss_l, h_r, c_r, loss_r, label).

    Returns (h, c, loss of the subtree rooted here). `shared`: another TreeLSTMNode whose
    embedding, leaf weights and classifier this one uses, so that only its internal-node
    weights are its own (TreeLSTM-2Type).
    """

    def __init__(self, vocab_size, embed=256, hidden=256, classes=5, seed=0, shared=None):
        super().__init__()
        self.cell = TreeLSTMCell(hidden, embed, seed=seed + 1)
        if shared is None:
            rng = np.random.default_rng(seed)
            self.embedding = Parameter("embedding", (vocab_size, embed), init="uniform", rng=rng)
            self.output = Dense(classes, hidden, seed=seed + 2)
        else:
            self.embedding, self.output, self.cell.leaf = shared.embedding, shared.output, shared.cell.leaf

    def forward(self, *args):
        if len(args) == 2:
            word, label = args
            h, c = self.cell(hb.lookup(self.embedding, word))
            return h, c, hb.pick_neg_log_softmax(self.output(h), label)
        h_l, c_l, loss_l, h_r, c_r, loss_r, label = args
        h, c = self.cell((h_l, c_l), (h_r, c_r))
        return h, c, hb.add_n([hb.pick_neg_log_softmax(self.output(h), label), loss_l, loss_r])


class TreeLSTMSentiment(RecursiveTreeModel):
    """W1. `tree_loss(tree)` sums the loss of every node; `root_logits(tree)` classifies it."""

    def __init__(self, vocab, embed=256, hidden=256, classes=5, seed=0):
        super().__init__(vocab)
        self.node = TreeLSTMNode(len(vocab), embed, hidden, classes, seed)


class TwoTypeTreeLSTM(TreeLSTMSentiment):
    """W4 TreeLSTM-2Type: `tree_loss(tree, types)`, `types` from `draw_node_types`."""

    def __init__(self, vocab, embed=256, hidden=256, classes=5, seed=0):
        super().__init__(vocab, embed, hidden, classes, seed)
        self.node_b = TreeLSTMNode(len(vocab), embed, hidden, classes, seed + 3, shared=self.node)

    def internal_blocks(self):
        return (self.node, self.node_b)


def draw_node_types(tree, rng):
    """Per internal node of `tree` (post-order), 0 or 1 with probability 1/2 each."""
    return tuple(rng.integers(0, 2, tree.n_leaves - 1).tolist())
