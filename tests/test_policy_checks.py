"""Scheduling policies at their edges: the schedule a policy returns is checked, a learned
policy needs one distinct type name per signature (in a view and in a saved file), and the
type names of py_func calls hold no object address, so that they mean the same in every process."""
import functools
import json

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.schedule import agenda
from hybridbatch.schedule.check import checked
from hybridbatch.schedule.fsm import FSMPolicy
from graphs import make_view


def test_a_batch_pointer_past_the_order_is_reported_as_such():
    """batch_ptr [0, 5, 3] over 3 nodes: the check read order[3:5] out of bounds and
    reported whatever node id it found there."""
    view = make_view([(1, []), (1, [0]), (1, [1])])

    def bad(view):
        pass

    for bptr in ([0, 5, 3], [0, 2, 5, 3]):
        with pytest.raises(ValueError, match="batch_ptr must start at 0, rise strictly"):
            checked(bad, view, (np.arange(3), np.array(bptr)))


def test_a_learned_policy_rejects_a_view_whose_type_names_repeat():
    """Two signatures named alike got one type id: the table's action mapped to the other,
    which had nothing ready, and the step loop ran empty batches forever."""
    view = make_view([(1, []), (2, []), (1, [0]), (2, [1]), (1, [2]), (2, [3])])
    view.sig_keys = ("t0", "a", "a")
    policy = FSMPolicy(["a"], "base", [[0]], [0])
    with pytest.raises(ValueError, match="one distinct sig_key per signature"):
        policy.schedule(view)
    view.sig_keys = ()          # no names at all: the fallback heuristic, as before
    order, bptr = policy(view)
    assert sorted(order.tolist()) == list(range(6)) and len(bptr) - 1 == 6


def _scale(x, k):
    return x * k


class _Doubler:
    def __call__(self, x):
        return x * 2


def test_type_names_of_partials_and_callable_objects_hold_no_address():
    """py_func of functools.partial or of a callable object was named by its repr, with the
    object's address in it: a learned table never knew it in another process."""
    keys = []

    def capture(view):
        keys.extend(view.sig_keys)
        return agenda(view)

    with hb.batching(policy=capture):
        x = hb.array(np.ones(3, np.float32))
        y = hb.py_func(functools.partial(_scale, k=3), x, out_shape=(3,))
        hb.py_func(_Doubler(), y, out_shape=(3,)).asnumpy()
    named = [k for k in keys if k.startswith("py_func")]
    assert len(named) == 2 and not any("0x" in k for k in named), named
    assert any("partial(_scale)" in k for k in named) and any("_Doubler" in k for k in named), named


@pytest.mark.parametrize("types", [["a", "a"], "ab", {"a": 0, "b": 1}])
def test_loading_a_file_whose_types_are_not_distinct_names_names_it(tmp_path, types):
    """Repeated types loaded silently (the first one's states never matched again), and a
    string or an object of names was read as its characters or keys."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "hybridbatch.fsm-policy/1", "encoding": "sort", "types": types,
                                "states": [[0]], "actions": [0]}))
    with pytest.raises(ValueError, match="bad.json: not a saved FSM policy: .*types must be a list of distinct"):
        FSMPolicy.load(path)


def _chains(policy):
    W = hb.Parameter("W", (3, 3), init=0.5)
    with hb.batching(policy=policy) as scope:
        ys = []
        for n in (1, 2, 3):
            h = hb.array(np.ones(3, np.float32))
            for _ in range(n):
                h = hb.tanh(W @ h)
            ys.append(hb.sum(h))
        total = hb.add_n(ys)
        total.asnumpy()
    return scope


@pytest.mark.parametrize("frozen", [False, True])
def test_a_policy_that_cannot_be_a_key_runs_at_every_flush(frozen):
    """A dataclass's instance (its __hash__ None), or a frozen one holding a list (its
    __hash__ raising), is called each time, as a policy with cacheable = False, not crashed
    on in the plan cache's lookup with a bare "unhashable type"."""
    import dataclasses

    @dataclasses.dataclass(frozen=frozen)
    class Counting:
        calls: list = dataclasses.field(default_factory=list)

        def __call__(self, view):
            self.calls.append(len(view.depth))
            return agenda(view)

    policy = Counting()
    for _ in range(2):
        assert _chains(policy).stats.plan_cache_hits == 0
    assert len(policy.calls) == 2


@pytest.mark.parametrize("returned, got", [(None, "NoneType"), ([np.arange(2)] * 3, "a list of 3")])
def test_a_policy_returning_no_pair_is_named_with_what_a_policy_returns(returned, got):
    def bad(view):
        return returned

    with pytest.raises(ValueError, match=f"batching policy bad returned {got}; a policy returns a pair "
                                         r"\(order, batch_ptr\)"):
        _chains(bad)


def test_a_policy_class_is_refused_for_its_instance():
    class Mine:
        def __call__(self, view):
            return agenda(view)

    with pytest.raises(TypeError, match=r"policy=Mine is a class: pass an instance of it, policy=Mine\(\)"):
        hb.batching(policy=Mine)


def test_a_policy_that_raised_leaves_the_scope_failed():
    """Its flush failed as one whose kernel raised; the scope went on as if nothing had."""
    calls = []

    def once_broken(view):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("policy failed")
        return agenda(view)

    with pytest.raises(hb.ScopeError, match="abandoned by an exception .RuntimeError: policy failed"):
        with hb.batching(policy=once_broken):
            y = hb.tanh(hb.array(np.ones(2, np.float32)))
            with pytest.raises(RuntimeError):
                y.asnumpy()
            y.asnumpy()


def test_a_flush_whose_policy_raised_is_not_counted_as_a_read_one():
    """stats count the flushes that ran: the read's flush that failed in its policy had
    stayed counted among the forced ones (one forced of no flushes)."""
    def broken(view):
        raise RuntimeError("policy failed")

    scope = hb.batching(policy=broken)
    with pytest.raises(hb.ScopeError, match="abandoned by an exception .RuntimeError: policy failed"):
        with scope:
            y = hb.tanh(hb.array(np.ones(2, np.float32)))
            with pytest.raises(RuntimeError):
                y.asnumpy()
    assert (scope.stats.flushes, scope.stats.forced_flushes) == (0, 0)


def test_a_saved_table_nested_too_deep_or_holding_a_state_twice_is_not_a_policy(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="deep.json: not a saved FSM policy: its JSON nests too deep"):
        FSMPolicy.load(deep)
    twice = tmp_path / "twice.json"
    table = FSMPolicy(["a", "b"], "sort", [[0, 4]], [0]).to_json()
    table["states"], table["actions"] = [[0, 4], [0, 4]], [0, 1]
    twice.write_text(json.dumps(table))
    with pytest.raises(ValueError, match=r"twice.json: .*states 0 and 1 are both \[0, 4\]"):
        FSMPolicy.load(twice)
