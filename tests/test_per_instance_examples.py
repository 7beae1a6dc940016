"""The per-instance examples examples/ggnn.py (GRUCell message passing, dropout, LayerNorm over
random graphs) and examples/attention_pooling.py (nn.Attention over sets of 2-24 vectors):
batched runs give the eager losses and gradients at every granularity, with one hb.seed
drawing the same dropout masks, and each script's --compare run agrees."""
import sys

import numpy as np
import pytest

import hybridbatch as hb
from helpers import EXAMPLES, run_example

sys.path.insert(0, str(EXAMPLES))
import attention_pooling  # noqa: E402
import ggnn  # noqa: E402


def small_ggnn():
    return ggnn.GGNN(features=8, hidden=6, classes=3, steps=2, dropout=0.3, seed=1), ggnn.random_graphs(7, seed=2)


def small_pooling():
    model = attention_pooling.AttentionPooling(dim=16, hidden=6, classes=4, heads=2, dropout=0.3, seed=1)
    return model, attention_pooling.random_sets(7, min_size=1, max_size=9, seed=2)


def losses_and_grads(model, data, granularity=None, seed=5):
    """Per-instance losses and every gradient of their sum, through hb.map as the examples'
    training does, eagerly (granularity None) or in a batching scope."""
    params = model.parameters()
    for p in params:
        p.zero_grad()
    hb.seed(seed)
    if granularity is None:
        losses = hb.map(model.loss, data)
        hb.add_n(losses).backward()
    else:
        with hb.batching(granularity=granularity):
            losses = hb.map(model.loss, data)
            hb.add_n(losses).backward()
    return np.array([loss.item() for loss in losses]), [p.grad.copy() for p in params]


@pytest.mark.parametrize("granularity", ["op", "block", "auto"])
@pytest.mark.parametrize("make", [small_ggnn, small_pooling], ids=["ggnn", "attention_pooling"])
def test_batched_gives_eager_losses_and_gradients_with_dropout(make, granularity):
    model, data = make()
    model.hybridize()
    eager_losses, eager_grads = losses_and_grads(model, data)
    losses, grads = losses_and_grads(model, data, granularity)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, eager_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    other_seed = losses_and_grads(model, data, granularity, seed=6)[0]
    assert not np.allclose(other_seed, eager_losses)          # dropout is on: the masks matter


@pytest.mark.parametrize("make", [small_ggnn, small_pooling], ids=["ggnn", "attention_pooling"])
def test_eval_mode_turns_dropout_off(make):
    model, data = make()
    model.eval()
    first, _ = losses_and_grads(model, data[:3], seed=1)
    np.testing.assert_allclose(losses_and_grads(model, data[:3], "block", seed=2)[0], first, rtol=1e-5)


def test_random_graphs_label_the_feature_class_of_the_most_pointed_to_node():
    for g in ggnn.random_graphs(20, features=8, classes=3, seed=0):
        indegree = np.bincount([v for _, v, _ in g.edges], minlength=len(g.features))
        assert g.label == int(np.argmax(g.features[int(np.argmax(indegree))][:3]))
        assert all(u != v and 0 <= t < 2 for u, v, t in g.edges)
        assert {u for u, _, _ in g.edges} == set(range(len(g.features)))


@pytest.mark.parametrize("script", ["ggnn.py", "attention_pooling.py"])
def test_example_trains_and_agrees_with_eager(script):
    done = run_example(script, "--limit", "24", "--dev", "8", "--hidden", "8", "--batch", "8", "--epochs", "1",
                       "--compare")
    assert done.returncode == 0, done.stderr
    assert "eager epoch 1" in done.stdout and "eager and batched agree" in done.stdout
