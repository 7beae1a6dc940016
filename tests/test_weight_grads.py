"""A shared weight's gradient in batched reverse mode: one G^T X over all its batches, summed
straight into Parameter.grad (autograd.one_gemm_per_weight, blas.add_product)."""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.runtime.autograd import accumulate_param, one_gemm_per_weight
from hybridbatch.kernels import blas
from hybridbatch.ops import OuterGrad
from helpers import transposed_operands

DEPTHS = (1, 3, 2, 5, 4, 5, 1, 3)      # chain lengths: each level is one batch, one OuterGrad


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


def _chains(dtype, n=40, seed=0):
    """W and the chains' inputs. n=40: with MKL, W's first level (8 rows) gets a GEMM of its
    own, the later ones (6, 5, 3, 2 rows) are stacked into one."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((n, n)) / np.sqrt(n)).astype(dtype)
    xs = [rng.standard_normal(n).astype(dtype) for _ in DEPTHS]
    return w, xs


def _batched_loss(W, xs):
    """sum over chains of sum(W^d x): the chains' levels batch, so W gets one part per level."""
    outs = []
    for x, d in zip(xs, DEPTHS):
        h = hb.array(x)
        for _ in range(d):
            h = W @ h
        outs.append(hb.sum(h))
    return hb.add_n(outs)


def _expected_grad(w, xs):
    """d/dW of sum_i sum(W^d_i x_i) by hand in float64: sum over steps of outer(g_t+1, h_t)."""
    w = w.astype(np.float64)
    grad = np.zeros_like(w)
    for x, d in zip(xs, DEPTHS):
        hs = [x.astype(np.float64)]
        for _ in range(d):
            hs.append(w @ hs[-1])
        g = np.ones_like(hs[-1])
        for h in reversed(hs[:-1]):
            grad += np.outer(g, h)
            g = w.T @ g
    return grad


def _weight(w):
    W = hb.Parameter("W", w.shape, init="zeros", dtype=w.dtype)
    W.data = w
    return W


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_batched_weight_gradient_matches_the_hand_computed_one(library, dtype):
    w, xs = _chains(dtype)
    W = _weight(w)
    with hb.batching():
        _batched_loss(W, xs).backward()
    assert W.peek_grad().dtype == dtype
    np.testing.assert_allclose(W.peek_grad(), _expected_grad(w, xs), **_tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_two_backwards_without_a_step_add_up(library, dtype):
    """The second backward sums into the gradient the first left."""
    w, xs = _chains(dtype)
    _, xs2 = _chains(dtype, seed=1)
    W = _weight(w)
    for inputs in (xs, xs2):
        with hb.batching():
            _batched_loss(W, inputs).backward()
    np.testing.assert_allclose(W.peek_grad(), _expected_grad(w, xs) + _expected_grad(w, xs2), **_tol(dtype))


def test_a_dense_weight_gradient_turns_row_tracking_off(library):
    w, xs = _chains(np.float32)
    W = _weight(w)
    W.add_grad_rows(np.array([1]), np.ones((1, w.shape[1]), np.float32))
    assert W.grad_rows().tolist() == [1]
    with hb.batching():
        _batched_loss(W, xs).backward()
    assert W.grad_rows() is None
    expected = _expected_grad(w, xs)
    expected[1] += 1
    np.testing.assert_allclose(W.peek_grad(), expected, **_tol(np.float32))
    W.zero_grad()
    assert not W.peek_grad().any()


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_check_numerics_raises_before_an_overflowing_sum_reaches_grad(library):
    """The summed G^T X overflows though every batch's factors are finite: NumericsError
    names the parameter, and the gradient held from before is left as it was."""
    W = hb.Parameter("W", (3, 3), init=0.0)
    before = np.arange(9, dtype=np.float32).reshape(3, 3)
    W.grad = before
    big = hb.array(np.full(3, 3e38, np.float32))
    with hb.batching(check_numerics=True):
        loss = hb.add_n([hb.sum(W @ big) * 2.0, hb.sum(W @ (W @ big)) * 2.0])
        with pytest.raises(hb.NumericsError, match="parameter 'W', summed over its batches, overflowed"):
            loss.backward()
    np.testing.assert_array_equal(W.peek_grad(), before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_parts_of_a_rectangular_weight_sum_to_the_stacked_product(library, dtype):
    """(30, 20): with MKL, parts of 4 rows or more get GEMMs of their own, the others are
    stacked; with numpy all are stacked."""
    rng = np.random.default_rng(4)
    W = hb.Parameter("W", (30, 20), init="zeros", dtype=dtype)
    held = rng.standard_normal((30, 20)).astype(dtype)
    W.grad = held
    parts = [OuterGrad(rng.standard_normal((r, 30)).astype(dtype), rng.standard_normal((r, 20)).astype(dtype))
             for r in (1, 3, 50, 2, 7, 200, 3)]
    with one_gemm_per_weight(np):
        for g in parts:
            accumulate_param(W.pid, g)
    left = np.concatenate([g.left for g in parts]).astype(np.float64)
    right = np.concatenate([g.right for g in parts]).astype(np.float64)
    np.testing.assert_allclose(W.peek_grad(), held + left.T @ right, **_tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("accumulate", [True, False])
def test_add_product_sums_into_c(library, dtype, ta, tb, accumulate):
    """c + a @ b; without accumulate a @ b, c's old numbers (a NaN included) never read."""
    rng = np.random.default_rng(2)
    a, b = transposed_operands(rng, dtype, ta, tb, 5, 9, 4)
    c = rng.standard_normal((5, 4)).astype(dtype)
    expected = accumulate * c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    if not accumulate:
        c[0, 0] = np.nan
    target = c
    blas.add_product(c, a, b, accumulate=accumulate)
    assert c is target
    np.testing.assert_allclose(c, expected, **_tol(dtype))


@pytest.mark.parametrize("layout", ["fortran", "strided", "float64 c", "read-only"])
def test_add_product_falls_back_for_a_c_mkl_cannot_write(library, layout):
    """A c that is not C-contiguous, or of another dtype, still gets c + a @ b (numpy's)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 7)).astype(np.float32)
    b = rng.standard_normal((7, 4)).astype(np.float32)
    base = rng.standard_normal((5, 8)).astype(np.float32)
    c = {"fortran": np.asfortranarray(base[:, :4]), "strided": base[:, ::2],
         "float64 c": base[:, :4].astype(np.float64), "read-only": base[:, :4].copy()}[layout]
    expected = c.astype(np.float64) + a.astype(np.float64) @ b.astype(np.float64)
    untouched = base[:, 1::2].copy()
    if layout == "read-only":
        c.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            blas.add_product(c, a, b)
        return
    blas.add_product(c, a, b)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(base[:, 1::2], untouched)     # the strided c's gaps
