"""Matrix products. A shared-parameter matmul over B stacked vectors is one GEMM.

Per instance, operands are 1-D or 2-D with numpy's matmul rules. Internally a 1-D left
operand is a (1, n) row and a 1-D right operand an (n, 1) column, so every case is a
(B, m, n) @ (B, n, k) product where a shared operand has no batch axis; the cases below
turn each combination into plain 2-D GEMMs where they can.
"""
from ..errors import ShapeError
from ..kernels import blas
from .registry import (Op, OuterGrad, register, expand, unbroadcast, broadcast_shape, check, check_one_dtype,
                       as_batched, batch_size)


def _promote(x, shared, shape, left):
    if len(shape) == 1:
        shape = (1, shape[0]) if left else (shape[0], 1)
    return x.reshape(shape) if shared else x.reshape((x.shape[0],) + shape)


def _shared_left(xp, a, b3):
    """a (m, n) shared times b3 (B, n, k) -> (B, m, k)."""
    B, n, k = b3.shape
    if k == 1:   # vectors: X W^T, rows out, as every later kernel reads them
        return blas.shared_product(b3.reshape(B, n), a.T).reshape(B, a.shape[0], 1)
    # matrices per instance: one GEMM per instance beats transposing the batch into one wide
    # GEMM and back (2.5-4x for 64 x 128 @ 128 x 64, B = 64..1024: no copies either way)
    return xp.matmul(a, b3)


def _shared_right(xp, a3, b):
    """a3 (B, m, n) times b (n, k) shared -> (B, m, k)."""
    B, m, n = a3.shape
    return blas.shared_product(a3.reshape(B * m, n), b).reshape(B, m, b.shape[1])


def _product(xp, a3, b3, sa, sb):
    if sa:
        return _shared_left(xp, a3, b3)
    if sb:
        return _shared_right(xp, a3, b3)
    return xp.matmul(a3, b3)


def matmul_shape(name, sa, sb):
    check(1 <= len(sa) <= 2 and 1 <= len(sb) <= 2, name, (sa, sb),
          "matmul takes 1-D or 2-D operands per instance")
    check(sa[-1] == sb[0], name, (sa, sb), f"inner dimensions {sa[-1]} and {sb[0]} differ")
    return sa[:-1] + sb[1:]


def _layer(sa, sb, shape_a, shape_b):
    """Whether a shared 2-D weight multiplies each instance's vector: a layer over rows, X W^T,
    which the product kernel takes as it is (without the reshapes below: some 2 us a call,
    a tenth of an 8-row product by a 256 x 256 weight)."""
    return sa and not sb and len(shape_a) == 2 and len(shape_b) == 1


def matmul_forward(xp, a, b, sa, sb, shape_a, shape_b, out_shape):
    if _layer(sa, sb, shape_a, shape_b):
        return blas.shared_product(b, a.T)
    a3, b3 = _promote(a, sa, shape_a, True), _promote(b, sb, shape_b, False)
    y3 = _product(xp, a3, b3, sa, sb)
    return y3.reshape((y3.shape[0],) + out_shape)


def matmul_backward(xp, a, b, sa, sb, shape_a, shape_b, gy, needs):
    if _layer(sa, sb, shape_a, shape_b):      # dW = G^T X (one GEMM per weight later), dX = G W
        return (OuterGrad(gy, b) if needs[0] else None,
                blas.shared_product(gy, a) if needs[1] else None)
    a3, b3 = _promote(a, sa, shape_a, True), _promote(b, sb, shape_b, False)
    B = gy.shape[0]
    m, k = a3.shape[-2], b3.shape[-1]
    g3 = gy.reshape(B, m, k)
    ga = None
    if needs[0]:
        if sa and k == 1 and len(shape_a) == 2:   # a matrix per instance times a column: dW = G^T X
            return OuterGrad(g3.reshape(B, m), b3.reshape(B, -1)), _matmul_grad_b(xp, a3, g3, sa, shape_b, B, needs)
        if sa:            # sum_b g_b @ b_b^T
            ga = g3.transpose(1, 0, 2).reshape(m, -1) @ b3.transpose(0, 2, 1).reshape(-1, b3.shape[1])
        else:
            ga = _product(xp, g3, b3.T if sb else b3.transpose(0, 2, 1), False, sb)
        ga = ga.reshape(shape_a if sa else (B,) + shape_a)
    return ga, _matmul_grad_b(xp, a3, g3, sa, shape_b, B, needs, sb)


def _matmul_grad_b(xp, a3, g3, sa, shape_b, B, needs, sb=False):
    if not needs[1]:
        return None
    if sb:   # sum_b a_b^T @ g_b
        gb = blas.gemm(a3.reshape(-1, a3.shape[-1]).T, g3.reshape(-1, g3.shape[-1]))
    else:
        gb = _product(xp, a3.T if sa else a3.transpose(0, 2, 1), g3, sa, False)
    return gb.reshape(shape_b if sb else (B,) + shape_b)


@register
class MatMul(Op):
    name = "matmul"
    zero_exact = True
    cost = 1
    product = True

    def infer(self, attrs, shapes, dtypes):
        check_one_dtype(self.name, shapes, dtypes)
        return matmul_shape(self.name, *shapes), dtypes[0]

    def forward(self, xp, sig, xs, aux):
        return matmul_forward(xp, xs[0], xs[1], *sig.shared, *sig.in_shapes, sig.out_shape)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return matmul_backward(xp, xs[0], xs[1], *sig.shared, *sig.in_shapes, gy, needs)


@register
class Affine(Op):
    """W @ x + b in one kernel: saves a batch and a pass over the output per layer."""
    name = "affine"
    zero_exact = True
    cost = 1
    product = True
    without_bias = MatMul

    def infer(self, attrs, shapes, dtypes):
        check_one_dtype(self.name, shapes, dtypes)
        prod = matmul_shape(self.name, shapes[0], shapes[1])
        try:
            out = broadcast_shape(self.name, (prod, shapes[2]))
        except ShapeError:      # re-raised below naming all three operands, not the product
            out = None
        check(out == prod, self.name, shapes, f"bias of shape {shapes[2]} does not broadcast to the product's {prod}")
        return prod, dtypes[0]

    def product_operands(self, xp, sig, xs):
        """W, x and whether each is shared. When both are shared (only the bias is per
        instance) W is repeated over the batch: the matmul kernels need a batched operand."""
        sa, sb = sig.shared[:2]
        if sa and sb:
            return as_batched(xp, xs[0], True, batch_size(xs, sig)), xs[1], False, True
        return xs[0], xs[1], sa, sb

    def forward(self, xp, sig, xs, aux):
        a, b, sa, sb = self.product_operands(xp, sig, xs)
        y = matmul_forward(xp, a, b, sa, sb, *sig.in_shapes[:2], sig.out_shape)
        y += expand(xs[2], sig.shared[2], sig.in_shapes[2], len(sig.out_shape))
        return y

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        a, b, sa, sb = self.product_operands(xp, sig, xs)
        ga, gb = matmul_backward(xp, a, b, sa, sb, *sig.in_shapes[:2], gy, needs[:2])
        if ga is not None and sig.shared[0] and not sa:   # W was repeated: sum its batch
            ga = ga.sum(axis=0)
        gc = unbroadcast(gy, sig.shared[2], sig.in_shapes[2]) if needs[2] else None
        return ga, gb, gc
