"""Schedules and bounds from the graph's independent parts (schedule/automata.py).

  * three chains whose type orders clash pairwise less than all together: the parts bound
    sees the third chain, the path pairs do not, and search reaches it;
  * a lattice in miniature (chains of character types, word cells beside them, an output
    chain after them): the output chain is the tail, run after the core;
  * the parts bound never exceeds the brute-forced optimum on small random graphs (with
    breadth-first search over three parts, and A* over more, stopped early or not), A*
    agrees with breadth-first search where both run, and search with the bound stays
    valid and not behind the heuristics.
"""
import numpy as np
from hypothesis import HealthCheck, given, settings

from hybridbatch.schedule import POLICIES, lower_bound
from hybridbatch.schedule.offline.automata import core_and_tail, merged_core, part_bound
from hybridbatch.schedule.offline.bounds import path_bound, tight_lower_bound
from hybridbatch.schedule.offline.search import _beam
from graphs import build, graph_views, n_batches, optimum, rotations


def test_parts_bound_sees_three_clashing_chains():
    view = rotations()
    assert lower_bound(view) == 3
    assert path_bound(view) == 4
    assert part_bound(view) == tight_lower_bound(view) == optimum(view) == 5
    assert part_bound(view, n_first=3, limit=10**6) == 5     # A* agrees
    assert n_batches(POLICIES["search"], view) == 5


def mini_lattice():
    """Two sentences. Sentence one: characters p p m (m merges a word cell w that starts at
    the first character); sentence two: p m p m, each m after a word cell from the character
    before it. Each sentence's characters feed an output chain o o o (...)."""
    nodes = []

    def sentence(kinds, words):
        first = len(nodes)
        chars = []
        for j, kind in enumerate(kinds):
            ops = [chars[-1]] if chars else [-1]
            ops += [w for (b, e), w in words.items() if e == j]
            nodes.append((kind, ops))
            chars.append(len(nodes) - 1)
            for (b, e) in list(words):
                if b == j and words[(b, e)] is None:
                    nodes.append(("w", [chars[-1]]))
                    words[(b, e)] = len(nodes) - 1
        prev = -1
        for c in chars:
            nodes.append(("o", [c, prev]))
            prev = len(nodes) - 1
        return first

    sentence(["p", "p", "m"], {(0, 2): None})
    sentence(["p", "m", "p", "m"], {(0, 1): None, (2, 3): None})
    return build(nodes)


def test_a_lattice_in_miniature_runs_its_output_chain_as_the_tail():
    view = mini_lattice()
    core, tail = core_and_tail(view)
    names = view.sig_keys
    assert {names[t] for t in np.flatnonzero(tail)} == {"o"}
    assert {names[t] for t in np.flatnonzero(core)} == {"m", "p", "w"}
    best = optimum(view)
    seq = merged_core(view)
    assert len(seq) + 4 == best                  # the core's sequence, then the 4 outputs
    assert lower_bound(view) <= tight_lower_bound(view) <= best
    assert part_bound(view) == best
    assert n_batches(POLICIES["search"], view) == best


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_views(max_nodes=14))
def test_parts_bound_never_exceeds_the_optimum(view):
    assert part_bound(view) <= optimum(view)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_views(max_nodes=14))
def test_astar_parts_bound_is_exact_where_it_finishes_and_a_bound_where_it_stops(view):
    best = optimum(view)
    assert part_bound(view, n_first=3, limit=10**6) == part_bound(view, n_first=3)
    assert part_bound(view, n_first=5, limit=10**6) <= best
    assert part_bound(view, n_first=5, limit=2) <= part_bound(view, n_first=5, limit=10**6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_views(max_nodes=40))
def test_merged_schedules_are_valid_and_search_never_behind_its_beam(view):
    seq = merged_core(view)
    if seq is not None:
        core, _ = core_and_tail(view)
        assert core[seq].all()
    beam = n_batches(lambda v: _beam(v, 4, lower_bound(v)), view)
    assert n_batches(POLICIES["search"], view) <= beam


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_views(max_nodes=40))
def test_dropping_steps_never_costs_a_batch(view):
    """search._play: critical path's own type sequence, steps dropped where that costs no
    batch, is a valid schedule with at most critical path's batches."""
    from hybridbatch.schedule.frontier import critical_path
    from hybridbatch.schedule.offline.search import _play
    order, bptr = critical_path(view)
    types = view.sig[order[bptr[:-1]]] if len(order) else np.zeros(0, np.int64)
    assert n_batches(lambda v: _play(v, types, drop=True), view) <= len(bptr) - 1
