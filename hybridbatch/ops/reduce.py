"""Reductions and selections along per-instance axes: sum, mean, logsumexp, max, min, argmax,
argmin, top-k.

A per-instance axis a is batch axis a + 1: the batch axis stays first and is never reduced.
The reductions take attrs (axes, keepdims): axes a sorted tuple of per-instance axes, or None
for all of them, as numpy's axis=None (api._axes builds it, so a call's errors name its axes).
"""
import numpy as np

from .lists import shift
from .registry import Op, register, check, check_float


def _reduced(attrs, ndim):
    """The per-instance axes a reduction's attrs name."""
    axes = attrs[0]
    return tuple(range(ndim)) if axes is None else axes


def _kept(attrs, shape):
    """The operand's per-instance shape with the reduced axes as 1s (keepdims' shape)."""
    axes = _reduced(attrs, len(shape))
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _expanded(g, sig):
    """A (B,)+out array viewed with the reduced axes as 1s, so it broadcasts against the operand."""
    return g.reshape((g.shape[0],) + _kept(sig.attrs, sig.in_shapes[0]))


class _Reduce(Op):
    zero_exact = True
    needs_values = False    # True: reduces with no identity (max), so a reduced axis needs values

    def out_dtype(self, dtype):
        return dtype

    def infer(self, attrs, shapes, dtypes):
        (shape,), (axes, keepdims) = shapes, attrs
        axes = _reduced(attrs, len(shape))
        check(all(0 <= a < len(shape) for a in axes), self.name, shapes, f"axes {axes} out of range")
        if self.needs_values:
            check(all(shape[a] > 0 for a in axes), self.name, shapes,
                  f"a {self.name} over an axis of length 0 has no value")
        out = _kept(attrs, shape) if keepdims else tuple(n for i, n in enumerate(shape) if i not in axes)
        return out, self.out_dtype(dtypes[0])

    @staticmethod
    def batch_axes(sig):
        return tuple(a + 1 for a in _reduced(sig.attrs, len(sig.in_shapes[0])))

    def forward(self, xp, sig, xs, aux):
        y = self.reduce(xs[0], self.batch_axes(sig), sig.out_dtype)
        return y.reshape((y.shape[0],) + sig.out_shape)


@register
class Sum(_Reduce):
    """The sum over the axes. Its dtype is numpy's for a sum (bools and small integers sum as
    the platform integer): keeping the operand's would wrap a batched int8 sum that eager
    returns whole."""
    name = "sum"

    def out_dtype(self, dtype):
        return np.zeros(0, dtype).sum().dtype

    @staticmethod
    def reduce(x, axes, dtype):
        if len(axes) == x.ndim - 1:     # every element of a row: one contiguous sum per row
            return x.reshape(x.shape[0], -1).sum(axis=1, dtype=dtype)
        return x.sum(axis=axes, dtype=dtype)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return (xp.broadcast_to(_expanded(gy, sig), xs[0].shape).copy(),)


@register
class Mean(type(Sum)):
    """The mean over the axes: the sum divided by the count (floats only, as the value is one).
    float16 sums and divides in float32, rounding once, as numpy's mean: its sum overflows
    past 65504, and a count past it is inf (the gradient then 0)."""
    name = "mean"

    def infer(self, attrs, shapes, dtypes):
        check_float(self.name, shapes, dtypes)
        return super().infer(attrs, shapes, dtypes)

    def out_dtype(self, dtype):
        return dtype

    @staticmethod
    def count(sig):
        shape = sig.in_shapes[0]
        return int(np.prod([shape[a] for a in _reduced(sig.attrs, len(shape))], dtype=np.int64))

    def forward(self, xp, sig, xs, aux):
        wide = _accumulator(sig.out_dtype)
        y = self.reduce(xs[0], self.batch_axes(sig), wide)
        y /= wide.type(self.count(sig))
        return y.astype(sig.out_dtype, copy=False).reshape((y.shape[0],) + sig.out_shape)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        share = _expanded(gy, sig).astype(_accumulator(gy.dtype), copy=False) / self.count(sig)
        return (xp.broadcast_to(share.astype(gy.dtype, copy=False), xs[0].shape).copy(),)


def _accumulator(dtype):
    """The dtype a mean of `dtype` sums in: float32 for float16, else itself."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


@register
class LogSumExp(_Reduce):
    """log(sum(exp(x))) over the axes, shifted by the largest element so it never overflows
    (floats only)."""
    name = "logsumexp"
    needs_values = True

    def infer(self, attrs, shapes, dtypes):
        check_float(self.name, shapes, dtypes)
        return super().infer(attrs, shapes, dtypes)

    def forward(self, xp, sig, xs, aux):
        x, axes = xs[0], self.batch_axes(sig)
        m = shift(xp, x.max(axis=axes, keepdims=True))
        y = xp.log(xp.exp(x - m).sum(axis=axes, keepdims=True))
        y += m
        return y.reshape((y.shape[0],) + sig.out_shape)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return (_expanded(gy, sig) * xp.exp(xs[0] - _expanded(y, sig)),)


def tie_shared(x, y, gy, axes):
    """The gradient of a max or min over `axes` of x: gy (y's gradient, both broadcasting
    against x) goes to the elements equal to y, shared equally where several tie (as
    PyTorch's amax), so it is the same whatever order a kernel scans."""
    at = x == y
    return at * (gy / at.sum(axis=axes, keepdims=True, dtype=gy.dtype))


class _Extreme(_Reduce):
    """max or min, differentiated by tie_shared."""
    needs_values = True

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return (tie_shared(xs[0], _expanded(y, sig), _expanded(gy, sig), self.batch_axes(sig)),)


@register
class Max(_Extreme):
    """The largest element over the axes (NaN if any is NaN, as numpy)."""
    name = "max"
    reduce = staticmethod(lambda x, axes, dtype: x.max(axis=axes))


@register
class Min(_Extreme):
    """The smallest element over the axes (NaN if any is NaN, as numpy)."""
    name = "min"
    reduce = staticmethod(lambda x, axes, dtype: x.min(axis=axes))


class _ArgExtreme(Op):
    """The index of the first largest (smallest) element along one axis, or in the flattened
    value (attrs (axis or None, keepdims)): an int64 with no gradient (its operand's is 0)."""
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        (shape,), (axis, keepdims) = shapes, attrs
        axes = tuple(range(len(shape))) if axis is None else (axis,)
        check(all(0 <= a < len(shape) for a in axes), self.name, shapes, f"axis {axis} out of range")
        check(all(shape[a] > 0 for a in axes), self.name, shapes, f"{self.name} of an axis of length 0")
        out = _kept((axes, keepdims), shape) if keepdims else tuple(n for i, n in enumerate(shape) if i not in axes)
        return out, np.dtype(np.int64)

    def forward(self, xp, sig, xs, aux):
        x, axis = xs[0], sig.attrs[0]
        if axis is None:
            i = self.find(x.reshape(x.shape[0], -1), 1)
        else:
            i = self.find(x, axis + 1)
        return i.astype(np.int64, copy=False).reshape((x.shape[0],) + sig.out_shape)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return (xp.zeros(xs[0].shape, xs[0].dtype),)    # its dtype: an integer operand's gradient arena is one


@register
class ArgMax(_ArgExtreme):
    name = "argmax"
    find = staticmethod(lambda x, axis: x.argmax(axis=axis))


@register
class ArgMin(_ArgExtreme):
    name = "argmin"
    find = staticmethod(lambda x, axis: x.argmin(axis=axis))


@register
class TopK(Op):
    """The k largest elements along one axis, largest first (ties: the lower index first),
    attrs (k, axis, "values" | "indices"): hb.topk records one node of each. NaN counts as
    largest, as for max and argmax. The values' gradient goes back to the elements they came
    from; the indices are int64, with none."""
    name = "topk"
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        k, axis, part = attrs
        (shape,) = shapes
        check(0 <= axis < len(shape), self.name, shapes, f"axis {axis} out of range")
        check(1 <= k <= shape[axis], self.name, shapes, f"k = {k} needs 1 <= k <= {shape[axis]}, the axis' length")
        out = shape[:axis] + (k,) + shape[axis + 1:]
        return out, (dtypes[0] if part == "values" else np.dtype(np.int64))

    @staticmethod
    def indices(xp, sig, x):
        k, axis = sig.attrs[0], sig.attrs[1] + 1
        # descending, ties in index order: -x for floats; ~x for integers and bools, which
        # reverses their order where negating wraps (unsigned values, the signed minimum)
        order = xp.argsort(-x if x.dtype.kind == "f" else ~x, axis=axis, kind="stable")
        if x.dtype.kind == "f" and xp.isnan(x).any():      # NaNs first, in index order (argsort put them last)
            nan = xp.isnan(xp.take_along_axis(x, order, axis=axis))
            order = xp.take_along_axis(order, xp.argsort(~nan, axis=axis, kind="stable"), axis=axis)
        return order.take(xp.arange(k), axis=axis)

    def forward(self, xp, sig, xs, aux):
        i = self.indices(xp, sig, xs[0])
        if sig.attrs[2] == "indices":
            return i.astype(np.int64, copy=False)
        return xp.take_along_axis(xs[0], i, axis=sig.attrs[1] + 1)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        x = xs[0]
        g = xp.zeros(x.shape, x.dtype)
        if sig.attrs[2] == "values":
            xp.put_along_axis(g, self.indices(xp, sig, x), gy, axis=sig.attrs[1] + 1)
        return (g,)
