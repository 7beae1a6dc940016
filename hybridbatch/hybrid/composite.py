"""The Composite op: a traced Program as one graph node per block call, one kernel per batch.

A batch of calls runs every step of the program on the stacked inputs (block granularity):
the steps as `passes.lower` rewrote them (numpy, fusion on), the part that depends on one
integer argument once per distinct value (distinct.py); backward walks the same units in
reverse. While a fused run's kernels still compile, a batch runs the program's plain steps
(as with fusion off), forward and backward. The runtime asks the op, not the program, what it needs
(Op.extra_out_sigs, input_use, owner_block, params_used, locate_nonfinite).
"""
import itertools
import weakref

import numpy as np

from ..kernels import fused
from ..kernels.fused import FusedRun
from ..ops.registry import ColumnGrad, Op
from ..ops.shape import Output
from ..record import signature
from ..runtime.autograd import accumulate_param, rows_named_by
from ..train.parameter import by_id
from .arguments import int_column
from ..config import settings
from .distinct import Distinct, keyed_part
from .passes import lower

_ids = itertools.count(1 << 20)   # op ids for traced programs, apart from the primitive registry


class Composite(Op):
    """A traced Program as one op: one graph node per block call, one kernel per batch."""

    saves = True
    writes_out = True
    cost = 1
    needs_batched = False

    def __init__(self, program, owner):
        self._program = weakref.ref(program)     # weak, as the block: both outlive no scope that needs them
        self.id = next(_ids)
        self.name = f"block:{program.name}"
        self.n_out = len(program.outputs)
        self.zero_exact = program.zero_seeds_exact
        self.uses_aux = program.n_ints > 0
        self.aux_width = max(program.n_ints, 1)
        self.input_use = program.input_use
        self._owner = weakref.ref(owner)     # weak: interned with the signature, it must not keep the block
        self.extra_out_sigs = [signature.intern(Output, (j, t), ())
                               for j, t in enumerate(program.out_types) if j]
        self._units = None
        self._fused_ready = False   # every fused run of the lowered units has its kernels
        self._keyed = {}     # per unit list (fused or not): its KeyedPart, or None
        self._wanted = {}    # per needs tuple: the slots that take a gradient (_wanted_slots)

    def infer(self, attrs, shapes, dtypes):
        return signature.TYPES[self.program.out_types[0]]

    @property
    def program(self):
        """The traced Program this op runs. Interned with its signature for the life of the
        process, the op holds it weakly: its block holds it, and so does every scope that
        recorded a call of it (scope.programs), so a model let go is collected."""
        return self._program()

    @property
    def owner_block(self):
        """The HybridBlock whose forward this runs, or None once it is collected."""
        return self._owner()

    def params_used(self, sig):
        return list(self.program.params)

    def units(self, xp):
        """The program's steps as they run on `xp`: lowered (numpy backend, fusion on), once;
        the fused runs' kernels then load or start compiling (kernels/fused.py, `Kernels`)."""
        if xp is not np or not settings.fusion:
            return self.program.steps
        if self._units is None:
            units = lower(self.program.steps, self.program.outputs)
            fused.prepare(units, self.name)
            self._units = units
        return self._units

    def keyed_part(self, units):
        """The part of `units` that runs once per distinct integer key (distinct.py), or None."""
        key = units is self.program.steps
        if key not in self._keyed:
            self._keyed[key] = keyed_part(units, self.program.outputs)
        return self._keyed[key]

    def with_input_looked_up(self, sig, position, lookup_sig):
        """Op.with_input_looked_up: the program with that input looked up inside
        (program.with_input_looked_up), where its per-word part then holds a product and this
        program has none keyed already (its own stays whole); None otherwise. Once per
        (position, table, fusion setting)."""
        key = (position, lookup_sig.id, settings.fusion)
        program = self.program
        if key not in program.looked_up:
            from .program import with_input_looked_up      # program.py imports this module
            found = None
            if self.keyed_part(self.units(np)) is None:
                folded = with_input_looked_up(program, position, lookup_sig)
                part = folded.op.keyed_part(folded.op.units(np))
                if part is not None and part.column == folded.n_ints - 1:
                    found = folded
            program.looked_up[key] = found          # the folded program lives as long as this one
        found = program.looked_up[key]
        return None if found is None else found.sig

    # -- forward ------------------------------------------------------------------------
    def forward(self, xp, sig, xs, aux, out=None):
        """(the output, or a tuple of them; the slot values) of the batch. out: per output,
        an array of its (size,) + shape that a fused run making that output writes straight
        into (the output is then that array); the caller copies the others."""
        size = xs[0].shape[0] if xs else len(aux)
        outputs = self.program.outputs
        vals = self._inputs(xp, xs, size, self._batch_units(xp))
        todo = vals.units
        if xp is np and aux is not None and settings.distinct_rows:
            part = self.keyed_part(todo)
            split = None if part is None else part.split(aux, size)
            if split is not None:
                first, inverse = split
                key_ints = aux[first]
                self._run(xp, part.keyed, vals, key_ints, len(first))
                vals.distinct = Distinct(part, first, inverse, key_ints, {s: vals[s] for s in part.boundary})
                vals.distinct.expand(vals)
                todo = part.rest
        into = {} if out is None else dict(zip(reversed(outputs), reversed(out)))   # first wins
        self._run(xp, todo, vals, aux, size, into)
        return (tuple(vals[o] for o in outputs) if self.n_out > 1 else vals[outputs[0]]), vals

    def _batch_units(self, xp):
        """units(xp), or the program's plain steps while a fused run's kernels still compile,
        as with fusion off: the lowered steps run one by one (a run's bias added apart) made
        a new cell's first minibatches some 4% slower."""
        units = self.units(xp)
        if self._fused_ready or units is self.program.steps:
            return units
        if all(u.kernels.ready or u.kernels.available() for u in units if isinstance(u, FusedRun)):
            self._fused_ready = True
            return units
        return self.program.steps

    def _run(self, xp, units, vals, ints, size, into=None):
        for unit in units:
            if isinstance(unit, FusedRun):
                self._forward_fused(xp, unit, vals, size, into)
            else:
                self._step(xp, unit, vals, ints, size)

    def locate_nonfinite(self, xp, sig, xs, aux, row):
        """(op name, line in the block's forward) of the first step whose value holds NaN or
        inf on batch row `row`, the steps run one by one (unfused): check_numerics's pointer
        into a block."""
        xs = [x[row:row + 1] for x in xs]
        ints = None if aux is None else aux[row:row + 1]
        steps = self.program.steps
        vals = self._inputs(xp, xs, 1, steps)
        for step in steps:
            self._step(xp, step, vals, ints, 1)
            if not xp.isfinite(vals[step.slot]).all():
                return step.sig.op.name, self.program.origins.get(step.slot, "<unknown>")
        return None

    def _inputs(self, xp, xs, size, units):
        """The slot values before the first step: inputs and constants."""
        program = self.program
        vals = _Values([None] * program.n_slots)
        vals.units = units
        vals.distinct = None
        vals[:program.n_inputs] = xs
        for slot, value in program.consts:
            vals[slot] = xp.broadcast_to(value, (size,) + value.shape)
        return vals

    @staticmethod
    def _aux(op, code, ints, size):
        if not op.uses_aux:
            return None
        j = int_column(code)
        if j is None:
            return np.full(size, code, np.int64)
        return ints if ints.ndim == 1 else ints[:, j]

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
        and its loops then run scalar, 10-20x slower than vectorized (a BiLSTM tagger's first step
        read its gates that way: 370 us a batch of 64 rows)."""
        return [np.ascontiguousarray(vals[key]) if kind == "slot" else by_id(key).data for kind, key in run.inputs]

    def _forward_fused(self, xp, run, vals, size, into=None):
        outs = [xp.empty((size, run.n), run.dtype) if not into or slot not in into else into[slot]
                for slot in run.outputs]
        run.forward_kernel(size, *self._fused_inputs(run, vals), *outs)
        for slot, out in zip(run.outputs, outs):
            vals[slot] = out

    @staticmethod
    def _run_inputs(run, vals):
        """The slot values a run's steps read: vals, with the bias that the run adds where it
        reads a product (`fused.plan_units`) added."""
        local = _Values(vals)
        for slot, pid in run.biases.items():
            local[slot] = vals[slot] + by_id(pid).data
        return local

    # -- backward -----------------------------------------------------------------------
    def backward(self, xp, sig, xs, aux, y, gy, needs, saved=None):
        vals = saved
        grads = _Grads(self.program.n_slots)
        for o, g in zip(self.program.outputs, gy if self.n_out > 1 else (gy,)):
            if g is not None:       # None: an output these rows do not read
                grads.add(o, g)
        wanted = self._wanted_slots(needs)
        distinct = vals.distinct
        if distinct is None:     # the forward's plan, even if fusion was toggled since
            self._backward_units(xp, vals.units, vals, grads, wanted, aux)
        else:
            self._backward_units(xp, distinct.part.rest, vals, grads, wanted, aux)
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
                [i for i, need in enumerate(needs) if need] + [step.slot for step in self.program.steps])
        return wanted

    def _backward_fused(self, xp, run, vals, grads, wanted):
        gys = [grads[s] for s in run.outputs]
        given = [g for g in gys if g is not None]
        if not given:
            return
        size = given[0].shape[0]
        read = tuple(g is not None for g in gys)
        use = run if all(read) else run.backward_reading(read)
        if not (use.kernels.ready or use.kernels.available()):
            self._backward_unfused(xp, run, vals, grads, wanted, size)
            return
        kernel, reached = use.backward_kernel, use.reached
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

    def _backward_unfused(self, xp, run, vals, grads, wanted, size):
        """A run's backward step by step where the kernel for the outputs these rows read
        is still compiling: its forward recomputed from its inputs, as its kernel does, its
        steps differentiated as unfused ones, each input's gradient (and a bias's, summed
        over rows) added where the kernel would add it."""
        local = self._run_inputs(run, vals)
        for step in run.steps:
            self._step(xp, step, local, None, size)
        inner = _Grads(len(vals))
        for slot in run.outputs:
            if grads[slot] is not None:
                inner.add(slot, grads[slot])
        self._backward_units(xp, run.steps, local, inner, wanted, None)
        for kind, slot in run.inputs:
            g = inner[slot] if kind == "slot" else None
            if g is None:
                continue
            if g.__class__ is ColumnGrad:
                g = g.dense()
            if slot in run.biases:
                accumulate_param(run.biases[slot], g.sum(axis=0))
            if slot in wanted:
                grads.add(slot, g)

    def _backward_units(self, xp, units, vals, grads, wanted, ints):
        n_inputs = self.program.n_inputs
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
                first = op.columns(sig) if refs[0] < n_inputs and xp is np else None
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
