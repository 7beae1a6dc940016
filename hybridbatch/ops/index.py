"""Ops whose nodes each carry one integer (aux): embedding lookup, pick, the picked loss.

The integer is per-node data, not part of the signature, so lookups of different words or
losses of different labels still batch together.
"""
import numpy as np

from ..kernels import softmax
from .registry import Op, register, RowGrad, check, check_float
from .softmax import log_softmax


def _row_range(xp, aux):
    return xp.arange(len(aux))


@register
class Lookup(Op):
    """Row `aux` of a parameter matrix (an embedding); a negative aux counts from the end,
    as numpy's index (recorded as aux + rows, so the kernels see rows >= 0)."""
    name = "lookup"
    zero_exact = True
    uses_aux = True
    needs_batched = False

    def infer(self, attrs, shapes, dtypes):
        check(len(shapes[0]) >= 1, self.name, shapes, "lookup needs a table with at least one axis")
        return shapes[0][1:], dtypes[0]

    def check_aux(self, sig, aux):
        n = sig.in_shapes[0][0]
        if not -n <= aux < n:
            raise IndexError(f"lookup: index {aux} out of range for a table of {n} rows")

    def aux_limit(self, sig):
        return sig.in_shapes[0][0]

    def forward(self, xp, sig, xs, aux):
        return xs[0][aux]

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        if not sig.shared[0]:
            raise NotImplementedError("lookup from a computed (non-parameter) table")
        return (RowGrad(aux, gy),)


def _check_label(name, sig, aux):
    n = sig.in_shapes[0][0]
    if not 0 <= aux < n:
        raise IndexError(f"{name}: index {aux} out of range for a vector of length {n}")


def _vector(name, shapes, dtypes):
    check(len(shapes[0]) == 1, name, shapes, "expects a 1-D vector per instance")
    return (), dtypes[0]


@register
class Pick(Op):
    """Element `aux` of a vector, or row `aux` (along the first axis) of a value of higher
    rank; a negative aux counts from the end, as numpy's index (and the kernels' fancy
    indexing) reads it. A label (pick_neg_log_softmax) stays >= 0."""
    name = "pick"
    zero_exact = True
    uses_aux = True
    aux_from_end = True

    def infer(self, attrs, shapes, dtypes):
        check(len(shapes[0]) >= 1, self.name, shapes, "needs a value with at least one axis")
        return shapes[0][1:], dtypes[0]

    def check_aux(self, sig, aux):
        n = sig.in_shapes[0][0]
        if not -n <= aux < n:
            raise IndexError(f"{self.name}: index {aux} out of range for an axis of length {n}")

    def aux_limit(self, sig):
        return sig.in_shapes[0][0]

    def forward(self, xp, sig, xs, aux):
        return xs[0][_row_range(xp, aux), aux]

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        g = xp.zeros(xs[0].shape, gy.dtype)
        g[_row_range(xp, aux), aux] = gy
        return (g,)


@register
class PickNegLogSoftmax(Op):
    """-log softmax(x)[aux]: the per-instance classification loss, stable for large logits."""
    name = "pick_neg_log_softmax"
    zero_exact = True
    uses_aux = True

    def infer(self, attrs, shapes, dtypes):
        check_float(self.name, shapes, dtypes)
        return _vector(self.name, shapes, dtypes)

    def check_aux(self, sig, aux):
        _check_label(self.name, sig, aux)

    def aux_limit(self, sig):
        return sig.in_shapes[0][0]

    def forward(self, xp, sig, xs, aux):
        if xp is np:
            return softmax.pick_neg_log_softmax(xs[0], aux)
        return -log_softmax(xp, xs[0])[_row_range(xp, aux), aux]

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        if xp is np:
            return (softmax.pick_neg_log_softmax_grad(xs[0], aux, gy),)
        g = xp.exp(log_softmax(xp, xs[0]))
        g[_row_range(xp, aux), aux] -= 1
        g *= gy[:, None]
        return (g,)
