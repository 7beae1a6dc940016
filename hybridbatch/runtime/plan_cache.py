"""The structure-keyed schedule cache: an identical graph (same minibatch again, repeated
inference) reuses its schedule instead of running the policy.

Keys are exact (the bytes of the signature, depth and edge arrays, plus the policy), so two
different structures never share an entry; the dict hashes them, equality decides. Depth is
part of the key because a later flush's structure can repeat while its operands from earlier
flushes sit at other depths, which depth-driven policies schedule differently.
"""
import numbers
from collections import OrderedDict

from ..schedule import POLICIES
from ..schedule.check import checked
from ..schedule.fsm import FSMPolicy

_BUILT_IN = tuple(POLICIES.values())


def run_policy(policy, view):
    """policy(view), checked unless the policy is built in or a learned FSMPolicy: those
    make valid schedules by construction, a user's callable may not (see schedule/check.py)."""
    order, bptr = policy(view)
    if policy in _BUILT_IN or type(policy) is FSMPolicy:
        return order, bptr
    return checked(policy, view, order, bptr)


class ScheduleCache:
    """A bounded LRU of (order, batch_ptr) per (policy, structure)."""

    def __init__(self, capacity=32):
        self.capacity = capacity
        self._entries = OrderedDict()

    def resize(self, capacity):
        """Keep at most `capacity` schedules (0 turns caching off)."""
        if isinstance(capacity, bool) or not isinstance(capacity, numbers.Integral):
            raise TypeError(f"the plan cache size is a number of schedules, not {capacity!r}")
        if capacity < 0:
            raise ValueError(f"the plan cache size must be 0 (off) or more, not {capacity}")
        self.capacity = int(capacity)
        while len(self._entries) > capacity:
            self._entries.popitem(last=False)

    def clear(self):
        self._entries.clear()

    def __len__(self):
        return len(self._entries)

    def schedule(self, policy, view, global_sig):
        """(order, batch_ptr, hit): the cached schedule for this structure, or a new one.
        A policy with `cacheable = False` (one that keeps what it is shown) is always run."""
        if self.capacity <= 0 or not getattr(policy, "cacheable", True):
            order, bptr = run_policy(policy, view)
            return order, bptr, False
        key = (policy, global_sig.tobytes(), view.depth.tobytes(), view.arg_ptr.tobytes(), view.args.tobytes())
        found = self._entries.get(key)
        if found is not None:
            self._entries.move_to_end(key)
            return found[0], found[1], True
        order, bptr = run_policy(policy, view)
        self._entries[key] = (order, bptr)
        if len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return order, bptr, False


CACHE = ScheduleCache()


def set_plan_cache_size(capacity: int) -> None:
    """How many schedules the process keeps for reuse (default 32; 0 disables)."""
    CACHE.resize(capacity)
