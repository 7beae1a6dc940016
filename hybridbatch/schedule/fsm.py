"""ED-Batch's finite-state-machine policy (§2.2): a table from the state of the ready set
to the signature to run next, learned per model (learn.py), looked up in numba per step.

Types are named by their stable keys (GraphView.sig_keys), so a table learned in one
process schedules flushes of another. A state never seen in training (new types, an
unusual mix) falls back to the encoding's heuristic: the frontier ratio, or for "phase"
the critical path.
"""
import json

import numpy as np

from .frontier import BASE, FLAGS, MAX, SORT, PHASE, TABLE, fallback_rule, index_states, schedule

ENCODINGS = {"base": BASE, "max": MAX, "sort": SORT, "phase": PHASE}
FORMAT = "hybridbatch.fsm-policy/1"


def encoding_code(name):
    try:
        return ENCODINGS[name]
    except KeyError:
        raise ValueError(f"unknown state encoding {name!r}; expected one of {sorted(ENCODINGS)}") from None


def keys_of(view):
    """The view's stable type keys (one distinct key per signature), or ValueError."""
    keys = view.sig_keys
    if len(keys) != view.n_sigs or len(set(keys)) != len(keys):
        raise ValueError(f"a learned policy knows types by their names: the GraphView needs one distinct "
                         f"sig_key per signature ({view.n_sigs}), not {len(keys)} with {len(set(keys))} distinct")
    return keys


class FSMPolicy:
    """A learned batching policy: call it on a GraphView, or pass it to hb.batching(policy=).

    types: stable keys, a type's position is its id in the states; states: per state, the
    key elements (type id * FLAGS + flags, see frontier._state); actions: the type id to run;
    backoff: an unseen state takes the action of the longest learned state inside it, else
    the fallback rule decides (learning turns it off where the samples run strictly fewer
    batches without it).
    Hashes by identity, as the plan cache expects of a policy. Learning sets `batches` and
    `lower_bound`: the table's batch count and the bound, summed over the samples.
    Learn one with hb.learn_policy, save it with the model, load it to schedule with it.

    >>> import os, tempfile
    >>> W = hb.Parameter("W", (4, 4), init=0.1)
    >>> def chain(n):
    ...     h = hb.array(np.ones(4, np.float32))
    ...     for _ in range(n):
    ...         h = hb.tanh(W @ h)
    ...     return h
    >>> policy = hb.learn_policy(chain, [2, 3], episodes=10, progress=False)
    >>> path = os.path.join(tempfile.mkdtemp(), "policy.json")
    >>> policy.save(path)
    >>> loaded = hb.FSMPolicy.load(path)
    >>> loaded.types == policy.types, loaded.states == policy.states
    (True, True)
    >>> with hb.batching(policy=loaded):
    ...     y = chain(3)
    >>> y.shape
    (4,)
    """

    def __init__(self, types, encoding, states, actions, backoff=True):
        if not isinstance(backoff, bool):
            raise ValueError(f"backoff must be true or false, not {backoff!r}")
        if not isinstance(types, (list, tuple)) or len(set(types)) != len(types):
            raise ValueError(f"a policy's types must be a list of distinct names, not {types!r}")
        self.types = list(types)
        self.encoding = encoding
        self._code = encoding_code(encoding)
        self._ids = {k: i for i, k in enumerate(self.types)}
        self.states = [_integers(s, "state") for s in states]
        self.actions = _integers(actions, "actions")
        self.batches = self.lower_bound = None
        if len(self.states) != len(self.actions):
            raise ValueError(f"{len(self.states)} states but {len(self.actions)} actions")
        width = max(1, len(self.types))
        skeys = np.full((len(self.states), width), -1, np.int64)
        slen = np.zeros(len(self.states), np.int64)
        seen = {}
        for i, (state, action) in enumerate(zip(self.states, self.actions)):
            first = seen.setdefault(tuple(state), i)
            if first != i:      # the lookup would take either action
                raise ValueError(f"states {first} and {i} are both {state}: a table holds each state once")
            members = {e // FLAGS for e in state}
            if len(state) > width or action not in members or not members <= set(range(len(self.types))):
                raise ValueError(f"state {i} {state} -> {action}: not a state over {len(self.types)} types "
                                 f"whose action is one of its ready types")
            skeys[i, :len(state)] = state
            slen[i] = len(state)
        self._table = (index_states(skeys, slen, len(self.states)), skeys, slen,
                       np.array(self.actions, np.int64), backoff)
        self._in_states = {e // FLAGS for state in self.states for e in state}

    def type_ids(self, view):
        """Per signature of the view, its type id, or -1 for a type that no state of the
        table holds (never seen, or seen only where it ran without a state: a loss sum of
        one sentence length). States leave those types out: they carry nothing the table
        learned, and a sum per length would otherwise make most states of unseen
        minibatches unseen. A left-out type runs when its signature is ready in full, or
        when the fallback heuristic picks it."""
        keys = keys_of(view) if view.sig_keys else [None] * view.n_sigs
        ids = (self._ids.get(k, -1) for k in keys)
        return np.array([i if i in self._in_states else -1 for i in ids], np.int64)

    def schedule(self, view):
        """(order, batch_ptr, steps that fell back to the heuristic). An empty table (learning
        found nothing better than the fallback) runs the fallback rule without the per-step
        table work, every batch counted as a fallback."""
        if not self.states:
            order, bptr, _ = schedule(view, fallback_rule(self._code))
            return order, bptr, len(bptr) - 1
        return schedule(view, TABLE, self.type_ids(view), self._code, self._table)

    def __call__(self, view):
        order, bptr, _ = self.schedule(view)
        return order, bptr

    def to_json(self):
        return {"format": FORMAT, "encoding": self.encoding, "types": self.types,
                "states": self.states, "actions": self.actions, "backoff": self.backoff}

    def save(self, path):
        """Write the policy as JSON, for load() in any process."""
        with open(path, "w") as f:
            json.dump(self.to_json(), f)

    @classmethod
    def load(cls, path):
        """A policy saved by save(); ValueError naming the file if it is not one."""
        try:
            with open(path) as f:
                data = json.load(f)
            if data.get("format") != FORMAT:
                raise ValueError(f"format is {data.get('format')!r}, not {FORMAT!r}")
            return cls(data["types"], data["encoding"], data["states"], data["actions"],
                       data.get("backoff", True))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}: not a saved FSM policy: {e}") from None
        except RecursionError:      # JSON nested past Python's stack: no saved table is
            raise ValueError(f"{path}: not a saved FSM policy: its JSON nests too deep") from None

    @property
    def backoff(self):
        return self._table[4]

    def with_backoff(self, backoff):
        """The same table, backing off on unseen states or not."""
        return FSMPolicy(self.types, self.encoding, self.states, self.actions, backoff)

    def __repr__(self):
        return f"FSMPolicy({self.encoding!r}, {len(self.types)} types, {len(self.states)} states)"


def _integers(values, what):
    """A saved table's integers as ints; 1.5 or "1" is a corrupt file, not a truncated 1."""
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        raise ValueError(f"a policy's {what} must hold integers, not {list(values)!r}")
    return [int(v) for v in values]
