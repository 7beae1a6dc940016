"""A block input that the block only slices gets its gradient back as a ColumnGrad (only the
sliced columns are scattered, ops/registry.py), made dense when more reaches it: batched
gradients equal eager ones whichever way the rows were gathered."""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.kernels import scatter
from hybridbatch.ops import ColumnGrad


class _Sliced(hb.HybridBlock):
    """Reads its input p by `how`: one column range, two, a range and the whole, a strided
    slice (not a column range), or a range of a first slice."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.W = hb.Parameter("W", (4, 4), rng=np.random.default_rng(1))

    def forward(self, p, h):
        if self.how == "one":
            z = p[2:6]
        elif self.how == "two":
            z = p[0:4] * p[4:8]
        elif self.how == "and whole":
            z = p[1:5] + hb.sum(p * p)
        elif self.how == "strided":
            z = p[0:8:2]
        else:   # "nested"
            z = p[1:7][1:5]
        return hb.tanh(self.W @ z + h)


def _loss(block, ps, hs):
    return hb.add_n([hb.sum(block(p, h)) for p, h in zip(ps, hs)])


def _grads(block, proj, xs, hs, mode, order="same"):
    """Gradients of W and of the projection V that makes each p = V x, in one mode. The
    block's batch reads the p by a slice of their arena ("same"), by rows out of order
    ("reversed"), or from two flushes' arenas ("two flushes": half the p flushed first)."""
    params = [block.W, proj]
    for q in params:
        q.zero_grad()
    if mode == "eager":
        ps = [proj @ hb.array(x) for x in xs]
        _loss(block, ps[::-1] if order == "reversed" else ps, hs).backward()
    else:
        with hb.batching(granularity=mode):
            ps = [proj @ hb.array(x) for x in xs[:3]]
            if order == "two flushes":
                ps[0].asnumpy()
            ps += [proj @ hb.array(x) for x in xs[3:]]
            _loss(block, ps[::-1] if order == "reversed" else ps, [hb.array(h) for h in hs]).backward()
    return [q.grad.copy() for q in params]


@pytest.mark.parametrize("how", ["one", "two", "and whole", "strided", "nested"])
@pytest.mark.parametrize("order", ["same", "reversed", "two flushes"])
def test_gradients_through_sliced_block_inputs_equal_eager(how, order):
    rng = np.random.default_rng(0)
    block = _Sliced(how)
    block.hybridize()
    proj = hb.Parameter("V", (9, 3), rng=rng)
    xs = [rng.standard_normal(3).astype(np.float32) for _ in range(7)]
    hs = [rng.standard_normal(4).astype(np.float32) for _ in range(7)]
    want = _grads(block, proj, xs, hs, "eager", order)
    for mode in ("block", "op"):
        for got, ref in zip(_grads(block, proj, xs, hs, mode, order), want):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6, err_msg=mode)


def test_a_block_hands_back_columns_for_an_input_it_only_slices():
    block = _Sliced("one")
    block.hybridize()
    rng = np.random.default_rng(2)
    program = block._program((hb.record.signature.type_id((9,), np.float32), hb.record.signature.type_id((4,), np.float32)))
    p, h = rng.standard_normal((5, 9)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    _, vals = program.op.forward(np, program.sig, [p, h], None)
    g = program.op.backward(np, program.sig, None, None, None, np.ones((5, 4), np.float32), (True, True), vals)
    assert isinstance(g[0], ColumnGrad) and (g[0].first, g[0].width, g[0].values.shape) == (2, 9, (5, 4))
    dense = g[0].dense()
    assert dense.shape == (5, 9) and not dense[:, :2].any() and not dense[:, 6:].any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_scatter_add_columns_adds_repeated_rows_into_their_columns(dtype):
    rng = np.random.default_rng(3)
    rows = np.array([4, 1, 4, 0, 4])
    dst = rng.standard_normal((6, 10)).astype(dtype)
    src = rng.standard_normal((5, 3)).astype(dtype)
    want = dst.astype(np.float64)
    np.add.at(want[:, 5:8], rows, src.astype(np.float64))
    scatter.scatter_add_columns(dst, rows, 5, src)
    np.testing.assert_allclose(dst, want, rtol=1e-2 if dtype == np.float16 else 1e-6, atol=1e-2 if dtype == np.float16 else 1e-6)
