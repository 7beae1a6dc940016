"""Tracing a hybrid block's forward into a Program, and running a Program batched.

A Program is the block's forward as straight-line primitive nodes over numbered slots
(its inputs first). It runs three ways: as ONE graph node whose kernel executes every step
on the stacked batch (block granularity, via the Composite op), replayed node by node into
a scope (op granularity: primitive ops batch across block boundaries), or replayed eagerly.
Tracing runs the Python forward once per input signature; later calls only replay.
"""
import itertools

import numpy as np

from ..runtime.autograd import accumulate_param, rows_named_by
from .distinct import DISTINCT, Distinct, keyed_part
from ..errors import HybridBatchError
from ..record.future import Future, maker
from ..kernels.fused import FusedRun, plan_units
from ..ops.affine_loss import fold_affine_losses
from ..ops.registry import ColumnGrad, Op
from ..ops.shape import Input, Output
from ..train.parameter import Parameter, by_id
from ..record import signature


_composite_ids = itertools.count(1 << 20)   # op ids for traced programs, apart from the primitive registry
INT = "int"   # an integer argument in a program's cache key
# Arguments that are flags, not values: forward gets each as it is, so it may test them
# (`mode == "train"`, `mask is None`; as placeholders both tests were silently False), and
# each value has its own trace.
STATIC = (str, type(None))
# Fuse elementwise runs of block programs into numba kernels (on by default: one pass over
# the gates instead of one numpy pass per op, and a backward without temporaries; measured
# in docs/architecture.md). `set_fusion(False)` runs every op through numpy instead.
FUSION = {"enabled": True}


def set_fusion(enabled: bool) -> None:
    """Run elementwise runs of hybridized blocks as fused numba kernels (block granularity)."""
    FUSION["enabled"] = bool(enabled)


class BlockInt:
    """Placeholder for the j-th integer argument of a block call being traced.

    It may only serve as an op's index (lookup row, pick index, label); each call's own
    integers then travel with its node, so calls with different integers still batch.
    """

    __slots__ = ("code",)

    def __init__(self, j):
        self.code = -2 - j

    def __repr__(self):
        """Which argument it stands for (for a debugger; str() and format() refuse)."""
        return f"BlockInt({-2 - self.code})"

    def _not_a_value(self, *other, **kwargs):
        """Its value differs per call, so forward cannot read it. Every use of the value
        raises, as int() does: a truth test, ==, <, a hash (a set or dict lookup matched no
        key) or text would pick one branch for every later call, arithmetic would compute
        with no value, and np.asarray (an operand such as `x * n`) would make an object array."""
        raise TypeError("an integer argument of a hybridized block can only be used as an op index "
                        "(hb.lookup, hb.pick, a label) inside forward; its value is not known "
                        "while tracing, so forward cannot branch on it, compute with it or print it")

    __index__ = __int__ = __float__ = __complex__ = __bool__ = __hash__ = __array__ = _not_a_value
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _not_a_value
    __str__ = __format__ = __bytes__ = _not_a_value
    __neg__ = __pos__ = __abs__ = __invert__ = __round__ = __trunc__ = __floor__ = __ceil__ = _not_a_value
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __matmul__ = __rmatmul__ = _not_a_value
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _not_a_value
    __divmod__ = __rdivmod__ = __pow__ = __rpow__ = __lshift__ = __rlshift__ = __rshift__ = _not_a_value
    __rrshift__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _not_a_value


def _int_column(code):
    return -code - 2 if code <= -2 else None


def _ancestors(steps, outputs):
    """Per output, the set of slots it depends on (itself included)."""
    reads = {slot: [r for r in refs if r is not None] for slot, _, refs, _ in steps}
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
    as exact zeros (W6's merge step divides, but its h is made from its c)."""
    return all(sig.op.zero_exact or all(slot in anc for anc in ancestors) for slot, sig, _, _ in steps)


def _int_checks(steps):
    """(integer column, inline bound or None, sig) per step that indexes with a call's integer."""
    return tuple((_int_column(aux), sig.op.aux_limit(sig), sig) for _, sig, _, aux in steps
                 if sig.op.uses_aux and _int_column(aux) is not None)


class Program:
    """Steps (slot, sig, operand slots per position (None for shared params), aux)."""

    def __init__(self, name, graph, n_inputs, outputs, container, n_ints):
        self.name = name
        self.n_ints = n_ints
        self.n_inputs = n_inputs
        self.n_slots = len(graph)
        self.in_types = tuple(graph.type[:n_inputs])
        self.consts = [(slot, value) for slot, value in graph.constants.items()]
        self.outputs = tuple(outputs)
        # a trace records ops (a nested block runs inline), so each of its calls is one node
        assert len(graph.sig) == len(graph), "a traced graph holds a multi-output call"
        steps = []
        for slot in range(n_inputs, len(graph)):
            sig = signature.SIGS[graph.sig[slot]]
            if not sig.op.executed:
                continue
            operands = iter(graph.args[(graph.arg_end[slot - 1] if slot else 0):graph.arg_end[slot]])
            refs = tuple(next(operands) if pid is None else None for pid in sig.params)
            steps.append((slot, sig, refs, graph.aux[slot]))
        # Only the steps whose values reach an output are kept: eager backward never visits a
        # dead one, and differentiated with a zero gradient its local derivative could be inf
        # (log at 0), putting 0 * inf = NaN into the live gradients it shares a fused run with.
        ancestors = _ancestors(steps, self.outputs)
        live = set().union(*ancestors)
        self.steps = [step for step in steps if step[0] in live]
        # every integer is checked, even one only a dead step reads: eager forward reads it
        self.int_checks = _int_checks(steps)
        self.dead_int_checks = _int_checks([step for step in steps if step[0] not in live])
        self.input_use = _input_use(ancestors, n_inputs)
        self.zero_seeds_exact = _zero_seeds_exact(self.steps, ancestors)
        self._wanted = {}
        self.origins = dict(enumerate(graph.origin or ()))     # slot -> its line in forward
        self.container = container      # None: forward returned one value; else tuple or list, as it did
        self.out_types = tuple(graph.type[o] for o in outputs)
        self.make_futures = maker(len(self.outputs), container)    # (scope, nid) -> a block call's Futures
        self._units = None
        self._keyed = {}     # per unit list (fused or not): its KeyedPart, or None
        self.op = Composite(self)
        self.op.id = next(_composite_ids)
        self.sig = signature.intern(self.op, (), self.in_types)   # one block call = one node
        self.extra_out_sigs = [signature.intern(Output, (j, t), ()) for j, t in enumerate(self.out_types) if j]

    # -- block granularity: all steps on the stacked batch --------------------------------
    def _aux(self, op, code, ints, size):
        if not op.uses_aux:
            return None
        j = _int_column(code)
        if j is None:
            return np.full(size, code, np.int64)
        return ints if ints.ndim == 1 else ints[:, j]

    def check_ints(self, ints, checks=None):
        """Validate a call's integers against every op that indexes with them (at record
        time), or against `checks`: a bound inline where the op has one, the op's own check
        otherwise."""
        for j, limit, sig in self.int_checks if checks is None else checks:
            v = ints[j]
            if limit is None or not 0 <= v < limit:
                sig.op.check_aux(sig, v)

    def units(self, xp):
        """Steps with elementwise runs fused and classifier losses folded (numpy backend,
        fusion on), planned once."""
        if xp is not np or not FUSION["enabled"]:
            return self.steps
        if self._units is None:
            self._units = plan_units(fold_affine_losses(self.steps, self.outputs), self.outputs)
        return self._units

    def keyed_part(self, units):
        """The part of `units` that runs once per distinct integer key (distinct.py), or None."""
        key = units is self.steps
        if key not in self._keyed:
            self._keyed[key] = keyed_part(units, self.outputs, _int_column)
        return self._keyed[key]

    def forward(self, xp, xs, size, ints=None, out=None):
        """(outputs, slot values) of the batch. out: per output, an array of its (size,) +
        shape that a fused run making that output writes straight into (the output is then
        that array); the caller copies the others."""
        vals = self._inputs(xp, xs, size, self.units(xp))
        todo = vals.units
        if xp is np and ints is not None and DISTINCT["enabled"]:
            part = self.keyed_part(todo)
            split = None if part is None else part.split(ints, size)
            if split is not None:
                first, inverse = split
                key_ints = ints[first]
                self._run(xp, part.keyed, vals, key_ints, len(first))
                vals.distinct = Distinct(part, first, inverse, key_ints, {s: vals[s] for s in part.boundary})
                vals.distinct.expand(vals)
                todo = part.rest
        into = {} if out is None else dict(zip(reversed(self.outputs), reversed(out)))   # first wins
        self._run(xp, todo, vals, ints, size, into)
        return tuple(vals[o] for o in self.outputs), vals

    def _run(self, xp, units, vals, ints, size, into=None):
        for unit in units:
            if isinstance(unit, FusedRun):
                self._forward_fused(xp, unit, vals, size, into)
            else:
                self._step(xp, unit, vals, ints, size)

    def first_nonfinite_step(self, xp, xs, ints=None):
        """(op name, line in the block's forward) of the first step whose value holds NaN or
        inf, the steps run one by one (unfused) on xs: check_numerics's pointer into a block."""
        size = xs[0].shape[0] if xs else len(ints)
        vals = self._inputs(xp, xs, size, self.steps)
        for step in self.steps:
            self._step(xp, step, vals, ints, size)
            if not xp.isfinite(vals[step[0]]).all():
                return step[1].op.name, self.origins.get(step[0], "<unknown>")
        return None

    def _inputs(self, xp, xs, size, units):
        """The slot values before the first step: inputs and constants."""
        vals = _Values([None] * self.n_slots)
        vals.units = units
        vals.distinct = None
        vals[:self.n_inputs] = xs
        for slot, value in self.consts:
            vals[slot] = xp.broadcast_to(value, (size,) + value.shape)
        return vals

    def _step(self, xp, step, vals, ints, size):
        slot, sig, refs, aux = step
        op = sig.op
        operands = [vals[r] if r is not None else by_id(pid).data for r, pid in zip(refs, sig.params)]
        vals[slot] = op.forward(xp, sig, operands, self._aux(op, aux, ints, size))

    @staticmethod
    def _fused_inputs(run, vals):
        """A run's kernel arguments: its slots' values, each (B, width) as the kernel indexes
        them (a run reads only vectors), and its parameters' data. A strided slot value (a
        column range of a block input) is copied to rows first: numba types it 'A' layout
        and its loops then run scalar, 10-20x slower than vectorized (W2's first LSTM step
        read its gates that way: 370 us a batch of 64 rows)."""
        return [np.ascontiguousarray(vals[key]) if kind == "slot" else by_id(key).data for kind, key in run.inputs]

    def _forward_fused(self, xp, run, vals, size, into=None):
        outs = [xp.empty((size, run.n), run.dtype) if not into or slot not in into else into[slot]
                for slot in run.outputs]
        run.forward_kernel(size, *self._fused_inputs(run, vals), *outs)
        for slot, out in zip(run.outputs, outs):
            vals[slot] = out

    def _backward_fused(self, xp, run, vals, grads, wanted):
        gys = [grads[s] for s in run.outputs]
        given = [g for g in gys if g is not None]
        if not given:
            return
        size = given[0].shape[0]
        read = tuple(g is not None for g in gys)
        kernel, reached = (run.backward_kernel, run.reached) if all(read) else run.backward_reading(read)
        gys = [xp.ascontiguousarray(given[0] if g is None else g) for g in gys]   # None's is never read
        ins = self._fused_inputs(run, vals)
        gins = [(xp.empty if once else xp.zeros)(x.shape, x.dtype) for x, once in zip(ins, run.write_once)]
        kernel(size, *ins, *gys, *gins)
        for (kind, key), g, used in zip(run.inputs, gins, reached):
            if not used:
                continue
            if kind == "param":
                accumulate_param(key, g)
            elif key in wanted:
                grads.add(key, g)

    def backward(self, xp, vals, gys, needs, ints=None):
        grads = _Grads(self.n_slots)
        for o, g in zip(self.outputs, gys):
            if g is not None:       # None: an output these rows do not read
                grads.add(o, g)
        wanted = self._wanted_slots(needs)
        distinct = vals.distinct
        if distinct is None:     # the forward's plan, even if fusion was toggled since
            self._backward_units(xp, vals.units, vals, grads, wanted, ints)
        else:
            self._backward_units(xp, distinct.part.rest, vals, grads, wanted, ints)
            distinct.sum_back(grads)
            key_vals = _Values(vals)
            for s, v in distinct.values.items():
                key_vals[s] = v
            with rows_named_by(distinct.first):     # keys are numbered in first-call order
                self._backward_units(xp, distinct.part.keyed, key_vals, grads, wanted, distinct.ints)
        return tuple(grads[i] if need else None for i, need in enumerate(needs))

    def _wanted_slots(self, needs):
        """The slots that take a gradient, as in eager mode: the inputs with needs[i] (not
        constants) and every value a step computes; not a constant made inside forward. So
        an op whose operands are all constants (a py_func without grad_fn on data) is never
        differentiated. Parameters go by their grad_req, step by step."""
        key = tuple(needs)
        wanted = self._wanted.get(key)
        if wanted is None:
            wanted = self._wanted[key] = frozenset(
                [i for i, need in enumerate(needs) if need] + [slot for slot, *_ in self.steps])
        return wanted

    def _backward_units(self, xp, units, vals, grads, wanted, ints):
        for unit in reversed(units):
            if isinstance(unit, FusedRun):
                self._backward_fused(xp, unit, vals, grads, wanted)
                continue
            slot, sig, refs, aux = unit
            gy = grads[slot]
            if gy is None:
                continue
            op = sig.op
            if op.add_grad is not None and refs[0] in wanted:   # a slice: add into its region
                first = op.columns(sig) if refs[0] < self.n_inputs and xp is np else None
                if first is not None and grads[refs[0]] is None:   # an input only sliced so far
                    grads.add(refs[0], ColumnGrad(first, gy, vals[refs[0]].shape[1]))
                else:
                    op.add_grad(sig, grads.buffer(xp, refs[0], vals[refs[0]]), gy)
                continue
            wants = [(r is not None and r in wanted) or (r is None and by_id(pid).grad_req != "null")
                     for r, pid in zip(refs, sig.params)]
            if not any(wants):
                continue
            operands = [vals[r] if r is not None else by_id(pid).data for r, pid in zip(refs, sig.params)]
            aux_arr = self._aux(op, aux, ints, gy.shape[0])
            for r, pid, want, g in zip(refs, sig.params, wants,
                                       op.backward(xp, sig, operands, aux_arr, vals[slot], gy, wants)):
                if not want or g is None:
                    continue
                if r is None:
                    accumulate_param(pid, g)
                else:
                    grads.add(r, g)

    # -- op granularity and eager: replay the steps as separate nodes ------------------
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
            j = _int_column(aux)
            vals[slot] = apply(sig.op, operands, sig.attrs, aux if j is None else ints[j])
        return self.structure([vals[o] for o in self.outputs])

    def structure(self, outs):
        return outs[0] if self.container is None else self.container(outs)


class _Values(list):
    """A program's slot values from one forward, with the units that computed them: backward
    follows the same plan (a fused run leaves its inner slots empty, and a bias folded into
    a run is missing from its affine's slot). distinct: the batch's Distinct where its keyed
    part ran once per key (its inner slots then hold one row per key), else None."""

    __slots__ = ("units", "distinct")


class _Grads:
    """Gradients of a program's slots. Arrays it allocated are updated in place; borrowed ones
    (the caller's output gradients, or an op returning its gy unchanged) are never written.
    An input that only one slice has reached holds a ColumnGrad, made dense if more comes."""

    def __init__(self, n):
        self.grads = [None] * n
        self.owned = set()

    def __getitem__(self, slot):
        return self.grads[slot]

    def add(self, slot, g):
        current = self.grads[slot]
        if current is None:
            self.grads[slot] = g
        elif slot in self.owned:
            current += g
        elif current.__class__ is ColumnGrad:
            self.own(slot, current.dense())
            self.grads[slot] += g
        else:
            self.grads[slot] = current + g
            self.owned.add(slot)

    def own(self, slot, g):
        """Set slot's gradient to g, an array this program made."""
        self.grads[slot] = g
        self.owned.add(slot)

    def buffer(self, xp, slot, like):
        """An owned gradient array for `slot`, to add into in place."""
        current = self.grads[slot]
        if current is None:
            current = xp.zeros(like.shape, like.dtype)
        elif current.__class__ is ColumnGrad:
            current = current.dense()
        elif slot not in self.owned:
            current = current.copy()
        self.grads[slot] = current
        self.owned.add(slot)
        return current


class Composite(Op):
    """A traced Program as one op: one graph node per block call, one kernel per batch."""

    saves = True
    writes_out = True
    cost = 1
    needs_batched = False

    def __init__(self, program):
        self.program = program
        self.name = f"block:{program.name}"
        self.n_out = len(program.outputs)
        self.zero_exact = program.zero_seeds_exact
        self.uses_aux = program.n_ints > 0
        self.aux_width = max(program.n_ints, 1)

    def infer(self, attrs, shapes, dtypes):
        return signature.TYPES[self.program.out_types[0]]

    def forward(self, xp, sig, xs, aux, out=None):
        outs, vals = self.program.forward(xp, xs, xs[0].shape[0] if xs else len(aux), aux, out)
        return (outs if self.n_out > 1 else outs[0]), vals

    def backward(self, xp, sig, xs, aux, y, gy, needs, saved=None):
        return self.program.backward(xp, saved, gy if self.n_out > 1 else (gy,), needs, aux)

    @staticmethod
    def saved_rows(saved, live):
        """The forward's values (each batch-first) for the batch rows in boolean mask `live`:
        a backward that reaches only some of the batch. Where rows shared keys, the values
        with one row per key keep the keys that live rows use."""
        distinct, inner, used = saved.distinct, (), None
        if distinct is not None:
            distinct, used = distinct.rows(live)
            inner = distinct.part.inner
        rows = _Values(v if v is None else v[used] if i in inner else v[live] for i, v in enumerate(saved))
        rows.units, rows.distinct = saved.units, distinct
        return rows


def trace(block, key, tracer):
    """Run block.forward once on placeholders recorded in `tracer` (a fresh scope).

    key: per argument, its type id, INT for an integer, the Parameter itself (baked in), or
    (STATIC, value) for a flag (a pair: the str "int" alone would read as INT).
    """
    inputs = []
    n_ints = 0
    for a in key:
        if isinstance(a, Parameter):
            inputs.append(a)
            continue
        if a is INT:
            inputs.append(BlockInt(n_ints))
            n_ints += 1
            continue
        if a.__class__ is tuple:
            inputs.append(a[1])
            continue
        sig = signature.intern(Input, (a,), ())
        tracer.graph.origin.append("<block input>")     # origins stay aligned with node ids
        inputs.append(Future(tracer, tracer.graph.add(sig.id, (sig.out_type,), (), -1)))
    n_inputs = len(tracer.graph)
    out = block.forward(*inputs)
    container = list if isinstance(out, list) else tuple if isinstance(out, tuple) else None
    outs = [out] if container is None else list(out)
    if not outs:
        raise HybridBatchError(f"{type(block).__name__}.forward must return at least one value")
    for o in outs:
        if not (isinstance(o, Future) and o.scope is tracer):
            raise HybridBatchError(f"{type(block).__name__}.forward must return values computed with hb ops "
                                   f"from its inputs (got {type(o).__name__})")
    return Program(type(block).__name__, tracer.graph, n_inputs, [o.id for o in outs], container, n_ints)
