"""DyNet's agenda-based batching (Neubig et al. 2017, §3.2).

Keep every node whose inputs are done on an agenda, one FIFO queue per signature. Each step
runs all ready nodes of the signature with the lowest average depth (ties: cheap ops
first), so nodes that become ready at different times (a loss after chains of different
lengths) wait and run together. Ready nodes of an unbatchable signature all run in that
step too, one batch each, so their consumers become ready together.
"""
import numpy as np
from numba import njit


@njit(cache=True)
def _ready_counts(executable, arg_ptr, args):
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
def _consumers(executable, arg_ptr, args):
    """Reverse edges (CSR): for each executed node, the executed nodes that read it."""
    n = arg_ptr.shape[0] - 1
    ptr = np.zeros(n + 1, np.int64)
    for v in range(n):
        if not executable[v]:
            continue
        for e in range(arg_ptr[v], arg_ptr[v + 1]):
            u = args[e]
            if u >= 0 and executable[u]:
                ptr[u + 1] += 1
    for v in range(n):
        ptr[v + 1] += ptr[v]
    fill = ptr[:-1].copy()
    out = np.empty(ptr[n], np.int64)
    for v in range(n):
        if not executable[v]:
            continue
        for e in range(arg_ptr[v], arg_ptr[v + 1]):
            u = args[e]
            if u >= 0 and executable[u]:
                out[fill[u]] = v
                fill[u] += 1
    return ptr, out


@njit(cache=True, inline="always")
def _push(v, s, head, tail, nxt, nready):
    """Append node v to signature s's FIFO of ready nodes (a linked list in arrays)."""
    if tail[s] < 0:
        head[s] = v
    else:
        nxt[tail[s]] = v
    tail[s] = v
    nready[s] += 1


@njit(cache=True)
def _agenda(sig, executable, unbatchable, priority, cost, arg_ptr, args):
    n = sig.shape[0]
    n_sigs = priority.shape[0]
    indeg = _ready_counts(executable, arg_ptr, args)
    cons_ptr, cons = _consumers(executable, arg_ptr, args)
    head = np.full(n_sigs, -1, np.int64)
    tail = np.full(n_sigs, -1, np.int64)
    nxt = np.full(n, -1, np.int64)
    nready = np.zeros(n_sigs, np.int64)
    n_exec = 0
    for v in range(n):
        if executable[v]:
            n_exec += 1
            if indeg[v] == 0:
                _push(v, sig[v], head, tail, nxt, nready)
    order = np.empty(n_exec, np.int64)
    bptr = np.empty(n_exec + 1, np.int64)
    bptr[0] = 0
    nb = 0
    pos = 0
    while pos < n_exec:
        best = -1
        for s in range(n_sigs):
            if nready[s] > 0:
                if best < 0 or priority[s] < priority[best] or (
                        priority[s] == priority[best] and cost[s] < cost[best]):
                    best = s
        take = nready[best]
        start = pos
        for _ in range(take):
            v = head[best]
            head[best] = nxt[v]
            nxt[v] = -1
            order[pos] = v
            pos += 1
        nready[best] = 0
        tail[best] = -1
        order[start:pos] = np.sort(order[start:pos])
        if unbatchable[best]:       # every ready node of it, one batch each, before choosing again
            for k in range(start, pos):
                nb += 1
                bptr[nb] = k + 1
        else:
            nb += 1
            bptr[nb] = pos
        for k in range(start, pos):
            v = order[k]
            for e in range(cons_ptr[v], cons_ptr[v + 1]):
                w = cons[e]
                indeg[w] -= 1
                if indeg[w] == 0:
                    _push(w, sig[w], head, tail, nxt, nready)
    return order, bptr[:nb + 1]


def average_depth(sig, depth, executable, n_sigs):
    """Mean depth of the executed nodes of each signature (DyNet's priority)."""
    w = executable.astype(np.float64)
    total = np.bincount(sig, weights=depth * w, minlength=n_sigs)
    count = np.bincount(sig, weights=w, minlength=n_sigs)
    return total / np.maximum(count, 1)


def agenda(view):
    """Ordered batches for a GraphView: (order, batch_ptr) over its local node ids."""
    priority = average_depth(view.sig, view.depth, view.executable, view.n_sigs)
    return _agenda(view.sig, view.executable, view.unbatchable, priority, view.cost, view.arg_ptr, view.args)
