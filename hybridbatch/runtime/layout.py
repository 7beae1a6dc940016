"""The order of nodes inside each batch, which is the order of their arena rows.

A policy decides which nodes run together; the order inside a batch is free, and it decides
whether a later batch finds its operands as a view or must copy them. Ordered by where
they are read next, a chain's values come out as the sort-by-length layout that hand-batched
RNN code asks for (PyTorch's packed sequences): the sentences still running first, in the
order the next step reads them, so its operand rows are a prefix of this batch's, read in
place (`plan.SLICE`), and its gradient goes back by a slice add, not a scatter. ED-Batch
gets the same from a PQ-tree over all readers; nearest reader first covers chains.
"""
import numpy as np
from numba import njit


@njit(cache=True)
def rows_by_next_reader(order, bptr, arg_ptr, args):
    """order with each batch's nodes sorted by their nearest later reader: its batch, then
    its position there (ties and unread nodes keep their order, after the read ones).

    Batches are visited last to first, so a reader's position is final before its operands
    are sorted by it. args: local operand ids (an extra output read as its producer), -1 for
    an earlier flush's value."""
    n = arg_ptr.shape[0] - 1
    nb = bptr.shape[0] - 1
    unread = nb * (n + 1)
    key = np.full(n, unread, np.int64)     # reader batch * (n + 1) + position in it
    out = order.copy()
    for b in range(nb - 1, -1, -1):
        lo, hi = bptr[b], bptr[b + 1]
        nodes = out[lo:hi]
        if hi - lo > 1:
            nodes = nodes[np.argsort(key[nodes], kind="mergesort")]
            out[lo:hi] = nodes
        for i in range(hi - lo):
            v = nodes[i]
            here = b * (n + 1) + i
            for e in range(arg_ptr[v], arg_ptr[v + 1]):
                u = args[e]
                if u >= 0 and here < key[u]:
                    key[u] = here
    return out
