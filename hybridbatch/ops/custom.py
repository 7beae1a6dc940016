"""User functions as ops: arbitrary per-instance numpy code, run one node at a time."""
from .registry import Op, register


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
        rows = [xp.asarray(fn(*(x[b] for x in xs)), dtype=sig.out_dtype) for b in range(xs[0].shape[0])]
        for r in rows:
            if r.shape != sig.out_shape:
                raise ValueError(f"py_func {fn.__name__} returned shape {r.shape}, declared {sig.out_shape}")
        return xp.stack(rows)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        grad_fn = sig.attrs[1]
        if grad_fn is None:
            raise NotImplementedError(f"py_func {sig.attrs[0].__name__} has no grad_fn")
        per_row = [grad_fn(*(x[b] for x in xs), y[b], gy[b]) for b in range(gy.shape[0])]
        return tuple(xp.stack([xp.asarray(r[i]) for r in per_row]) if n else None for i, n in enumerate(needs))
