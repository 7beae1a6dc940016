"""The step loop every dynamic policy runs (ED-Batch Alg. 1), in numba.

A schedule repeats one step: pick a signature among those with ready nodes, run all its
ready nodes, release their consumers. Policies differ only in the pick: agenda's average
depth (with or without the graph's tail last), the frontier ratio of ED-Batch's reward, the
critical path, or a learned table.
search.py looks ahead with this loop's kernels (_start, _take, copy_loop, critical_completion).
Everything here calls everything else, so it stays in one file: numba's on-disk cache does
not notice a changed callee in another module.

The frontier ratio of a signature a is |ready a| / |a-frontier|, where the a-frontier is the
unexecuted a-nodes with no unexecuted a-node above them (ED-Batch's Frontier(G^a)). At 1,
running a now loses nothing (ED-Batch Lemma 1). It needs, per (node, signature), how many
operands still carry that signature from above (`carry`): O(signatures x (nodes + edges)) in
all, so only the rules that read the ratio pay for it. The critical path needs each node's
height (longest path below it): one more pass over the edges.
"""
import numpy as np
from numba import njit

AGENDA, FRONTIER, CRITICAL, TABLE, TAIL_LAST = 0, 1, 2, 3, 4   # how `run` picks the next signature
BASE, MAX, SORT, PHASE = 0, 1, 2, 3       # state encodings (ED-Batch §2.3, plus our phase)
FLAGS = 4                                  # a state element is vid * FLAGS + flags
# the loop state's fields (see _start)
INDEG, CONS_PTR, CONS, TAIL, NEXT, NREADY, LEFT, HEIGHT, TOP = range(9)


@njit(cache=True, inline="always")
def _ready_counts(sig, executable, arg_ptr, args, feeds, fill):
    """Per node, how many of its operands are executed nodes of this flush (still pending).
    fill (a constant per inlined copy): also set bit b of feeds[a] where an executed a-node
    feeds an executed b-node, a bit table of the signature graph (tail-last's)."""
    n = arg_ptr.shape[0] - 1
    indeg = np.zeros(n, np.int64)
    for v in range(n):
        b = sig[v]
        for e in range(arg_ptr[v], arg_ptr[v + 1]):
            u = args[e]
            if u >= 0 and executable[u]:
                indeg[v] += 1
                if fill and executable[v]:
                    feeds[sig[u], b >> 6] |= np.uint64(1) << np.uint64(b & 63)
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


@njit(cache=True)
def _heights(executable, cons_ptr, cons):
    """Per executed node, the longest path of executed nodes from it to a sink (>= 1)."""
    n = executable.shape[0]
    height = np.zeros(n, np.int64)
    for v in range(n - 1, -1, -1):       # consumers come after their operands
        if executable[v]:
            h = 0
            for e in range(cons_ptr[v], cons_ptr[v + 1]):
                h = max(h, height[cons[e]])
            height[v] = h + 1
    return height


@njit(cache=True, inline="always")
def _feeds(feeds, a, b):
    """Whether an a-node feeds a b-node (the bit table _ready_counts fills)."""
    return feeds[a, b >> 6] >> np.uint64(b & 63) & np.uint64(1) != 0


@njit(cache=True)
def _peel_tail(feeds, left, chains):
    """The graph's tail, sinks first: (signatures, count). It is peeled from the sinks of
    the signature graph (feeds; left > 0: the signatures with executed nodes): a signature
    joins once every other signature its nodes feed has joined; one whose nodes feed each
    other (a chain's step) only if it feeds no other (a sum of sums), or, with `chains`, if
    every other one it feeds is a sink (a running total of losses, read by the minibatch's
    sum). A recurrence feeds a per-step output that is no sink, so it stays out. No node
    outside the tail reads one inside it. O(signatures^2 / 64 + signatures x tail): within
    the loop's O(steps x signatures)."""
    n_sigs = left.shape[0]
    out = np.zeros(n_sigs, np.int64)           # other signatures fed that have not joined
    sink = np.zeros(n_sigs, np.bool_)
    peeled = np.empty(n_sigs, np.int64)
    k = 0
    for a in range(n_sigs):
        for j in range(feeds.shape[1]):
            x = feeds[a, j]
            while x:
                x &= x - np.uint64(1)
                out[a] += 1
        if _feeds(feeds, a, a):
            out[a] -= 1
        if left[a] > 0 and out[a] == 0:
            peeled[k] = a
            k += 1
            sink[a] = True
    i = 0
    while i < k:
        t = peeled[i]
        i += 1
        for a in range(n_sigs):
            if a != t and _feeds(feeds, a, t):
                out[a] -= 1
                if out[a] == 0 and (not _feeds(feeds, a, a) or (chains and _feeds_sinks_only(feeds, a, sink))):
                    peeled[k] = a
                    k += 1
    return peeled, k


@njit(cache=True)
def _feeds_sinks_only(feeds, a, sink):
    for b in range(sink.shape[0]):
        if b != a and not sink[b] and _feeds(feeds, a, b):
            return False
    return True


@njit(cache=True)
def _tail_last_priority(priority, feeds, left):
    """Agenda's priority with the graph's tail (_peel_tail) after every other signature,
    upstream first (agenda.py says why)."""
    peeled, k = _peel_tail(feeds, left, False)
    result = priority.copy()
    if k:
        last = priority.max() + 1
        for i in range(k):
            result[peeled[i]] = last + k - 1 - i
    return result


@njit(cache=True)
def _tail_below(sig, executable, feeds, loop):
    """Critical path with the graph's tail (_peel_tail) last: every other node's height is
    raised above any tail node's, so a tail signature runs only when nothing else is ready.
    Nothing outside the tail waits for it, and run last its signatures are ready in full:
    a per-step classifier whose losses a running total sums (`sum(losses)`, a chain) had
    looked as critical as the recurrence and ran once per step beside it."""
    peeled, k = _peel_tail(feeds, loop[LEFT], True)
    if k == 0:
        return
    in_tail = np.zeros(feeds.shape[0], np.bool_)
    in_tail[peeled[:k]] = True
    height, nready, top = loop[HEIGHT], loop[NREADY], loop[TOP]
    above = sig.shape[0] + 1            # more than any height
    for v in range(sig.shape[0]):
        if executable[v] and not in_tail[sig[v]]:
            height[v] += above
    for s in range(nready.shape[0]):
        if nready[s] > 0 and not in_tail[s]:
            top[s] += above


@njit(cache=True)
def _start(sig, executable, arg_ptr, args, n_sigs, with_heights, feeds):
    """The loop's state before the first step: (pending operand counts, consumers (CSR),
    ready FIFOs (tail, next), ready count, unexecuted count and highest ready node's height
    per signature, node heights (empty unless asked for)). feeds: a (signatures, words) bit
    table to fill with the signature graph (_ready_counts), or (0, 1) for none.

    Signature s's FIFO of ready nodes is a linked list in `next`, headed at next[n + s];
    tail[s] is its last node, or n + s while it is empty, so appending v is
    `next[tail[s]] = v; tail[s] = v`. The appends are written out where nodes become ready
    (here and _release): a call taking arrays counts their references up and down, which
    per node cost more than the rest of the loop."""
    n = sig.shape[0]
    if feeds.shape[0]:
        indeg = _ready_counts(sig, executable, arg_ptr, args, feeds, True)
    else:
        indeg = _ready_counts(sig, executable, arg_ptr, args, feeds, False)
    cons_ptr, cons = _consumers(executable, arg_ptr, args)
    height = _heights(executable, cons_ptr, cons) if with_heights else np.zeros(0, np.int64)
    loop = (indeg, cons_ptr, cons, np.arange(n, n + n_sigs), np.full(n + n_sigs, -1, np.int64),
            np.zeros(n_sigs, np.int64), np.zeros(n_sigs, np.int64), height, np.zeros(n_sigs, np.int64))
    tail, nxt, nready, left, top = loop[TAIL], loop[NEXT], loop[NREADY], loop[LEFT], loop[TOP]
    for v in range(n):
        if executable[v]:
            s = sig[v]
            left[s] += 1
            if indeg[v] == 0:
                nxt[tail[s]] = v
                tail[s] = v
                nready[s] += 1
                if with_heights:
                    top[s] = max(top[s], height[v])
    return loop


@njit(cache=True, inline="always")
def _release(order, start, pos, sig, loop, track):
    """Count down the consumers of order[start:pos]; append the ones now ready to their
    signature's FIFO (_start). track (critical path): also keep each type's highest ready
    node."""
    indeg, cons_ptr, cons, height, top = loop[INDEG], loop[CONS_PTR], loop[CONS], loop[HEIGHT], loop[TOP]
    tail, nxt, nready = loop[TAIL], loop[NEXT], loop[NREADY]
    for k in range(start, pos):
        v = order[k]
        for e in range(cons_ptr[v], cons_ptr[v + 1]):
            w = cons[e]
            indeg[w] -= 1
            if indeg[w] == 0:
                t = sig[w]
                nxt[tail[t]] = w
                tail[t] = w
                nready[t] += 1
                if track:
                    top[t] = max(top[t], height[w])


@njit(cache=True, inline="always")
def _bits(m):
    """The number of bits of m >= 0 (about log2 m)."""
    b = 0
    while m:
        m >>= 1
        b += 1
    return b


@njit(cache=True)
def _take(s, sig, unbatchable, order, bptr, pos, nb, loop):
    """Run every ready node of s (one batch, or one each if unbatchable), in id order;
    release their consumers. Returns the new (pos, nb).

    The FIFO mostly holds them in id order already (checked as they are taken). Otherwise
    a batch dense in ids is put in order by one pass over its id range, cheaper than a sort
    for large batches spread over the flush (every tree node's classifier at once), and a
    sparse one is sorted."""
    tail, nxt, nready, left, top = loop[TAIL], loop[NEXT], loop[NREADY], loop[LEFT], loop[TOP]
    first = nxt.shape[0] - nready.shape[0] + s       # the head slot of s's FIFO
    start = pos
    lo, hi = first, -1
    ascending = True
    v = nxt[first]
    for _ in range(nready[s]):
        order[pos] = v
        pos += 1
        ascending = ascending and v > hi
        lo, hi = min(lo, v), max(hi, v)
        u = nxt[v]
        nxt[v] = -1
        v = u
    nxt[first] = -1
    tail[s] = first
    left[s] -= nready[s]
    nready[s] = 0
    top[s] = 0
    size = pos - start
    if not ascending and hi - lo < size * _bits(size):
        for k in range(start, pos):      # mark the batch (nxt -2), read it off in id order
            nxt[order[k]] = -2
        k = start
        for v in range(lo, hi + 1):
            if nxt[v] == -2:
                nxt[v] = -1
                order[k] = v
                k += 1
    elif not ascending:
        order[start:pos].sort()
    if unbatchable[s]:       # every ready node of it, one batch each, before choosing again
        for k in range(start, pos):
            nb += 1
            bptr[nb] = k + 1
    else:
        nb += 1
        bptr[nb] = pos
    if loop[HEIGHT].shape[0]:    # a constant per inlined copy: agenda's loop carries no test
        _release(order, start, pos, sig, loop, True)
    else:
        _release(order, start, pos, sig, loop, False)
    return pos, nb


@njit(cache=True)
def _carry_start(sig, executable, done, arg_ptr, args, n_sigs):
    """carry[v, col[a]]: operands of v that are a-nodes or have an a-node above them, among
    the unexecuted (not `done`) nodes; front[a]: the size of the a-frontier. Columns exist
    only for signatures with several unexecuted nodes: not for inputs and extra outputs
    (most of a block graph's signatures), nor for one-node signatures such as each
    sentence length's loss sum, whose frontier is their node. That keeps the table and its
    O(edges x columns) pass small."""
    n = sig.shape[0]
    count = np.zeros(n_sigs, np.int64)
    for v in range(n):
        if executable[v] and not done[v]:
            count[sig[v]] += 1
    col = np.full(n_sigs, -1, np.int64)
    front = np.zeros(n_sigs, np.int64)
    n_cols = 0
    for s in range(n_sigs):
        if count[s] > 1:
            col[s] = n_cols
            n_cols += 1
        elif count[s] == 1:    # its node is its frontier: no column to keep
            front[s] = 1
    carry = np.zeros((n, max(n_cols, 1)), np.int32)
    for v in range(n):
        if not executable[v] or done[v]:
            continue
        for e in range(arg_ptr[v], arg_ptr[v + 1]):
            u = args[e]
            if u < 0 or not executable[u] or done[u]:
                continue
            cu = col[sig[u]]
            for c in range(n_cols):
                if carry[u, c] > 0 or cu == c:
                    carry[v, c] += 1
        if col[sig[v]] >= 0 and carry[v, col[sig[v]]] == 0:
            front[sig[v]] += 1
    return carry, front, col


@njit(cache=True)
def _carry_release(batch, a, sig, carry, front, cons_ptr, cons, stack, col):
    """Update carry/front after the ready a-nodes `batch` ran: nodes below them that no
    longer have an a-node above them stop carrying a, and a-nodes among them join the
    a-frontier. Each (edge, signature) is released at most once, so `stack` needs one slot
    per edge."""
    c = col[a]
    if c < 0:                  # a signature of one node
        front[a] = 0
        return
    sp = 0
    for v in batch:
        front[a] -= 1
        for e in range(cons_ptr[v], cons_ptr[v + 1]):
            stack[sp] = cons[e]
            sp += 1
    while sp > 0:
        sp -= 1
        w = stack[sp]
        carry[w, c] -= 1
        if carry[w, c] == 0:
            if sig[w] == a:
                front[a] += 1
            else:
                for e in range(cons_ptr[w], cons_ptr[w + 1]):
                    stack[sp] = cons[e]
                    sp += 1


@njit(cache=True, inline="always")
def _complete(nready, left):
    """A ready signature all of whose unexecuted nodes are ready, or -1. Running it now never
    costs a batch: any schedule can run those nodes first instead, in one batch, and keep
    the rest of its batches. Learned tables take such steps without a state (a sentence's
    loss sum, one signature per length, would otherwise make most states unseen)."""
    for s in range(nready.shape[0]):
        if nready[s] > 0 and nready[s] == left[s]:
            return s
    return -1


@njit(cache=True)
def _pick(rule, nready, front, top, priority, cost):
    """The ready signature a heuristic rule runs next. AGENDA: lowest average depth, then
    lowest cost. FRONTIER: highest frontier ratio, then agenda's rule. CRITICAL: the
    highest ready node (longest path still to run below it), then agenda's rule."""
    best = -1
    for s in range(nready.shape[0]):
        if nready[s] == 0:
            continue
        if best < 0:
            best = s
            continue
        mine = theirs = 0
        if rule == FRONTIER:          # ratios nready / front, cross-multiplied
            mine, theirs = nready[s] * front[best], nready[best] * front[s]
        elif rule == CRITICAL:
            mine, theirs = top[s], top[best]
        if mine > theirs or (mine == theirs and (priority[s] < priority[best] or (
                priority[s] == priority[best] and cost[s] < cost[best]))):
            best = s
    return best


@njit(cache=True, inline="always")
def _state(encoding, loop, vid, key, rank):
    """The state of the ready set as a key over stable type ids: fills key, returns its
    length (-1 if it does not fit); signatures of vid -1 are left out. Elements are
    vid * FLAGS + flags. `rank` is scratch of key's size: the loop runs
    once per batch, so it allocates nothing.

    BASE: ready types by vid. MAX: BASE, flag 1 on the most frequent. SORT: by ready count,
    most first. PHASE: by the height of the highest ready node, highest first (how much is
    left below the type: where in the run the graph is), flag 1 when the batch would finish
    the type."""
    nready, left, top = loop[NREADY], loop[LEFT], loop[TOP]
    k = 0
    span = 0
    for s in range(nready.shape[0]):
        if nready[s] > 0 and vid[s] >= 0:       # vid -1: a type the table leaves out
            if k == key.shape[0]:
                return -1
            key[k] = s
            k += 1
            span = max(span, vid[s] + 1)
    for i in range(k):       # insertion sort by rank; ranks are distinct (vid < span)
        s = key[i]
        r = vid[s]
        if encoding == SORT:
            r -= nready[s] * span
        elif encoding == PHASE:
            r -= top[s] * span
        j = i
        while j > 0 and rank[j - 1] > r:
            rank[j] = rank[j - 1]
            key[j] = key[j - 1]
            j -= 1
        rank[j] = r
        key[j] = s
    most = 0
    for i in range(k):
        s, m = key[i], key[most]
        if nready[s] > nready[m] or (nready[s] == nready[m] and vid[s] < vid[m]):
            most = i
    for i in range(k):
        s = key[i]
        flags = 0
        if encoding == MAX and i == most:
            flags = 1
        elif encoding == PHASE and nready[s] == left[s]:
            flags = 1
        key[i] = vid[s] * FLAGS + flags
    return k


@njit(cache=True, inline="always")
def _hash(key, k):
    h = np.uint64(1469598103934665603)
    for i in range(k):
        h = (h ^ np.uint64(key[i] + 1)) * np.uint64(1099511628211)
    return h


@njit(cache=True, inline="always")
def _find(slots, skeys, slen, key, k):
    """The table slot holding this exact key: (slot, state id), state id -1 if absent."""
    mask = slots.shape[0] - 1
    i = np.int64(_hash(key, k) & np.uint64(mask))
    while True:
        sid = slots[i]
        if sid < 0:
            return i, -1
        if slen[sid] == k:
            same = True
            for j in range(k):
                if skeys[sid, j] != key[j]:
                    same = False
                    break
            if same:
                return i, sid
        i = (i + 1) & mask


@njit(cache=True, inline="always")
def _lookup(encoding, loop, vid, key, rank, slots, skeys, slen, act, local, backoff):
    """The table's action (a ready signature) for the state, else (with backoff) that of the
    longest state in the table whose elements appear in this one's key, in order (a new
    minibatch often overlaps two phases more than the samples did); -1 if none does."""
    k = _state(encoding, loop, vid, key, rank)
    if k <= 0:
        return -1
    _, sid = _find(slots, skeys, slen, key, k)
    if sid < 0 and backoff:
        longest = 0
        for t in range(slen.shape[0]):
            if slen[t] <= longest or slen[t] > k:
                continue
            j = 0
            for i in range(k):
                if j < slen[t] and skeys[t, j] == key[i]:
                    j += 1
            if j == slen[t]:
                sid, longest = t, slen[t]
    if sid < 0:
        return -1
    return local[act[sid]]        # the action is one of the state's types: ready


@njit(cache=True)
def index_states(skeys, slen, n_states):
    """The open-addressing slots (state ids, -1 empty) for the first n_states keys."""
    size = 8
    while size < 2 * n_states:
        size *= 2
    slots = np.full(size, -1, np.int64)
    for sid in range(n_states):
        i, _ = _find(slots, skeys, slen, skeys[sid], slen[sid])
        slots[i] = sid
    return slots


@njit(cache=True)
def fallback_rule(encoding):
    """The heuristic a table falls back to (and starts from): the one its state reflects."""
    return CRITICAL if encoding == PHASE else FRONTIER


@njit(cache=True)
def _n_executed(executable):
    n = 0
    for v in range(executable.shape[0]):
        if executable[v]:
            n += 1
    return n


@njit(cache=True)
def run(sig, executable, unbatchable, priority, cost, arg_ptr, args, rule, vid, encoding, slots, skeys, slen, act,
        backoff):
    """The schedule (order, batch_ptr) and how many steps fell back to a heuristic.

    rule AGENDA, TAIL_LAST (agenda, the graph's tail last), FRONTIER or CRITICAL: that
    heuristic. TABLE: a signature ready in full (_complete); else the action act[state] of
    the learned table for the state's key, or (backoff) of the longest table state inside it
    (_lookup); else the encoding's fallback heuristic. The frontier bookkeeping starts at
    the first step that needs it, so a table that covers the graph costs about what agenda
    does."""
    n = sig.shape[0]
    n_sigs = priority.shape[0]
    fallback = fallback_rule(encoding) if rule == TABLE else rule
    feeds = np.zeros((n_sigs, (n_sigs + 63) >> 6) if rule == TAIL_LAST or rule == CRITICAL else (0, 1), np.uint64)
    loop = _start(sig, executable, arg_ptr, args, n_sigs, fallback == CRITICAL, feeds)
    nready, cons_ptr, cons, top = loop[NREADY], loop[CONS_PTR], loop[CONS], loop[TOP]
    if rule == TAIL_LAST:
        priority = _tail_last_priority(priority, feeds, loop[LEFT])
    elif rule == CRITICAL:
        _tail_below(sig, executable, feeds, loop)
    n_exec = _n_executed(executable)
    order = np.empty(n_exec, np.int64)
    bptr = np.empty(n_exec + 1, np.int64)
    bptr[0] = 0
    pos = nb = fallbacks = 0
    tracking = False
    carry, front = np.zeros((0, n_sigs), np.int32), np.zeros(n_sigs, np.int64)
    col = np.full(n_sigs, -1, np.int64)
    stack = np.empty(0, np.int64)
    key = np.empty(skeys.shape[1], np.int64)
    rank = np.empty(skeys.shape[1], np.int64)
    local = np.full(vid.max() + 1 if n_sigs else 0, -1, np.int64)      # vid -> this view's signature
    for s in range(n_sigs):
        if vid[s] >= 0:
            local[vid[s]] = s
    while pos < n_exec:
        best = -1
        if rule == TABLE:
            best = _complete(nready, loop[LEFT])
            if best < 0:
                best = _lookup(encoding, loop, vid, key, rank, slots, skeys, slen, act, local, backoff)
            if best < 0:
                fallbacks += 1
        if best < 0:
            if fallback == FRONTIER and not tracking:
                done = np.zeros(n, np.bool_)
                done[order[:pos]] = True
                carry, front, col = _carry_start(sig, executable, done, arg_ptr, args, n_sigs)
                stack = np.empty(cons.shape[0] + 1, np.int64)
                tracking = True
            best = _pick(fallback, nready, front, top, priority, cost)
        start = pos
        pos, nb = _take(best, sig, unbatchable, order, bptr, pos, nb, loop)
        if tracking:
            _carry_release(order[start:pos], best, sig, carry, front, cons_ptr, cons, stack, col)
    return order, bptr[:nb + 1], fallbacks


@njit(cache=True)
def _greedy(q, seen, sid, nready, vid):
    """The ready signature with the highest Q among those tried in state sid (ties: lowest
    vid); -1 if none was tried."""
    best = -1
    for s in range(nready.shape[0]):
        a = vid[s]
        if nready[s] > 0 and seen[sid, a] and (best < 0 or q[sid, a] > q[sid, vid[best]] or (
                q[sid, a] == q[sid, vid[best]] and a < vid[best])):
            best = s
    return best


@njit(cache=True)
def _grow_states(skeys, slen, q, seen):
    n = skeys.shape[0]
    skeys2 = np.full((2 * n, skeys.shape[1]), -1, np.int64)
    slen2 = np.full(2 * n, -1, np.int64)
    q2 = np.zeros((2 * n, q.shape[1]), np.float64)
    seen2 = np.zeros((2 * n, q.shape[1]), np.int64)
    skeys2[:n] = skeys
    slen2[:n] = slen
    q2[:n] = q
    seen2[:n] = seen
    return skeys2, slen2, q2, seen2


@njit(cache=True)
def episode(sig, executable, unbatchable, priority, cost, arg_ptr, args, vid, encoding,
            slots, skeys, slen, q, seen, n_states, alpha, eps, lr, n_step, seed):
    """One Q-learning episode over the graph (tabular, n-step returns, epsilon-greedy).

    Reward per step: -batches + alpha * frontier ratio of the chosen type (ED-Batch Eq. 1).
    Greedy is the best action tried in the state (seen[state, type]: times tried), or the
    fallback heuristic's pick in a state with none tried, so learning starts from the
    heuristic. A step's return is bootstrapped on the state n_step later if that state has
    a tried action, else on a later one (or the end). The first return of an action sets
    its Q; later ones move it by the learning rate lr.
    Returns the (possibly grown) table and its size."""
    np.random.seed(seed)
    n = sig.shape[0]
    n_sigs = priority.shape[0]
    fallback = fallback_rule(encoding)
    loop = _start(sig, executable, arg_ptr, args, n_sigs, fallback == CRITICAL, np.zeros((0, 1), np.uint64))
    nready, cons_ptr, cons, top = loop[NREADY], loop[CONS_PTR], loop[CONS], loop[TOP]
    n_exec = _n_executed(executable)
    order = np.empty(n_exec, np.int64)
    bptr = np.zeros(n_exec + 1, np.int64)
    carry, front, col = _carry_start(sig, executable, np.zeros(n, np.bool_), arg_ptr, args, n_sigs)
    stack = np.empty(cons.shape[0] + 1, np.int64)
    key = np.empty(skeys.shape[1], np.int64)
    rank = np.empty(skeys.shape[1], np.int64)
    steps_sid = np.empty(n_exec + 1, np.int64)
    steps_act = np.empty(n_exec + 1, np.int64)
    returns = np.zeros(n_exec + 2, np.float64)        # prefix sums of the rewards
    pos = nb = t = pending = 0                         # steps [pending, t) await their update
    while True:
        forced = _complete(nready, loop[LEFT]) if pos < n_exec else -1
        if forced >= 0:          # as run() does: no state, its batch charged to the last step
            start, nb0 = pos, nb
            pos, nb = _take(forced, sig, unbatchable, order, bptr, pos, nb, loop)
            _carry_release(order[start:pos], forced, sig, carry, front, cons_ptr, cons, stack, col)
            returns[t] -= nb - nb0
            continue
        sid = k = -1
        best = -1
        if pos < n_exec:
            k = _state(encoding, loop, vid, key, rank)
            slot, sid = _find(slots, skeys, slen, key, k)
            if sid < 0:
                if n_states == skeys.shape[0]:
                    skeys, slen, q, seen = _grow_states(skeys, slen, q, seen)
                sid = n_states
                n_states += 1
                skeys[sid, :k] = key[:k]
                slen[sid] = k
                if 2 * n_states > slots.shape[0]:
                    slots = index_states(skeys, slen, n_states)
                else:
                    slots[slot] = sid
            best = _greedy(q, seen, sid, nready, vid)
        if best >= 0 or pos == n_exec:
            value = q[sid, vid[best]] if best >= 0 else 0.0
            last = t - n_step + 1 if pos < n_exec else t
            for j in range(pending, last):
                s_j, a_j = steps_sid[j], steps_act[j]
                seen[s_j, a_j] += 1
                q[s_j, a_j] += max(lr, 1.0 / seen[s_j, a_j]) * (returns[t] - returns[j] + value - q[s_j, a_j])
            pending = max(pending, last)
        if pos == n_exec:
            break
        if np.random.random() < eps:
            r = np.random.randint(0, k)
            for s in range(n_sigs):
                if nready[s] > 0:
                    if r == 0:
                        best = s
                        break
                    r -= 1
        elif best < 0:
            best = _pick(fallback, nready, front, top, priority, cost)
        ratio = nready[best] / front[best]
        start, nb0 = pos, nb
        pos, nb = _take(best, sig, unbatchable, order, bptr, pos, nb, loop)
        _carry_release(order[start:pos], best, sig, carry, front, cons_ptr, cons, stack, col)
        steps_sid[t] = sid
        steps_act[t] = vid[best]
        returns[t + 1] = returns[t] - (nb - nb0) + alpha * ratio
        t += 1
    return slots, skeys, slen, q, seen, n_states


@njit(cache=True)
def greedy_actions(q, seen, skeys, slen, n_states):
    """The table a Q function stands for: per state, the vid of its best tried member."""
    act = np.empty(n_states, np.int64)
    for sid in range(n_states):
        best = -1
        for j in range(slen[sid]):
            a = skeys[sid, j] // FLAGS
            if seen[sid, a] and (best < 0 or q[sid, a] > q[sid, best] or (
                    q[sid, a] == q[sid, best] and a < best)):
                best = a
        act[sid] = best
    return act


@njit(cache=True)
def copy_loop(loop):
    """The loop state with its mutable arrays copied (edges and heights are only read)."""
    return (loop[INDEG].copy(), loop[CONS_PTR], loop[CONS], loop[TAIL].copy(), loop[NEXT].copy(),
            loop[NREADY].copy(), loop[LEFT].copy(), loop[HEIGHT], loop[TOP].copy())


@njit(cache=True)
def critical_completion(loop, sig, unbatchable, priority, cost, order, bptr, pos, nb):
    """Run critical path's picks from this state to the end (consumes loop): (pos, nb)."""
    front = np.zeros(priority.shape[0], np.int64)      # CRITICAL does not read it
    while pos < order.shape[0]:
        s = _pick(CRITICAL, loop[NREADY], front, loop[TOP], priority, cost)
        pos, nb = _take(s, sig, unbatchable, order, bptr, pos, nb, loop)
    return pos, nb


@njit(cache=True)
def critical_pick(loop, priority, cost):
    """The signature critical path runs next from this state."""
    return _pick(CRITICAL, loop[NREADY], np.zeros(priority.shape[0], np.int64), loop[TOP], priority, cost)


@njit(cache=True)
def average_depth(sig, depth, executable, n_sigs):
    """Mean depth of the executed nodes of each signature (DyNet's priority)."""
    total = np.zeros(n_sigs, np.float64)
    count = np.zeros(n_sigs, np.int64)
    for v in range(sig.shape[0]):
        if executable[v]:
            total[sig[v]] += depth[v]
            count[sig[v]] += 1
    return total / np.maximum(count, 1)


_NO_TABLE = (np.full(8, -1, np.int64), np.zeros((0, 1), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
             False)


def schedule(view, rule, vid=None, encoding=BASE, table=_NO_TABLE):
    """run() on a GraphView: (order, batch_ptr, fallbacks). vid: stable type id per
    signature (TABLE only); table: (slots, state keys, key lengths, action per state,
    whether unseen states back off)."""
    priority = average_depth(view.sig, view.depth, view.executable, view.n_sigs)
    vid = np.arange(view.n_sigs, dtype=np.int64) if vid is None else vid
    return run(view.sig, view.executable, view.unbatchable, priority, view.cost, view.arg_ptr, view.args,
               rule, vid, encoding, *table)


def greedy_frontier(view):
    """ED-Batch's sufficient-condition heuristic: each step runs the ready signature whose
    frontier ratio is highest (1: no later schedule does better by waiting)."""
    order, bptr, _ = schedule(view, FRONTIER)
    return order, bptr


def critical_path(view):
    """Each step runs the signature of the ready node with the longest path still below it:
    what holds up the end of the run goes first (weighted majority merge for chains)."""
    order, bptr, _ = schedule(view, CRITICAL)
    return order, bptr


@njit(cache=True)
def play_types(types, keep, root, sig, unbatchable, priority, cost, order, bptr):
    """Run the kept types in turn from the state `root` (not consumed), each where it has
    ready nodes (else skipped), then critical path to the end: the number of batches."""
    loop = copy_loop(root)
    nready = loop[NREADY]
    pos = nb = 0
    for i in range(types.shape[0]):
        if keep[i] and nready[types[i]] > 0:
            pos, nb = _take(types[i], sig, unbatchable, order, bptr, pos, nb, loop)
    pos, nb = critical_completion(loop, sig, unbatchable, priority, cost, order, bptr, pos, nb)
    return nb


@njit(cache=True)
def drop_steps(types, root, sig, unbatchable, priority, cost, order, bptr):
    """Which steps of `types` to keep: each in turn is dropped where play_types then runs
    no more batches (the critical-path completion may take over what it ran)."""
    keep = np.ones(types.shape[0], np.bool_)
    best = play_types(types, keep, root, sig, unbatchable, priority, cost, order, bptr)
    for i in range(types.shape[0]):
        keep[i] = False
        nb = play_types(types, keep, root, sig, unbatchable, priority, cost, order, bptr)
        if nb <= best:
            best = nb
        else:
            keep[i] = True
    return keep
