"""The arrays a policy schedules over, and graph helpers the policies share (numba)."""
from dataclasses import dataclass

import numpy as np
from numba import njit


@dataclass
class GraphView:
    """One flush's pending nodes, renumbered 0..n-1.

    sig: compact signature per node (0..n_sigs-1); args: local ids of each node's operands,
    -1 for values computed in an earlier flush (already available); executable: False for
    inputs. Per signature: unbatchable flags and op cost (agenda tie-break).
    """
    sig: np.ndarray
    depth: np.ndarray
    arg_ptr: np.ndarray
    args: np.ndarray
    executable: np.ndarray
    unbatchable: np.ndarray
    cost: np.ndarray

    @property
    def n_sigs(self):
        return len(self.unbatchable)


@njit(cache=True)
def ready_counts(executable, arg_ptr, args):
    """Per node, how many of its operands are executed nodes of this flush (still pending)."""
    n = arg_ptr.shape[0] - 1
    indeg = np.zeros(n, np.int64)
    for v in range(n):
        for e in range(arg_ptr[v], arg_ptr[v + 1]):
            u = args[e]
            if u >= 0 and executable[u]:
                indeg[v] += 1
    return indeg


@njit(cache=True)
def consumers(executable, arg_ptr, args):
    """Reverse edges (CSR): for each executed node, the nodes that read it."""
    n = arg_ptr.shape[0] - 1
    ptr = np.zeros(n + 1, np.int64)
    for v in range(n):
        for e in range(arg_ptr[v], arg_ptr[v + 1]):
            u = args[e]
            if u >= 0 and executable[u]:
                ptr[u + 1] += 1
    for v in range(n):
        ptr[v + 1] += ptr[v]
    fill = ptr[:-1].copy()
    out = np.empty(ptr[n], np.int64)
    for v in range(n):
        for e in range(arg_ptr[v], arg_ptr[v + 1]):
            u = args[e]
            if u >= 0 and executable[u]:
                out[fill[u]] = v
                fill[u] += 1
    return ptr, out
