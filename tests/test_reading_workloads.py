"""Models that read values as they run (the W9 parser, the per-example mixture of experts,
beam search): run through hb.map inside a scope they take eager's decisions and give its
losses and gradients, with one flush per round of reads; the parser's oracle and
projectivity; the bench workloads and the example scripts run."""
import numpy as np
import pytest

import hybridbatch as hb
from helpers import check_harness_runs, run_example
from hybridbatch_workloads.bench.registry import make_workload
from hybridbatch_workloads.data import read_conllu, shared_data_dir, synthetic_tagging
from hybridbatch_workloads.data.vectors import synthetic_vectors
from hybridbatch_workloads.models.beam import beam_search
from hybridbatch_workloads.models.moe import MixtureOfExperts
from hybridbatch_workloads.models.parser import SHIFT, ArcHybridParser, ParserVocab, is_projective
from hybridbatch_workloads.models.seq2seq import Seq2SeqLSTM


def _grads(params):
    out = [p.grad.copy() for p in params]
    for p in params:
        p.zero_grad()
    return out


def _assert_grads_close(params, ref):
    for p, g, r in zip(params, _grads(params), ref):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6, err_msg=p.name)
    assert any(np.abs(r).max() > 0 for r in ref)


# -- the parser -----------------------------------------------------------------------------

def _parser(sentences=10, hidden=12):
    sents = synthetic_tagging(sentences, seed=3)
    vocab = ParserVocab(sents)
    model = ArcHybridParser(vocab, word_dim=8, tag_dim=4, hidden=hidden, mlp=10, seed=0)
    model.hybridize()
    return model, [vocab.encode(s) for s in sents]


def test_static_oracle_rebuilds_every_projective_tree_in_two_transitions_per_word():
    model, sents = _parser()
    for s in sents:
        p = model.train_parse(s)
        assert p.heads[1:] == list(s.heads[1:]) and p.labels[1:] == list(s.labels[1:])
        assert len(p.actions) == 2 * (len(s.words) - 1)
        assert p.actions.count(SHIFT) == len(s.words) - 1


@pytest.mark.parametrize("heads, projective", [
    ((0, 2, 0, 2), True),            # 1 <- 2 -> 3, 2 the root
    ((0, 3, 4, 0, 3), False),        # 3 -> 1 and 4 -> 2 cross
    ((0, 3, 0, 1), False),           # 1 -> 3 spans the root word 2
    ((0, 0), True),
])
def test_is_projective_finds_crossing_arcs(heads, projective):
    assert is_projective(heads) is projective


def test_training_refuses_a_nonprojective_sentence_at_the_call():
    model, sents = _parser()
    s = sents[0]
    crossing = s._replace(words=s.words[:5], tags=s.tags[:5], heads=(0, 3, 4, 0, 3), labels=(-1, 0, 0, 0, 0))
    assert not is_projective(crossing.heads)
    with pytest.raises(ValueError, match="projective"):
        model.train_parse(crossing)


@pytest.mark.parametrize("granularity", ["block", "op"])
def test_parser_training_through_map_takes_eager_decisions_losses_and_gradients(granularity):
    model, sents = _parser()
    params = model.parameters()
    for p in params:
        p.zero_grad()
    eager = [model.train_parse(s) for s in sents]
    for p in eager:
        if p.loss is not None:
            p.loss.backward()
    ref = _grads(params)
    with hb.batching(granularity=granularity) as scope:
        batched = hb.map(model.train_parse, sents)
        total = hb.add_n([p.loss for p in batched if p.loss is not None])
    total.backward()
    assert [p.actions for p in batched] == [p.actions for p in eager]
    assert [p.loss is None for p in batched] == [p.loss is None for p in eager]
    np.testing.assert_allclose([p.loss.item() for p in batched if p.loss is not None],
                               [p.loss.item() for p in eager if p.loss is not None], rtol=1e-5)
    _assert_grads_close(params, ref)
    # one flush per round of reads: the longest sentence's transitions, not all of them
    assert scope.stats.flushes <= max(len(p.actions) for p in eager) + 1


def test_parser_decoding_through_map_takes_eager_transitions():
    model, sents = _parser()
    eager = [model.parse(s) for s in sents]
    with hb.batching() as scope:
        batched = hb.map(model.parse, sents)
    assert [(p.actions, p.heads, p.labels) for p in batched] == [(p.actions, p.heads, p.labels) for p in eager]
    assert all(p.loss is None for p in batched)
    assert scope.stats.flushes <= max(len(p.actions) for p in eager) + 1


def test_parser_vocabulary_marks_labels_unseen_in_training():
    train = synthetic_tagging(5, seed=1)
    vocab = ParserVocab(train)
    tokens = [t._replace(deprel="nowhere:seen") for t in train[0]]
    s = vocab.encode(tokens)
    assert s.labels[1:] == (-1,) * len(tokens) and s.words[0] == vocab.root_word
    model = ArcHybridParser(vocab, word_dim=4, tag_dim=2, hidden=4, mlp=4)
    with pytest.raises(ValueError, match="label vocabulary"):
        model.train_parse(s)


@pytest.mark.skipif(shared_data_dir() is None, reason="the shared data (UD English EWT) is absent")
def test_ewt_dev_has_nonprojective_trees_and_the_oracle_rebuilds_the_rest():
    sents = read_conllu(shared_data_dir() / "ud_english_ewt" / "en_ewt-ud-dev.conllu")
    vocab = ParserVocab(sents)
    encoded = [vocab.encode(s) for s in sents]
    projective = [s for s in encoded if is_projective(s.heads)]
    assert 0 < len(encoded) - len(projective) < len(encoded) // 10
    model = ArcHybridParser(vocab, word_dim=4, tag_dim=2, hidden=4, mlp=4)
    for s in projective[:50]:
        assert model.train_parse(s).heads == list(s.heads[:1]) + list(s.heads[1:])


# -- mixture of experts ---------------------------------------------------------------------

def _moe():
    model = MixtureOfExperts(experts=8, dim=12, k=2, classes=3, seed=0)
    model.hybridize()
    return model, synthetic_vectors(24, dim=12, classes=3, clusters=8, seed=0)


def test_moe_through_map_chooses_eager_experts_and_gives_eager_losses_and_gradients():
    model, data = _moe()
    params = model.parameters()
    for p in params:
        p.zero_grad()
    eager = [model.loss(v.x, v.label) for v in data]
    for loss in eager:
        loss.backward()
    ref = _grads(params)
    chosen = [model.mixture(v.x)[1] for v in data]
    with hb.batching() as scope:
        losses = hb.map(lambda v: model.loss(v.x, v.label), data)
        total = hb.add_n(losses)
    total.backward()
    np.testing.assert_allclose([l.item() for l in losses], [l.item() for l in eager], rtol=1e-5)
    _assert_grads_close(params, ref)
    assert scope.stats.flushes == 2          # the gates of all examples, then everything else
    with hb.batching():
        assert hb.map(lambda v: model.mixture(v.x)[1], data) == chosen
    assert len({e for c in chosen for e in c}) > 2 and all(len(set(c)) == 2 for c in chosen)


def test_moe_mixture_weights_are_the_softmax_of_the_chosen_gate_scores():
    model, data = _moe()
    x = data[0].x
    scores = model.gate(x).asnumpy()
    out, chosen = model.mixture(x)
    w = np.exp(scores[chosen] - scores[chosen].max())
    w /= w.sum()
    want = sum(wi * model.expert(e)(x).asnumpy() for wi, e in zip(w, chosen))
    np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-5, atol=1e-6)
    assert list(np.argsort(-scores)[:2]) == chosen
    with pytest.raises(ValueError, match="k must be"):
        MixtureOfExperts(experts=4, dim=4, k=5)


# -- beam search ----------------------------------------------------------------------------

def _seq2seq():
    model = Seq2SeqLSTM(30, 30, embed=8, hidden=8, seed=0)
    model.hybridize()
    rng = np.random.default_rng(0)
    return model, [[int(w) for w in rng.integers(3, 30, n)] for n in rng.integers(1, 9, 12)]


def test_beam_search_through_map_gives_eager_outputs():
    model, sources = _seq2seq()
    decode = lambda s: beam_search(model, s, 1, 2, beam=4, max_length=10)     # noqa: E731
    eager = [decode(s) for s in sources]
    with hb.batching() as scope:
        batched = hb.map(decode, sources)
    assert batched == eager
    assert scope.stats.flushes <= 10 + 1


def test_beam_of_one_is_greedy_decoding():
    model, sources = _seq2seq()
    for source in sources[:4]:
        state = ()
        for w in source:
            state = model.encoder(w, *state)
        words, w = [], 1
        for _ in range(6):
            state = model.decoder(w, *state)
            w = int(np.argmax(model.output(state[0]).asnumpy()))
            if w == 2:
                break
            words.append(w)
        assert beam_search(model, source, 1, 2, beam=1, max_length=6) == words


# -- bench workloads and examples -----------------------------------------------------------

@pytest.mark.parametrize("name", ["W9", "W8-GATE", "W8", "BEAM"])
def test_harness_runs_the_reading_workloads(name):
    res = check_harness_runs(name)
    assert 0 <= res["batched"]["infer"]["accuracy"] <= 1


def test_w9_counts_the_nonprojective_sentences_it_skips():
    wl = make_workload("W9", hidden=8, synthetic_train=6, synthetic_dev=2)
    assert wl.skipped_nonprojective == 0 and len(wl.train_instances()) == 6
    right, words = wl.score(wl.dev_instances()[0], wl.predict(wl.dev_instances()[0]))
    assert 0 <= right <= words == len(wl.dev_instances()[0].words) - 1


@pytest.mark.parametrize("script, args", [
    ("parser.py", ["--limit", "12", "--dev", "6", "--hidden", "16", "--batch", "4"]),
    ("moe.py", ["--limit", "32", "--dev", "16", "--experts", "4", "--hidden", "8", "--batch", "8"]),
    ("beam.py", ["--limit", "16", "--dev", "4", "--hidden", "8", "--batch", "4"]),
])
def test_example_runs_and_agrees_with_eager(script, args):
    done = run_example(script, *args, "--epochs", "1", "--compare")
    assert done.returncode == 0, done.stderr
    assert "epoch 1" in done.stdout and "eager and batched agree" in done.stdout
