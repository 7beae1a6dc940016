"""W1 Tree-LSTM as written per instance: batched equals eager, one graph node per tree node."""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch_workloads.data import Vocab, synthetic_sst
from hybridbatch_workloads.models import TreeLSTMSentiment


@pytest.fixture(scope="module")
def w1():
    trees = synthetic_sst(6, seed=3)
    vocab = Vocab.build(w.word for t in trees for w in t.leaves())
    model = TreeLSTMSentiment(vocab, embed=8, hidden=8)
    model.hybridize()
    return model, trees


def _loss_and_grads(model, trees, granularity=None):
    params = list(model.collect_params().values())
    for p in params:
        p.zero_grad()
    if granularity is None:
        loss = hb.add_n([model.tree_loss(t) for t in trees])
        scope = None
    else:
        with hb.batching(granularity=granularity) as scope:
            loss = hb.add_n([model.tree_loss(t) for t in trees])
    loss.backward()
    return loss.asnumpy(), [p.grad.copy() for p in params], scope


def test_w1_batched_equals_eager(w1):
    model, trees = w1
    ref_loss, ref_grads, _ = _loss_and_grads(model, trees)
    for granularity in ("block", "op", "auto"):
        loss, grads, _ = _loss_and_grads(model, trees, granularity)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
        for g, r in zip(grads, ref_grads):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6)


def test_w1_records_one_node_per_tree_node_at_block_granularity(w1):
    model, trees = w1
    tree_nodes = sum(len(t.nodes()) for t in trees)
    _, _, block = _loss_and_grads(model, trees, "block")
    _, _, op = _loss_and_grads(model, trees, "op")
    assert block.stats.nodes == tree_nodes + 1            # + the minibatch's add_n
    assert op.stats.nodes > 10 * tree_nodes
    assert block.stats.batches == block.stats.lower_bound
