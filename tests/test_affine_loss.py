"""A classifier layer and its picked loss folded into one op (hybridbatch/ops/affine_loss.py):
the same numbers as the two ops and as eager mode, and folded only where that is safe."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import hybridbatch as hb
from hybridbatch import nn
from hybridbatch.errors import NumericsError
from hybridbatch.kernels import softmax

FOLDED = "affine_pick_neg_log_softmax"


def _reference(x, w, b, labels):
    z = x.astype(np.float64) @ w.T.astype(np.float64) + b
    z -= z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(x)), labels]


@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_kernels_match_numpy_and_finite_differences(dtype, rtol):
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in ((7, 9), (5, 9), (5,)))
    labels = rng.integers(0, 5, 7)
    gy = rng.standard_normal(7).astype(dtype)
    np.testing.assert_allclose(softmax.affine_pick_neg_log_softmax(x, w, b, labels),
                               _reference(x, w, b, labels), rtol=rtol)
    gx, gw, gb = softmax.affine_pick_neg_log_softmax_grad(x, w, b, labels, gy)
    if dtype is np.float32:
        return
    eps = 1e-6

    def numeric(arr):
        g = np.zeros_like(arr)
        for i in np.ndindex(arr.shape):
            old = arr[i]
            arr[i] = old + eps
            up = gy @ _reference(x, w, b, labels)
            arr[i] = old - eps
            down = gy @ _reference(x, w, b, labels)
            arr[i] = old
            g[i] = (up - down) / (2 * eps)
        return g

    np.testing.assert_allclose(gx, numeric(x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gw, numeric(w), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gb, numeric(b), rtol=1e-6, atol=1e-8)


class Head(hb.HybridBlock):
    """A hidden layer, then a classifier whose logits only the loss reads: folded."""

    def __init__(self, also_logits=False):
        super().__init__()
        self.hidden, self.out = nn.Dense(6, 4, seed=0), nn.Dense(3, 6, seed=1)
        self.also_logits = also_logits

    def forward(self, x, label):
        logits = self.out(hb.tanh(self.hidden(x)))
        loss = hb.pick_neg_log_softmax(logits, label)
        return (loss, logits) if self.also_logits else loss


def _run(mode, fused=True, xs=None, also_logits=False):
    """(summed loss, gradients, the block's units) for 9 calls of Head."""
    block = Head(also_logits)
    block.hybridize()
    params = list(block.collect_params().values())
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((9, 4)).astype(np.float32) if xs is None else xs
    def summed():
        losses = [block(x, i % 3) for i, x in enumerate(xs)]
        return hb.add_n([(o[0] if also_logits else o) * (1.0 + i) for i, o in enumerate(losses)])

    with hb.settings(fusion=fused):
        if mode == "eager":
            loss = summed()
        else:
            with hb.batching(granularity=mode):
                loss = summed()
        loss.backward()
        units = next(iter(block._programs.values())).op.units(np) if block._programs else None
    return loss.asnumpy(), [p.grad.copy() for p in params], units


def _names(units):
    return [u[1].op.name for u in units if isinstance(u, tuple)]


def _same(a, b):
    np.testing.assert_allclose(a[0], b[0], rtol=1e-5)
    for ga, gb in zip(a[1], b[1]):
        np.testing.assert_allclose(ga, gb, rtol=1e-4, atol=1e-6)


def test_folded_block_equals_the_two_ops_and_eager():
    folded = _run("block")
    assert FOLDED in _names(folded[2]) and "pick_neg_log_softmax" not in _names(folded[2])
    unfused = _run("block", fused=False)
    assert FOLDED not in _names(unfused[2])
    _same(folded, unfused)
    _same(folded, _run("eager"))
    _same(folded, _run("op"))


def test_logits_read_elsewhere_are_not_folded():
    loss, grads, units = _run("block", also_logits=True)
    assert FOLDED not in _names(units) and "pick_neg_log_softmax" in _names(units)
    _same((loss, grads), _run("eager", also_logits=True)[:2])


def test_nan_reaches_the_loss_and_check_numerics_names_the_call():
    xs = np.ones((9, 4), np.float32)
    xs[4, 2] = np.nan
    block = Head()
    block.hybridize()
    with hb.batching(granularity="block"):
        losses = [block(x, i % 3) for i, x in enumerate(xs)]
        values = [l.asnumpy() for l in losses]
    assert np.isnan(values[4]) and np.isfinite(np.delete(values, 4)).all()
    # the batch's error names the block call's line and the operand the NaN came in by
    with pytest.raises(NumericsError, match=r"block:Head read NaN/inf already in its operand 0 .*recorded at "
                                            r".*test_affine_loss.py:\d+"):
        with hb.batching(granularity="block", check_numerics=True):
            losses = [block(x, i % 3) for i, x in enumerate(xs)]
            hb.add_n(losses).asnumpy()


def test_label_out_of_range_is_refused_at_the_call():
    block = Head()
    block.hybridize()
    with hb.batching(granularity="block"):
        block(np.ones(4, np.float32), 0)
        with pytest.raises(IndexError):
            block(np.ones(4, np.float32), 3)


class Classifier(hb.HybridBlock):
    def __init__(self, classes, width, seed):
        super().__init__()
        self.out = nn.Dense(classes, width, seed=seed)

    def forward(self, x, label):
        return hb.pick_neg_log_softmax(self.out(hb.tanh(x)), label)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(classes=st.integers(2, 7), width=st.integers(1, 9), labels=st.lists(st.integers(0, 6), min_size=1, max_size=40),
       seed=st.integers(0, 1000))
def test_property_folded_batches_equal_eager(classes, width, labels, seed):
    """Any class count, width and batch: the folded loss and its gradients (W, b and the
    input, through a parameter) equal eager mode's."""
    rng = np.random.default_rng(seed)
    xs = hb.Parameter("xs", (len(labels), width), init="uniform", rng=rng)
    results = []
    for mode in ("eager", "block"):
        block = Classifier(classes, width, seed)
        block.hybridize()
        xs.zero_grad()

        def total():
            return hb.add_n([block(hb.lookup(xs, i), y % classes) * (1.0 + i) for i, y in enumerate(labels)])

        if mode == "eager":
            loss = total()
        else:
            with hb.batching(granularity="block"):
                loss = total()
        loss.backward()
        results.append((loss.asnumpy(), [p.grad.copy() for p in block.collect_params().values()] + [xs.grad.copy()]))
    assert FOLDED in _names(next(iter(block._programs.values())).op.units(np))
    _same(*results)


def test_a_wide_classifier_keeps_its_blas_product():
    """The fold's dot products beat BLAS only on thin layers (W1's 5 x 256); a wider one stays
    an affine (W2's 17 x 512 was slower folded)."""
    thin, wide = Classifier(5, 256, 0), Classifier(17, 512, 0)
    for block, folded in ((thin, True), (wide, False)):
        block.hybridize()
        width = block.out.weight.shape[1]
        with hb.batching(granularity="block"):
            block(np.ones(width, np.float32), 1).asnumpy()
        assert (FOLDED in _names(next(iter(block._programs.values())).op.units(np))) is folded
