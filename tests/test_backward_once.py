"""backward() runs once from a loss unless the first call keeps the graph (retain_graph=True),
as in PyTorch: a repeated call used to add the same gradients again, silently doubling them."""
import numpy as np
import pytest

import hybridbatch as hb

MODES = ["eager", "batched"]


@pytest.fixture
def W():
    return hb.Parameter("W", (3, 3), rng=np.random.default_rng(0))


X = [np.array([1.0, -2.0, 0.5], np.float32), np.array([0.3, 0.1, -1.0], np.float32)]


def loss_of(W, x):
    return hb.sum(hb.tanh(W @ x))


def losses(mode, W):
    """The loss of each input of X and their total: eager Tensors, or Futures of one scope."""
    if mode == "eager":
        return record_losses(W)
    with hb.batching():
        return record_losses(W)


def record_losses(W):
    first, second = (loss_of(W, x) for x in X)
    return first, second, first + second


def gradient(W, *xs):
    """W's gradient of the losses of xs, each differentiated once (eager)."""
    W.zero_grad()
    for x in xs:
        loss_of(W, x).backward()
    grad = W.grad.copy()
    W.zero_grad()
    return grad


@pytest.mark.parametrize("mode", MODES)
def test_a_second_backward_from_a_loss_raises_and_adds_nothing(W, mode):
    expected = gradient(W, X[0])
    loss = losses(mode, W)[0]
    loss.backward()
    with pytest.raises(hb.BackwardError, match=r"retain_graph=True") as raised:
        loss.backward()
    assert isinstance(raised.value, RuntimeError)
    np.testing.assert_allclose(W.grad, expected, rtol=1e-6)


def test_a_backward_inside_the_scope_counts_after_it_exits(W):
    with hb.batching():
        loss = loss_of(W, X[0])
        loss.backward()
    with pytest.raises(hb.BackwardError):
        loss.backward()


@pytest.mark.parametrize("mode", MODES)
def test_retain_graph_allows_one_more_backward_which_accumulates(W, mode):
    once = gradient(W, X[0])
    loss = losses(mode, W)[0]
    loss.backward(retain_graph=True)
    loss.backward(retain_graph=True)
    loss.backward()                                  # the last one the graph was kept for
    np.testing.assert_allclose(W.grad, 3 * once, rtol=1e-6)
    with pytest.raises(hb.BackwardError):
        loss.backward()
    np.testing.assert_allclose(W.grad, 3 * once, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_losses_sharing_a_graph_are_each_differentiated(W, mode):
    """The rule is per loss: other losses of the same scope (or tape), and a total over
    them, still differentiate after one of them has."""
    both = gradient(W, *X)
    first, second, total = losses(mode, W)
    first.backward()
    second.backward()
    np.testing.assert_allclose(W.grad, both, rtol=1e-6)
    W.zero_grad()
    total.backward()
    np.testing.assert_allclose(W.grad, both, rtol=1e-6)
