"""`policy="search"`: beam search over schedules, each partial schedule scored by its
critical-path completion (width 1 is the rollout, or pilot, method), and a second
candidate from the graph's independent parts (automata.py: the parts' shortest common type
sequence, then critical path for the rest). It stops early at the lower bound.

Why: the heuristics and learned tables decide from the ready set alone; on lattices they
stay 1.3x above the lower bound, and nothing tells whether the bound or the policies are
loose. A search's count is a schedule that exists. Each step extends every kept partial
schedule by every ready signature, scores each by the batches of the prefix plus critical
path's completion of it, and keeps the `width` best distinct ones. The answer is the best
scored schedule met, or tail-last's schedule (never more batches than agenda's) or
greedy-frontier's where one of those has fewer batches (a character-level tagger, where
critical path is the weakest rule). The very first step scores critical path's own
schedule, so search never runs more batches than any of these.

Where the beam stays above Eq. 2 and the graph falls into narrow parts (a lattice's
sentences), `automata.merged_core` gives a type sequence for the core types. It is played
(types with nothing ready skipped, critical path to the end), each of its steps dropped in
turn where the play then runs no more batches (frontier.drop_steps), and kept where it has
fewer batches than the beam. On four lattice-LSTM minibatches (`bench policies`): 1,672 batches
against the beam's 1,761 (tight bound 1,599, Eq. 2 1,479). On the beam's trees (2-Type) it
rarely wins; there it costs most of search's time.

The price is a completion per kept schedule, ready signature and step: O(steps x width x
signatures x (nodes + edges)), plus the parts' automata (built in Python) and their merges
(numba). At the default width 4 a lattice-LSTM minibatch of 64 sentences takes about 9-11 s (the
beam 7 s, the parts 2-4 s), a two-type Tree-LSTM one 0.15 s: tens to thousands of times agenda's
time. It is a reference for offline comparison (`bench policies`), or a choice where a
batch costs far more than planning does. The loop itself runs in frontier.py's
numba kernels; this module only keeps the beam.
"""
import numpy as np

from ..agenda import tail_last
from .automata import merged_core
from ..frontier import (INDEG, LEFT, NREADY, _n_executed, _start, _take, average_depth, copy_loop,
                        critical_completion, critical_path, critical_pick, drop_steps, greedy_frontier,
                        play_types)
from ..lower_bound import lower_bound

WIDTH = 4


def rollout_search(view, width=WIDTH):
    """The best schedule (order, batch_ptr) a beam of `width` partial schedules finds, or
    critical path's, tail-last's or greedy-frontier's where it has fewer batches (the beam
    completes with critical path's rule, which does not run the tail last)."""
    if width < 1:
        raise ValueError(f"search width must be at least 1, not {width}")
    bound = lower_bound(view)                    # nothing beats it: stop there
    found = _beam(view, width, bound)
    if len(found[1]) - 1 > bound:
        core = merged_core(view)
        if core is not None:
            merged = _play(view, core, drop=True)
            if len(merged[1]) < len(found[1]):
                found = merged
    for rule in (critical_path, tail_last, greedy_frontier):
        if len(found[1]) - 1 <= bound:
            break
        other = rule(view)
        if len(other[1]) < len(found[1]):
            found = other
    return found


def _beam(view, width, bound):
    """The best schedule the beam scores (critical path's own at worst), replayed."""
    sig, unbatchable, cost = view.sig, view.unbatchable, view.cost
    priority, order, bptr, root = _start_search(view)
    n_exec = order.shape[0]

    def complete(loop, pos, nb):
        return critical_completion(copy_loop(loop), sig, unbatchable, priority, cost, order, bptr, pos, nb)[1]

    best_total, best_steps = complete(root, 0, 0), ()
    beam = [(0, 0, (), root)]                    # (batches, nodes run, signatures run, loop state)
    while beam and best_total > bound:
        scored, seen = [], set()
        for nb, pos, steps, loop in beam:
            first = critical_pick(loop, priority, cost)       # its ties go to critical path
            for s in [first] + [s for s in np.flatnonzero(loop[NREADY]) if s != first]:
                trial = copy_loop(loop)
                p, b = _take(s, sig, unbatchable, order, bptr, pos, nb, trial)
                if p == n_exec:
                    total = b
                else:
                    key = (trial[INDEG].tobytes(), trial[LEFT].tobytes())   # alike states are kept once
                    if key in seen:
                        continue
                    seen.add(key)
                    total = complete(trial, p, b)
                    scored.append((total, b, p, steps + (int(s),), trial))
                if total < best_total:
                    best_total, best_steps = total, steps + (int(s),)
        scored.sort(key=lambda c: c[:2])          # stable: earlier (critical path's) first on ties
        beam = [(b, p, steps, loop) for _, b, p, steps, loop in scored[:width]]
    return _play(view, best_steps, drop=False)


def _start_search(view):
    """(priority per signature, order and batch_ptr buffers, the loop's starting state)."""
    n_exec = _n_executed(view.executable)
    return (average_depth(view.sig, view.depth, view.executable, view.n_sigs),
            np.empty(n_exec, np.int64), np.zeros(n_exec + 1, np.int64),
            _start(view.sig, view.executable, view.arg_ptr, view.args, view.n_sigs, True,
                   np.zeros((0, 1), np.uint64)))


def _play(view, types, drop):
    """The schedule of running the types in turn, each where it has ready nodes (else it is
    skipped), then critical path to the end. drop: first drop each step in turn where that
    costs no batch (frontier.drop_steps)."""
    priority, order, bptr, root = _start_search(view)
    types = np.asarray(types, np.int64)
    args = (root, view.sig, view.unbatchable, priority, view.cost, order, bptr)
    keep = drop_steps(types, *args) if drop else np.ones(len(types), np.bool_)
    nb = play_types(types, keep, *args)
    return order, bptr[:nb + 1].copy()
