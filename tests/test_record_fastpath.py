"""Block-granularity recording's fast path: every output arity, depths, and its refusals."""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.errors import ScopeError


class Outputs(hb.HybridBlock):
    """x -> n outputs (x * 1, x * 2, ...); n=None: the single value x * 1, not a tuple."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x):
        outs = tuple(x * float(k + 1) for k in range(self.n or 1))
        return outs[0] if self.n is None else outs


@pytest.mark.parametrize("n", [None, 1, 2, 3, 4, 5])
def test_every_output_arity_gives_its_futures_and_values(n):
    block = Outputs(n)
    block.hybridize()
    x = np.arange(3, dtype=np.float32)
    with hb.batching(granularity="block") as scope:
        first = block(x)
        again = block(first if n is None else first[-1])
    if n is None:
        assert isinstance(first, hb.Future) and isinstance(again, hb.Future)
        outs = [first]
    else:
        assert isinstance(first, tuple) and len(first) == n == len(again)
        assert [f.id for f in first] == list(range(first[0].id, first[0].id + n))
        assert all(f.scope is scope for f in first)
        outs = list(first)
    for k, f in enumerate(outs):
        np.testing.assert_array_equal(f.asnumpy(), x * (k + 1))
    last = again if n is None else again[-1]
    np.testing.assert_array_equal(last.asnumpy(), x * (len(outs) ** 2))


def test_a_call_is_one_deeper_than_its_deepest_operand():
    """Its extra outputs are as deep as it; an input is at depth 0."""
    block = Outputs(3)
    block.hybridize()
    x = np.ones(2, np.float32)
    with hb.batching(granularity="block") as scope:
        a = block(x)                      # reads an input node (depth 0)
        b = block(a[1])
        c = block(b[2])
        d = Outputs(None)
        d.hybridize()
        e = d(c[0])
        e.asnumpy()                       # depths are the flush's
        depth = scope.graph.depths.view
        assert depth[0] == 0
        assert [depth[f.id] for f in a] == [1, 1, 1]
        assert [depth[f.id] for f in b] == [2, 2, 2]
        assert [depth[f.id] for f in c] == [3, 3, 3]
        assert depth[e.id] == 4
        f = d(e)                          # a second flush reads the first's depths
        f.asnumpy()
        assert scope.graph.depths.view[f.id] == 5
        assert len(scope.graph.depths.view) == len(scope.graph)


def test_op_granularity_depths_count_ops_and_a_parameter_read():
    W = hb.Parameter("W", (2, 2))
    with hb.batching(granularity="op") as scope:
        y = hb.tanh(W @ np.ones(2, np.float32)) + hb.sum(hb.tanh(W))    # tanh(W) reads W first
        y.asnumpy()
    got = [(hb.record.signature.SIGS[s].op.name, d) for s, d in zip(scope.graph.sig, scope.graph.depths.view.tolist())]
    assert got == [("input", 0), ("matmul", 1), ("tanh", 2), ("param", 1), ("tanh", 2), ("sum", 3), ("add", 4)]


def test_graph_delta_gives_each_flush_its_calls_and_can_give_them_again():
    """A call of k outputs is one call and k nodes; a flush rebuilt after a failure asks for
    the same delta again."""
    from hybridbatch.record.graph import Graph
    g = Graph()
    assert g.add(7, (1,), (), -1) == 0                  # an input
    assert g.add(8, (1, 2, 3), (0,), 5) == 1           # a block call of three outputs: nodes 1-3
    first = g.delta(0)
    assert len(g) == 4 and [a.tolist() for a in first] == [[7, 8], [-1, 5], [0, 0, 1], [0]]
    assert g.add(9, (1,), (3, 1), -1) == 4
    second = g.delta(4)
    again = g.delta(4)
    assert [a.tolist() for a in second] == [a.tolist() for a in again] == [[9], [-1], [0, 2], [3, 1]]


def test_a_future_of_another_scope_is_refused_at_the_call():
    block = Outputs(2)
    block.hybridize()
    with hb.batching(granularity="block"):
        old = block(np.ones(2, np.float32))
    with hb.batching(granularity="block"):
        with pytest.raises(ScopeError, match="outside the batching scope"):
            block(old[0])


def test_the_inlined_appends_build_the_same_graph_as_graph_add():
    """Recording's fast paths append a call's lists themselves (record, a block call, an
    input array, a list op); with check_numerics every call goes through graph.add (it also
    keeps the caller's line). Both give the same calls."""
    block = Outputs(2)
    block.hybridize()
    x = np.arange(4, dtype=np.float32)

    def calls(check_numerics):
        with hb.batching(granularity="block", check_numerics=check_numerics) as scope:
            a = hb.array(x)
            b, c = block(x)                     # an input array into a block call
            d = hb.add_n([a, b, c]) - 0.5       # a list op, a packed number
            hb.sum(hb.tanh(d) * b)
            g = scope.graph
            return g.sig, g.type, g.aux, g.args, g.arg_end, sorted(g.constants)

    assert calls(False) == calls(True)
