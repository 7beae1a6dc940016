"""Tracing a hybrid block's forward into a Program, and running a Program batched.

A Program is the block's forward as straight-line primitive nodes over numbered slots
(its inputs first). It runs three ways: as ONE graph node whose kernel executes every step
on the stacked batch (block granularity, via the Composite op), replayed node by node into
a scope (op granularity: primitive ops batch across block boundaries), or replayed eagerly.
Tracing runs the Python forward once per input signature; later calls only replay.
"""
import numpy as np

from .autograd import accumulate_param
from .errors import HybridBatchError
from .future import Future
from .ops.registry import Op, OPS
from .ops.shape import Input
from .parameter import Parameter, by_id
from . import signature


class Program:
    """Steps (slot, sig, operand slots per position (None for shared params), aux)."""

    def __init__(self, name, graph, n_inputs, outputs, single):
        self.name = name
        self.n_inputs = n_inputs
        self.n_slots = len(graph)
        self.in_types = tuple(graph.type[:n_inputs])
        self.consts = [(slot, value) for slot, value in graph.constants.items()]
        self.steps = []
        for slot in range(n_inputs, len(graph)):
            sig = signature.SIGS[graph.sig[slot]]
            if not sig.op.executed:
                continue
            operands = iter(graph.args[(graph.arg_end[slot - 1] if slot else 0):graph.arg_end[slot]])
            refs = tuple(next(operands) if pid is None else None for pid in sig.params)
            self.steps.append((slot, sig, refs, graph.aux[slot]))
        self.outputs = tuple(outputs)
        self.single = single
        self.out_types = tuple(graph.type[o] for o in outputs)
        self.op = Composite(self)
        self.op.id = len(OPS)
        OPS.append(self.op)

    # -- block granularity: all steps on the stacked batch --------------------------------
    def forward(self, xp, xs, size):
        vals = [None] * self.n_slots
        vals[:self.n_inputs] = xs
        for slot, value in self.consts:
            vals[slot] = xp.broadcast_to(value, (size,) + value.shape)
        for slot, sig, refs, aux in self.steps:
            op = sig.op
            operands = [vals[r] if r is not None else by_id(pid).data for r, pid in zip(refs, sig.params)]
            vals[slot] = op.forward(xp, sig, operands, np.full(size, aux, np.int64) if op.uses_aux else None)
        return tuple(vals[o] for o in self.outputs), vals

    def backward(self, xp, vals, gys, needs):
        grads = [None] * self.n_slots
        for o, g in zip(self.outputs, gys):
            grads[o] = g if grads[o] is None else grads[o] + g
        const = {slot for slot, _ in self.consts}
        for slot, sig, refs, aux in reversed(self.steps):
            gy = grads[slot]
            if gy is None:
                continue
            op = sig.op
            wants = [(r is not None and r not in const) or (r is None and by_id(pid).grad_req != "null")
                     for r, pid in zip(refs, sig.params)]
            if not any(wants):
                continue
            operands = [vals[r] if r is not None else by_id(pid).data for r, pid in zip(refs, sig.params)]
            aux_arr = np.full(gy.shape[0], aux, np.int64) if op.uses_aux else None
            for r, pid, want, g in zip(refs, sig.params, wants,
                                       op.backward(xp, sig, operands, aux_arr, vals[slot], gy, wants)):
                if not want or g is None:
                    continue
                if r is None:
                    accumulate_param(pid, g)
                else:
                    grads[r] = g if grads[r] is None else grads[r] + g
        return tuple(grads[i] if need else None for i, need in enumerate(needs))

    # -- op granularity and eager: replay the steps as separate nodes ------------------
    def replay(self, apply, constant, inputs):
        """Run each step through `apply(op, operands, attrs, aux)`; returns output handles."""
        vals = [None] * self.n_slots
        vals[:self.n_inputs] = inputs
        for slot, value in self.consts:
            vals[slot] = constant(value)
        for slot, sig, refs, aux in self.steps:
            operands = [vals[r] if r is not None else by_id(pid) for r, pid in zip(refs, sig.params)]
            vals[slot] = apply(sig.op, operands, sig.attrs, aux)
        return self.structure([vals[o] for o in self.outputs])

    def structure(self, outs):
        return outs[0] if self.single else tuple(outs)


class Composite(Op):
    """A traced Program as one op: one graph node per block call, one kernel per batch."""

    saves = True
    cost = 1

    def __init__(self, program):
        self.program = program
        self.name = f"block:{program.name}"
        self.n_out = len(program.outputs)

    def infer(self, attrs, shapes, dtypes):
        return signature.TYPES[self.program.out_types[0]]

    def forward(self, xp, sig, xs, aux):
        outs, vals = self.program.forward(xp, xs, xs[0].shape[0])
        return (outs if self.n_out > 1 else outs[0]), vals

    def backward(self, xp, sig, xs, aux, y, gy, needs, saved=None):
        return self.program.backward(xp, saved, gy if self.n_out > 1 else (gy,), needs)


def trace(block, key, tracer):
    """Run block.forward once on placeholders recorded in `tracer` (a fresh scope).

    key: per argument, its type id, or the Parameter itself (baked into the program).
    """
    inputs = []
    for a in key:
        if isinstance(a, Parameter):
            inputs.append(a)
            continue
        sig = signature.intern(Input, (a,), ())
        inputs.append(Future(tracer, tracer.graph.add(sig.id, sig.out_type, 0, (), -1)))
    n_inputs = len(tracer.graph)
    out = block.forward(*inputs)
    single = not isinstance(out, (tuple, list))
    outs = [out] if single else list(out)
    for o in outs:
        if not (isinstance(o, Future) and o.scope is tracer):
            raise HybridBatchError(f"{type(block).__name__}.forward must return values computed with hb ops "
                                   f"from its inputs (got {type(o).__name__})")
    return Program(type(block).__name__, tracer.graph, n_inputs, [o.id for o in outs], single)
