"""add_n in a batching scope is one RaggedAddN node whatever its operand count, so every
add_n of a type at a depth runs as one batch (plan.py gathers its operands node after node).
Values and gradients equal eager mode's; what does not fit falls back to the fixed-arity
AddN, which names the problem at the recording line."""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.record import signature
from hybridbatch.kernels.segments import segment_sums
from hybridbatch.ops.elementwise import AddN, RaggedAddN

COUNTS = [2, 5, 3, 7, 2, 4]


def _model(W, xs):
    """One add_n per instance over len(xs) values; the instance's loss weighs its sum."""
    total = hb.add_n([hb.tanh(W @ hb.array(x)) for x in xs])
    return total, hb.sum(total * np.arange(1, 4, dtype=np.float32))


def _instances(seed=0, counts=COUNTS):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(4).astype(np.float32) for _ in range(k)] for k in counts]


def _run(mode, instances, used=None, flush_first=False, policy="agenda"):
    """(per-instance sums, W.grad) with the losses of `used` instances (default all) summed."""
    W = hb.Parameter("W", (3, 4), rng=np.random.default_rng(7))
    used = range(len(instances)) if used is None else used
    if mode == "eager":
        outs = [_model(W, xs) for xs in instances]
        hb.add_n([outs[i][1] for i in used]).backward()
        return [o.asnumpy() for o, _ in outs], W.grad.copy(), None
    with hb.batching(granularity=mode, policy=policy) as scope:
        outs = []
        for i, xs in enumerate(instances):
            outs.append(_model(W, xs))
            if flush_first and i == 1:
                outs[0][0].asnumpy()
        loss = hb.add_n([outs[i][1] for i in used])
        if flush_first:   # operands from two flushes: one from the first, the rest after
            extra = hb.add_n([outs[0][0], outs[-1][0], outs[2][0]])
            loss = hb.add_n([loss, hb.sum(extra)])
        loss.backward()
    return [o.asnumpy() for o, _ in outs], W.grad.copy(), scope


@pytest.mark.parametrize("granularity", ["op", "block", "auto"])
@pytest.mark.parametrize("policy", ["agenda", "depth"])
def test_add_ns_of_every_count_run_as_one_batch_and_match_eager(granularity, policy):
    instances = _instances()
    values, grad, _ = _run("eager", instances)
    b_values, b_grad, scope = _run(granularity, instances, policy=policy)
    for v, e in zip(b_values, values):
        np.testing.assert_allclose(v, e, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b_grad, grad, rtol=1e-5, atol=1e-6)
    sums = [(p, b) for p in scope.plans for b in range(p.n_batches)
            if signature.SIGS[p.batch_sig[b]].op is RaggedAddN and p.sizes[b] == len(COUNTS)]
    assert len(sums) == 1, "the six add_n's of 2..7 operands are one batch"
    plan, b = sums[0]
    assert plan.operand_counts(b).tolist() == COUNTS
    assert plan.gathers.size[plan.gathers.first[b]] == sum(COUNTS)


def test_operands_from_two_flushes_and_unreached_nodes():
    instances = _instances(1)
    for used in (None, [0, 3]):     # [0, 3]: the other instances' add_n's get no gradient
        eager = _run("eager", instances, used=used)
        batched = _run("op", instances, used=used)
        np.testing.assert_allclose(batched[1], eager[1], rtol=1e-5, atol=1e-6)
    flushed = _run("op", instances, flush_first=True)
    W = hb.Parameter("W", (3, 4), rng=np.random.default_rng(7))
    outs = [_model(W, xs) for xs in instances]
    extra = hb.add_n([outs[0][0], outs[-1][0], outs[2][0]])
    hb.add_n([hb.add_n([l for _, l in outs]), hb.sum(extra)]).backward()
    np.testing.assert_allclose(flushed[1], W.grad, rtol=1e-5, atol=1e-6)
    assert len(flushed[2].plans) == 2


def test_sums_have_eager_bits():
    """The kernel adds a node's operands one after another from the first, as eager add_n."""
    rng = np.random.default_rng(2)
    vals = [rng.standard_normal(5).astype(np.float32) * 10.0 ** rng.integers(-4, 5) for _ in range(9)]
    with hb.batching() as scope:
        futures = [hb.add_n([hb.array(v) for v in vals]), hb.add_n([hb.array(v) for v in vals[:4]])]
    assert all(signature.SIGS[scope.graph.sig[f.id]].op is RaggedAddN for f in futures)
    np.testing.assert_array_equal(futures[0].asnumpy(), hb.add_n(vals).asnumpy())
    np.testing.assert_array_equal(futures[1].asnumpy(), hb.add_n(vals[:4]).asnumpy())


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.bool_])
def test_segment_sums_of_other_dtypes_match_sequential_adds(dtype):
    rng = np.random.default_rng(3)
    counts = np.array([3, 1, 4, 2], np.int64)
    flat = (rng.standard_normal((counts.sum(), 2, 3)) * 4).astype(dtype)
    want, o = [], 0
    for k in counts:
        acc = flat[o].copy()
        for i in range(1, k):
            acc += flat[o + i]
        want.append(acc)
        o += k
    np.testing.assert_array_equal(segment_sums(np, flat, counts), np.stack(want))


def test_what_does_not_fit_falls_back_to_add_n_of_its_arity():
    W = hb.Parameter("W", (3,), init=1.0)
    with hb.batching() as scope:
        x = hb.array(np.ones(3, np.float32))
        with_param = hb.add_n([x, W])                       # a Parameter operand
        with_array = hb.add_n([x, np.full(3, 2.0, np.float32)])   # a plain array operand
    ops = [signature.SIGS[scope.graph.sig[f.id]].op for f in (with_param, with_array)]
    assert ops == [AddN, AddN]
    np.testing.assert_array_equal(with_param.asnumpy(), [2, 2, 2])
    np.testing.assert_array_equal(with_array.asnumpy(), [3, 3, 3])
    with hb.batching():
        a, b = hb.array(np.ones(3, np.float32)), hb.array(np.ones(4, np.float32))
        with pytest.raises(hb.ShapeError, match=r"add_n.*\(3,\).*\(4,\)"):
            hb.add_n([a, b, a])


def test_a_future_of_another_scope_is_refused():
    with hb.batching():
        old = hb.array(np.ones(3, np.float32))
    with hb.batching():
        new = hb.array(np.ones(3, np.float32))
        with pytest.raises(hb.ScopeError, match="another batching scope"):
            hb.add_n([new, old])


def test_inside_a_hybridized_block_add_n_keeps_its_arity():
    """A trace keeps one operand per position, so add_n there is AddN; block granularity
    still matches eager."""

    class Cell(hb.HybridBlock):
        def __init__(self):
            super().__init__()
            self.W = hb.Parameter("W", (3, 3), rng=np.random.default_rng(4))

        def forward(self, a, b):
            return hb.add_n([hb.tanh(self.W @ a), b, a])

    cell = Cell()
    cell.hybridize()
    xs = [np.full(3, v, np.float32) for v in (0.1, -0.3, 0.7)]
    hb.sum(hb.add_n([cell(x, x * 2) for x in xs])).backward()
    eager = cell.W.grad.copy()
    cell.W.zero_grad()
    with hb.batching(granularity="block"):
        hb.sum(hb.add_n([cell(hb.array(x), hb.array(x * 2)) for x in xs])).backward()
    np.testing.assert_allclose(cell.W.grad, eager, rtol=1e-5)
    assert all(step.sig.op is AddN for step in next(iter(cell._programs.values())).steps if step.sig.op.name == "add_n")


def test_check_numerics_names_the_add_n_line():
    big = np.full(2, 3e38, np.float32)
    with pytest.raises(hb.NumericsError) as info:
        with hb.batching(check_numerics=True):
            hb.add_n([hb.array(big), hb.array(big), hb.array(big)])
    assert "add_n" in str(info.value) and "test_ragged_add_n.py" in str(info.value)
