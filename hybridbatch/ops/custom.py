"""User functions as ops: arbitrary per-instance numpy code, run one node at a time.

A node's functions are its data, not its signature's: each node's integer is a handle to
its (fn, grad_fn). A function made per call (a lambda written in forward, a closure over
the instance) then shares one signature, where one signature per function object grew the
signature table, and the plan cache's keys, for as long as the process ran. A handle lives
while anything that may run its node does: the scope's graph that recorded it, a traced
block's program, an eager Tensor (`keep`).
"""
import functools
import itertools
import threading
import weakref

import numpy as np

from .registry import Op, register

_functions = {}          # handle -> [fn, grad_fn, holders]
_handles = itertools.count()
_lock = threading.Lock()     # a traced program's handle is kept by scopes of several threads


def hold(fn, grad_fn):
    """A new handle for (fn, grad_fn), held once by the caller, who lets go with `drop`
    once the node's owners `keep` it."""
    h = next(_handles)
    _functions[h] = [fn, grad_fn, 1]
    return h


def keep(owner, h):
    """Hold handle h until `owner` (a Graph, Program or Tensor) is collected."""
    with _lock:
        _functions[h][2] += 1
    weakref.finalize(owner, drop, h)


def drop(h):
    with _lock:
        entry = _functions[h]
        entry[2] -= 1
        if not entry[2]:
            del _functions[h]


@register
class PyFunc(Op):
    """attrs = (fn's name, out_shape, out_dtype); each node's integer is its handle (above).
    Unbatchable: fn sees one instance.

    fn(*xs) -> y per instance; grad_fn(*xs, y, gy) -> tuple of per-operand gradients.
    """
    name = "py_func"
    batchable = False
    cost = 1
    uses_aux = True
    holds_aux = True

    def infer(self, attrs, shapes, dtypes):
        return attrs[1], attrs[2]

    def check_aux(self, sig, aux):
        """Recorded into a scope (directly, in a trace, or replayed from one): its graph
        keeps the functions."""
        from ..record.scope import current      # record imports the ops
        scope = current()
        if scope is not None:
            keep(scope.graph, aux)

    @staticmethod
    def keep_aux(owner, aux):
        """A traced program's step: the program keeps its functions."""
        keep(owner, aux)

    def forward(self, xp, sig, xs, aux):
        rows = []
        for b, h in enumerate(aux.tolist()):
            fn = _functions[h][0]
            r = xp.asarray(fn(*_row(xs, sig, b)), dtype=sig.out_dtype)
            if r.shape != sig.out_shape:
                raise ValueError(f"py_func {function_name(fn)} returned shape {r.shape}, declared {sig.out_shape}")
            rows.append(r)
        return xp.stack(rows)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        per_row = []
        for b, h in enumerate(aux.tolist()):
            fn, grad_fn, _ = _functions[h]
            if grad_fn is None:
                raise NotImplementedError(f"py_func {function_name(fn)} has no grad_fn")
            row = _gradients(grad_fn, grad_fn(*_row(xs, sig, b), _read_only(y[b]), _read_only(gy[b])), len(xs))
            for i, (g, shape) in enumerate(zip(row, sig.in_shapes)):
                # a wrong shape would broadcast into the operand's gradient silently
                if needs[i] and g is not None and xp.shape(g) != shape:
                    raise ValueError(f"py_func {function_name(grad_fn)} returned a gradient of shape {xp.shape(g)} "
                                     f"for operand {i}, whose shape is {shape}")
            per_row.append(row)
        grads = []
        for i, (n, shared, shape, dtype) in enumerate(zip(needs, sig.shared, sig.in_shapes, sig.in_dtypes)):
            if not n:
                grads.append(None)
                continue
            # None: no gradient for that operand (zero), as the user guide allows
            g = xp.stack([xp.zeros(shape, dtype) if r[i] is None else xp.asarray(r[i]) for r in per_row])
            grads.append(g.sum(axis=0) if shared else g)   # a shared parameter gets one summed grad
        return tuple(grads)


def _row(xs, sig, b):
    """Instance b's operands: its row of each batched operand, shared parameters whole."""
    return tuple(_read_only(x if shared else x[b]) for x, shared in zip(xs, sig.shared))


def _read_only(x):
    """A view of x that the user's function cannot write: an operand is a value other ops
    read (or a gradient eager mode sums on), and writing it changed them."""
    if isinstance(x, np.ndarray):
        x = x.view()
        x.flags.writeable = False
    return x


def _gradients(grad_fn, result, n):
    """grad_fn's result checked as one gradient (or None) per operand: a bare array or a
    tuple of another length would be read per operand wrongly (r[i] of an array is a row)."""
    if not isinstance(result, (tuple, list)) or len(result) != n:
        got = f"a {type(result).__name__} of {len(result)}" if isinstance(result, (tuple, list)) else \
            type(result).__name__
        raise ValueError(f"py_func's grad_fn {function_name(grad_fn)!r} must return a tuple of "
                         f"{n} gradients (one per operand, None for none), not {got}")
    return result


def function_name(fn):
    """A name for fn's signature that holds no address, so that a learned policy's table
    knows it in another process: a function's qualified name, a partial's function's, a
    callable object's class."""
    if isinstance(fn, functools.partial):
        return f"partial({function_name(fn.func)})"
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__
