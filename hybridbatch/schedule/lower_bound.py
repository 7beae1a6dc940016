"""ED-Batch's lower bound on the number of batches (Eq. 2).

For each signature, the longest chain of its nodes in which each depends on the previous,
directly or through other nodes: no schedule can run two of them in one batch. The bound
is the sum of these over signatures, plus one per unbatchable node.
"""
import numpy as np
from numba import njit


@njit(cache=True)
def _lower_bound(sig, executable, unbatchable, arg_ptr, args, n_sigs):
    n = sig.shape[0]
    present = np.zeros(n_sigs, np.bool_)
    extra = 0
    for v in range(n):
        if executable[v]:
            if unbatchable[sig[v]]:
                extra += 1
            else:
                present[sig[v]] = True
    longest = np.zeros(n, np.int64)
    total = extra
    for s in range(n_sigs):
        if not present[s]:
            continue
        best = 0
        for v in range(n):   # ids are a topological order: operands are recorded first
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
        total += best
    return total


def lower_bound(view):
    """The lower bound on batches for a GraphView."""
    return int(_lower_bound(view.sig, view.executable, view.unbatchable, view.arg_ptr, view.args, view.n_sigs))
