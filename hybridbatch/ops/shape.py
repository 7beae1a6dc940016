"""Ops that move values around: inputs, parameter reads, concat, stack, slicing, reshape, transpose."""
import numpy as np

from ..errors import ShapeError
from .registry import Op, register, check, check_one_dtype, as_batched
from ..record import signature


@register
class Input(Op):
    """A constant recorded with its value; never executed, never differentiated."""
    name = "input"
    zero_exact = True
    executed = False

    def infer(self, attrs, shapes, dtypes):
        return signature.TYPES[attrs[0]]


@register
class Output(Op):
    """Output j (attrs (j, type id)) of the multi-output node recorded just before it.

    Never executed: the producing node's kernel writes it. Scheduling reads it as its
    producer, so a consumer waits for the producer's batch.
    """
    name = "output"
    zero_exact = True
    executed = False
    n_out = 0

    def infer(self, attrs, shapes, dtypes):
        return signature.TYPES[attrs[1]]


@register
class ParamRead(Op):
    """A parameter used as a per-instance value (e.g. tanh(W)): broadcast over the batch.

    Recording inserts it when an op would otherwise have only shared operands, so every
    other kernel can rely on at least one batched operand. Its aux only sizes the batch.
    """
    name = "param"
    zero_exact = True
    uses_aux = True
    needs_batched = False

    def infer(self, attrs, shapes, dtypes):
        return shapes[0], dtypes[0]

    def forward(self, xp, sig, xs, aux):
        return xp.broadcast_to(xs[0], (len(aux),) + xs[0].shape)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return (gy.sum(axis=0),)


@register
class Concat(Op):
    name = "concat"
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        axis = attrs[0]
        first = shapes[0]
        check(len(first) > axis, self.name, shapes, f"axis {axis} out of range")
        check(all(len(s) == len(first) and s[:axis] == first[:axis] and s[axis + 1:] == first[axis + 1:]
                  for s in shapes), self.name, shapes, f"shapes differ off the concat axis {axis}")
        check_one_dtype(self.name, shapes, dtypes)
        return first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1:], dtypes[0]

    def forward(self, xp, sig, xs, aux):
        B = xs[sig.node_positions[0]].shape[0]
        return xp.concatenate([as_batched(xp, x, s, B) for x, s in zip(xs, sig.shared)], axis=sig.attrs[0] + 1)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        axis = sig.attrs[0] + 1
        grads, start = [], 0
        for shape, shared, need in zip(sig.in_shapes, sig.shared, needs):
            stop = start + shape[axis - 1]
            if need:
                g = gy[(slice(None),) * axis + (slice(start, stop),)]
                grads.append(g.sum(axis=0) if shared else g)
            else:
                grads.append(None)
            start = stop
        return tuple(grads)


def normalize_index(key, shape):
    """A hashable, bounds-resolved form of a basic index (ints and slices) for one instance."""
    if not isinstance(key, tuple):
        key = (key,)
    if len(key) > len(shape):
        raise IndexError(f"too many indices ({len(key)}) for a value of shape {shape}")
    out = []
    for k, n in zip(key, shape):
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            # a backward slice resolves "before the front" to -1, which slice() would read as
            # "the last element": an empty one (x[-10::-1], start -1) becomes 0:0, and one
            # that runs to the front (stop -1) gets None, "past the front"
            if not range(start, stop, step):
                out.append(("s", 0, 0, 1))
                continue
            out.append(("s", start, None if stop < 0 else stop, step))
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):   # numpy: a bool is a mask
            k = int(k)
            if not -n <= k < n:
                raise IndexError(f"index {k} out of range for an axis of length {n} (shape {shape})")
            out.append(("i", k % n))
        else:
            hint = (": an index computed as a value (hb.argmax) is read with int(...) first"
                    if hasattr(k, "asnumpy") else "")
            raise TypeError(f"values take int and slice indices, ... and None only, not {type(k).__name__}{hint}")
    return tuple(out)


def _index(attrs):
    return (slice(None),) + tuple(slice(*k[1:]) if k[0] == "s" else k[1] for k in attrs)


@register
class Slice(Op):
    name = "slice"
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        return np.empty(shapes[0], np.bool_)[_index(attrs)[1:]].shape, dtypes[0]

    def forward(self, xp, sig, xs, aux):
        return xs[0][_index(sig.attrs)]

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        g = xp.zeros(xs[0].shape, gy.dtype)
        g[_index(sig.attrs)] = gy
        return (g,)

    def add_grad(self, sig, g_input, gy):
        """Add into the sliced region only (callers holding a gradient buffer use this)."""
        g_input[_index(sig.attrs)] += gy

    @staticmethod
    def columns(sig):
        """The first element when this slice is a contiguous range of a vector."""
        (k,) = sig.attrs if len(sig.attrs) == 1 and len(sig.in_shapes[0]) == 1 else (None,)
        return k[1] if k is not None and k[0] == "s" and k[3] == 1 else None


@register
class Reshape(Op):
    name = "reshape"
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        size = int(np.prod(shapes[0], dtype=np.int64))
        if not all(d >= 0 for d in attrs) or int(np.prod(attrs, dtype=np.int64)) != size:
            why = ("a -1 stands for the one dimension that makes the element counts equal"
                   if any(d < 0 for d in attrs) else "the element counts differ")
            raise ShapeError(f"reshape: cannot reshape a value of shape {tuple(shapes[0])} ({size} elements) "
                             f"into {tuple(attrs)}: {why}")
        return attrs, dtypes[0]

    def forward(self, xp, sig, xs, aux):
        return xs[0].reshape((xs[0].shape[0],) + sig.out_shape)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return (gy.reshape(xs[0].shape),)


@register
class Transpose(Op):
    """The per-instance axes permuted (attrs: the permutation, numpy's `axes`)."""
    name = "transpose"
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        (shape,) = shapes
        check(sorted(attrs) == list(range(len(shape))), self.name, shapes,
              f"axes {attrs} are not a permutation of the {len(shape)} axes")
        return tuple(shape[a] for a in attrs), dtypes[0]

    def forward(self, xp, sig, xs, aux):
        return xs[0].transpose((0,) + tuple(a + 1 for a in sig.attrs))

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return (gy.transpose((0,) + tuple(int(a) + 1 for a in np.argsort(sig.attrs))),)


@register
class Stack(Op):
    """Values of one shape stacked along a new axis (attrs (axis,))."""
    name = "stack"
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        axis = attrs[0]
        check(all(s == shapes[0] for s in shapes), self.name, shapes, "stack needs equal shapes")
        check_one_dtype(self.name, shapes, dtypes)
        check(0 <= axis <= len(shapes[0]), self.name, shapes, f"axis {axis} out of range")
        return shapes[0][:axis] + (len(shapes),) + shapes[0][axis:], dtypes[0]

    def forward(self, xp, sig, xs, aux):
        B = xs[sig.node_positions[0]].shape[0]
        return xp.stack([as_batched(xp, x, s, B) for x, s in zip(xs, sig.shared)], axis=sig.attrs[0] + 1)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        axis = sig.attrs[0] + 1
        grads = []
        for i, (need, shared) in enumerate(zip(needs, sig.shared)):
            g = gy.take(i, axis=axis) if need else None
            grads.append(g.sum(axis=0) if need and shared else g)
        return tuple(grads)
