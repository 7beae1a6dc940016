"""Checking a schedule that a user-supplied policy returned.

The plan runs whatever (order, batch_ptr) it is given: arenas are allocated uninitialized
and a batch gathers its operands' rows as they are, so a batch that runs before one of its
operands reads garbage, and a batch mixing signatures runs one signature's kernel on the
other's nodes. Built-in and learned policies build valid schedules by construction; a
callable from the user is checked once per schedule it makes (the plan cache keeps checked
schedules only), in O(nodes + edges).
"""
import numpy as np
from numba import njit

# problem codes of _find_problem, and what each means (node and batch filled in)
_PROBLEMS = {
    1: "batch_ptr must start at 0, rise strictly and end at len(order) ({n} here)",
    2: "batch {b} holds node {v}, which is not an executed node of this flush",
    3: "node {v} appears twice (again in batch {b})",
    4: "batch {b} mixes signatures (node {v} differs from the batch's first node)",
    5: "batch {b} runs several nodes of an unbatchable signature (node {v})",
    6: "executed node {v} is missing from the order",
    7: "node {v} in batch {b} runs before one of its operands",
}


@njit(cache=True)
def _find_problem(order, bptr, sig, arg_ptr, args, executable, unbatchable):
    """(code, batch, node) of the first problem found, or (0, -1, -1) for a valid schedule."""
    n = sig.shape[0]
    nb = bptr.shape[0] - 1
    if nb < 0 or bptr[0] != 0 or bptr[nb] != order.shape[0]:
        return 1, -1, -1
    batch_of = np.full(n, -1, np.int64)
    for b in range(nb):
        lo, hi = bptr[b], bptr[b + 1]
        if hi <= lo or hi > order.shape[0]:      # checked before order[lo:hi] is read
            return 1, b, -1
        for k in range(lo, hi):
            v = order[k]
            if v < 0 or v >= n or not executable[v]:
                return 2, b, v
            if batch_of[v] >= 0:
                return 3, b, v
            if sig[v] != sig[order[lo]]:
                return 4, b, v
            if unbatchable[sig[v]] and hi - lo > 1:
                return 5, b, v
            batch_of[v] = b
    for v in range(n):
        if executable[v]:
            if batch_of[v] < 0:
                return 6, -1, v
            for e in range(arg_ptr[v], arg_ptr[v + 1]):
                u = args[e]
                if u >= 0 and executable[u] and batch_of[u] >= batch_of[v]:
                    return 7, batch_of[v], v
    return 0, -1, -1


def checked(policy, view, schedule):
    """(order, bptr) as int64 arrays when the policy's `schedule` is a valid one of the
    view, else a ValueError naming the policy and the first problem."""
    name = getattr(policy, "__name__", repr(policy))
    if not isinstance(schedule, (tuple, list)) or len(schedule) != 2:
        got = f"a {type(schedule).__name__} of {len(schedule)}" if isinstance(schedule, (tuple, list)) else \
            type(schedule).__name__
        raise ValueError(f"batching policy {name} returned {got}; a policy returns a pair (order, batch_ptr): "
                         f"the executed nodes in run order, and where each batch starts in it (len(order) last)")
    order, bptr = np.asarray(schedule[0]), np.asarray(schedule[1])
    for what, a in (("order", order), ("batch_ptr", bptr)):
        if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
            raise ValueError(f"batching policy {name} returned an invalid schedule: {what} must be a "
                             f"1-D array of integers, not {a.dtype} of shape {a.shape}")
    order, bptr = order.astype(np.int64), bptr.astype(np.int64)
    code, b, v = _find_problem(order, bptr, view.sig, view.arg_ptr, view.args, view.executable,
                               view.unbatchable)
    if code:
        raise ValueError(f"batching policy {name} returned an invalid schedule: "
                         + _PROBLEMS[code].format(b=b, v=v, n=len(order)))
    return order, bptr
