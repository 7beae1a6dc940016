"""A layer's product (a shared 2-D weight times each instance's vector, plus a shared bias)
goes straight to the product kernel (`ops/linalg._layer`): against numpy's per-instance
W @ x + b and its gradients, on strided operands, without writing them; other operand
layouts keep the general path."""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.ops import linalg as L
from hybridbatch.ops.registry import OuterGrad
from hybridbatch.record import signature


def _code(value):
    return -value.pid - 1 if isinstance(value, hb.Parameter) else signature.type_id(value.shape, value.dtype)


def _sig(op, *operands):
    """op's signature over Parameters (shared) and per-instance example values."""
    return signature.intern(op, (), tuple(_code(v) for v in operands))


def _is_layer(sig):
    return L._layer(*sig.shared[:2], *sig.in_shapes[:2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 3, 17, 70])
@pytest.mark.parametrize("bias", [True, False])
def test_a_layer_product_gives_numpys_values_and_gradients(dtype, rows, bias):
    rng = np.random.default_rng(rows)
    w = hb.Parameter("w", (24, 40), dtype=dtype, rng=rng)
    b = hb.Parameter("b", (24,), init="xavier", dtype=dtype, rng=rng) if bias else None
    op = L.Affine if bias else L.MatMul
    sig = _sig(op, w, np.zeros(40, dtype), *([b] if bias else []))
    assert _is_layer(sig)
    x = rng.standard_normal((rows, 80)).astype(dtype)[:, ::2]       # strided rows
    gy = rng.standard_normal((rows, 48)).astype(dtype)[:, ::2]
    xs = [w.data, x] + ([b.data] if bias else [])
    before = [a.copy() for a in xs + [gy]]
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    want = np.stack([w.data @ row for row in x]) + (b.data if bias else 0)
    np.testing.assert_allclose(op.forward(np, sig, xs, None), want, **tol)
    got = op.backward(np, sig, xs, None, None, gy, [True] * len(xs))
    assert isinstance(got[0], OuterGrad)
    np.testing.assert_allclose(got[0].left.T @ got[0].right, sum(np.outer(g, r) for g, r in zip(gy, x)), **tol)
    np.testing.assert_allclose(got[1], np.stack([w.data.T @ g for g in gy]), **tol)
    if bias:
        np.testing.assert_allclose(got[2], gy.sum(axis=0), **tol)
    for a, a0 in zip(xs + [gy], before):
        np.testing.assert_array_equal(a, a0)       # no operand written


def test_other_operand_layouts_keep_the_general_path():
    w2 = hb.Parameter("w2", (6, 5))
    w1 = hb.Parameter("w1", (5,))
    v5, m54 = np.zeros(5, np.float32), np.zeros((5, 4), np.float32)
    assert _is_layer(_sig(L.MatMul, w2, v5))
    assert not _is_layer(_sig(L.MatMul, w1, v5))                    # a 1-D weight: a dot product
    assert not _is_layer(_sig(L.MatMul, w2, m54))                   # a matrix per instance
    assert not _is_layer(_sig(L.MatMul, np.zeros((6, 5), np.float32), v5))     # the weight per instance
    assert not _is_layer(_sig(L.MatMul, w2, hb.Parameter("v", (5,))))          # both shared
