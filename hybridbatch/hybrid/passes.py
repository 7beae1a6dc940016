"""Passes over a program's steps before it runs as one node per call (block granularity).

Each is a function of the steps (Step records, program order) and the program's output
slots, returning the steps to run instead: `fold_affine_losses` makes a classifier layer and
its loss one op, `kernels.fused.plan_units` groups elementwise runs into FusedRuns (a
program's *units*: steps and runs), `distinct.keyed_part` splits units by what depends on
one integer argument. `lower` is the pipeline the Composite op runs (numpy backend, `hb.settings.fusion` on).
"""
from collections import Counter

import numpy as np

from ..kernels.blas import SMALL_WEIGHT
from ..kernels.fused import plan_units
from ..ops.affine_loss import AffinePickNegLogSoftmax
from ..ops.index import PickNegLogSoftmax
from ..ops.linalg import Affine
from ..record import signature

def lower(steps, outputs):
    """The units a program runs as with fusion on: classifier losses folded, then
    elementwise runs fused."""
    return plan_units(fold_affine_losses(steps, outputs), outputs)


def fold_affine_losses(steps, outputs):
    """Steps with each foldable affine -> pick_neg_log_softmax pair made one
    AffinePickNegLogSoftmax step at the loss's place.

    Foldable: W and b shared Parameters, W thin (`_foldable`), x per instance, float32/float64
    on the host, and the affine's value read only by the loss (not by another step, not a
    program output)."""
    readers = Counter(r for step in steps for r in step.refs if r is not None)
    affines = {step.slot: step for step in steps
               if _foldable(step.sig) and readers.get(step.slot) == 1 and step.slot not in outputs}
    folded, dropped = [], set()
    for step in steps:
        affine = affines.get(step.refs[0]) if step.sig.op is PickNegLogSoftmax else None
        if affine is None:
            folded.append(step)
            continue
        dropped.add(affine.slot)
        folded.append(step._replace(sig=signature.intern(AffinePickNegLogSoftmax, (), affine.sig.codes),
                                    refs=affine.refs))
    return [step for step in folded if step.slot not in dropped]


def _foldable(sig):
    """A thin layer only (fewer than blas.SMALL_WEIGHT elements, e.g. a 5 x 256 classifier): the op's dot
    products beat a BLAS call there, but not on a wider one (a 17 x 512 tagger output layer:
    its step was 2.5% slower folded, in-process A/B)."""
    w = sig.in_shapes[0]
    return (sig.op is Affine and sig.shared == (True, False, True) and len(w) == 2 and w[0] * w[1] < SMALL_WEIGHT
            and len(sig.in_shapes[1]) == 1 and sig.in_shapes[2] == sig.out_shape
            and sig.out_dtype in (np.float32, np.float64))
