"""Reductions of consecutive runs of rows (segments): the kernels of ragged batches (add_n,
max_n, min_n, logsumexp_n), whose nodes each reduce their own number of operand rows."""
import numpy as np
from numba import njit


@njit(cache=True)
def _segment_sums(flat, counts, out):
    o = 0
    for b in range(counts.shape[0]):
        for j in range(flat.shape[1]):
            out[b, j] = flat[o, j]
        for i in range(1, counts[b]):
            for j in range(flat.shape[1]):
                out[b, j] += flat[o + i, j]
        o += counts[b]


def segment_sums(xp, flat, counts):
    """Row b of the result: the sum of the next counts[b] rows of flat, added one after
    another from the first, as eager add_n adds its operands (so the bits match). counts: a
    host int64 array of positive counts summing to len(flat)."""
    if xp is np and flat.dtype.kind in "fiuc" and flat.dtype != np.float16:   # numba's types
        out = np.empty((len(counts),) + flat.shape[1:], flat.dtype)
        _segment_sums(flat.reshape(len(flat), -1), counts, out.reshape(len(counts), -1))
        return out
    return _by_position(xp, xp.add, flat, counts)     # cupy, float16, bool: in the same order


def _by_position(xp, step, flat, counts):
    """Each segment's rows combined by `step` (a ufunc of xp) from its first, one indexed
    step per operand position across every segment that long."""
    first = np.cumsum(counts) - counts
    out = flat[xp.asarray(first)]
    for i in range(1, int(counts.max())):
        more = np.flatnonzero(counts > i)
        rows = xp.asarray(more)
        out[rows] = step(out[rows], flat[xp.asarray(first[more] + i)])
    return out


def segment_of_rows(counts):
    """Per row of the stacked operands, the segment (node) it belongs to."""
    return np.repeat(np.arange(len(counts)), counts)


def segment_reduce(xp, ufunc, flat, counts):
    """Row b of the result: numpy ufunc `ufunc` (np.maximum, np.minimum) reduced over the next
    counts[b] rows of flat, each segment alone, so a node's result is the same in any batch."""
    if xp is np:
        return ufunc.reduceat(flat, np.cumsum(counts) - counts, axis=0)
    return _by_position(xp, getattr(xp, ufunc.__name__), flat, counts)
