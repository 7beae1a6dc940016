"""Learning an FSM policy for a model (ED-Batch §2.3): capture the dataflow graphs of a
sample minibatch, then tabular Q-learning over them (episodes in numba, frontier.episode)
until the greedy table's batch count reaches the lower bound or the episodes run out."""
import sys

import numpy as np
from tqdm import tqdm

from ..record.scope import batching
from .agenda import agenda
from .fsm import FSMPolicy, encoding_code, keys_of
from .frontier import CRITICAL, average_depth, episode, fallback_rule, greedy_actions, index_states
from .lower_bound import lower_bound

CHECK_EVERY = 10        # episodes between evaluations of the greedy table (ED-Batch: 50)
PATIENCE = 100          # episodes without a better table before learning stops
LEARNING_RATE = 0.2
EPSILON = (0.3, 0.02)   # exploration, decaying linearly from the first to the second


class _Capture:
    """A policy that keeps every view it schedules (and schedules it by agenda). Not
    cacheable: a cached schedule for a repeated structure would skip the view."""

    cacheable = False

    def __init__(self):
        self.views = []

    def __call__(self, view):
        self.views.append(view)
        return agenda(view)


def capture_views(model_fn, sample_inputs, granularity="block", batch_size=None):
    """The GraphViews of the flushes that running model_fn over the samples makes: one scope
    for all of them, or with batch_size one scope per minibatch of that many, as training
    records them."""
    capture = _Capture()
    size = max(len(sample_inputs), 1) if batch_size is None else batch_size
    if size < 1:
        raise ValueError(f"batch_size must be a positive number of samples, not {batch_size!r}")
    for i in range(0, len(sample_inputs), size):
        with batching(policy=capture, granularity=granularity):
            for x in sample_inputs[i:i + size]:
                model_fn(x)
    if not capture.views:
        raise ValueError("model_fn recorded nothing to schedule for these sample inputs")
    return capture.views


class _QTable:
    """Q values over the states of some views, whose types get ids in key order."""

    def __init__(self, views, encoding):
        self.views, self.encoding, self.code = views, encoding, encoding_code(encoding)
        keyed = [keys_of(v) for v in views]
        self.types = sorted({k for keys in keyed for k in keys})
        ids = {k: i for i, k in enumerate(self.types)}
        self.vids = [np.array([ids[k] for k in keys], np.int64) for keys in keyed]
        self.priority = [average_depth(v.sig, v.depth, v.executable, v.n_sigs) for v in views]
        width = max(1, len(self.types))
        self.skeys = np.full((64, width), -1, np.int64)
        self.slen = np.full(64, -1, np.int64)
        self.q = np.zeros((64, width), np.float64)
        self.seen = np.zeros((64, width), np.int64)
        self.n_states = 0
        self.slots = index_states(self.skeys, self.slen, 0)

    def episode(self, alpha, eps, lr, n_step, rng):
        for view, vid, priority in zip(self.views, self.vids, self.priority):
            self.slots, self.skeys, self.slen, self.q, self.seen, self.n_states = episode(
                view.sig, view.executable, view.unbatchable, priority, view.cost, view.arg_ptr, view.args,
                vid, self.code, self.slots, self.skeys, self.slen, self.q, self.seen, self.n_states,
                alpha, eps, lr, n_step, int(rng.integers(2 ** 31)))

    def policy(self, empty=False):
        """The greedy table (or no table: the fallback alone) as a policy."""
        n = 0 if empty else self.n_states
        act = greedy_actions(self.q, self.seen, self.skeys, self.slen, n)
        return FSMPolicy(self.types, self.encoding, [self.skeys[i, :self.slen[i]].tolist() for i in range(n)],
                         act.tolist())

    def batches(self, policy):
        return sum(len(policy(v)[1]) - 1 for v in self.views)


def learn_policy(model_fn, sample_inputs, encoding="sort", alpha=0.5, episodes=300, n_step=4, seed=0,
                 progress=True, granularity="block", batch_size=None):
    """An FSMPolicy learned for model_fn: model_fn(x) for each sample input is recorded in
    an hb.batching scope of this granularity (one per `batch_size` samples, else one for
    all), and the flushes' graphs are learned on. Several minibatches show the table more
    of the states that unseen minibatches reach.

    encoding: "base", "max", "sort" (ED-Batch's states, frontier-ratio fallback) or "phase"
    (ready types by critical path, critical-path fallback). The reward of a step is
    -batches + alpha * frontier ratio; n_step: steps before bootstrapping. The policy's
    `batches` and `lower_bound` say how it did on the samples.

    >>> W = hb.Parameter("W", (4, 4), init=0.1)
    >>> def chain(n):
    ...     h = hb.array(np.ones(4, np.float32))
    ...     for _ in range(n):
    ...         h = hb.tanh(W @ h)
    ...     return h
    >>> policy = hb.learn_policy(chain, [2, 3, 5], episodes=20, progress=False)
    >>> policy.batches, policy.lower_bound
    (10, 10)
    >>> with hb.batching(policy=policy) as scope:
    ...     ys = [chain(n) for n in (4, 1)]
    >>> scope.stats.batches
    8
    """
    encoding_code(encoding)          # a bad name fails before the model runs
    return learn_views(capture_views(model_fn, sample_inputs, granularity, batch_size), encoding, alpha,
                       episodes, n_step, seed, progress)


def learn_views(views, encoding="sort", alpha=0.5, episodes=300, n_step=4, seed=0, progress=True):
    """learn_policy on GraphViews (with sig_keys). Returns the table of fewest batches over
    the views among those evaluated (every CHECK_EVERY episodes; learning stops at the
    bound, or after PATIENCE episodes without a better one), with .batches and
    .lower_bound set. The first episode follows the fallback heuristic, so learning starts
    from it; the phase table may also end up empty (its fallback alone is as cheap). The
    table backs off on unseen states unless the samples run fewer batches without."""
    if n_step < 1 or episodes < 1:
        raise ValueError(f"need n_step >= 1 and episodes >= 1, not {n_step} and {episodes}")
    table = _QTable(views, encoding)
    rng = np.random.default_rng(seed)
    bound = sum(lower_bound(v) for v in views)
    best, improved = None, 0
    if fallback_rule(table.code) == CRITICAL:
        best = table.policy(empty=True)
        best.batches = table.batches(best)
    with tqdm(total=episodes, desc=f"learn_policy[{encoding}]", file=sys.stderr, disable=not progress) as bar:
        for e in range(episodes):
            if best is not None and best.batches <= bound:
                break
            eps = 0.0 if e == 0 else EPSILON[0] + (EPSILON[1] - EPSILON[0]) * e / episodes
            table.episode(alpha, eps, LEARNING_RATE, n_step, rng)
            bar.update(1)
            if e % CHECK_EVERY == 0 or e == episodes - 1:
                policy = table.policy()
                policy.batches = table.batches(policy)
                if best is None or policy.batches < best.batches:
                    best, improved = policy, e
                bar.set_postfix(batches=best.batches, lower_bound=bound)
                if e - improved >= PATIENCE:
                    break
    # Backing off helps where unseen states resemble seen ones (taggers, seq2seq) and misleads
    # where they do not (lattices): drop it only where the samples run strictly fewer batches without.
    if best.states:
        plain = best.with_backoff(False)
        plain.batches = table.batches(plain)
        if plain.batches < best.batches:
            best = plain
    best.lower_bound = bound
    return best
