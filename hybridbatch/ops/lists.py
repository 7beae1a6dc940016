"""Reductions over a list of values of one type, elementwise across the list: max_n, min_n,
logsumexp_n (add_n, the sum, is elementwise.AddN and RaggedAddN).

Each comes twice, as add_n does: the op of a fixed count (eager mode, a hybridized block's
trace, operands that are not all values of the scope), whose signature holds the count, and
the ragged op a batching scope records (Op.ragged), whose signature names the type alone, so
that lists of every length batch together: a node's operands are one segment of the stacked
rows, aux its length. Both run the same segment kernels; the fixed op stacks its operands
into segments of equal length.
"""
import numpy as np

from ..kernels.segments import segment_of_rows, segment_reduce, segment_sums
from .registry import Op, register, check, check_float, as_batched, batch_size


class _ListReduce(Op):
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        check(all(s == shapes[0] for s in shapes), self.name, shapes, f"{self.name} needs equal shapes")
        check(all(d == dtypes[0] for d in dtypes), self.name, shapes, f"{self.name} needs one dtype")
        return shapes[0], dtypes[0]

    def segments(self, xp, sig, xs, aux):
        """The operand rows, node after node, and each node's count of them."""
        if self.ragged:
            return xs[0], aux
        B, n = batch_size(xs, sig), len(xs)
        rows = xp.stack([as_batched(xp, x, s, B) for x, s in zip(xs, sig.shared)], axis=1)
        return rows.reshape((B * n,) + rows.shape[2:]), np.full(B, n, np.int64)

    def forward(self, xp, sig, xs, aux):
        return self.reduce(xp, *self.segments(xp, sig, xs, aux))

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        rows, counts = self.segments(xp, sig, xs, aux)
        of_row = xp.asarray(segment_of_rows(counts))
        g = self.row_grads(xp, rows, counts, of_row, y[of_row], gy[of_row])
        if self.ragged:
            return (g,)
        g = g.reshape((len(counts), len(xs)) + g.shape[1:])
        return tuple(None if not need else (g[:, i].sum(axis=0) if shared else g[:, i])
                     for i, (need, shared) in enumerate(zip(needs, sig.shared)))


class _ListExtreme(_ListReduce):
    """The gradient goes to the operands equal to the result, shared equally where several
    tie, as the max and min reductions (reduce.py) give it."""

    def reduce(self, xp, rows, counts):
        return segment_reduce(xp, self.ufunc, rows, counts)

    def row_grads(self, xp, rows, counts, of_row, y_rows, gy_rows):
        at = rows == y_rows
        ties = segment_sums(xp, at.astype(gy_rows.dtype), counts)
        return at * (gy_rows / ties[of_row])


@register
class MaxN(_ListExtreme):
    """The largest of a list of values, elementwise (numpy's maximum over them)."""
    name = "max_n"
    ufunc = np.maximum


@register
class RaggedMaxN(type(MaxN)):
    name = "max_n"
    ragged = True


@register
class MinN(_ListExtreme):
    """The smallest of a list of values, elementwise (numpy's minimum over them)."""
    name = "min_n"
    ufunc = np.minimum


@register
class RaggedMinN(type(MinN)):
    name = "min_n"
    ragged = True


def shift(xp, m):
    """A logsumexp's shift: the largest value where finite, else 0, so that a segment of
    -inf gives -inf and one holding +inf gives +inf, not inf - inf."""
    return xp.where(xp.isfinite(m), m, m.dtype.type(0))


@register
class LogSumExpN(_ListReduce):
    """log(sum(exp(x_i))) over a list of values, elementwise, shifted by the largest so that
    it never overflows: the normalizer of a softmax over the list (hb.softmax(xs))."""
    name = "logsumexp_n"

    def infer(self, attrs, shapes, dtypes):
        check_float(self.name, shapes, dtypes)
        return super().infer(attrs, shapes, dtypes)

    def reduce(self, xp, rows, counts):
        m = shift(xp, segment_reduce(xp, np.maximum, rows, counts))
        y = xp.log(segment_sums(xp, xp.exp(rows - m[xp.asarray(segment_of_rows(counts))]), counts))
        y += m
        return y

    def row_grads(self, xp, rows, counts, of_row, y_rows, gy_rows):
        return gy_rows * xp.exp(rows - y_rows)


@register
class RaggedLogSumExpN(type(LogSumExpN)):
    name = "logsumexp_n"
    ragged = True
