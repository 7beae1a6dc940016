"""Rows inside a batch are ordered by their nearest later reader (layout.py): batches keep
their nodes, chains of different lengths read their state in place, and values and
gradients stay eager mode's."""
import numpy as np
from hypothesis import given, settings, strategies as st

import hybridbatch as hb
from hybridbatch.runtime import plan as plan_module
from hybridbatch.record import signature
from hybridbatch.runtime.layout import rows_by_next_reader


@st.composite
def _graphs(draw):
    """(order, bptr, arg_ptr, args): a random DAG batched by depth, batches shuffled inside."""
    n = draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    args, arg_ptr, depth = [], [0], np.zeros(n, np.int64)
    for v in range(n):
        k = int(rng.integers(0, 4)) if v else 0
        ops = [int(u) for u in rng.integers(-1, v, k)] if v else []
        args += ops
        arg_ptr.append(len(args))
        depth[v] = 1 + max([depth[u] for u in ops if u >= 0], default=-1)
    order = np.concatenate([rng.permutation(np.flatnonzero(depth == d)) for d in range(depth.max() + 1)])
    bptr = np.concatenate([[0], np.cumsum(np.bincount(depth))])
    return order.astype(np.int64), bptr.astype(np.int64), np.array(arg_ptr, np.int64), np.array(args, np.int64)


@settings(max_examples=200, deadline=None)
@given(_graphs())
def test_each_batch_keeps_its_nodes_sorted_by_their_next_reader(graph):
    order, bptr, arg_ptr, args = graph
    out = rows_by_next_reader(order, bptr, arg_ptr, args)
    n, position = len(arg_ptr) - 1, {}
    for b in range(len(bptr) - 1):
        lo, hi = bptr[b], bptr[b + 1]
        assert sorted(out[lo:hi]) == sorted(order[lo:hi])
        for i, v in enumerate(out[lo:hi]):
            position[int(v)] = (b, i)
    for b in range(len(bptr) - 1):
        nearest = []
        for v in out[bptr[b]:bptr[b + 1]]:
            readers = [position[w] for w in range(n) if v in args[arg_ptr[w]:arg_ptr[w + 1]].tolist()]
            nearest.append(min(readers) if readers else (len(bptr), 0))
        assert nearest == sorted(nearest), "read nodes first, in their readers' order"


class _Step(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.U = hb.Parameter("U", (3, 3), rng=np.random.default_rng(5))

    def forward(self, x, h):
        return hb.tanh(self.U @ h + x)


def _chain_losses(step, chains):
    losses = []
    for xs in chains:
        h = hb.array(np.zeros(3, np.float32))
        for x in xs:
            h = step(hb.array(x), h)
        losses.append(hb.sum(h))
    return hb.add_n(losses)


def test_chains_of_different_lengths_read_their_state_in_place():
    rng = np.random.default_rng(6)
    lengths = [2, 6, 3, 5, 1, 6, 4]      # recorded in no length order
    chains = [[rng.standard_normal(3).astype(np.float32) for _ in range(k)] for k in lengths]
    step = _Step()
    step.hybridize()
    _chain_losses(step, chains).backward()
    eager = step.U.grad.copy()
    step.U.zero_grad()
    with hb.batching(granularity="block") as scope:
        _chain_losses(step, chains).backward()
    np.testing.assert_allclose(step.U.grad, eager, rtol=1e-5, atol=1e-6)
    plan = scope.plans[0]
    steps = [b for b in range(plan.n_batches) if signature.SIGS[plan.batch_sig[b]].op.name == "block:_Step"]
    assert [plan.sizes[b] for b in steps] == [7, 6, 5, 4, 3, 2]
    # operand 1 (h) of every step after the first is the previous step's first rows: a view
    assert all(plan.gathers.kind[plan.gathers.first[b] + 1] == plan_module.SLICE for b in steps[1:])
