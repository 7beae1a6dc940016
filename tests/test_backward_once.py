"""backward() runs once from a loss unless the first call keeps the graph (retain_graph=True),
as in PyTorch: a repeated call used to add the same gradients again, silently doubling them."""
import contextlib

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch import nn

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


def _lstm_loss(cell, W, granularity):
    xs = [np.random.default_rng(i).standard_normal(4).astype(np.float32) for i in range(6)]
    if granularity == "eager":
        return hb.add_n([hb.sum(cell(W @ x, x, x)[0]) for x in xs])
    with hb.batching(granularity=granularity):
        total = hb.add_n([hb.sum(cell(W @ x, x, x)[0]) for x in xs])
    total.asnumpy()
    return total


def _assign_bias(cell, W):
    cell.bias.data = cell.bias.data - 1.0


def _trainer_step(cell, W):
    hb.Trainer([W], "sgd").step(1)


@pytest.mark.parametrize("change", [_assign_bias, _trainer_step])
@pytest.mark.parametrize("granularity", ["eager", "block", "op", "auto"])
def test_a_parameter_changed_between_the_forward_and_backward_raises(granularity, change):
    """A block's fused backward recomputed the LSTM gates from the changed bias: gradients
    off by 80% at block granularity, where eager and op used the saved gates."""
    cell = nn.LSTMCell(4, 4, seed=0)
    cell.hybridize()
    W = hb.Parameter("W", (4, 4), rng=np.random.default_rng(1))
    loss = _lstm_loss(cell, W, granularity)
    change(cell, W)
    name = "bias" if change is _assign_bias else "W"
    with pytest.raises(hb.BackwardError, match=rf"parameter '{name}' changed after the forward pass"):
        loss.backward()
    assert not W.grad.any() and not cell.bias.grad.any()      # nothing was added
    loss = _lstm_loss(cell, W, granularity)                   # computed anew: fine
    loss.backward()
    assert W.grad.any()


def test_an_update_after_a_flush_that_a_later_backward_does_not_reach_is_allowed():
    """The check covers the flushes a backward goes through: an update between two losses'
    flushes in one scope, each differentiated after its own flush, is the documented way."""
    W = hb.Parameter("W", (2, 2), init=1.0)
    trainer = hb.Trainer([W], "sgd", {"learning_rate": 0.1})
    with hb.batching():
        first = hb.sum(W @ hb.array([1.0, 2.0]))
        first.backward()
        trainer.step(1)
        second = hb.sum(W @ hb.array([3.0, 4.0]))
        second.backward()
    np.testing.assert_allclose(W.grad, [[3.0, 4.0], [3.0, 4.0]])


@pytest.mark.parametrize("batched", [False, True])
def test_a_parameter_changed_that_the_loss_does_not_read_is_allowed(batched):
    """Only what the backward reaches is checked: a parameter read by another value of the
    same flush, then updated, had made the batched backward raise where eager did not."""
    A, B = hb.Parameter("A", (2, 2), init=1.0), hb.Parameter("B", (2, 2), init=1.0)
    with (hb.batching() if batched else contextlib.nullcontext()):
        loss = hb.sum(A @ hb.array([1.0, 2.0]))
        hb.sum(B @ hb.array([1.0, 2.0]))
        loss.asnumpy()
    hb.Trainer([B], "sgd").step(1)
    loss.backward()
    np.testing.assert_allclose(A.grad, [[1.0, 2.0], [1.0, 2.0]])


@pytest.mark.parametrize("batched", [False, True])
def test_a_value_of_a_frozen_parameter_shared_by_minibatches_between_steps_is_allowed(batched):
    """Computed once in the scope, in a flush that also read the first minibatch's W."""
    frozen = hb.Parameter("frozen", (2,), init=0.5, grad_req="null")
    W = hb.Parameter("W", (2, 2), init=1.0)
    trainer = hb.Trainer([W], "sgd", {"learning_rate": 0.1})
    with (hb.batching() if batched else contextlib.nullcontext()):
        shared = hb.tanh(frozen * 1.0)
        for x in ([1.0, 2.0], [3.0, 4.0]):
            hb.sum(W @ (hb.array(x) + shared)).backward()
            trainer.step(1)
    np.testing.assert_allclose(W.data, 1.0 - 0.1 * np.outer([1, 1], [1.0, 2.0] + np.tanh(0.5))
                               - 0.1 * np.outer([1, 1], [3.0, 4.0] + np.tanh(0.5)), rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
def test_a_backward_that_raises_part_way_is_not_run_again(mode, W):
    """The first backward adds W's gradient, then a grad_fn raises: a retry would add W's
    part a second time, so it is refused, and the error says what .grad holds."""
    failures = iter([RuntimeError("grad_fn failed")])

    def grad_fn(a, y, gy):
        for e in failures:
            raise e
        return (gy * 2,)

    B = hb.Parameter("B", (3,), init=1.0)

    def loss():
        doubled = hb.py_func(lambda v: v * 2, W @ X[0], out_shape=(3,), grad_fn=grad_fn)
        return hb.sum(W @ X[1]) + hb.sum(B * doubled)

    with hb.batching() if mode == "batched" else contextlib.nullcontext():
        total = loss()
    with pytest.raises(RuntimeError, match="grad_fn failed") as failed:
        total.backward()
    assert any("stopped part way" in note for note in failed.value.__notes__)
    held = W.peek_grad().copy()
    with pytest.raises(hb.BackwardError, match="stopped part way"):
        total.backward()
    np.testing.assert_array_equal(W.peek_grad(), held)
