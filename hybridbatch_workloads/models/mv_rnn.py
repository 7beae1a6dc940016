"""W4 MV-RNN (Socher et al. 2012): matrix-vector recursive network on the W1 trees, d = 64.

Every word has a vector a (d) and a matrix A (d x d). An internal node with children
(a, A) and (b, B) computes, as docs/workloads.md writes it (no bias in either product):

    p = tanh(W [B a; A b])        W: d x 2d
    P = W_M [A; B]                W_M: d x 2d, so P is d x d again

Every node, leaves included, is classified as in W1: logits = W_out p + b_out (5 classes),
loss −log softmax(logits)[label], summed over the tree. Word matrices start at the identity
plus noise (as in the paper) and W_M at [I I] / 2 plus noise: P then starts as the mean of
its children's matrices and stays near the identity up a deep tree instead of growing (or
shrinking) with every level.

One hybridized block call per tree node (leaf: (word, label); internal: (a, A, loss_l, b, B,
loss_r, label)), returning (p, P, subtree loss): see recursive_tree.py. A node's d³ product
W_M [A; B] is the dominant cost; the batched run does it as one GEMM per instance (a
batched matmul: see ops/linalg._shared_left for why not one wide GEMM).
"""
import numpy as np

from hybridbatch import api as hb
from hybridbatch.hybrid.block import HybridBlock
from hybridbatch.nn import Dense
from hybridbatch.train.parameter import Initializer, Parameter
from .recursive_tree import RecursiveTreeModel


class NearIdentity(Initializer):
    """`scale` times identity blocks side by side ([I I ...] along the last axis), in every
    leading index, plus N(0, noise²)."""

    def __init__(self, scale=1.0, noise=0.01):
        self.scale, self.noise = scale, noise

    def __call__(self, shape, dtype, rng):
        d, k = shape[-2], shape[-1] // shape[-2]
        eye = np.tile(np.eye(d, dtype=dtype), k) * dtype.type(self.scale)
        noise = rng.standard_normal(shape, dtype=np.float32).astype(dtype, copy=False)
        return noise * dtype.type(self.noise) + eye


class MVRNNNode(HybridBlock):
    """Leaf: (word, label); internal: (a, A, loss_l, b, B, loss_r, label) -> (p, P, subtree loss)."""

    def __init__(self, vocab_size, dim=64, classes=5, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.vectors = Parameter("vectors", (vocab_size, dim), init="uniform", rng=rng)
        self.matrices = Parameter("matrices", (vocab_size, dim, dim), init=NearIdentity(1.0), rng=rng)
        self.weight = Parameter("weight", (dim, 2 * dim), rng=rng)
        self.weight_m = Parameter("weight_m", (dim, 2 * dim), init=NearIdentity(0.5), rng=rng)
        self.output = Dense(classes, dim, seed=seed + 2)

    def forward(self, *args):
        if len(args) == 2:
            word, label = args
            a = hb.lookup(self.vectors, word)
            return a, hb.lookup(self.matrices, word), hb.pick_neg_log_softmax(self.output(a), label)
        a, A, loss_l, b, B, loss_r, label = args
        p = hb.tanh(self.weight @ hb.concat([B @ a, A @ b]))
        P = self.weight_m @ hb.concat([A, B])
        return p, P, hb.add_n([hb.pick_neg_log_softmax(self.output(p), label), loss_l, loss_r])


class MVRNNSentiment(RecursiveTreeModel):
    """W4 MV-RNN: `tree_loss(tree)`, `root_logits(tree)`."""

    def __init__(self, vocab, dim=64, classes=5, seed=0):
        super().__init__(vocab)
        self.node = MVRNNNode(len(vocab), dim, classes, seed)
