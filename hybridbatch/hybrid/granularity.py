"""granularity="auto": the per-block choice between one node per call and inlined ops, by
measured cost.

A hybridized block starts whole (one graph node per call: the cheaper graph to record and
schedule). Inlining can only pay where its whole calls batch poorly because they come in
several signatures (arities, shapes) that its primitive ops would merge: such a block
becomes a *candidate* when a flush shows its calls in two or more signatures, a median
batch below `settings.auto_min_batch`, and at least one call in `SMALL_SHARE` (8) in such
a small batch. Inlining adds its steps' recording to every call, and all it can win back
is on the calls that batched poorly: a child-sum cell over dependency trees (12 arities,
median batch 7) holds 4% of its calls in small batches and costs 2-5x per call inlined,
while the n-ary combiner of benchmarks/bench_auto.py holds 18% there and costs about the
same either way. A candidate is then measured both ways. A flush's cost is the recording
since the previous flush (or since the scope opened, or since a backward) plus scheduling
and execution, divided by the block's calls in it. After
`WHOLE_SAMPLES` flushes whole (the first pays the tracing), one flush runs it inlined, and
the cheaper mode per call is kept: the smallest recent sample of each, as a shared
machine's noise only ever adds time. A flush's cost per call falls as its calls grow (its
fixed costs spread), so only flushes of alike sizes are compared (calls within a factor
of `ALIKE`), and the recent costs are kept per size class (a power of two of calls), so
that minibatches of mixed sizes keep a cost of each size. Where the trial's size has no
alike flush of the other mode, the block goes back to that mode and tries again after
`RETRY` more flushes. Every `REVISIT` flushes one flush runs the other mode again, so the
choice follows the data when its shapes drift. The choice lives on the block
(`block.auto_inline`) and applies from its next call on, in this scope and later ones.
"""
import statistics

from ..config import settings
from ..kernels.compiling import log
from ..record import signature

WHOLE_SAMPLES = 2   # flushes measured whole before the first inlined one
SMALL_SHARE = 8     # a candidate has at least 1 in SMALL_SHARE of its calls in small batches
KEEP = 4            # recent per-call costs kept per mode and size class
REVISIT = 200       # flushes after a choice before the other mode is measured again
ALIKE = 2           # flushes compared have calls within this factor of each other
RETRY = 3           # flushes before another trial, where the last had nothing alike to compare


class AutoChoice:
    """One block's evidence and current choice (`inline`)."""

    __slots__ = ("inline", "candidate", "costs", "since", "trial")

    def __init__(self):
        self.inline = False
        self.candidate = False
        self.costs = {False: {}, True: {}}    # per mode: size class -> recent (calls, seconds per call)
        self.since = 0                        # flushes since the mode was last chosen
        self.trial = False                    # the current mode is on trial for one flush

    def observe(self, seconds_per_call, calls, batches_poorly):
        """Take one flush's cost per call (of `calls` calls) in the current mode; returns
        whether to inline from now on. batches_poorly: this flush ran the block whole in
        several signatures with small batches (never true of an inlined flush)."""
        mode = self.inline
        costs = self.costs[mode].setdefault(calls.bit_length(), [])
        costs.append((calls, seconds_per_call))
        del costs[:-KEEP]
        self.candidate = self.candidate or batches_poorly
        if not self.candidate:
            return False
        other = self.costs[not mode]
        if self.trial:                        # both modes measured: choose, from flushes alike in size
            self.trial = False
            self.since = 0
            alike = [c for size in (calls.bit_length() + d for d in (-1, 0, 1)) for n, c in other.get(size, ())
                     if n <= ALIKE * calls and calls <= ALIKE * n]
            if alike:
                self.inline = mode if seconds_per_call < min(alike) else not mode
            else:
                self.inline = not mode
                self.since = REVISIT - RETRY
        elif (not other and len(self.samples(mode)) >= WHOLE_SAMPLES) or self.since >= REVISIT:
            other.clear()                     # measure the other mode afresh, for one flush
            self.trial = True
            self.inline = not mode
        else:
            self.since += 1
        return self.inline

    def samples(self, mode):
        """Mode `mode`'s kept (calls, seconds per call), every size class."""
        return [sample for kept in self.costs[mode].values() for sample in kept]


def choose_granularity(plan, inlined_calls, seconds):
    """After a flush of an "auto" scope: give every hybridized block called in it the
    flush's cost per call (`seconds` for the whole flush) and set its choice
    (`block.auto_inline`) from the evidence so far. A block run whole is found, with its
    calls, in the plan's batches; an inlined one leaves none, so its calls are counted as
    they are made (`inlined_calls`: block -> calls in this flush)."""
    seen = {}
    for b, size in enumerate(plan.sizes):
        sig = plan.batch_sig[b]      # as recorded, not as run (run_sig)
        owner = signature.SIGS[sig].op.owner_block
        if owner is not None:
            sizes, sigs = seen.setdefault(owner, ([], set()))
            sizes.append(size)
            sigs.add(sig)
    small = settings.auto_min_batch
    for block, (sizes, sigs) in seen.items():
        calls = sum(sizes)
        poorly = (len(sigs) >= 2 and statistics.median(sizes) < small
                  and SMALL_SHARE * sum(s for s in sizes if s < small) >= calls)
        _choose(block, seconds, calls, poorly)
    for block, n in inlined_calls.items():
        _choose(block, seconds, n, False)


def _choose(block, seconds, calls, poorly):
    """Give the block's AutoChoice one flush's cost; say at DEBUG when its mode changes."""
    choice = block.auto_choice
    inline = choice.observe(seconds / calls, calls, poorly)
    if inline != block.auto_inline:
        object.__setattr__(block, "auto_inline", inline)
        whole, inlined = (f"{min(s for _, s in c) * 1e6:.1f} us" if c else "not measured"
                          for c in (choice.samples(False), choice.samples(True)))
        log.debug("granularity auto: %s %s (a call whole %s, inlined %s)", type(block).__name__,
                  ("runs inlined for a trial flush" if choice.trial else "runs inlined") if inline else
                  ("runs whole for a trial flush" if choice.trial else "runs whole"), whole, inlined)
