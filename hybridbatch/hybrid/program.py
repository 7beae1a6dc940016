"""The Program: a traced block forward as straight-line primitive steps over numbered slots.

Slots number the values of one call: the block's inputs first, then constants and step
results. A Program runs three ways: as ONE graph node per call whose Composite op executes
every step on the stacked batch (block granularity, composite.py), replayed step by step
into a scope (op granularity: primitive ops batch across block boundaries), or replayed
eagerly. It keeps only the steps whose values reach an output.
"""
from dataclasses import InitVar, dataclass
from typing import NamedTuple

import numpy as np

from ..ops.random import next_keys, replay_draws
from ..record import signature
from ..record.future import future_of, maker
from ..record.scope import caller
from ..record.signature import Signature
from ..train.parameter import by_id
from .arguments import int_column
from .composite import Composite


class StepByStep(Exception):
    """A call's negative integer names different indices for the ops it reaches (a table's
    row and a shorter vector's element): the call is recorded step by step instead."""


class Step(NamedTuple):
    """One primitive op of a program: `slot = sig.op(operands)`."""

    slot: int             # the slot it writes
    sig: Signature        # op, attrs, operand types; sig.params names the shared Parameters
    refs: tuple           # per operand position, the slot it reads, or None for a shared Parameter
    aux: int              # the op's integer: a constant, or -2 - j for the call's j-th (int_column)


def _ancestors(steps, outputs):
    """Per output, the set of slots it depends on (itself included)."""
    reads = {step.slot: [r for r in step.refs if r is not None] for step in steps}
    found = []
    for out in outputs:
        todo, seen = [out], set()
        while todo:
            slot = todo.pop()
            if slot not in seen:
                seen.add(slot)
                todo += reads.get(slot, ())
        found.append(seen)
    return found


def _input_use(ancestors, n_inputs):
    """(n_outputs, n_inputs) bools: which block inputs each output depends on; None when every
    output depends on every input. Backward marks a call's input as reached only through the
    outputs it reaches, as eager mode visits only the ops on a path to the seed."""
    use = np.array([[i in anc for i in range(n_inputs)] for anc in ancestors], np.bool_)
    return None if use.all() else use.reshape(len(ancestors), n_inputs)


def _zero_seeds_exact(steps, ancestors):
    """Whether a zero gradient for the outputs a row does not read is exact (short of an
    overflow): every step that is not zero_exact feeds every output. Such a step then always
    gets a read output's gradient too, and the zeros reach it only through zero_exact steps,
    as exact zeros (a lattice LSTM's merge step divides, but its h is made from its c)."""
    return all(step.sig.op.zero_exact or all(step.slot in anc for anc in ancestors) for step in steps)


def _int_checks(steps):
    """(integer column, inline bound or None, sig) per step that indexes with a call's integer."""
    return tuple((int_column(step.aux), step.sig.op.aux_limit(step.sig), step.sig) for step in steps
                 if step.sig.op.uses_aux and int_column(step.aux) is not None)


@dataclass(eq=False, repr=False)
class Program:
    """A traced block forward: its steps, and what recording one call of it needs.

    steps: every Step the trace recorded, in order (the dead ones are dropped here); consts:
    (slot, value) of the constants made inside forward; outputs: the slots forward returned,
    as one value (container None) or a tuple or list (container); origins: slot -> its line
    in forward; owner: the HybridBlock traced.
    """

    name: str
    steps: list
    n_inputs: int
    n_slots: int
    in_types: tuple
    consts: list
    outputs: tuple
    out_types: tuple
    container: type | None
    n_ints: int             # integer columns per call: its integer arguments, then n_draws keys
    n_draws: int            # random keys a call draws (hb.dropout inside forward)
    draw_events: tuple | None   # how it draws them where an hb.map inside split streams (draw_keys)
    origins: dict
    owner: InitVar

    def __post_init__(self, owner):
        # Only the steps whose values reach an output are kept: eager backward never visits a
        # dead one, and differentiated with a zero gradient its local derivative could be inf
        # (log at 0), putting 0 * inf = NaN into the live gradients it shares a fused run with.
        steps, outputs = self.steps, self.outputs
        ancestors = _ancestors(steps, outputs)
        live = set().union(*ancestors)
        self.steps = [step for step in steps if step.slot in live]
        # every integer is checked, even one only a dead step reads: eager forward reads it
        self.int_checks = _int_checks(steps)
        self.dead_int_checks = _int_checks([step for step in steps if step.slot not in live])
        self.input_use = _input_use(ancestors, self.n_inputs)
        self.zero_seeds_exact = _zero_seeds_exact(self.steps, ancestors)
        self.make_futures = maker(len(outputs), self.container)    # (scope, nid) -> a block call's Futures
        # per step, what appending its node to a scope's graph needs (record_into)
        self.node_steps = tuple((step.slot, step.sig.id, step.sig.out_type, tuple(r for r in step.refs if r is not None),
                                 step.aux, int_column(step.aux)) for step in self.steps)
        # every Parameter a step reads, a block made inside forward's too; the program lives
        # with its block and the scopes that recorded it, not with its interned signature
        self.params = {pid: by_id(pid) for step in self.steps for pid in step.sig.params if pid is not None}
        self.looked_up = {}     # Composite.with_input_looked_up's answers, with the programs they run
        for step in self.steps:
            if step.sig.op.holds_aux:
                step.sig.op.keep_aux(self, step.aux)
        # a call takes from the random stream where it draws keys, or where an hb.map inside
        # splits the stream (one key) though no instance draws
        self.draws = self.n_draws > 0 or self.draw_events is not None
        self.op = Composite(self, owner)
        self.sig = signature.intern(self.op, (), self.in_types)   # one block call = one node
        self.sig_id = self.sig.id      # what recording a call appends

    def draw_keys(self):
        """A call's random keys, drawn as the plain forward draws them: the next n_draws of
        the current stream, or, where an hb.map inside gave its instances streams of their
        own, by replaying the trace's draw events."""
        if self.draw_events is None:
            return next_keys(self.n_draws)
        return replay_draws(self.draw_events)

    def check_ints(self, ints, checks=None):
        """Validate a call's integers against every op that indexes with them (at record
        time), or against `checks`: a bound inline where the op has one, the op's own check
        otherwise."""
        for j, limit, sig in self.int_checks if checks is None else checks:
            v = ints[j]
            if limit is None or not 0 <= v < limit:
                sig.op.check_aux(sig, v)
                if v < 0 and limit and checks is None:
                    ints[j] = self._counted_from_end(j, v)

    def _counted_from_end(self, j, v):
        """Integer argument j's negative value v, which its ops accepted, as the index >= 0
        it names: one axis length for all its ops, or v as it is where every op reads it from
        the end itself (pick). Ops over axes of different lengths need different values, which
        one integer of the call cannot carry: StepByStep."""
        readers = [(limit, sig) for k, limit, sig in self.int_checks if k == j]
        lengths = {limit for limit, _ in readers}
        if len(lengths) == 1:
            return v + lengths.pop()
        if all(sig.op.aux_from_end for _, sig in readers):
            return v
        raise StepByStep

    def record_steps(self, scope, ids, ints):
        """A call recorded step by step through scope.record, each op taking the call's
        integers its own way (after StepByStep)."""
        return self.replay(scope.record, scope.constant, [future_of(scope, i) for i in ids], ints)

    # -- op granularity and eager: replay the steps as separate nodes ------------------
    def record_into(self, scope, ids, ints=()):
        """Op granularity's replay into `scope` (open, not tracing): each step's node
        appended to the graph with the signature the trace interned, which the operands'
        types (the program's key) give again, so none of `record`'s per-operand checks and
        lookups run. ids: the inputs' node ids. Returns the outputs' Futures."""
        if ints:
            try:
                self.check_ints(ints)       # int_checks holds the dead steps' too
            except StepByStep:
                return self.record_steps(scope, ids, ints)
        g = scope.graph
        types, sigs, auxs, args, arg_end = g.type, g.sig, g.aux, g.args, g.arg_end
        vals = [None] * self.n_slots
        vals[:self.n_inputs] = ids
        for slot, value in self.consts:
            vals[slot] = scope.constant(value).id
        if g.origin is not None:        # check_numerics: the call's line and each step's in forward
            line = caller()
            g.origin.extend([f"{line} (inside {self.name}, at {self.origins.get(slot, '<unknown>')})"
                             for slot, *_ in self.node_steps])
        for slot, sig, out_type, refs, aux, j in self.node_steps:
            vals[slot] = len(types)
            sigs.append(sig)
            types.append(out_type)
            auxs.append(aux if j is None else ints[j])
            args.extend([vals[r] for r in refs])
            arg_end.append(len(args))
        outs = [future_of(scope, vals[o]) for o in self.outputs]
        return outs[0] if self.container is None else self.container(outs)

    def replay(self, apply, constant, inputs, ints=()):
        """Run each step through `apply(op, operands, attrs, aux)`; returns output handles."""
        if ints and self.dead_int_checks:      # the live steps' ops check their own
            self.check_ints(ints, self.dead_int_checks)
        vals = [None] * self.n_slots
        vals[:self.n_inputs] = inputs
        for slot, value in self.consts:
            vals[slot] = constant(value)
        for slot, sig, refs, aux in self.steps:
            operands = [vals[r] if r is not None else by_id(pid) for r, pid in zip(refs, sig.params)]
            j = int_column(aux)
            vals[slot] = apply(sig.op, operands, sig.attrs, aux if j is None else ints[j])
        outs = [vals[o] for o in self.outputs]
        return outs[0] if self.container is None else self.container(outs)


def with_input_looked_up(program, position, lookup_sig):
    """`program` with its input `position` computed inside: a first step `lookup(table, j)`,
    j a new last integer argument (lookup_sig names the table). The runtime runs a batch of
    calls that all read a lookup there this way (runtime/plan.py), so that the block's part
    that depends only on the word runs once per distinct word (distinct.py).

    Inputs after `position` move down one slot; the freed slot n_inputs - 1 holds the
    looked-up row. Other slots keep their numbers."""
    n = program.n_inputs
    row = n - 1

    def moved(s):
        if s is None or s >= n:
            return s
        return row if s == position else s - (s > position)

    steps = [Step(row, lookup_sig, (None,), -2 - program.n_ints)]
    steps += [step._replace(refs=tuple(moved(r) for r in step.refs)) for step in program.steps]
    return Program(name=program.name, steps=steps, n_inputs=n - 1, n_slots=program.n_slots,
                   in_types=program.in_types[:position] + program.in_types[position + 1:],
                   consts=program.consts, outputs=tuple(moved(o) for o in program.outputs),
                   out_types=program.out_types, container=program.container, n_ints=program.n_ints + 1,
                   n_draws=program.n_draws, draw_events=program.draw_events,
                   origins={moved(s): o for s, o in program.origins.items()}, owner=program.op.owner_block)
