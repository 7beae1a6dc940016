"""Tighter lower bounds on batches for offline study: path pairs, grouped paths, parts.

Each is a bound no schedule can beat, closer than Eq. 2 (`schedule.lower_bound`) where
chains of types interleave; the benchmarks and tests compare policies against them.
"""
import numpy as np
from numba import njit

from ..lower_bound import lower_bound
from .automata import part_bound


# -- a tighter bound from pairs of dependency paths -----------------------------------------
# A schedule is a sequence of batches, one type each. The nodes of a dependency path run in
# strictly later batches one after another, so the schedule's type sequence contains the
# path's type sequence as a subsequence; for two paths it is a common supersequence of both,
# at least as long as their shortest one (|p| + |q| - LCS(p, q)). Where chains of types meet
# in different orders (two node types interleaved in a tree, lattices) this exceeds Eq. 2.

@njit(cache=True)
def _longest_paths(counted, arg_ptr, args):
    """Per node: counted nodes on the path ending at it that has the most, and its predecessor."""
    n = arg_ptr.shape[0] - 1
    length = np.zeros(n, np.int64)
    pred = np.full(n, -1, np.int64)
    consumed = np.zeros(n, np.bool_)
    for v in range(n):
        for e in range(arg_ptr[v], arg_ptr[v + 1]):
            u = args[e]
            if u >= 0:
                consumed[u] = True
                if length[u] > length[v]:
                    length[v] = length[u]
                    pred[v] = u
        if counted[v]:
            length[v] += 1
    return length, pred, consumed


@njit(cache=True)
def _scs_length(p, q):
    """Length of the shortest common supersequence of two type sequences."""
    m, k = p.shape[0], q.shape[0]
    row = np.zeros(k + 1, np.int64)
    for i in range(1, m + 1):
        diag = 0
        for j in range(1, k + 1):
            up = row[j]
            if p[i - 1] == q[j - 1]:
                row[j] = diag + 1
            elif row[j - 1] > row[j]:
                row[j] = row[j - 1]
            diag = up
    return m + k - row[k]


@njit(cache=True)
def _path_pair_bound(sig, counted, arg_ptr, args, n_paths):
    """Max over pairs of the n_paths sink-ending paths with the most counted nodes of the
    SCS length of their counted nodes' type sequences."""
    length, pred, consumed = _longest_paths(counted, arg_ptr, args)
    n = length.shape[0]
    sinks = np.array([v for v in range(n) if not consumed[v] and length[v] > 0], np.int64)
    if sinks.shape[0] == 0:
        return 0
    order = np.argsort(-length[sinks], kind="mergesort")[:n_paths]
    chosen = sinks[order]
    paths = []
    for v in chosen:
        seq = np.empty(length[v], np.int64)
        k = length[v]
        u = v
        while u >= 0:
            if counted[u]:
                k -= 1
                seq[k] = sig[u]
            u = pred[u]
        paths.append(seq)
    best = 0
    for i in range(len(paths)):
        if paths[i].shape[0] > best:
            best = paths[i].shape[0]
        for j in range(i + 1, len(paths)):
            s = _scs_length(paths[i], paths[j])
            if s > best:
                best = s
    return best


def path_bound(view, n_paths=48):
    """The pairwise-path bound above, over the n_paths longest paths that end at a sink."""
    return int(_path_pair_bound(view.sig, view.executable, view.arg_ptr, view.args, n_paths))


# -- groups of types ----------------------------------------------------------------------
# Every batch has one type, so the batches of any set G of types are at least the path-pair
# bound of the paths' G-nodes alone, and a partition of the types into groups gives the
# sum of its groups' bounds. Singletons are Eq. 2; one group of all types is the path bound.
# Between them, a lattice's character types (whose orders differ from sentence to sentence)
# belong together, and its output chain (one type, running beside them) alone.

def _group_bound(view, group, n_paths):
    counted = view.executable & np.isin(view.sig, np.fromiter(group, np.int64, len(group)))
    return int(_path_pair_bound(view.sig, counted, view.arg_ptr, view.args, n_paths))


def grouped_bound(view, n_paths=16):
    """The partition bound above, for a partition found greedily: starting from one group
    per batchable type, merge the two groups whose union's bound gains most over their sum,
    while one does. Plus one batch per unbatchable node, as in Eq. 2."""
    batchable = view.executable & ~view.unbatchable[view.sig]
    extra = int(np.count_nonzero(view.executable)) - int(np.count_nonzero(batchable))
    groups = [frozenset([int(t)]) for t in np.unique(view.sig[batchable])]
    bound = {g: _group_bound(view, g, n_paths) for g in groups}
    while len(groups) > 1:
        gain, pair = 0, None
        for i in range(len(groups)):
            for j in range(i + 1, len(groups)):
                union = groups[i] | groups[j]
                if union not in bound:
                    bound[union] = _group_bound(view, union, n_paths)
                g = bound[union] - bound[groups[i]] - bound[groups[j]]
                if g > gain:
                    gain, pair = g, (i, j)
        if pair is None:
            break
        i, j = pair
        groups = [g for k, g in enumerate(groups) if k not in pair] + [groups[i] | groups[j]]
    return extra + sum(bound[g] for g in groups)


def tight_lower_bound(view):
    """max(Eq. 2, the path-pair bound, the grouped bound, the parts bound): still a bound
    no schedule can beat, closer on graphs whose types interleave. The parts bound
    (automata.part_bound: the exact fewest batches of the two or three independent parts,
    e.g. sentences, with the longest schedules) sees how many chains' type orders clash,
    where the path pairs see two paths."""
    return max(lower_bound(view), path_bound(view), grouped_bound(view), part_bound(view))
