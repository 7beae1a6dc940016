"""`hb.profile()`: where the time went over many scopes, and a Chrome trace of it.

While a Profile is active, scopes report their phases (recording, scheduling, forward,
backward) and Trainer.step its update as spans, and forward and backward time every batch:
per recorded signature the profile adds up batches, nodes and seconds (`top`), and it keeps
one trace event per span and per batch (`chrome_trace` writes them as JSON that Perfetto
and chrome://tracing open). Inactive, the engine reads one module attribute per flush or
backward and times nothing.
"""
import json
import os
import threading
import time
from collections import defaultdict

import numpy as np

from ..record import signature

_active = None      # the Profile being filled, or None


def active():
    """The Profile being filled, or None."""
    return _active


class Profile:
    """Spans and per-batch times from every scope flushed while it is active (a `with`
    block). `max_events` bounds the trace kept; the sums per phase and per signature go on
    after it.

    >>> import os, tempfile
    >>> with hb.profile() as prof:
    ...     with hb.batching():
    ...         ys = [hb.tanh(hb.array([1.0])) for _ in range(4)]
    >>> [(row["signature"], row["batches"], row["nodes"]) for row in prof.top(1)]
    [('tanh((1,); ()) -> (1,)', 1, 4)]
    >>> sorted(prof.phases())
    ['forward', 'recording', 'scheduling']
    >>> path = prof.chrome_trace(os.path.join(tempfile.mkdtemp(), "trace.json"))
    """

    def __init__(self, max_events=1_000_000):
        if not isinstance(max_events, (int, np.integer)) or isinstance(max_events, bool) or max_events < 0:
            raise ValueError(f"max_events must be an int >= 0, not {max_events!r}")
        self.max_events = max_events
        self.events = []                   # (name, category, start, seconds, args)
        self.dropped = 0                   # events past max_events
        self._phases = defaultdict(float)  # phase -> seconds, kept or not
        self._sums = defaultdict(lambda: [0, 0, 0.0, 0.0])   # sig id -> batches, nodes, fwd s, bwd s
        self._open = threading.local()     # .batch: this thread's backward batch being timed (plan, batch, start)
        self._weight_grads = [0, 0.0]      # backward passes, seconds of their weights' deferred products
        self._origin = None

    def __enter__(self):
        global _active
        if _active is not None:
            raise RuntimeError("hb.profile() is already active: a profile is process-wide, one at a time (it "
                               "collects from every thread), so its blocks neither nest nor overlap across threads")
        self._origin = time.perf_counter() if self._origin is None else self._origin
        _active = self
        return self

    def __exit__(self, *exc):
        global _active
        _active = None
        return False

    # -- what the engine reports ---------------------------------------------------------
    def span(self, name, start, end, **args):
        """A phase from `start` to `end` (perf_counter seconds), the part since the profile
        began (a scope's recording may have begun before it)."""
        start = max(start, self._origin)
        if end <= start:
            return
        self._phases[name] += end - start
        self._event(name, "phase", start, end - start, args)

    def batch(self, plan, b, start, end, phase):
        """Batch b of `plan`, run in `phase` ("forward" or "backward") from `start` to `end`:
        into the sums of its recorded signature, the trace, and the plan's seconds per batch
        (`plan.forward_seconds` / `backward_seconds`, made at its first timed batch), for
        scope.explain()."""
        sig_id, size, seconds = plan.batch_sig[b], plan.sizes[b], end - start
        _seconds_per_batch(plan, phase)[b] += seconds
        sums = self._sums[sig_id]
        if phase == "forward":
            sums[0] += 1
            sums[1] += size
            sums[2] += seconds
        else:
            sums[3] += seconds
        self._event(signature.SIGS[sig_id].op.name, phase, start, seconds, {"nodes": size, "signature": sig_id})

    def backward_batch(self, plan=None, b=0):
        """Backward's batches, timed from one to the next: close the batch being timed and
        open batch b of `plan` (None: only close)."""
        now = time.perf_counter()
        timing = getattr(self._open, "batch", None)
        if timing is not None:
            done, k, start = timing
            self.batch(done, k, start, now, "backward")
        self._open.batch = None if plan is None else (plan, b, now)

    def weight_gradients(self, start, end):
        """A backward's deferred weight-gradient products (runtime/autograd.py,
        one_gemm_per_weight), from `start` to `end`: timed apart (`weight_gradient_seconds`),
        in no batch's seconds, since they sum over all of a weight's batches."""
        self._weight_grads[0] += 1
        self._weight_grads[1] += end - start
        self._event("weight gradients", "weights", start, end - start, {})

    def _event(self, name, category, start, seconds, args):
        if len(self.events) < self.max_events:
            self.events.append((name, category, start, seconds, threading.get_ident(), args))
        else:
            self.dropped += 1

    # -- what it tells ------------------------------------------------------------------
    def top(self, n=10):
        """The n signatures that took the most time, forward and backward together: dicts
        of description, batches, nodes, forward and backward seconds."""
        rows = [{"signature": signature.SIGS[s].describe(), "batches": b, "nodes": k, "forward_seconds": f,
                 "backward_seconds": g} for s, (b, k, f, g) in self._sums.items()]
        rows.sort(key=lambda r: -(r["forward_seconds"] + r["backward_seconds"]))
        return rows[:n]

    def weight_gradient_seconds(self):
        """Seconds backward spent after its batches, summing each weight's gradient
        products (G^T X over all its batches, one GEMM per weight): part of the backward
        phase, in no signature's row."""
        return self._weight_grads[1]

    def phases(self):
        """Seconds per phase (recording, scheduling, forward, backward, update), every span
        included, those past max_events too."""
        return dict(self._phases)

    def as_dict(self, n=10):
        return {"phases": self.phases(), "top": self.top(n), "weight_gradient_seconds": self.weight_gradient_seconds(),
                "events": len(self.events), "dropped": self.dropped}

    def trace(self):
        """The spans and batches as a Chrome trace (the dict `chrome_trace` writes)."""
        pid = os.getpid()
        origin = self._origin or 0.0
        events = [{"name": name, "cat": category, "ph": "X", "ts": (start - origin) * 1e6, "dur": seconds * 1e6,
                   "pid": pid, "tid": tid, "args": args}
                  for name, category, start, seconds, tid, args in self.events]
        return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"dropped_events": self.dropped}}

    def chrome_trace(self, path):
        """Write the trace as JSON that Perfetto and chrome://tracing open; returns path."""
        with open(path, "w") as f:
            json.dump(self.trace(), f)
        return path

    def __str__(self):
        phases = self.phases()
        lines = ["seconds by phase: " + (", ".join(f"{k} {v:.4f}" for k, v in phases.items()) or "none"),
                 "", f"{'forward s':>10} {'backward s':>10} {'batches':>8} {'nodes':>8}  signature"]
        for r in self.top():
            lines.append(f"{r['forward_seconds']:>10.4f} {r['backward_seconds']:>10.4f} {r['batches']:>8} "
                         f"{r['nodes']:>8}  {r['signature']}")
        if self._weight_grads[0]:
            lines.append(f"{'':>10} {self._weight_grads[1]:>10.4f} {'':>8} {'':>8}  weight gradients: each weight's "
                         f"products over its batches, summed after them (in no batch above)")
        if self.dropped:
            lines.append(f"({self.dropped} trace events past max_events were not kept)")
        return "\n".join(lines)


def profile(max_events=1_000_000):
    """A Profile to fill in a `with` block: `with hb.profile() as prof: ...; print(prof)`:
    where the time of many scopes went, by phase and by signature.

    >>> with hb.profile() as prof:
    ...     for _ in range(2):
    ...         with hb.batching():
    ...             y = hb.tanh(hb.array([1.0, 2.0]))
    >>> print(prof)
    seconds by phase: recording ..., scheduling ..., forward ...
    <BLANKLINE>
     forward s backward s  batches    nodes  signature
    ...      2        2  tanh((2,); ()) -> (2,)
    """
    return Profile(max_events)


def _seconds_per_batch(plan, phase):
    """plan.forward_seconds or backward_seconds, made (zeros) at the phase's first timed batch."""
    name = f"{phase}_seconds"
    per_batch = getattr(plan, name)
    if per_batch is None:
        per_batch = [0.0] * len(plan.sizes)
        setattr(plan, name, per_batch)
    return per_batch
