"""A layer's product (a shared 2-D weight times each instance's vector, plus a shared bias)
goes straight to the product kernel (`ops/linalg._is_layer`): it gives the general matmul
path's values and gradients, on strided operands, without writing them; other operand
layouts keep the general path."""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.ops import linalg as L
from hybridbatch.ops.registry import OuterGrad, unbroadcast
from hybridbatch.record import signature


def _code(value):
    return -value.pid - 1 if isinstance(value, hb.Parameter) else signature.type_id(value.shape, value.dtype)


def _sig(op, *operands):
    """op's signature over Parameters (shared) and per-instance example values."""
    return signature.intern(op, (), tuple(_code(v) for v in operands))


def _general_forward(sig, xs):
    y = L.matmul_forward(np, xs[0], xs[1], *sig.shared[:2], *sig.in_shapes[:2], sig.out_shape)
    return y + xs[2] if len(xs) == 3 else y


def _general_backward(sig, xs, gy):
    ga, gb = L.matmul_backward(np, xs[0], xs[1], *sig.shared[:2], *sig.in_shapes[:2], gy, (True, True))
    grads = [ga, gb]
    if len(xs) == 3:
        grads.append(unbroadcast(gy, True, sig.in_shapes[2]))
    return grads


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 3, 17, 70])
@pytest.mark.parametrize("bias", [True, False])
def test_a_layer_product_gives_the_general_paths_values_and_gradients(dtype, rows, bias):
    rng = np.random.default_rng(rows)
    w = hb.Parameter("w", (24, 40), dtype=dtype, rng=rng)
    b = hb.Parameter("b", (24,), init="xavier", dtype=dtype, rng=rng) if bias else None
    op = L.Affine if bias else L.MatMul
    sig = _sig(op, w, np.zeros(40, dtype), *([b] if bias else []))
    assert L._is_layer(sig)
    x = rng.standard_normal((rows, 80)).astype(dtype)[:, ::2]       # strided rows
    gy = rng.standard_normal((rows, 48)).astype(dtype)[:, ::2]
    xs = [w.data, x] + ([b.data] if bias else [])
    before = [a.copy() for a in xs + [gy]]
    np.testing.assert_allclose(op.forward(np, sig, xs, None), _general_forward(sig, xs), rtol=1e-5)
    got = op.backward(np, sig, xs, None, None, gy, [True] * len(xs))
    want = _general_backward(sig, xs, gy)
    assert isinstance(got[0], OuterGrad)
    np.testing.assert_allclose(got[0].left.T @ got[0].right, want[0].left.T @ want[0].right, rtol=1e-5)
    for g, r in zip(got[1:], want[1:]):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
    for a, a0 in zip(xs + [gy], before):
        np.testing.assert_array_equal(a, a0)       # no operand written


def test_other_operand_layouts_keep_the_general_path():
    w2 = hb.Parameter("w2", (6, 5))
    w1 = hb.Parameter("w1", (5,))
    b = hb.Parameter("b", (6,), init="zeros")
    b1 = hb.Parameter("b1", (1,), init="zeros")
    v5, m54 = np.zeros(5, np.float32), np.zeros((5, 4), np.float32)
    assert L._is_layer(_sig(L.MatMul, w2, v5))
    assert not L._is_layer(_sig(L.MatMul, w1, v5))                   # a 1-D weight: a dot product
    assert not L._is_layer(_sig(L.MatMul, w2, m54))                  # a matrix per instance
    assert not L._is_layer(_sig(L.MatMul, np.zeros((6, 5), np.float32), v5))     # the weight per instance
    assert not L._is_layer(_sig(L.Affine, w2, v5, b1))               # a bias that broadcasts
    assert not L._is_layer(_sig(L.Affine, w2, v5, np.zeros(6, np.float32)))    # a bias per instance
