"""Schedules and bounds from the graph's independent parts (sentences, trees), each as a
small automaton of its own.

A step of the loop runs every ready node of one type. Seen from one connected part of the
graph, a schedule is just its sequence of types: from a set of executed nodes, type t leads
to that set plus the part's ready t-nodes (or nowhere, if it has none). The sets a part can
reach this way are few where it is narrow (a lattice's sentence: a chain of characters with
word cells beside it, a few hundred), so each part becomes a table state x type -> state.
A whole schedule is then a sequence of types that drives every part's automaton to its end;
dropping a step that moves no part changes nothing else, and inserting one never delays
anything (the executed sets only grow), so the problem is a shortest common
"supersequence" of the parts' automata.

- `core_and_tail`: the tail is the types whose nodes only feed tail nodes (found from the
  sinks up: a lattice's output and loss chain). Nothing else waits for them, so a schedule
  can run them all after the rest: the fewest batches are those of the core alone plus those
  of the tail alone. Only core types go into the automata; critical path runs the tail.
- `merged_core`: the core's type sequence, from the parts with the longest schedules first:
  the exact shortest one of the first two or three (breadth-first search over their states'
  product), then each further part merged in by the shortest supersequence of the sequence
  so far that also drives the new part to its end (breadth-first over sequence position x
  part state). Three tie-breaks of that search and three starts; the shortest result wins.
  Then each of the 16 parts with the longest schedules is taken out in turn (the steps
  that move no other part dropped) and merged back, in rounds while that shortens it;
  then 100 seeded tries of taking three of them out and merging them back in a random order
  (_perturb), which moves along plateaus the single-part rounds stop on.
- `part_bound`: the exact fewest batches of the few parts with the longest schedules,
  restricted to the core, plus the tail types' chains and one per unbatchable node: a lower
  bound (proof at the function). Three parts by breadth-first search for the bench; more by
  A* (`fewest_together`, estimates from exact pair and triple distances), which
  benchmarks/bound_parts.py uses to bound the optimum itself.

Parts whose automata would be large (wide trees) make these give up (None): the callers
keep what they had.
"""
import heapq
import itertools
import math

import numpy as np
from numba import njit, types
from numba.typed import Dict, List

from ..lower_bound import _lower_bound

MAX_PART_STATES = 4000      # per part: beyond, the parts are not narrow enough
MAX_PART_NODES = 1000       # per part: bit sets of Python ints stay cheap below
MAX_TOTAL_STATES = 200_000
MAX_PRODUCT = 12_000_000    # states of the exact search over the first parts


def core_and_tail(view):
    """(core types, tail types) as boolean masks over the view's signatures (see above).
    The core holds batchable types only; unbatchable ones are in neither."""
    ex = view.executable
    present = np.zeros(view.n_sigs, np.bool_)
    present[view.sig[ex]] = True
    feeds = np.zeros((view.n_sigs, view.n_sigs), np.bool_)     # feeds[a, b]: an a-node is read by a b-node
    for v in np.flatnonzero(ex):
        for u in view.args[view.arg_ptr[v]:view.arg_ptr[v + 1]]:
            if u >= 0 and ex[u]:
                feeds[view.sig[u], view.sig[v]] = True
    tail = np.zeros(view.n_sigs, np.bool_)
    grown = True
    while grown:
        grown = False
        for t in np.flatnonzero(present & ~tail):
            others = feeds[t].copy()
            others[t] = False
            if not (others & ~tail).any():
                tail[t] = True
                grown = True
    core = present & ~tail & ~view.unbatchable
    return core, tail


def _parts(view, core):
    """Connected parts of the core nodes (direct edges between core nodes), each a sorted
    array of node ids."""
    n = len(view.sig)
    node_core = view.executable & core[view.sig]
    parent = np.arange(n)

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for v in np.flatnonzero(node_core):
        for u in view.args[view.arg_ptr[v]:view.arg_ptr[v + 1]]:
            if u >= 0 and node_core[u]:
                a, b = find(v), find(u)
                if a != b:
                    parent[a] = b
    groups = {}
    for v in np.flatnonzero(node_core):
        groups.setdefault(find(v), []).append(v)
    return [np.array(g, np.int64) for g in groups.values()]


def _automaton(view, nodes, core, limit):
    """(table states x types, final state, executed count per state) of one part, its
    states numbered in the order met; None beyond `limit` states. Bit sets are Python ints."""
    local = {int(v): i for i, v in enumerate(nodes)}
    by_type = {}
    for i, v in enumerate(nodes):
        mask = 0
        for u in view.args[view.arg_ptr[v]:view.arg_ptr[v + 1]]:
            j = local.get(int(u))
            if j is not None:
                mask |= 1 << j
        by_type.setdefault(int(view.sig[v]), []).append((i, mask))
    types = sorted(by_type)
    full = (1 << len(nodes)) - 1
    index, states, rows = {0: 0}, [0], []
    k = 0
    while k < len(states):
        done = states[k]
        row = np.full(view.n_sigs, -1, np.int64)
        for t in types:
            add = 0
            for i, mask in by_type[t]:
                if not (done >> i) & 1 and mask & done == mask:
                    add |= 1 << i
            if add:
                new = done | add
                if new not in index:
                    if len(states) >= limit:
                        return None
                    index[new] = len(states)
                    states.append(new)
                row[t] = index[new]
        rows.append(row)
        k += 1
    pop = np.array([bin(d).count("1") for d in states], np.int64)
    return np.array(rows, np.int64), index[full], pop


def _automata(view, core):
    """Every core part's automaton, longest schedule first; None if they are too large."""
    autos, total = [], 0
    parts = _parts(view, core)
    if any(len(nodes) > MAX_PART_NODES for nodes in parts):
        return None
    for nodes in parts:
        a = _automaton(view, nodes, core, MAX_PART_STATES)
        if a is None:
            return None
        total += a[0].shape[0]
        if total > MAX_TOTAL_STATES:
            return None
        autos.append(a + (int(_fewest(a[0], a[2])[0]),))
    autos.sort(key=lambda a: -a[3])        # stable: ties keep node order
    return autos


@njit(cache=True)
def _fewest(tab, pop):
    """Per state of one automaton, the fewest steps to its end (states by executed count,
    most first: every step executes more)."""
    nq, nt = tab.shape
    dist = np.zeros(nq, np.int64)
    for q in np.argsort(-pop, kind="mergesort"):
        best = -1
        for t in range(nt):
            r = tab[q, t]
            if r >= 0 and (best < 0 or dist[r] + 1 < best):
                best = dist[r] + 1
        dist[q] = max(best, 0)
    return dist


@njit(cache=True)
def _bfs_arrays(size):
    """A breadth-first search's arrays over `size` states, its start (state 0) met: per state
    the distance (-1: not met), the state and the type it was met from; and the queue.
    int32: the product search's 12M states stay under 200 MB."""
    dist = np.full(size, -1, np.int32)
    prev = np.full(size, -1, np.int32)
    how = np.full(size, -1, np.int32)
    queue = np.empty(size, np.int32)
    queue[0] = 0
    dist[0] = 0
    return dist, prev, how, queue


@njit(inline="always")
def _visit(dist, prev, how, queue, tail, x, y, t):
    """Meet state y from x by type t unless met before; the queue's new tail."""
    if dist[y] < 0:
        dist[y] = dist[x] + 1
        prev[y] = x
        how[y] = t
        queue[tail] = y
        return tail + 1
    return tail


@njit(cache=True)
def _path(dist, prev, how, goal):
    """The types along the breadth-first search's path from its start to `goal`."""
    out = np.empty(dist[goal], np.int64)
    y = goal
    for j in range(dist[goal] - 1, -1, -1):
        out[j] = how[y]
        y = prev[y]
    return out


@njit(cache=True)
def _successor(tabs, sizes, x, t):
    """The product state after a step of type t from product state x (mixed radix over the
    automata, the first fastest), and whether the step moved any of them."""
    y, mul, moved, rest = 0, 1, False, x
    for i in range(sizes.shape[0]):
        q = rest % sizes[i]
        rest //= sizes[i]
        r = tabs[i, q, t]
        if r >= 0:
            moved = True
            q = r
        y += q * mul
        mul *= sizes[i]
    return y, moved


@njit(cache=True)
def _goal(sizes, finals):
    """The product state where every automaton is at its final state."""
    goal, mul = 0, 1
    for i in range(sizes.shape[0]):
        goal += finals[i] * mul
        mul *= sizes[i]
    return goal


@njit(cache=True)
def _product_search(tabs, sizes, finals):
    """The shortest type sequence that drives every automaton (tabs[i], sizes[i] states) to
    its final state: breadth-first search over the product of their states."""
    total = 1
    for i in range(sizes.shape[0]):
        total *= sizes[i]
    goal = _goal(sizes, finals)
    dist, prev, how, queue = _bfs_arrays(total)
    head, tail = 0, 1
    while head < tail:
        x = queue[head]
        head += 1
        if x == goal:
            break
        for t in range(tabs.shape[2]):
            y, moved = _successor(tabs, sizes, x, t)
            if moved:
                tail = _visit(dist, prev, how, queue, tail, x, y, t)
    return _path(dist, prev, how, goal)


@njit(cache=True)
def _subset_fewest(tabs, sizes, pops):
    """Per state of the product of these automata, the fewest steps to the end of all of
    them. States by executed count (pops: per automaton and state), most first: every
    step executes more."""
    n = 1
    for i in range(sizes.shape[0]):
        n *= sizes[i]
    executed = np.zeros(n, np.int64)
    for x in range(n):
        rest = x
        for i in range(sizes.shape[0]):
            executed[x] += pops[i, rest % sizes[i]]
            rest //= sizes[i]
    dist = np.zeros(n, np.int32)
    for x in np.argsort(-executed, kind="mergesort"):
        best = -1
        for t in range(tabs.shape[2]):
            y, moved = _successor(tabs, sizes, x, t)
            if moved and (best < 0 or dist[y] + 1 < best):
                best = dist[y] + 1
        dist[x] = max(best, 0)
    return dist


@njit(cache=True)
def _heuristic(x, sizes, tables, members):
    """A* 's estimate at product state x: the largest exact distance to the end among the
    subsets of automata that have a table (each a projection of the whole product)."""
    k = sizes.shape[0]
    st = np.empty(k, np.int64)
    rest = x
    for i in range(k):
        st[i] = rest % sizes[i]
        rest //= sizes[i]
    best = 0
    for s in range(len(tables)):
        y, mul = 0, 1
        for i in members[s]:
            y += st[i] * mul
            mul *= sizes[i]
        best = max(best, tables[s][y])
    return best


@njit(cache=True)
def _astar(tabs, sizes, finals, tables, members, limit):
    """(fewest steps driving every automaton to its end, True), or past `limit` expansions
    (the smallest f still open, False): a lower bound on it either way, the heuristic being
    consistent (see fewest_together)."""
    goal = _goal(sizes, finals)
    g = Dict.empty(key_type=types.int64, value_type=types.int64)
    g[0] = 0
    heap = [(_heuristic(0, sizes, tables, members), np.int64(0))]
    expanded = 0
    while heap:
        f, x = heapq.heappop(heap)
        gx = g[x]
        if x == goal:
            return gx, True
        if f > gx + _heuristic(x, sizes, tables, members):    # stale: x was reached shorter since
            continue
        expanded += 1
        if expanded > limit:
            return f, False
        for t in range(tabs.shape[2]):
            y, moved = _successor(tabs, sizes, x, t)
            if moved and (y not in g or g[y] > gx + 1):
                g[y] = gx + 1
                heapq.heappush(heap, (gx + 1 + _heuristic(y, sizes, tables, members), y))
    return -1, False


MAX_TABLE = 30_000_000     # product states of one pair's or triple's distance table (A*)
MAX_ENCODED = 2**63 - 1    # product states A* can number: int64 (beyond, they wrap around)


def fewest_together(autos, limit):
    """(a lower bound on the fewest steps that drive all these automata to their ends,
    whether it is exact): A* over their product, for more parts than `_exact` can search.

    Its estimate is the largest exact distance to the end among the pairs and triples of
    automata whose product has at most MAX_TABLE states. That is admissible (a schedule of
    all of them runs each subset to its end, in no more steps) and consistent (one step
    moves each subset's state by one step), so A* returns the optimum, and where it stops
    after `limit` expansions the smallest f still open is a lower bound on it. Their
    product's states must number at most MAX_ENCODED."""
    k = len(autos)
    sizes = np.array([a[0].shape[0] for a in autos], np.int64)
    tabs = np.full((k, sizes.max(), autos[0][0].shape[1]), -1, np.int64)
    pops = np.zeros((k, sizes.max()), np.int64)
    for i, a in enumerate(autos):
        tabs[i, :len(a[0])] = a[0]
        pops[i, :len(a[2])] = a[2]
    tables, members = List(), List()
    for size in (2, 3):
        for sub in itertools.combinations(range(k), size):
            sub = np.array(sub, np.int64)
            if np.prod(sizes[sub].astype(np.float64)) <= MAX_TABLE:
                tables.append(_subset_fewest(tabs[sub], sizes[sub], pops[sub]))
                members.append(sub)
    if not tables:
        tables.append(np.zeros(1, np.int32))     # typed lists need one element to type
        members.append(np.zeros(0, np.int64))    # an empty subset: estimate 0
    finals = np.array([a[1] for a in autos], np.int64)
    steps, exact = _astar(tabs, sizes, finals, tables, members, limit)
    return int(steps), bool(exact)


@njit(cache=True)
def _merge(seq, tab, final, variant):
    """The shortest type sequence that has `seq` as a subsequence and drives the automaton
    `tab` from state 0 to `final`: breadth-first search over (position in seq, state).
    variant: the tie-break, i.e. which successors are met first (0: seq's next type, then
    inserted types in order; 1: inserted types first; 2: inserted types in reverse order
    first)."""
    m = seq.shape[0]
    nq, nt = tab.shape
    size = (m + 1) * nq
    dist, prev, how, queue = _bfs_arrays(size)
    head, tail = 0, 1
    goal = m * nq + final
    while head < tail:
        x = queue[head]
        head += 1
        if x == goal:
            break
        p, q = x // nq, x % nq
        for k in range(nt + 1):
            if k == (0 if variant == 0 else nt):      # along seq (read only before its end)
                if p == m:
                    continue
                t = seq[p]
                r = tab[q, t]
                y = (p + 1) * nq + (q if r < 0 else r)
            else:
                t = k - 1 if variant == 0 else (k if variant == 1 else nt - 1 - k)
                if p < m and t == seq[p]:
                    continue
                r = tab[q, t]
                if r < 0:
                    continue
                y = p * nq + r
            tail = _visit(dist, prev, how, queue, tail, x, y, t)
    return _path(dist, prev, how, goal)


def _exact(autos):
    """The shortest sequence for these automata together, or None if their product is too
    large to search."""
    sizes = np.array([a[0].shape[0] for a in autos], np.int64)
    if np.prod(sizes.astype(np.float64)) > MAX_PRODUCT:
        return None
    tabs = np.full((len(autos), int(sizes.max()), autos[0][0].shape[1]), -1, np.int64)
    for i, a in enumerate(autos):
        tabs[i, :a[0].shape[0]] = a[0]
    return _product_search(tabs, sizes, np.array([a[1] for a in autos], np.int64))


def merged_core(view, autos=None):
    """The shortest core type sequence found (see the module's docstring), or None where
    the parts do not make small automata. The core's batches number at most its length."""
    core, _ = core_and_tail(view)
    if not core.any():
        return None
    autos = _automata(view, core) if autos is None else autos
    if not autos:
        return None
    best = None
    for first in (0, 2, 3):
        if len(autos) < first:
            break
        start = np.zeros(0, np.int64) if first == 0 else _exact(autos[:first])
        if start is None:
            continue
        rest = autos[first:]
        for variant in (0, 1, 2):
            seq = start
            for tab, final, _, _ in rest:
                seq = _merge(seq, tab, final, variant)
            if best is None or len(seq) < len(best):
                best = seq
            if not rest:
                break
    return _perturb(_reinsert(best, autos, REINSERT), autos, REINSERT)


REINSERT = 16     # parts (longest schedules first) that _reinsert and _perturb take out
PERTURB = (100, 3, 0)    # _perturb's tries, parts taken out per try, random seed


@njit(cache=True)
def _moves(seq, tab):
    """Which steps of seq move the automaton (which run some of its nodes)."""
    moved = np.zeros(seq.shape[0], np.bool_)
    q = 0
    for p in range(seq.shape[0]):
        r = tab[q, seq[p]]
        if r >= 0:
            moved[p] = True
            q = r
    return moved


def _reinsert(seq, autos, n_parts):
    """Take each of the first n_parts parts out of seq in turn (drop the steps that move no
    other part) and merge it back: never longer, since seq itself is one way back. Rounds
    until none shortens."""
    if seq is None or len(autos) < 2:
        return seq
    shorter = True
    while shorter:
        shorter = False
        for i in range(min(n_parts, len(autos))):
            moves = np.zeros(len(seq), np.int64)
            for tab, _, _, _ in autos:
                moves += _moves(seq, tab)
            alone = _moves(seq, autos[i][0])
            keep = moves > alone              # steps that move some other part
            again = _merge(seq[keep], autos[i][0], autos[i][1], 0)
            if len(again) < len(seq):
                shorter = True
            if len(again) <= len(seq):
                seq = again
    return seq


def part_bound(view, n_first=3, limit=None):
    """A lower bound on batches from the parts, or 0 where they do not make small automata:

        (fewest core batches of the n_first parts with the longest schedules, run alone)
        + sum over tail types of their longest chain (Eq. 2's term) + unbatchable nodes.

    The fewest core batches come from breadth-first search over the parts' product
    (`_exact`, the bench's default of three parts) or, given `limit`, from A* with at most
    `limit` expansions (`fewest_together`: more parts, as many as its int64 state numbers
    hold, still a lower bound where it stops).

    Proof. Take any schedule. Its batches of core types, restricted to the nodes of those
    parts, run every such node after its operands among them (edges between core nodes of
    the parts are edges of the graph): a schedule of that subgraph, with no more batches
    (some may become empty). The automata search all schedules of the subgraph whose steps
    run every ready node of a type, and one of those is as short as any: running more
    ready nodes of the step's type never delays a later step (the executed sets only
    grow). So the core batches number at least the exact search's length. Each tail type's
    batches are at least the longest chain of its nodes (Eq. 2), and every unbatchable node
    is a batch of its own; core, tail and unbatchable types are disjoint, so the three
    counts add up. The tail may be any set of types here: its being downstream only
    matters for the schedules."""
    if n_first < 1:
        raise ValueError(f"part_bound needs n_first >= 1 parts, not {n_first}")
    core, tail = core_and_tail(view)
    if not core.any():
        return 0
    autos = _automata(view, core)
    if not autos:
        return 0
    k = min(n_first, len(autos))
    if limit is not None:
        while math.prod(len(a[0]) for a in autos[:k]) > MAX_ENCODED:
            k -= 1              # fewer parts: still a bound
    if limit is not None and k > 1:
        return fewest_together(autos[:k], limit)[0] + outside_core(view, tail)
    fewest = None
    while k >= 1 and fewest is None:
        seq = _exact(autos[:k]) if k > 1 else np.zeros(autos[0][3], np.int64)
        fewest = None if seq is None else len(seq)
        k -= 1
    return fewest + outside_core(view, tail)


def outside_core(view, tail):
    """The batches any schedule spends outside the core, at least: the tail types' longest
    chains (Eq. 2's term) plus one per unbatchable node."""
    ex = view.executable
    unbatchable = int(np.count_nonzero(ex & view.unbatchable[view.sig]))
    tail_nodes = ex & tail[view.sig] & ~view.unbatchable[view.sig]
    chains = _lower_bound(view.sig, tail_nodes, view.unbatchable, view.arg_ptr, view.args, view.n_sigs)
    return unbatchable + int(chains)


def _perturb(seq, autos, n_parts, tries=PERTURB[0], n_out=PERTURB[1], seed=PERTURB[2]):
    """Take n_out of the first n_parts parts out of seq at random and merge them back in a
    random order and tie-break, keeping the result where it is no longer (a move along
    equal lengths too, so that the next try starts elsewhere): the single-part rounds of
    _reinsert stop on such plateaus. Seeded: the same graph gets the same schedule."""
    n_parts = min(n_parts, len(autos))
    if seq is None or n_parts < n_out + 1:
        return seq
    rng = np.random.default_rng(seed)
    for _ in range(tries):
        out = rng.choice(n_parts, size=n_out, replace=False)
        moves = np.zeros(len(seq), np.int64)
        alone = np.zeros(len(seq), np.int64)
        for j, (tab, _, _, _) in enumerate(autos):
            m = _moves(seq, tab)
            moves += m
            if j in out:
                alone += m
        again = seq[moves > alone]
        for i in rng.permutation(out):
            again = _merge(again, autos[i][0], autos[i][1], int(rng.integers(3)))
        if len(again) <= len(seq):
            seq = again
    return seq
