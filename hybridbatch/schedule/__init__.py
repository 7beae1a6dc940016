"""Scheduling policies: pure functions GraphView -> (order, batch_ptr).

`order` lists the view's executed nodes; batch k is order[batch_ptr[k]:batch_ptr[k+1]],
all of one signature, each node's operands in earlier batches.
"""
from .agenda import agenda, tail_last
from .depth import by_depth
from .frontier import critical_path, greedy_frontier
from .graph_view import GraphView  # noqa: F401
from .lower_bound import lower_bound  # noqa: F401



def rollout_search(view):
    """The offline rollout search (`offline/search.py`), loaded on first use."""
    from .offline.search import rollout_search as search
    return search(view)


POLICIES = {"critical-path": critical_path, "tail-last": tail_last, "agenda": agenda, "depth": by_depth,
            "greedy-frontier": greedy_frontier, "search": rollout_search}
# What `hb.batching()` runs when given no policy. Critical path reaches ED-Batch's bound on
# trees and chains with per-node outputs as tail-last does, and beats tail-last and agenda
# wherever a cell comes in several signatures (a child-sum cell's arities, W4's two types,
# W6's lattices), for about 1.2x agenda's scheduling time (benchmarks/RESULTS.md).
DEFAULT_POLICY = "critical-path"


def get_policy(policy):
    """A scheduling function from a name or a callable(view) -> (order, batch_ptr)."""
    if isinstance(policy, type):
        raise TypeError(f"policy={policy.__name__} is a class: pass an instance of it, policy={policy.__name__}()")
    if callable(policy):
        return policy
    try:
        return POLICIES[policy]
    except (KeyError, TypeError):
        hint = ""
        if isinstance(policy, str) and policy.lower().startswith("fsm"):
            hint = ("; an FSM policy is learned for a model: pass the policy object that "
                    "hb.learn_policy(model_fn, samples) returns (or hb.FSMPolicy.load(path))")
        raise ValueError(f"unknown batching policy {policy!r}; expected one of {sorted(POLICIES)} "
                         f"or a callable(view) -> (order, batch_ptr){hint}") from None
