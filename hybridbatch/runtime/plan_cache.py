"""The structure-keyed schedule cache: an identical graph (same minibatch again, repeated
inference) reuses its schedule instead of running the policy.

Keys are exact (the bytes of the signature, depth and edge arrays, plus the policy), so two
different structures never share an entry; the dict hashes them, equality decides. Depth is
part of the key because a later flush's structure can repeat while its operands from earlier
flushes sit at other depths, which depth-driven policies schedule differently. For the
built-in and learned policies it is taken from the flush's shallowest node: they compare
depths, so the same depths shifted schedule alike, and the rounds of an hb.map, each a step
deeper than the last, match. A user's callable might read them as they are.
"""
import threading
from collections import OrderedDict

from ..config import settings
from ..schedule import POLICIES
from ..schedule.check import checked
from ..schedule.fsm import FSMPolicy

_BUILT_IN = tuple(POLICIES.values())


def run_policy(policy, view):
    """policy(view), checked unless the policy is built in or a learned FSMPolicy: those
    make valid schedules by construction, a user's callable may not (see schedule/check.py)."""
    schedule = policy(view)
    if policy in _BUILT_IN or type(policy) is FSMPolicy:
        return schedule
    return checked(policy, view, schedule)


class ScheduleCache:
    """A bounded LRU of (order, batch_ptr) per (policy, structure), of at most
    `settings.plan_cache_size` schedules (0 turns caching off). Threads flushing their own
    scopes share it: a lock makes each lookup and insertion whole (another thread's trim
    could drop an entry between its lookup and its move to the end)."""

    def __init__(self):
        self._entries = OrderedDict()
        self._lock = threading.Lock()

    def trim(self):
        """Drop the least recently used schedules beyond settings.plan_cache_size."""
        with self._lock:
            self._trim()

    def _trim(self):
        while len(self._entries) > settings.plan_cache_size:
            self._entries.popitem(last=False)

    def clear(self):
        with self._lock:
            self._entries.clear()

    def __len__(self):
        return len(self._entries)

    def schedule(self, policy, view, global_sig):
        """(order, batch_ptr, hit): the cached schedule for this structure, or a new one.
        A policy with `cacheable = False` (one that keeps what it is shown, or whose answers
        change), or one that cannot be a key (a dataclass's instance), is always run."""
        if settings.plan_cache_size <= 0 or not getattr(policy, "cacheable", True) or not _hashable(policy):
            order, bptr = run_policy(policy, view)
            return order, bptr, False
        depth = view.depth
        if len(depth) and (policy in _BUILT_IN or type(policy) is FSMPolicy):    # they only compare depths
            depth = depth - depth.min()
        key = (policy, global_sig.tobytes(), depth.tobytes(), view.arg_ptr.tobytes(), view.args.tobytes())
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found[0], found[1], True
        order, bptr = run_policy(policy, view)      # unlocked: other threads' lookups go on
        with self._lock:
            self._entries[key] = (order, bptr)
            self._trim()
        return order, bptr, False


def _hashable(policy):
    """Whether the policy can be part of a key: a dataclass's instance has no __hash__, a
    frozen one holding a list has one that raises."""
    try:
        hash(policy)
    except TypeError:
        return False
    return True


CACHE = ScheduleCache()
