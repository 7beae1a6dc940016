"""`scope.explain()`: what the batcher did with a scope's nodes, in words and as data.

Per recorded signature: its batches, nodes, batch sizes, the bytes its batches copied
(operand rows gathered by index; a contiguous run of rows is a view and copies nothing) and
wrote (output rows), and, where the scope ran under `hb.profile()`, their forward and
backward seconds. Then every node that ran in a batch of one, with the reason the plans
show: an op that never batches (`py_func`), the only node of its signature in its flush
(named further when the op ran on other shapes, with another number of operands or with
other Parameters there, or when a read or an hb.map round forced that flush while its
signature ran in other flushes), or a signature the flush ran in
several batches (dependencies, or the policy's order). The signatures a flush ran in more
batches than their longest chain of dependent nodes (Eq. 2's term for them: the policy's
order, not their dependencies, spread them). And the signatures that read alike
but ran apart because their Parameters differ (the experts of a mixture: one block class,
one instance each), and the ops that ran under many shapes of one rank (a per-length shape).
It reads the scope's plans after the fact; nothing is collected while recording or running
unless a profile is active.
"""
import dataclasses
import re
import statistics
from collections import Counter, defaultdict

from ..record import signature
from ..schedule import POLICIES
from .plan import SLICE, graph_chains

SINGLES_SHOWN = 20      # singles listed by str(); as_dict() keeps them all
_PARAMETER_ID = re.compile(r"param#\d+")     # in a description: which Parameter, left out to compare forms


@dataclasses.dataclass
class SignatureReport:
    """One recorded signature over the whole scope."""
    description: str        # op or block name, operand shapes, attributes -> output shape
    batches: int
    nodes: int
    smallest: int           # batch sizes
    median: float
    largest: int
    bytes_gathered: int     # operand rows copied into batches
    bytes_written: int      # output rows
    forward_seconds: float | None     # where hb.profile() timed its batches, else None
    backward_seconds: float | None
    chain: int              # its longest chain of dependent nodes: the fewest batches it could take
    flushes: int            # the flushes it ran in


@dataclasses.dataclass
class Single:
    """A node that ran in a batch of one."""
    flush: int              # index of the scope's flush (plan) that ran it
    node: int               # its node id in the scope's graph
    description: str
    reason: str


@dataclasses.dataclass
class ApartByParameters:
    """Signatures alike but for their Parameters (one description, Parameter ids left out):
    a batch shares its Parameters, so each set ran in batches of its own."""
    description: str
    signatures: int
    batches: int
    nodes: int


@dataclasses.dataclass
class ApartByShape:
    """Signatures of one op, attributes and Parameters that differ only in their operands'
    shapes, of one rank (a per-length shape: a convolution over each word's characters, an
    attention over each sentence's tokens): shapes never batch together, so each ran in
    batches of its own."""
    op: str
    shapes: int             # the distinct shape sets (signatures)
    batches: int
    nodes: int
    axes: tuple             # per operand, the axes whose length varies among them


@dataclasses.dataclass
class Explanation:
    nodes: int
    batches: int
    lower_bound: int
    flushes: int
    forced_flushes: int
    seconds: dict           # recording, scheduling, executing, backward
    signatures: list        # SignatureReport, most batches first
    singles: list           # Single, in flush and batch order
    apart: list             # ApartByParameters, most signatures first
    failed: str = None      # the flush whose kernel raised, not counted in the figures above
    policies: dict = None   # where the policy spread signatures: batches each quick built-in
                            # policy makes of the same flushes, the scope's own included
    recording: str = None   # where recording primitive ops took a third of the time: what to do
    by_shape: list = dataclasses.field(default_factory=list)    # ApartByShape, most shapes first

    def as_dict(self):
        return dataclasses.asdict(self)

    def __str__(self):
        lines = [f"{self.nodes} nodes in {self.batches} batches (lower bound {self.lower_bound}) over "
                 f"{self.flushes} flush{'es' if self.flushes != 1 else ''}"
                 + (f", {self.forced_flushes} forced by reads" if self.forced_flushes else ""),
                 "seconds: " + ", ".join(f"{k} {v:.4f}" for k, v in self.seconds.items()),
                 "", f"{'batches':>7} {'nodes':>7} {'sizes min/median/max':>21} {'gathered':>10} "
                     f"{'written':>10} {'forward s':>10} {'backward s':>10}  signature"]
        for s in self.signatures:
            lines.append(f"{s.batches:>7} {s.nodes:>7} {f'{s.smallest}/{s.median:g}/{s.largest}':>21} "
                         f"{_size(s.bytes_gathered):>10} {_size(s.bytes_written):>10} {_time(s.forward_seconds):>10} "
                         f"{_time(s.backward_seconds):>10}  {s.description}")
        spread = _spread(self.signatures)
        if spread:
            lines += ["", "ran in more batches than their longest chain of dependent nodes (the policy's order):"]
            for s in spread:
                lines.append(f"  {s.description}: {s.batches} batches, its longest chain {s.chain}")
            if self.policies:
                lines.append("  the same flushes under each quick built-in policy: "
                             + ", ".join(f"{name} {n}" for name, n in self.policies.items()) + " batches"
                             + _policy_advice(self.policies))
        if self.apart:
            lines += ["", "ran apart because their Parameters differ (a batch shares its Parameters):"]
            for a in self.apart:
                lines.append(f"  {a.description}: {a.signatures} sets of Parameters, {a.batches} batches, "
                             f"{a.nodes} nodes")
        if self.by_shape:
            lines += ["", "ran apart because their shapes differ (pad to a few lengths, or keep per-instance "
                          "lengths as lists of vectors and use the list ops: hb.softmax/hb.add_n/hb.max of a list):"]
            for a in self.by_shape:
                varying = "; ".join(f"operand {j} axis {', '.join(map(str, axes))}" for j, axes in enumerate(a.axes)
                                    if axes)
                lines.append(f"  {a.op}: {a.shapes} shapes ({varying} varies), {a.batches} batches, {a.nodes} nodes")
        if self.singles:
            lines += ["", f"{len(self.singles)} node{'s' if len(self.singles) != 1 else ''} ran in a batch of one:"]
            for s in self.singles[:SINGLES_SHOWN]:
                lines.append(f"  flush {s.flush}, node {s.node}: {s.description}: {s.reason}")
            if len(self.singles) > SINGLES_SHOWN:
                lines.append(f"  ... {len(self.singles) - SINGLES_SHOWN} more (explain().singles has them all)")
        if self.recording:
            lines += ["", self.recording]
        if self.failed:
            lines += ["", self.failed]
        return "\n".join(lines)


def _policy_advice(counts):
    """A policy to try, from the counts of the same flushes: the fewest batches, where it
    beats the scope's own (the first); search, which plans for seconds, is never counted."""
    own, *_ = counts.values()
    best = min(counts, key=counts.get)
    if counts[best] >= own:
        return "; none runs them in fewer (policy=\"search\" may, planning for seconds per new structure)"
    return f"; policy=\"{best}\" runs them in {counts[best]}"


def _time(seconds):
    return "-" if seconds is None else f"{seconds:.4f}"


def _size(n):
    for unit in ("B", "KB", "MB"):
        if n < 1024 or unit == "MB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def explain(scope):
    """The Explanation of everything the scope has flushed."""
    sigs = signature.SIGS
    batches = defaultdict(list)      # recorded signature -> [(size, gathered, written, fwd s, bwd s)]
    singles = []
    counts = []                      # per flush: (nodes, batches) per recorded signature
    in_scope = Counter()             # recorded signature -> its nodes in every flush
    flushes_of = defaultdict(set)    # recorded signature -> the flushes it ran in
    for k, plan in enumerate(scope.plans):
        nodes_of, batches_of = Counter(), Counter()
        for s, size in zip(plan.batch_sig, plan.sizes):
            nodes_of[s] += size
            batches_of[s] += 1
            flushes_of[s].add(k)
        in_scope.update(nodes_of)
        counts.append((nodes_of, batches_of))
    for k, plan in enumerate(scope.plans):
        recorded = plan.batch_sig
        nodes_of, batches_of = counts[k]
        for b, (s, size) in enumerate(zip(recorded, plan.sizes)):
            batches[s].append((size, _gathered(plan, scope.arenas, b), _written(plan, scope.arenas, b),
                               None if plan.forward_seconds is None else plan.forward_seconds[b],
                               None if plan.backward_seconds is None else plan.backward_seconds[b]))
            if size == 1:
                node = plan.start + int(plan.batch_nodes(b)[0])
                split = ("map" if flushes_of[s] & scope.map_round_plans else
                         "read" if flushes_of[s] & scope.forced_plans else "flush")
                reason = _why_alone(sigs[s], nodes_of, batches_of, split, in_scope[s] - nodes_of[s])
                line = scope.graph.origin[node] if scope.graph.origin is not None else scope.node_lines.get(node)
                if line is not None:
                    reason += f"; recorded at {line}"
                singles.append(Single(k, node, sigs[s].describe(), reason))
    reports = []
    chains = graph_chains(scope.graph, scope.flushed)
    for s, rows in batches.items():
        sizes = [r[0] for r in rows]
        reports.append(SignatureReport(sigs[s].describe(), len(rows), sum(sizes), min(sizes),
                                       statistics.median(sizes), max(sizes), sum(r[1] for r in rows),
                                       sum(r[2] for r in rows), _seconds(r[3] for r in rows),
                                       _seconds(r[4] for r in rows), chains.get(s, 0), len(flushes_of[s])))
    reports.sort(key=lambda r: (-r.batches, -r.nodes))
    alike = defaultdict(list)
    for r in reports:
        alike[_PARAMETER_ID.sub("param", r.description)].append(r)
    apart = [ApartByParameters(d, len(rs), sum(r.batches for r in rs), sum(r.nodes for r in rs))
             for d, rs in alike.items() if len(rs) > 1]
    apart.sort(key=lambda a: (-a.signatures, -a.nodes))
    st = scope.stats
    return Explanation(st.nodes, st.batches, st.lower_bound, st.flushes, st.forced_flushes,
                       {"recording": st.record_seconds, "scheduling": st.schedule_seconds,
                        "executing": st.execute_seconds, "backward": st.backward_seconds},
                       reports, singles, apart, _failed(scope), _policy_counts(scope) if _spread(reports) else None,
                       _recording_hint(st, reports), _apart_by_shape(batches))


SHAPES_NAMED = 4    # an op, attributes and Parameters under this many shapes or more: by_shape names it


def _apart_by_shape(batches):
    """The ops that ran under SHAPES_NAMED or more shape sets of one rank, all else (dtypes
    too) alike."""
    sigs = signature.SIGS
    groups = defaultdict(list)
    for s in batches:
        sig = sigs[s]
        groups[(sig.op.name, sig.attrs, sig.params, sig.in_dtypes, tuple(map(len, sig.in_shapes)))].append(s)
    found = []
    for (name, _, _, _, ranks), members in groups.items():
        shape_sets = {sigs[s].in_shapes for s in members}   # two blocks of one class: a set once
        if len(shape_sets) < SHAPES_NAMED:
            continue
        axes = tuple(tuple(a for a in range(rank) if len({shapes[j][a] for shapes in shape_sets}) > 1)
                     for j, rank in enumerate(ranks))
        found.append(ApartByShape(name, len(shape_sets), sum(len(batches[s]) for s in members),
                                  sum(r[0] for s in members for r in batches[s]), axes))
    found.sort(key=lambda a: (-a.shapes, -a.nodes))
    return found


def _spread(reports):
    """The signatures one flush ran in more batches than their longest chain: the policy's
    order spread them, not their dependencies."""
    return [r for r in reports if r.flushes == 1 and 0 < r.chain < r.batches]


RECORDING_HINT_NODES = 500      # fewer nodes: the times are too small to tell


def _recording_hint(st, reports):
    """Advice where recording primitive ops, one Python call a node, took a third of the
    time or more (half as long as scheduling, running and backward together) and no block
    call ran: a hybridized block records its whole forward as one node a call."""
    work = st.schedule_seconds + st.execute_seconds + st.backward_seconds
    if st.nodes < RECORDING_HINT_NODES or 2 * st.record_seconds < work or any(
            r.description.startswith("block:") for r in reports):
        return None
    return (f"recording took {st.record_seconds:.4f} s, scheduling, running and backward {work:.4f} s: "
            f"{st.nodes} nodes, each one hb call. Writing the per-step computation (a cell) as a "
            f"HybridBlock and calling block.hybridize() records one node per call, and runs it fused (the "
            f"user guide's Blocks and granularity)")


QUICK_POLICIES = ("critical-path", "tail-last", "agenda", "depth", "greedy-frontier")


def _policy_counts(scope):
    """{policy: batches} over the scope's flushes for the quick built-in policies, the
    scope's own first; None where the scope's policy is not one of them (a learned or user
    policy, or search)."""
    own = next((name for name, p in POLICIES.items() if p is scope.policy), None)
    if own not in QUICK_POLICIES:
        return None
    names = [own] + [name for name in QUICK_POLICIES if name != own]
    return {name: sum(len(POLICIES[name](plan.view)[1]) - 1 for plan in scope.plans) for name in names}


def _failed(scope):
    plan = scope.failed_plan
    if plan is None:
        return None
    e = scope.failure
    return (f"flush {len(scope.plans)} raised {type(e).__name__}: {e}; its {plan.n_executed} nodes in "
            f"{plan.n_batches} batches are not counted above")


def _seconds(per_batch):
    """The sum of the batches' timed seconds; None where none was timed."""
    timed = [t for t in per_batch if t is not None]
    return sum(timed) if timed else None


def _why_alone(sig, nodes_of, batches_of, split, elsewhere):
    """Why a node of `sig` ran alone, from its flush's counts per recorded signature, the
    signature's nodes in the scope's other flushes, and what split them across flushes
    ("map": hb.map rounds, "read": reads of pending values, "flush": explicit flushes)."""
    op = sig.op
    if not op.batchable:
        return f"{op.name} never batches: each node runs alone (write it with hb ops to batch it)"
    if elsewhere and batches_of[sig.id] == 1:
        alone = f"the only such node in its flush, {elsewhere} more in other flushes"
        if split == "map":
            return (f"{alone}: each hb.map round's flush batches what its instances recorded since their "
                    f"last reads, so a step fewer instances reached, or what an instance recorded after its "
                    f"last read (its loss, say), runs in a small batch of its round (to batch such a tail "
                    f"across instances, return what it needs from the mapped function and compute it after "
                    f"hb.map)")
        if split == "read":
            return (f"{alone}, flushes that reads forced: reading a pending value mid-scope flushes what is "
                    f"recorded so far (record the whole minibatch first, or run instances through hb.map)")
        return f"{alone}: each flush runs only what was recorded before it"
    own = _own_signature(sig, nodes_of)
    if batches_of[sig.id] > 1:
        chain = (f"its signature ran in {batches_of[sig.id]} batches ({nodes_of[sig.id]} nodes) in this flush: "
                 f"its nodes depend on each other, or the policy ran them apart")
        # a signature that never batched (one chain, say one instance's shape) is also its own
        return chain if own is None or nodes_of[sig.id] > batches_of[sig.id] else f"{own}; and {chain}"
    return own or "the only node of its signature in the scope"


def _own_signature(sig, nodes_of):
    """What sets `sig` apart from the other signatures of its op in the flush (shapes,
    arity, Parameters, attributes), or None where it has no such neighbours."""
    op = sig.op
    others = [signature.SIGS[s] for s in nodes_of if s != sig.id and signature.SIGS[s].op.name == op.name]
    arity = [o for o in others if len(o.in_shapes) != len(sig.in_shapes)]
    shapes = [o for o in others if len(o.in_shapes) == len(sig.in_shapes) and o.in_shapes != sig.in_shapes]
    if shapes:
        seen = ", ".join(sorted({str(o.in_shapes) for o in shapes})[:3])
        return (f"a shape of its own: {op.name} also ran on {seen} in this flush (shapes never batch together: "
                f"pad to one length, or keep per-instance lengths as lists of vectors and use the list ops, "
                f"hb.softmax/hb.add_n/hb.max of a list)")
    if arity:
        seen = ", ".join(str(n) for n in sorted({len(o.in_shapes) for o in arity})[:5])
        return (f"an arity of its own ({len(sig.in_shapes)} operands): {op.name} also ran with {seen} in this "
                f"flush (each arity is a signature)")
    if any(o.attrs == sig.attrs for o in others):     # shapes and arity alike: the Parameters differ
        return (f"Parameters of its own: {op.name} also ran with other Parameters in this flush (a batch "
                f"shares its Parameters: each block instance, or each weight, runs in batches of its own)")
    if others:
        return (f"attributes of its own: {op.name} also ran with other attributes in this flush (a number "
                f"that is an op's attribute, such as a dropout rate, makes a signature per "
                f"value{_ATTRIBUTE_ADVICE.get(op.name, '')})")
    return None


_ATTRIBUTE_ADVICE = {"dropout": ": keep to a few rates"}


def _gathered(plan, arenas, b):
    """Bytes of operand rows batch b copied (rows taken by index; a slice is a view)."""
    g = plan.gathers
    total = 0
    for j in range(g.first[b], g.first[b + 1]):
        if g.kind[j] != SLICE:
            a = arenas[g.arena[j]]
            total += g.size[j] * a[0].nbytes if len(a) else 0
    return total


def _written(plan, arenas, b):
    """Bytes of output rows batch b wrote."""
    size = plan.sizes[b]
    return sum(size * arenas[a][0].nbytes for a, _ in plan.outs[b] if len(arenas[a]))
