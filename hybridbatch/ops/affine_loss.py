"""A classifier layer and its picked loss as one op, for traced block programs.

`affine(W, x, b)` followed by `pick_neg_log_softmax(·, label)` is a tree model's per-node
output layer and loss: a thin product (5 classes) run once per tree level, forward and
backward. As one op it is one compiled pass per batch instead of a BLAS call, a bias add
and the loss kernel, each with its Python and temporaries. Users never record it:
`fold_affine_losses` rewrites a program's steps where the pattern occurs, and eager mode
and op granularity keep the two ops.
"""
from collections import Counter

import numpy as np

from ..record import signature
from ..kernels import softmax
from ..kernels.blas import SMALL_WEIGHT
from .index import PickNegLogSoftmax
from .linalg import Affine
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


def fold_affine_losses(steps, program_outputs):
    """Program steps (slot, sig, refs, aux) with each foldable affine -> pick_neg_log_softmax
    pair made one AffinePickNegLogSoftmax step at the loss's place.

    Foldable: W and b shared Parameters, W thin (`_foldable`), x per instance, float32/float64
    on the host, and the affine's value read only by the loss (not by another step, not a
    program output)."""
    readers = Counter(r for _, _, refs, _ in steps for r in refs if r is not None)
    affines = {step[0]: step for step in steps
               if _foldable(step[1]) and readers.get(step[0]) == 1 and step[0] not in program_outputs}
    folded, dropped = [], set()
    for slot, sig, refs, aux in steps:
        affine = affines.get(refs[0]) if sig.op is PickNegLogSoftmax else None
        if affine is None:
            folded.append((slot, sig, refs, aux))
            continue
        a_slot, a_sig, a_refs, _ = affine
        dropped.add(a_slot)
        folded.append((slot, signature.intern(AffinePickNegLogSoftmax, (), a_sig.codes), a_refs, aux))
    return [step for step in folded if step[0] not in dropped]


def _foldable(sig):
    """A thin layer only (fewer than blas.SMALL_WEIGHT elements, e.g. a 5 x 256 classifier): the op's dot
    products beat a BLAS call there, but not on a wider one (a 17 x 512 tagger output layer:
    its step was 2.5% slower folded, in-process A/B)."""
    w = sig.in_shapes[0]
    return (sig.op is Affine and sig.shared == (True, False, True) and len(w) == 2 and w[0] * w[1] < SMALL_WEIGHT
            and len(sig.in_shapes[1]) == 1 and sig.in_shapes[2] == sig.out_shape
            and sig.out_dtype in (np.float32, np.float64))
