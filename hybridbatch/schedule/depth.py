"""Depth-based batching (TensorFlow Fold): same depth and same signature run together.

Nodes of equal depth never depend on each other, so every (depth, signature) group is a
valid batch; the price is missed batches across depths (losses after chains of different
lengths each run alone).
"""
import numpy as np


def by_depth(view):
    """Ordered batches for a GraphView: (order, batch_ptr) over its local node ids."""
    ids = np.flatnonzero(view.executable)
    s = view.sig[ids]
    d = view.depth[ids]
    perm = np.lexsort((ids, s, view.cost[s], d))
    order = ids[perm]
    s, d = s[perm], d[perm]
    cut = np.empty(len(order), np.bool_)
    if len(order):
        cut[0] = True
        cut[1:] = (d[1:] != d[:-1]) | (s[1:] != s[:-1]) | view.unbatchable[s[1:]]
    starts = np.flatnonzero(cut)
    return order.astype(np.int64), np.append(starts, len(order)).astype(np.int64)
