"""Python numbers as operands: per-instance numbers batch, and the signature table stays put.

In a scope a float value's `x - s`, `x * s`, ... record the numbers as the node's operand
(ScalarAffineOperand), so instances with different numbers run as one batch, where numbers
baked into the signature gave one batch (and one interned signature) per distinct value.
"""
import numpy as np

import hybridbatch as hb
from hybridbatch.record import signature


def _per_instance(xs, shifts, scales, w):
    return [hb.sum(((w * x) - s) * k) for x, s, k in zip(xs, shifts, scales)]


def test_numbers_that_differ_per_instance_batch_and_match_eager_bit_for_bit():
    rng = np.random.default_rng(0)
    w = hb.Parameter("w", (5,), rng=rng)
    xs = [rng.standard_normal(5).astype(np.float32) for _ in range(64)]
    shifts = [float(v) for v in rng.standard_normal(64)]
    scales = [float(v) for v in rng.uniform(0.5, 2.0, 64)]
    eager = _per_instance(xs, shifts, scales, w)
    hb.add_n(eager).backward()
    want = w.grad.copy()
    w.zero_grad()
    with hb.batching() as scope:
        losses = _per_instance(xs, shifts, scales, w)
        total = hb.add_n(losses)
    total.backward()
    assert scope.stats.batches == 5          # w * x, - s, * k, sum, add_n: one batch each
    np.testing.assert_array_equal([f.item() for f in losses], [t.item() for t in eager])
    np.testing.assert_allclose(w.grad, want, rtol=1e-5)
    before = len(signature.SIGS)
    with hb.batching():
        _per_instance(xs, [s + 1.0 for s in shifts], [k * 3.0 for k in scales], w)
    assert len(signature.SIGS) == before     # new numbers, no new signatures


def test_signed_zero_and_special_values_are_kept():
    x = np.array([-0.0, 0.0, np.inf, -np.inf, np.nan, 1.5], np.float32)
    for fn in (lambda v: v * 2.0, lambda v: v - 0, lambda v: v + 0.0, lambda v: 1.0 - v, lambda v: v / 3.0,
               lambda v: -v):
        eager = fn(hb.array(x)).asnumpy()
        with hb.batching():
            batched = fn(hb.array(x))
        np.testing.assert_array_equal(np.signbit(batched.asnumpy()), np.signbit(eager))
        np.testing.assert_array_equal(batched.asnumpy(), eager)
        np.testing.assert_array_equal(eager, fn(x))       # numpy's own answer


def test_numbers_inside_a_traced_block_stay_in_its_program():
    class Halve(hb.HybridBlock):
        def forward(self, x):
            return x * 0.5 + 1.0

    block = Halve()
    block.hybridize()
    with hb.batching(granularity="op") as scope:
        y = block(np.ones(3, np.float32))
    assert signature.SIGS[scope.graph.sig[y.id]].op.name == "scalar_affine"
    np.testing.assert_array_equal(y.asnumpy(), np.full(3, 1.5, np.float32))


def test_integer_values_keep_exact_scalars():
    x = np.array([2 ** 60, -3], np.int64)
    with hb.batching() as scope:
        y = hb.array(x) + (2 ** 60 + 1)
    assert signature.SIGS[scope.graph.sig[y.id]].op.name == "scalar_affine"
    np.testing.assert_array_equal(y.asnumpy(), x + (2 ** 60 + 1))


def test_numbers_float32_cannot_hold_and_float16_values_match_eager():
    """A float32 value's number beyond float32's range stays an operand (its rounding to inf
    is numpy's); a float16 value's numbers are packed rounded to float16, as eager rounds."""
    cases = [(np.float32, 1e39, "scalar_affine_operand"), (np.float32, -3.3e38, "scalar_affine_packed"),
             (np.float16, 0.1, "scalar_affine_packed"), (np.float16, 70000.5, "scalar_affine_packed")]
    for dtype, s, recorded in cases:
        x = np.array([1.0, -2.0, 0.0, 0.5], dtype)
        for fn in (lambda v: v * s, lambda v: v + s, lambda v: s - v):
            with np.errstate(over="ignore", invalid="ignore"):
                eager = fn(hb.array(x)).asnumpy()
                with hb.batching() as scope:
                    batched = fn(hb.array(x))
                np.testing.assert_array_equal(batched.asnumpy(), eager, err_msg=f"{dtype.__name__} {s}")
                np.testing.assert_array_equal(eager, fn(x))
            assert signature.SIGS[scope.graph.sig[batched.id]].op.name == recorded


def test_exponents_that_differ_per_instance_batch_and_match_eager_bit_for_bit():
    """x ** k with k per instance (a focusing exponent) had made a signature per number: one
    batch per instance, and signatures that grew every minibatch. Numbers with numpy's own
    fast forms (2: a square, 0.5: a square root, -1, 0, 1) keep their numbers: -0 and -inf
    go through each number's own rule."""
    rng = np.random.default_rng(1)
    w = hb.Parameter("w", (6,), init="uniform", rng=rng)
    special = np.array([-0.0, 0.0, -np.inf, np.inf, 1e-40, -2.0], np.float32)
    ks = [2, 0.5, -1, 0, 1, 3.0, -1.5, 1.7, 0.5, 2.0]
    xs = [special] + [rng.uniform(0.1, 3.0, 6).astype(np.float32) for _ in ks[1:]]

    def losses():
        ys = [(hb.array(x) ** k) for x, k in zip(xs, ks)]
        return ys, [hb.sum(hb.sigmoid(w * x) ** k) for x, k in zip(xs, ks)]

    with np.errstate(all="ignore"):
        eager_ys, eager_losses = losses()
        hb.add_n(eager_losses[1:]).backward()
        want = w.grad.copy()
        w.zero_grad()
        with hb.batching() as scope:
            ys, batched_losses = losses()
            total = hb.add_n(batched_losses[1:])
        total.backward()
    for y, e in zip(ys, eager_ys):
        np.testing.assert_array_equal(y.asnumpy(), e.asnumpy())
        np.testing.assert_array_equal(np.signbit(y.asnumpy()), np.signbit(e.asnumpy()))
    np.testing.assert_array_equal([f.item() for f in batched_losses], [f.item() for f in eager_losses])
    np.testing.assert_allclose(w.grad, want, rtol=1e-5)
    ops = [signature.SIGS[s].op.name for s in scope.graph.sig]
    assert "scalar_pow" not in ops and scope.stats.batches == scope.stats.lower_bound
    before = len(signature.SIGS)
    with hb.batching():
        [hb.array(x) ** (k + 0.25) for x, k in zip(xs[1:], ks[1:])]
    assert len(signature.SIGS) == before
