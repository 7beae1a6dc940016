"""User functions as ops: arbitrary per-instance numpy code, run one node at a time."""
from .registry import Op, register, batch_size


@register
class PyFunc(Op):
    """attrs = (fn, grad_fn, out_shape, out_dtype). Unbatchable: fn sees one instance.

    fn(*xs) -> y per instance; grad_fn(*xs, y, gy) -> tuple of per-operand gradients.
    """
    name = "py_func"
    batchable = False
    cost = 1

    def infer(self, attrs, shapes, dtypes):
        return attrs[2], attrs[3]

    def forward(self, xp, sig, xs, aux):
        fn = sig.attrs[0]
        rows = [xp.asarray(fn(*_row(xs, sig, b)), dtype=sig.out_dtype) for b in range(batch_size(xs, sig))]
        for r in rows:
            if r.shape != sig.out_shape:
                raise ValueError(f"py_func {fn.__name__} returned shape {r.shape}, declared {sig.out_shape}")
        return xp.stack(rows)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        grad_fn = sig.attrs[1]
        if grad_fn is None:
            raise NotImplementedError(f"py_func {sig.attrs[0].__name__} has no grad_fn")
        per_row = [_gradients(grad_fn, grad_fn(*_row(xs, sig, b), y[b], gy[b]), len(xs)) for b in range(gy.shape[0])]
        grads = []
        for i, (n, shared, shape, dtype) in enumerate(zip(needs, sig.shared, sig.in_shapes, sig.in_dtypes)):
            if not n:
                grads.append(None)
                continue
            # None: no gradient for that operand (zero), as the user guide allows
            rows = [xp.zeros(shape, dtype) if r[i] is None else xp.asarray(r[i]) for r in per_row]
            for r in rows:     # a wrong shape would broadcast into the operand's gradient silently
                if r.shape != shape:
                    raise ValueError(f"py_func {grad_fn.__name__} returned a gradient of shape {r.shape} "
                                     f"for operand {i}, whose shape is {shape}")
            g = xp.stack(rows)
            grads.append(g.sum(axis=0) if shared else g)   # a shared parameter gets one summed grad
        return tuple(grads)


def _row(xs, sig, b):
    """Instance b's operands: its row of each batched operand, shared parameters whole."""
    return tuple(x if shared else x[b] for x, shared in zip(xs, sig.shared))


def _gradients(grad_fn, result, n):
    """grad_fn's result checked as one gradient (or None) per operand: a bare array or a
    tuple of another length would be read per operand wrongly (r[i] of an array is a row)."""
    if not isinstance(result, (tuple, list)) or len(result) != n:
        got = f"a {type(result).__name__} of {len(result)}" if isinstance(result, (tuple, list)) else \
            type(result).__name__
        raise ValueError(f"py_func's grad_fn {getattr(grad_fn, '__name__', grad_fn)!r} must return a tuple of "
                         f"{n} gradients (one per operand, None for none), not {got}")
    return result
