"""Ops over a list of values whose length differs per instance (attention scores over a
sentence, a node's children): softmax, log_softmax, sum, max, min, logsumexp and
weighted_sum over lists run as one batch per signature whatever the lengths (the ragged ops
of ops/lists.py, segment kernels), with eager mode's values and gradients."""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.record import signature

VOCAB = 50


def _lengths(seed=0, n=64, longest=40):
    lengths = np.random.default_rng(seed).integers(1, longest + 1, n)
    lengths[:2] = (1, longest)          # both ends of the range, always
    return lengths.tolist()


def _words(seed, lengths):
    rng = np.random.default_rng(seed + 1)
    return [rng.integers(0, VOCAB, k).tolist() for k in lengths]


def _params(shape=()):
    rng = np.random.default_rng(3)
    E = hb.Parameter("scores", (VOCAB,) + shape, init=0.0)
    E.data = rng.normal(0, 2, (VOCAB,) + shape).astype(np.float32)
    V = hb.Parameter("values", (VOCAB, 4), init=0.0)
    V.data = rng.normal(0, 1, (VOCAB, 4)).astype(np.float32)
    return E, V


def _weights(k, shape=()):
    """A fixed weight per list position, so every output reaches the loss differently."""
    return [np.float32(0.5 + (j % 5)) * np.ones(shape, np.float32) for j in range(k)]


def _run(model, words, scope_kw=None, shape=()):
    """(outputs per instance as numpy, gradients of both tables, the scope or None)."""
    E, V = _params(shape)

    def record():
        outs = [model(E, V, ws) for ws in words]
        terms = []
        for out in outs:
            ys = out if isinstance(out, list) else [out]
            terms += [hb.sum(y * w) for y, w in zip(ys, _weights(len(ys), ys[0].shape))]
        hb.add_n(terms).backward()
        return outs

    if scope_kw is None:
        outs, scope = record(), None
    else:
        with hb.batching(**scope_kw) as scope:
            outs = record()
    values = [[y.asnumpy() for y in (o if isinstance(o, list) else [o])] for o in outs]
    return values, (E.grad.copy(), V.grad.copy()), scope


def _batches_of(scope, names):
    """(op name, batch size) of every batch of the scope whose op is one of `names`."""
    return [(signature.SIGS[p.batch_sig[b]].op.name, p.sizes[b]) for p in scope.plans for b in range(p.n_batches)
            if signature.SIGS[p.batch_sig[b]].op.name in names]


def _assert_same(batched, eager):
    for b_vals, e_vals in zip(batched[0], eager[0]):
        assert len(b_vals) == len(e_vals)
        for b, e in zip(b_vals, e_vals):
            np.testing.assert_allclose(b, e, rtol=1e-5, atol=1e-6)
    for b, e in zip(batched[1], eager[1]):
        np.testing.assert_allclose(b, e, rtol=1e-4, atol=1e-6)
    assert any(np.abs(e).sum() > 0 for e in eager[1])


def _softmax(E, V, ws):
    return hb.softmax([hb.lookup(E, w) for w in ws])


@pytest.mark.parametrize("policy", ["agenda", "depth", "tail-last"])
def test_softmax_over_64_lists_of_lengths_1_to_40_runs_in_two_batches(policy):
    words = _words(0, _lengths())
    eager = _run(_softmax, words)
    batched = _run(_softmax, words, dict(policy=policy))
    _assert_same(batched, eager)
    softmax_batches = _batches_of(batched[2], {"logsumexp_n", "exp_sub"})
    assert len(softmax_batches) <= 2, softmax_batches
    lengths = _lengths()
    assert sum(size for name, size in softmax_batches if name == "logsumexp_n") == len(lengths)
    assert sum(size for name, size in softmax_batches if name == "exp_sub") == sum(lengths)
    for ys in eager[0]:
        np.testing.assert_allclose(np.sum(ys), 1.0, rtol=1e-5)


def _attention(E, V, ws):
    """Attention pooling: a softmax over the words' scores weighs their value vectors."""
    return hb.weighted_sum(hb.softmax([hb.lookup(E, w) for w in ws]), [hb.lookup(V, w) for w in ws])


LIST_MODELS = {
    "sum": (lambda E, V, ws: hb.sum([hb.lookup(V, w) for w in ws]), {"add_n"}),
    "max": (lambda E, V, ws: hb.max([hb.lookup(V, w) for w in ws]), {"max_n"}),
    "min": (lambda E, V, ws: hb.min([hb.lookup(E, w) for w in ws]), {"min_n"}),
    "logsumexp": (lambda E, V, ws: hb.logsumexp([hb.lookup(V, w) for w in ws]), {"logsumexp_n"}),
    "log_softmax": (lambda E, V, ws: hb.log_softmax([hb.lookup(E, w) for w in ws]), {"logsumexp_n", "sub"}),
    "attention": (_attention, {"logsumexp_n", "exp_sub", "mul", "add_n"}),
}


@pytest.mark.parametrize("name", LIST_MODELS)
def test_list_ops_run_one_batch_per_signature_and_match_eager(name):
    """Lists with repeated words, so that max and min see ties: the gradient is shared
    among the tied entries in both modes."""
    model, ops = LIST_MODELS[name]
    words = _words(1, _lengths(1, n=24, longest=12))
    eager = _run(model, words)
    batched = _run(model, words, {})
    _assert_same(batched, eager)
    scope = batched[2]
    sigs = [p.batch_sig[b] for p in scope.plans for b in range(p.n_batches)
            if signature.SIGS[p.batch_sig[b]].op.name in ops]
    assert len(sigs) == len(set(sigs)), _batches_of(scope, ops)
    assert {signature.SIGS[s].op.name for s in sigs} == ops


def test_softmax_over_a_list_of_vectors_is_elementwise():
    words = _words(2, [1, 3, 7, 2])
    eager = _run(_softmax, words, shape=(3,))
    batched = _run(_softmax, words, {}, shape=(3,))
    _assert_same(batched, eager)
    E, _ = _params((3,))
    for ws, ys in zip(words, eager[0]):
        scores = E.data[ws]
        want = np.exp(scores - scores.max(axis=0)) / np.exp(scores - scores.max(axis=0)).sum(axis=0)
        np.testing.assert_allclose(np.stack(ys), want, rtol=1e-5)


def test_lists_with_parameters_or_constants_take_the_op_of_their_count():
    """Operands that are not all values of the scope (a Parameter, a numpy array) record the
    op of the list's length, with the same values and gradient."""
    W = hb.Parameter("w", (3,), init=0.0)
    W.data = np.array([0.5, -1.0, 2.0], np.float32)

    def model():
        return hb.softmax([W, W * 2.0, np.ones(3, np.float32)]), hb.max([W, np.zeros(3, np.float32)])

    def loss(outs):
        soft, top = outs
        return hb.sum(soft[0] * 2.0 + soft[1] + top * 3.0)

    W.zero_grad()
    eager = model()
    loss(eager).backward()
    want = W.grad.copy()
    W.zero_grad()
    with hb.batching() as scope:
        got = model()
        loss(got).backward()
    np.testing.assert_allclose(W.grad, want, rtol=1e-5)
    for g, e in zip(got[0] + [got[1]], eager[0] + [eager[1]]):
        np.testing.assert_allclose(g.asnumpy(), e.asnumpy(), rtol=1e-6)
    ops = {signature.SIGS[p.batch_sig[b]].op for p in scope.plans for b in range(p.n_batches)}
    assert not any(op.ragged for op in ops)


@pytest.mark.parametrize("in_scope", [False, True])
def test_list_errors_name_the_problem_at_the_call(in_scope):
    def go():
        x = hb.array(np.ones(3, np.float32))
        with pytest.raises(ValueError, match="softmax over a list runs across the list"):
            hb.softmax([x, x], axis=1)
        with pytest.raises(ValueError, match=r"max over a list reduces the list \(axis 0\) only"):
            hb.max([x, x], axis=1)
        with pytest.raises(TypeError, match="mean takes one value, not a list"):
            hb.mean([x, x])
        with pytest.raises(ValueError, match="weighted_sum: 2 weights for 3 values"):
            hb.weighted_sum([x, x], [x, x, x])
        with pytest.raises(ValueError, match="needs at least one operand"):
            hb.softmax([])
        with pytest.raises(hb.ShapeError, match=r"max_n: .*\(3,\) and \(2,\)"):
            hb.max([x, hb.array(np.ones(2, np.float32))])
    if in_scope:
        with hb.batching():
            go()
    else:
        go()
