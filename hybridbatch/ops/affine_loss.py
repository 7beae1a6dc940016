"""A classifier layer and its picked loss as one op, for traced block programs.

`affine(W, x, b)` followed by `pick_neg_log_softmax(·, label)` is a tree model's per-node
output layer and loss: a thin product (5 classes) run once per tree level, forward and
backward. As one op it is one compiled pass per batch instead of a BLAS call, a bias add
and the loss kernel, each with its Python and temporaries. Users never record it:
`hybrid.passes.fold_affine_losses` rewrites a program's steps where the pattern occurs, and
eager mode and op granularity keep the two ops.
"""
import numpy as np

from ..kernels import softmax
from .registry import Op, check, register


@register
class AffinePickNegLogSoftmax(Op):
    """-log softmax(W x + b)[aux] for a shared W (n, k), per-instance x (k,) and shared b (n,).

    Its labels are checked where they are recorded, against the unfolded loss step
    (`Program.check_ints` reads the program's own steps), so it needs no check of its own."""
    name = "affine_pick_neg_log_softmax"
    zero_exact = True
    uses_aux = True

    def infer(self, attrs, shapes, dtypes):
        w, x, b = shapes
        check(len(w) == 2 and x == (w[1],) and b == (w[0],) and len(set(dtypes)) == 1
              and dtypes[0] in (np.float32, np.float64), self.name, shapes,
              "expects W (n, k), x (k,) and b (n,) of one dtype, float32 or float64")
        return (), dtypes[0]

    def forward(self, xp, sig, xs, aux):
        w, x, b = xs
        return softmax.affine_pick_neg_log_softmax(x, w, b, aux)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        w, x, b = xs
        gx, gw, gb = softmax.affine_pick_neg_log_softmax_grad(x, w, b, aux, gy)
        return gw if needs[0] else None, gx if needs[1] else None, gb if needs[2] else None
