"""nn.Attention: a query over a per-instance list of vectors. Its values are numpy's scaled
dot-product attention; batched runs at every granularity give eager values and gradients;
sets of every size batch together (the ragged list ops), so the batch count does not grow
with the number of distinct sizes."""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch import nn

QUERY, VALUE, DIM = 5, 4, 6


def sets(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=QUERY).astype(np.float32),
             [rng.normal(size=VALUE).astype(np.float32) for _ in range(n)]) for n in sizes]


def reference(attention, query, values):
    """numpy's multi-head scaled dot-product attention with the block's weights."""
    w = {name: p.data for name, p in attention.collect_params().items()}
    heads = attention.heads
    q = np.split(w["query.weight"] @ query, heads)
    ks = np.split(np.stack([w["key_value.key.weight"] @ v for v in values]), heads, axis=1)
    vs = np.split(np.stack([w["key_value.value.weight"] @ v for v in values]), heads, axis=1)
    contexts = []
    for qh, kh, vh in zip(q, ks, vs):
        scores = kh @ qh / np.sqrt(DIM // heads)
        e = np.exp(scores - scores.max())
        contexts.append((e / e.sum()) @ vh)
    return w["output.weight"] @ np.concatenate(contexts)


def run(attention, data, granularity=None):
    """(outputs, gradients) of sum(output * target) over the sets, eagerly or batched."""
    params = attention.parameters()
    for p in params:
        p.zero_grad()
    target = np.linspace(-1, 1, DIM, dtype=np.float32)

    def build():
        outs = [attention(q, vs) for q, vs in data]
        hb.add_n([hb.sum(o * target) for o in outs]).backward()
        return outs

    if granularity is None:
        outs = build()
    else:
        with hb.batching(granularity=granularity):
            outs = build()
    return [o.asnumpy() for o in outs], [p.grad.copy() for p in params]


@pytest.mark.parametrize("heads", [1, 2, 3])
def test_values_are_scaled_dot_product_attention(heads):
    attention = nn.Attention(QUERY, VALUE, DIM, heads=heads, seed=1)
    data = sets([1, 3, 7])
    for (q, vs), out in zip(data, run(attention, data)[0]):
        np.testing.assert_allclose(out, reference(attention, q, vs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("granularity", ["op", "block", "auto"])
@pytest.mark.parametrize("heads", [1, 2])
def test_batched_gives_eager_values_and_gradients(heads, granularity):
    attention = nn.Attention(QUERY, VALUE, DIM, heads=heads, seed=2)
    attention.hybridize()
    data = sets([4, 1, 6, 2, 2, 5, 3])
    eager_outs, eager_grads = run(attention, data)
    outs, grads = run(attention, data, granularity)
    for got, want in zip(outs, eager_outs):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, eager_grads):
        assert np.any(want != 0)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_sets_of_every_size_run_in_as_many_batches_as_sets_of_one_size():
    attention = nn.Attention(QUERY, VALUE, DIM, heads=2, seed=3)
    attention.hybridize()
    batches = []
    for sizes in ([3] * 8, [1, 2, 3, 4, 5, 6, 7, 8]):
        with hb.batching(granularity="block") as scope:
            outs = [attention(q, vs) for q, vs in sets(sizes)]
        batches.append(scope.stats.batches)
        assert all(o.shape == (DIM,) for o in outs)
    assert batches[0] == batches[1]


def test_units_sets_the_output_size():
    attention = nn.Attention(QUERY, VALUE, DIM, heads=3, units=2, seed=0)
    (q, vs), = sets([3])
    assert attention(q, vs).shape == (2,)


def test_bad_heads_and_an_empty_set_raise():
    with pytest.raises(ValueError, match="multiple of heads"):
        nn.Attention(QUERY, VALUE, DIM, heads=4)
    with pytest.raises(ValueError, match="multiple of heads"):
        nn.Attention(QUERY, VALUE, DIM, heads=0)
    with pytest.raises(ValueError, match="empty list"):
        nn.Attention(QUERY, VALUE, DIM)(np.zeros(QUERY, np.float32), [])
