"""Eager mode: outside a batching scope every op runs at once on one instance.

This is the unbatched baseline. It calls the same op kernels with a batch of one, and keeps
a tape (each Tensor holds its operands) for reverse mode, freed with the Tensors.
"""
import numpy as np

from ..runtime.autograd import PARTIAL_BACKWARD, SECOND_BACKWARD, accumulate_param, check_unchanged
from ..errors import BackwardError, ScopeError
from .future import Future
from ..ops.shape import Input, ParamRead
from ..train.parameter import Parameter
from ..runtime import backend
from . import signature


class Tensor:
    """A computed value of one instance: `value` has a leading batch axis of one. Ops
    called outside a batching scope return Tensors, computed at once (eager mode), with
    the same reads and backward() as a Future: the same model code runs either way.

    >>> x = hb.tanh(hb.array([0.0, 1.0]))
    >>> x
    Tensor(shape=(2,), dtype=float32)
    >>> x.asnumpy().round(3), float(hb.sum(x)) > 0.7
    (array([0.   , 0.762], dtype=float32), True)
    """

    __slots__ = ("value", "sig", "inputs", "aux", "versions", "_graph_spent", "__weakref__")

    def __init__(self, value, sig, inputs=(), aux=-1, versions=()):
        self.value = value
        self.sig = sig
        self.inputs = inputs
        self.aux = aux
        self.versions = versions    # the versions of the Parameters in inputs, in order, when read

    shape = property(lambda self: self.sig.out_shape)
    dtype = property(lambda self: self.sig.out_dtype)
    ndim = property(lambda self: len(self.sig.out_shape))
    size = Future.size

    __len__ = Future.__len__       # the same rule, 0-d values included

    def asnumpy(self):
        """The value, as a new numpy array."""
        return backend.to_numpy(self.value[0]).copy()

    # reads of the numbers, as a Future's (a Tensor's are computed already); bool is numpy's
    # truth value: without it Python fell back to __len__ (a [0.0] was True)
    item, __float__, __int__, __bool__, __array__, __format__, __round__ = (
        Future.item, Future.__float__, Future.__int__, Future.__bool__, Future.__array__, Future.__format__,
        Future.__round__)

    def backward(self, retain_graph=False):
        """As Future.backward: once, unless the call before passed retain_graph=True."""
        backward(self, retain_graph)

    def __repr__(self):
        return f"Tensor(shape={self.shape}, dtype={self.dtype.name})"


def constant(value) -> Tensor:
    refuse_held_values(value)
    if isinstance(value, Tensor) and (source := trainable_source(value)) is not None:
        raise TypeError(f"this Tensor was computed from Parameter {source.name!r}: as a constant (hb.array) its "
                        f"gradient would be lost; use the Tensor itself, or pass t.asnumpy() for a constant")
    value = backend.to_array(value)
    tid = signature.type_id(value.shape, value.dtype)
    return Tensor(value[None], signature.intern(Input, (tid,), ()))


def apply(op, args, attrs=(), aux=-1) -> Tensor:
    codes, xs, inputs, versions = [], [], [], []
    for a in args:
        if isinstance(a, Parameter):
            codes.append(-a.pid - 1)
            xs.append(a.data)
            versions.append(a.version)
        else:
            if not isinstance(a, Tensor):
                if isinstance(a, Future):
                    raise ScopeError("a Future is used outside its batching scope; read it with "
                                     ".asnumpy() and pass the array instead")
                a = constant(a)
            codes.append(a.sig.out_type)
            xs.append(a.value)
        inputs.append(a)
    if op.needs_batched and all(c < 0 for c in codes):
        inputs[0] = apply(ParamRead, (inputs[0],), (), 0)
        del versions[0]     # the read's Tensor holds it
        codes[0], xs[0] = inputs[0].sig.out_type, inputs[0].value
    sig = signature.intern(op, attrs, tuple(codes))
    aux_arr = None
    if op.uses_aux:
        aux = op.index(aux)
        op.check_aux(sig, aux)
        if aux < 0 and sig.aux_limit > 0:     # accepted: an index counting from the end
            aux += sig.aux_limit
        aux_arr = np.array([aux], np.int64)
    y = op.forward(backend.xp(), sig, xs, aux_arr)
    if getattr(y, "base", None) is not None and any(c < 0 and backend.xp().may_share_memory(y, x)
                                                    for c, x in zip(codes, xs)):
        y = y.copy()    # a view of a Parameter (W[0]) would change with its next update
    return Tensor(y, sig, tuple(inputs), aux, versions)


def _topological(root):
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        t, done = stack.pop()
        if done:
            order.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        stack.extend((u, False) for u in t.inputs if isinstance(u, Tensor) and id(u) not in seen)
    return order


def refuse_held_values(value):
    """A list or tuple holding a Future, Tensor or Parameter would be read by np.asarray
    into a constant array, with no gradient to what computed its entries: a TypeError."""
    if isinstance(value, (list, tuple)) and _holds_values(value):
        raise TypeError("a list or tuple holding recorded values would become a constant array, with no "
                        "gradient to what computed them; pass the values as separate arguments, or combine "
                        "them with hb.concat")


def _holds_values(a):
    return isinstance(a, (Future, Tensor, Parameter)) or (
        isinstance(a, (list, tuple)) and any(_holds_values(b) for b in a))


def trainable_source(t: Tensor):
    """The first Parameter with a gradient that t was computed from, or None: a scope that
    took t as a constant would lose the gradient into it."""
    for u in _topological(t):
        for v in u.inputs:
            if isinstance(v, Parameter) and v.grad_req != "null":
                return v
    return None


def backward(root: Tensor, retain_graph=False):
    """Reverse mode from a scalar Tensor, accumulating into Parameter.grad."""
    if root.shape != ():
        raise ValueError(f"backward() needs a scalar; this value has shape {root.shape}")
    spent = getattr(root, "_graph_spent", False)     # unset until a backward() without retain_graph
    if spent:
        raise BackwardError(PARTIAL_BACKWARD if spent == "part" else SECOND_BACKWARD)
    xp = backend.xp()
    order = _topological(root)
    for t in order:
        if t.versions:
            check_unchanged(zip([u for u in t.inputs if isinstance(u, Parameter)], t.versions))
    try:
        _reverse(xp, root, order)
    except BaseException as e:
        root._graph_spent = "part"
        e.add_note(PARTIAL_BACKWARD)
        raise
    if not retain_graph:
        root._graph_spent = True


def _reverse(xp, root, order):
    """The chain rule over `order` (root's graph, inputs first), into Parameter.grad."""
    grads = {id(root): xp.ones_like(root.value)}
    for t in reversed(order):
        gy = grads.pop(id(t), None)
        op = t.sig.op
        if gy is None or not op.executed:
            continue
        needs = [isinstance(u, Tensor) and u.sig.op.executed or (isinstance(u, Parameter) and u.grad_req != "null")
                 for u in t.inputs]
        if not any(needs):
            continue
        xs = [u.data if isinstance(u, Parameter) else u.value for u in t.inputs]
        aux = np.array([t.aux], np.int64) if op.uses_aux else None
        for u, need, g in zip(t.inputs, needs, op.backward(xp, t.sig, xs, aux, t.value, gy, needs)):
            if not need:
                continue
            if isinstance(u, Parameter):
                accumulate_param(u.pid, g)
            elif id(u) in grads:
                grads[id(u)] = grads[id(u)] + g
            else:
                grads[id(u)] = g
