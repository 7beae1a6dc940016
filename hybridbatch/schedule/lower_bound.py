"""ED-Batch's lower bound on the number of batches (Eq. 2).

For each signature, the longest chain of its nodes in which each depends on the previous,
directly or through other nodes: no schedule can run two of them in one batch. The bound
is the sum of these over signatures, plus one per unbatchable node.
"""
import numpy as np
from numba import njit


@njit(cache=True)
def _lower_bound(sig, executable, unbatchable, arg_ptr, args, n_sigs):
    chains, extra = _chains(sig, executable, unbatchable, arg_ptr, args, n_sigs)
    return extra + chains.sum()


@njit(cache=True)
def _chains(sig, executable, unbatchable, arg_ptr, args, n_sigs):
    """(per signature its longest chain of executed nodes, 0 for an unbatchable one; the
    unbatchable nodes' count): Eq. 2's terms."""
    n = sig.shape[0]
    first = np.full(n_sigs, n, np.int64)     # per signature: its first and last executed node
    last = np.full(n_sigs, -1, np.int64)
    extra = 0
    for v in range(n):
        if executable[v]:
            if unbatchable[sig[v]]:
                extra += 1
            else:
                if first[sig[v]] == n:
                    first[sig[v]] = v
                last[sig[v]] = v
    longest = np.zeros(n, np.int64)          # all zero between passes
    chains = np.zeros(n_sigs, np.int64)
    for s in range(n_sigs):
        if last[s] < 0:
            continue
        # a path's count of s-nodes peaks at an s-node, and none comes before the first
        best = 0
        for v in range(first[s], last[s] + 1):   # ids are a topological order: operands are recorded first
            m = 0
            for e in range(arg_ptr[v], arg_ptr[v + 1]):
                u = args[e]
                if u >= 0 and longest[u] > m:
                    m = longest[u]
            if executable[v] and sig[v] == s:
                m += 1
            longest[v] = m
            if m > best:
                best = m
        longest[first[s]:last[s] + 1] = 0
        chains[s] = best
    return chains, extra


def lower_bound(view):
    """The lower bound on batches for a GraphView."""
    return int(_lower_bound(view.sig, view.executable, view.unbatchable, view.arg_ptr, view.args, view.n_sigs))
