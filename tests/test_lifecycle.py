"""Lifecycle of scopes, futures, parameters and plans: misuse raises a clear error instead
of a silently wrong value or a crash deep inside a kernel."""
import numpy as np
import pytest

import hybridbatch as hb


class _Leaky(hb.HybridBlock):
    """Keeps an intermediate of its traced forward on self: a placeholder, not a value."""

    def __init__(self):
        super().__init__()
        self.W = hb.Parameter("W", (3, 2), rng=np.random.default_rng(0))

    def forward(self, x):
        self.hidden = self.W @ x
        return hb.tanh(self.hidden)


@pytest.mark.parametrize("mode", ["eager", "op", "block"])
def test_a_value_kept_from_a_traced_forward_cannot_be_read(mode):
    block = _Leaky()
    block.hybridize()
    x = np.ones(2, np.float32)
    if mode == "eager":
        y = block(x)
    else:
        with hb.batching(granularity=mode):
            y = block(x)
    np.testing.assert_allclose(y.asnumpy(), np.tanh(block.W.data @ x), rtol=1e-6)
    with pytest.raises(hb.ScopeError, match="traced"):
        block.hidden.asnumpy()


def test_reading_a_value_inside_a_traced_forward_is_refused():
    class Branchy(hb.HybridBlock):
        def forward(self, x):
            return x * 2.0 if x.asnumpy().sum() > 0 else x

    block = Branchy()
    block.hybridize()
    with pytest.raises(hb.ScopeError, match="traced"):
        block(np.ones(2, np.float32))


def test_freezing_a_parameter_discards_its_gradient():
    """A gradient left from before freezing must not be applied at the first step after
    unfreezing: a frozen parameter keeps no gradient."""
    w = hb.Parameter("w", (2,), init=1.0)
    x = np.array([2.0, 3.0], np.float32)
    trainer = hb.Trainer([w], "sgd", {"learning_rate": 1.0})
    hb.sum(w * x).backward()
    w.grad_req = "null"
    assert not w.grad.any()
    trainer.step(1)
    np.testing.assert_array_equal(w.data, [1.0, 1.0])
    w.grad_req = "write"
    with hb.batching():
        hb.sum(w * x).backward()
    trainer.step(1)
    np.testing.assert_allclose(w.data, 1.0 - x)


def test_an_initializer_must_make_the_parameters_shape_and_dtype():
    """A (1,) bias would broadcast silently in every op; a float64 one would disagree with
    the float32 its signatures promise."""
    class Made(hb.train.parameter.Initializer):
        def __init__(self, shape):
            self.shape = shape

        def __call__(self, shape, dtype, rng):
            return np.full(self.shape, 0.5, np.float64)

    with pytest.raises(ValueError, match=r"'b'.*shape \(1,\).*\(3,\)"):
        hb.Parameter("b", (3,), init=Made((1,)))
    b = hb.Parameter("b", (3,), init=Made((3,)))
    assert b.data.dtype == np.float32 and b.data.shape == (3,)


@pytest.mark.parametrize("bad, error", [(-1, ValueError), (2.5, TypeError), (True, TypeError)])
def test_plan_cache_size_must_be_a_count(bad, error):
    before = hb.settings.plan_cache_size
    with pytest.raises(error, match="plan_cache_size"):
        hb.set_plan_cache_size(bad)
    assert hb.settings.plan_cache_size == before


def test_iterating_a_future_follows_numpy():
    """Iteration fell back to __getitem__, which stops at the first IndexError: a 0-d
    value iterated as empty, so sum(loss) was silently 0."""
    v = np.arange(3, dtype=np.float32)
    with hb.batching():
        rows = list(hb.array(v) * 2.0)
        loss = hb.sum(hb.array(v))
        with pytest.raises(TypeError, match="0-d"):
            iter(loss)
        with pytest.raises(TypeError, match="0-d"):
            sum(loss)
    np.testing.assert_array_equal([r.item() for r in rows], v * 2.0)


def test_a_cached_schedule_is_reused_only_for_the_same_depths():
    """A flush's local structure can repeat while the depths of its operands from earlier
    flushes differ; depth-driven policies schedule those differently, so the cached
    schedule of one is not the policy's schedule of the other."""
    W = hb.Parameter("W", (3, 3), rng=np.random.default_rng(0))
    x = np.ones(3, np.float32)

    def second_flush(deep):
        with hb.batching(policy="depth") as scope:
            a = hb.tanh(W @ x)
            b = hb.tanh(W @ x)
            for _ in range(deep):
                b = hb.tanh(W @ b)
            b.asnumpy()
            hb.sigmoid(a), hb.sigmoid(b)       # the same two nodes after either chain
        return scope.plans[-1]

    with hb.settings(plan_cache_size=32):
        second_flush(3)
        shallow = second_flush(0)
        reused = second_flush(0)
    assert shallow.n_batches == 1              # both sigmoids at depth 3: one batch
    assert reused.cache_hit                    # the same depths again: reused
