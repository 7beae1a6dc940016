"""Bounds and schedules on unusual graphs: several disconnected parts of different shapes
(chains, trees, diamonds, lattices, copies of each other), unbatchable and input-only nodes,
repeated operands, and the automata's size limits.

  * every bound (Eq. 2, path pairs, grouped, parts by breadth-first search and by A*,
    stopped early or not, the tight bound) is at most the brute-forced optimum;
  * search and critical path return valid schedules with at least the tight bound's batches;
  * merged_core's sequence drives every part's automaton to its end;
  * past the size limits, the parts bound gives up (0, or fewer parts), never a wrong claim.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hybridbatch.schedule import POLICIES, lower_bound
from hybridbatch.schedule.offline import automata
from hybridbatch.schedule.offline.automata import _automata, _merge, core_and_tail, merged_core, part_bound
from hybridbatch.schedule.offline.bounds import grouped_bound, path_bound, tight_lower_bound
from graphs import INPUT, build, chain, graph_views, make_view, n_batches, optimum, rotations

UB = 5            # the unbatchable signature of the views below
TYPES = [1, 2, 3, 1, 2, 3, 4, UB]     # few types, so that they feed each other (a core)


@st.composite
def parts_views(draw, max_nodes=16):
    """Several disconnected parts, each a chain, a tree, a diamond, a lattice (a chain with
    word cells beside it), a fan-in with repeated operands, or a copy of earlier nodes;
    operands from an earlier flush (-1) or input nodes (not executed)."""
    nodes = []

    def typ():
        return draw(st.sampled_from(TYPES))

    def add(s, ops):
        nodes.append((s, ops))
        return len(nodes) - 1

    def source():
        return add(INPUT, []) if draw(st.booleans()) else -1

    while len(nodes) < max_nodes and (not nodes or draw(st.integers(0, 4))):
        shape = draw(st.sampled_from(["chain", "tree", "diamond", "lattice", "fan", "copy"]))
        size = draw(st.integers(1, min(6, max_nodes - len(nodes))))
        if shape == "copy" and nodes:
            a = draw(st.integers(0, len(nodes) - 1))
            b = min(len(nodes), a + size)
            shift = len(nodes) - a
            for s, ops in nodes[a:b]:
                add(s, [u + shift if u >= a else u for u in ops])
        elif shape == "chain" or shape == "copy":
            prev = source()
            for _ in range(size):
                prev = add(typ(), [prev] * draw(st.sampled_from([1, 1, 2])))   # sometimes twice
        elif shape == "tree":
            level = [add(typ(), [source()]) for _ in range(max(2, size // 2))]
            while len(level) > 1:
                level.append(add(typ(), [level.pop(0), level.pop(0)]))
        elif shape == "diamond":
            top = add(typ(), [source()])
            add(typ(), [add(typ(), [top]) for _ in range(draw(st.integers(1, 3)))])
        elif shape == "lattice":
            chars = []
            for k in range(size):
                ops = [chars[-1]] if chars else [source()]
                if k >= 2 and draw(st.booleans()):
                    ops.append(add(typ(), [chars[-2]]))
                chars.append(add(typ(), ops))
        else:
            srcs = [add(typ(), [source()]) for _ in range(draw(st.integers(1, 3)))]
            add(typ(), srcs * draw(st.integers(1, 3)))
    return make_view(nodes, unbatchable=[UB], n_sigs=UB + 1)


def views(max_nodes=16):
    return st.one_of(parts_views(max_nodes), graph_views(max_nodes=max_nodes))


def small(view, most=16):
    return int(np.count_nonzero(view.executable)) <= most


def bounds(view):
    return {"eq2": lower_bound(view), "path": path_bound(view), "grouped": grouped_bound(view),
            "parts": part_bound(view), "parts1": part_bound(view, n_first=1),
            "parts5": part_bound(view, n_first=5),
            "astar": part_bound(view, n_first=5, limit=10**5),
            "astar0": part_bound(view, n_first=5, limit=0), "astar1": part_bound(view, n_first=5, limit=1),
            "tight": tight_lower_bound(view)}


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(views())
def test_every_bound_is_at_most_the_optimum(view):
    if not small(view):
        return
    best = optimum(view)
    got = bounds(view)
    assert all(b <= best for b in got.values()), (got, best)
    assert got["eq2"] <= got["tight"]


@SETTINGS
@given(views(max_nodes=30))
def test_search_and_critical_path_are_valid_and_not_below_the_tight_bound(view):
    tight = tight_lower_bound(view)
    for name in ("search", "critical-path"):
        assert n_batches(POLICIES[name], view) >= tight, name


def drives_to_end(seq, tab, final):
    q = 0
    for t in seq:
        if tab[q, t] >= 0:
            q = tab[q, t]
    return q == final


@SETTINGS
@given(views(max_nodes=30))
def test_merged_core_drives_every_part_to_its_end(view):
    seq = merged_core(view)
    core, tail = core_and_tail(view)
    if seq is None:
        assert not core.any()
        return
    assert core[seq].all()
    autos = _automata(view, core)
    assert all(drives_to_end(seq, tab, final) for tab, final, _, _ in autos)
    assert len(seq) >= part_bound(view) - automata.outside_core(view, tail)     # no shorter than exact


def test_astar_gives_up_parts_whose_product_overflows_int64():
    """23 identical chains abcabc: the optimum is 6 (a batch per step, every chain together).
    Their product has 7**23 > 2**63 states, more than A*'s int64 state numbers hold: it must
    search fewer parts, not wrapped-around ones (it claimed 10-15)."""
    nodes = []
    for _ in range(23):
        nodes += chain(list("abcabc"), start=len(nodes))
    view = build(nodes)
    assert n_batches(POLICIES["critical-path"], view) == 6
    for limit in (0, 5, 50, 500):
        assert part_bound(view, n_first=23, limit=limit) <= 6, limit


def test_merge_never_reads_past_the_end_of_the_sequence():
    """At the end of the sequence (every type of it taken), _merge read seq[len(seq)]: past
    the array, which compiled numba does not check. Run as Python, which does: each part
    merged into the empty sequence, and into the others' exact sequence, reaches its end."""
    view = rotations()
    autos = _automata(view, core_and_tail(view)[0])
    for tab, final, _, fewest in autos:
        for variant in (0, 1, 2):
            seq = _merge.py_func(np.zeros(0, np.int64), tab, final, variant)
            assert len(seq) == fewest and drives_to_end(seq, tab, final)
            both = _merge.py_func(seq, autos[0][0], autos[0][1], variant)
            assert drives_to_end(both, tab, final) and drives_to_end(both, autos[0][0], autos[0][1])


@pytest.mark.parametrize("limit, value", [("MAX_PART_NODES", 3), ("MAX_PART_STATES", 4), ("MAX_TOTAL_STATES", 8),
                                          ("MAX_PRODUCT", 20), ("MAX_TABLE", 20)])
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(view=views())
def test_past_the_size_limits_the_parts_give_up_cleanly(limit, value, view):
    """With each limit tiny, the parts bound is 0 or uses fewer parts (never above the
    optimum), merged_core is None or still drives every part to its end, search is valid."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(automata, limit, value)
        got = bounds(view)
        seq = merged_core(view)
        if seq is not None:
            core = core_and_tail(view)[0]
            assert all(drives_to_end(seq, tab, final) for tab, final, _, _ in _automata(view, core))
        searched = n_batches(POLICIES["search"], view)
    assert searched >= got["tight"]
    if small(view):
        best = optimum(view)
        assert all(b <= best for b in got.values()), (got, best)


@pytest.mark.parametrize("view, best", [
    pytest.param(make_view([]), 0, id="empty"),
    pytest.param(make_view([(1, [])]), 1, id="one node"),
    pytest.param(make_view([(INPUT, [])] * 3), 0, id="inputs only"),
    pytest.param(make_view(chain([UB] * 3) + [(UB, [-1])], unbatchable=[UB]), 4, id="all unbatchable"),
    pytest.param(make_view([(INPUT, []), (1, [0, 0, 0]), (2, [1, 1]), (1, [2, 0, 2])]), 3,
                 id="repeated operands"),
    pytest.param(build(chain(list("ab" * 600))), 1200, id="one part past MAX_PART_NODES"),
])
def test_edge_cases_are_bounded_and_scheduled_exactly(view, best):
    if len(view.sig) <= 16:
        assert optimum(view) == best
    assert all(b <= best for b in bounds(view).values())
    assert tight_lower_bound(view) == best
    for name in ("search", "critical-path"):
        assert n_batches(POLICIES[name], view) == best, name


def test_part_bound_needs_at_least_one_part():
    with pytest.raises(ValueError, match="n_first >= 1"):
        part_bound(rotations(), n_first=0)


def _eq2_every_node(view):
    """Eq. 2 as written: per signature, the longest chain of its nodes over the whole graph."""
    total = sum(1 for v in range(len(view.sig)) if view.executable[v] and view.unbatchable[view.sig[v]])
    for s in set(view.sig[v] for v in range(len(view.sig)) if view.executable[v] and not view.unbatchable[view.sig[v]]):
        longest = [0] * len(view.sig)
        for v in range(len(view.sig)):
            m = max([longest[u] for u in view.args[view.arg_ptr[v]:view.arg_ptr[v + 1]] if u >= 0], default=0)
            longest[v] = m + (view.executable[v] and view.sig[v] == s)
        total += max(longest)
    return total


@SETTINGS
@given(views(max_nodes=30))
def test_eq2_over_each_signatures_span_of_nodes_is_eq2_over_the_graph(view):
    """The bound walks only the nodes from a signature's first to its last."""
    assert lower_bound(view) == _eq2_every_node(view)
