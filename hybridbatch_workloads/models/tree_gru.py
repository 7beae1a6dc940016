"""W4 TreeGRU: a binary Tree-GRU sentiment classifier on the W1 trees, docs/workloads.md sizes.

nn.GRUCell reads one input and one previous state; a binary tree node has two children and
no input, so the cell here gives each child its own reset gate and updates towards the
children's mean (the GRU of a chain is the case of one child):

- leaf (word w), a GRU step from the zero state: x = E[w]; [z, n] = W x + b (2H x E);
  h = (1 − σ(z)) ⊙ tanh(n);
- internal (children l, r): [r_l, r_r, z] = σ(U_g [h_l; h_r] + b_g) (3H x 2H);
  n = tanh(U_n [r_l ⊙ h_l; r_r ⊙ h_r] + b_n) (H x 2H); h = (1 − z) ⊙ n + z ⊙ (h_l + h_r) / 2;
- every node, as W1: logits = W_out h + b_out (5 classes), loss −log softmax(logits)[label],
  summed over the tree.

One hybridized block call per tree node (leaf: (word, label); internal: (h_l, loss_l, h_r,
loss_r, label)), returning (h, subtree loss): see recursive_tree.py.
"""
import numpy as np

from hybridbatch import api as hb
from hybridbatch.hybrid.block import HybridBlock
from hybridbatch.nn import Dense
from hybridbatch.train.parameter import Parameter
from .recursive_tree import RecursiveTreeModel


class TreeGRULeaf(HybridBlock):
    """x -> h = (1 − σ(z)) ⊙ tanh(n), [z, n] = W x + b."""

    def __init__(self, hidden, input_size, rng=None):
        super().__init__()
        self.weight = Parameter("weight", (2 * hidden, input_size), rng=rng)
        self.bias = Parameter("bias", (2 * hidden,), init="zeros")

    def forward(self, x):
        z, n = hb.split(hb.affine(self.weight, x, self.bias), 2)
        return (1.0 - hb.sigmoid(z)) * hb.tanh(n)


class TreeGRUInternal(HybridBlock):
    """(h_l, h_r) -> h, with a reset gate per child and one update gate."""

    def __init__(self, hidden, rng=None):
        super().__init__()
        self.gates = Parameter("gates", (3 * hidden, 2 * hidden), rng=rng)
        self.gates_bias = Parameter("gates_bias", (3 * hidden,), init="zeros")
        self.cand = Parameter("cand", (hidden, 2 * hidden), rng=rng)
        self.cand_bias = Parameter("cand_bias", (hidden,), init="zeros")

    def forward(self, h_l, h_r):
        r_l, r_r, z = hb.split(hb.sigmoid(hb.affine(self.gates, hb.concat([h_l, h_r]), self.gates_bias)), 3)
        n = hb.tanh(hb.affine(self.cand, hb.concat([r_l * h_l, r_r * h_r]), self.cand_bias))
        return (1.0 - z) * n + z * ((h_l + h_r) * 0.5)


class TreeGRUNode(HybridBlock):
    """Leaf: (word, label); internal: (h_l, loss_l, h_r, loss_r, label) -> (h, subtree loss)."""

    def __init__(self, vocab_size, embed=256, hidden=256, classes=5, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.embedding = Parameter("embedding", (vocab_size, embed), init="uniform", rng=rng)
        self.leaf = TreeGRULeaf(hidden, embed, rng)
        self.internal = TreeGRUInternal(hidden, rng)
        self.output = Dense(classes, hidden, seed=seed + 2)

    def forward(self, *args):
        if len(args) == 2:
            word, label = args
            h = self.leaf(hb.lookup(self.embedding, word))
            return h, hb.pick_neg_log_softmax(self.output(h), label)
        h_l, loss_l, h_r, loss_r, label = args
        h = self.internal(h_l, h_r)
        return h, hb.add_n([hb.pick_neg_log_softmax(self.output(h), label), loss_l, loss_r])


class TreeGRUSentiment(RecursiveTreeModel):
    """W4 TreeGRU: `tree_loss(tree)`, `root_logits(tree)`."""

    def __init__(self, vocab, embed=256, hidden=256, classes=5, seed=0):
        super().__init__(vocab)
        self.node = TreeGRUNode(len(vocab), embed, hidden, classes, seed)
