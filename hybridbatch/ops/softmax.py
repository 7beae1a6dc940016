"""Softmax and log-softmax along one per-instance axis (attrs (axis,)).

Both subtract the largest value along the axis first, so large logits neither overflow nor
lose the small ones.
"""
from .registry import Op, register, check, check_float


def log_softmax(xp, x, axis=-1):
    z = x - x.max(axis=axis, keepdims=True)
    return z - xp.log(xp.exp(z).sum(axis=axis, keepdims=True))


class _Softmax(Op):
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        (axis,), (shape,) = attrs, shapes
        check(0 <= axis < len(shape), self.name, shapes, f"axis {axis} out of range")
        check(shape[axis] > 0, self.name, shapes,
              f"needs values along axis {axis} (a softmax of none is undefined)")
        check_float(self.name, shapes, dtypes)
        return shape, dtypes[0]


@register
class LogSoftmax(_Softmax):
    """log softmax(x) along the axis: x minus the log of the sum of its exps."""
    name = "log_softmax"

    def forward(self, xp, sig, xs, aux):
        return log_softmax(xp, xs[0], sig.attrs[0] + 1)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return (gy - xp.exp(y) * gy.sum(axis=sig.attrs[0] + 1, keepdims=True),)


@register
class Softmax(_Softmax):
    """exp(x) / sum(exp(x)) along the axis."""
    name = "softmax"

    def forward(self, xp, sig, xs, aux):
        return xp.exp(log_softmax(xp, xs[0], sig.attrs[0] + 1))

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        gy_y = gy * y
        return (gy_y - y * gy_y.sum(axis=sig.attrs[0] + 1, keepdims=True),)
