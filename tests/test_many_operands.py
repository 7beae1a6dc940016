"""Nodes with many operands (a concat of a long list, a block taking *args): the flush's
per-node masks of operand positions hold 63 bits, and positions past them are neither
misread nor folded."""
import numpy as np
import pytest

import hybridbatch as hb


class Pool(hb.HybridBlock):
    """The tanh of the sum of its arguments, times a weight, then summed: one node of len(args)
    operands; the last argument may be a word's embedding (a lookup that batches fold)."""

    def __init__(self):
        super().__init__()
        self.w = hb.Parameter("w", (4,), rng=np.random.default_rng(0))

    def forward(self, *xs):
        return hb.sum(hb.tanh(hb.add_n(list(xs))) * self.w)


@pytest.mark.parametrize("granularity", ["block", "op", "auto"])
@pytest.mark.parametrize("count", [63, 64, 68, 130])
def test_a_node_of_many_operands_batches_as_eager(granularity, count):
    table = hb.Parameter("table", (10, 4), rng=np.random.default_rng(1))
    pool = Pool()
    pool.hybridize()
    rng = np.random.default_rng(2)
    data = [[rng.standard_normal(4).astype(np.float32) for _ in range(count - 1)] for _ in range(3)]

    def loss():
        total = []
        for k, xs in enumerate(data):
            hs = [hb.tanh(hb.array(x)) for x in xs]
            total.append(hb.sum(hb.concat(hs)))                       # count - 1 operands
            total.append(hb.sum(hb.stack(hs + [hb.lookup(table, k)])))
            total.append(pool(*hs, hb.lookup(table, k)))              # the lookup at position count - 1
        return hb.add_n(total)

    eager = loss()
    eager.backward()
    want = {p.name: p.grad.copy() for p in (table, pool.w)}
    table.zero_grad()
    pool.w.zero_grad()
    with hb.batching(granularity=granularity):
        batched = loss()
    batched.backward()
    np.testing.assert_allclose(batched.item(), eager.item(), rtol=1e-5)
    for p in (table, pool.w):
        np.testing.assert_allclose(p.grad, want[p.name], rtol=1e-4, atol=1e-6, err_msg=p.name)
