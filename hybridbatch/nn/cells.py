"""Recurrent and tree cells, one instance per call; hybridize() to batch them whole."""
import numpy as np

from .. import api as F
from ..hybrid.block import Block, HybridBlock
from ..train.parameter import Parameter


def _rng(seed):
    return np.random.default_rng(seed) if seed is not None else None


class LSTMCell(HybridBlock):
    """(x, h, c) -> (h', c'); gates [i, f, g, o] from one affine over [x; h]."""

    def __init__(self, hidden, input_size, seed=None):
        super().__init__()
        self.hidden = hidden
        self.weight = Parameter("weight", (4 * hidden, input_size + hidden), rng=_rng(seed))
        self.bias = Parameter("bias", (4 * hidden,), init="zeros")

    def forward(self, x, h, c):
        i, f, g, o = F.split(F.affine(self.weight, F.concat([x, h]), self.bias), 4)
        c = F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
        return F.sigmoid(o) * F.tanh(c), c


class GRUCell(HybridBlock):
    """(x, h) -> h' with reset and update gates (Cho et al. 2014)."""

    def __init__(self, hidden, input_size, seed=None):
        super().__init__()
        rng = _rng(seed)
        self.gates = Parameter("gates", (2 * hidden, input_size + hidden), rng=rng)
        self.gates_bias = Parameter("gates_bias", (2 * hidden,), init="zeros")
        self.cand_x = Parameter("cand_x", (hidden, input_size), rng=rng)
        self.cand_h = Parameter("cand_h", (hidden, hidden), rng=rng)
        self.cand_bias = Parameter("cand_bias", (hidden,), init="zeros")

    def forward(self, x, h):
        r, z = F.split(F.sigmoid(F.affine(self.gates, F.concat([x, h]), self.gates_bias)), 2)
        n = F.tanh(F.affine(self.cand_x, x, self.cand_bias) + self.cand_h @ (r * h))
        return (1.0 - z) * n + z * h


class TreeLSTMLeaf(HybridBlock):
    """Leaf: [i, o, u] = W x + b; c = σ(i)⊙tanh(u); h = σ(o)⊙tanh(c)."""

    def __init__(self, hidden, input_size, rng=None):
        super().__init__()
        self.weight = Parameter("weight", (3 * hidden, input_size), rng=rng)
        self.bias = Parameter("bias", (3 * hidden,), init="zeros")

    def forward(self, x):
        i, o, u = F.split(F.affine(self.weight, x, self.bias), 3)
        c = F.sigmoid(i) * F.tanh(u)
        return F.sigmoid(o) * F.tanh(c), c


class TreeLSTMInternal(HybridBlock):
    """Internal node: z = U [h_l; h_r] + b; c = σ(i)⊙tanh(u) + σ(f_l)⊙c_l + σ(f_r)⊙c_r."""

    def __init__(self, hidden, rng=None):
        super().__init__()
        self.weight = Parameter("weight", (5 * hidden, 2 * hidden), rng=rng)
        self.bias = Parameter("bias", (5 * hidden,), init="zeros")

    def forward(self, h_l, c_l, h_r, c_r):
        i, o, u, f_l, f_r = F.split(F.affine(self.weight, F.concat([h_l, h_r]), self.bias), 5)
        c = F.sigmoid(i) * F.tanh(u) + F.sigmoid(f_l) * c_l + F.sigmoid(f_r) * c_r
        return F.sigmoid(o) * F.tanh(c), c


class TreeLSTMCell(Block):
    """Binary Tree-LSTM (Tai et al. 2015).

    cell(x) -> (h, c) for a leaf; cell((h_l, c_l), (h_r, c_r)) -> (h, c) for an internal node.
    """

    def __init__(self, hidden, input_size, seed=None):
        super().__init__()
        rng = _rng(seed)
        self.leaf = TreeLSTMLeaf(hidden, input_size, rng)
        self.internal = TreeLSTMInternal(hidden, rng)

    def forward(self, *args):
        if len(args) == 1:
            return self.leaf(args[0])
        if len(args) == 2:
            (h_l, c_l), (h_r, c_r) = args
            return self.internal(h_l, c_l, h_r, c_r)
        raise TypeError("TreeLSTMCell takes x (a leaf) or two (h, c) child states")


class ChildSumTreeLSTMCell(HybridBlock):
    """Child-sum Tree-LSTM (Tai et al. 2015): any number of children, one forget gate each.

    cell(x, h_1, c_1, ..., h_k, c_k) -> (h, c); each arity is traced once.
    """

    def __init__(self, hidden, input_size, seed=None):
        super().__init__()
        rng = _rng(seed)
        self.hidden = hidden
        self.w_iou = Parameter("w_iou", (3 * hidden, input_size), rng=rng)
        self.u_iou = Parameter("u_iou", (3 * hidden, hidden), rng=rng)
        self.b_iou = Parameter("b_iou", (3 * hidden,), init="zeros")
        self.w_f = Parameter("w_f", (hidden, input_size), rng=rng)
        self.u_f = Parameter("u_f", (hidden, hidden), rng=rng)
        self.b_f = Parameter("b_f", (hidden,), init="zeros")

    def forward(self, x, *states):
        if len(states) % 2:
            raise TypeError("ChildSumTreeLSTMCell takes x then (h, c) pairs of the children")
        hs, cs = states[0::2], states[1::2]
        iou = F.affine(self.w_iou, x, self.b_iou)
        if hs:
            iou = iou + self.u_iou @ F.add_n(hs)
        i, o, u = F.split(iou, 3)
        c = F.sigmoid(i) * F.tanh(u)
        if hs:
            fx = F.affine(self.w_f, x, self.b_f)
            c = F.add_n([c] + [F.sigmoid(fx + self.u_f @ h) * ck for h, ck in zip(hs, cs)])
        return F.sigmoid(o) * F.tanh(c), c
