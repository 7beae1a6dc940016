"""W2 / W3 BiLSTM tagger: batched (block, op, auto) equals eager, the character path embeds
rare words, training lowers the loss, and the benchmark workloads follow the interface."""
from collections import Counter

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch_workloads.bench.workload import Workload
from hybridbatch_workloads.bench.workload_tagger import W2Tagger, W3Tagger
from hybridbatch_workloads.data.conllu import UPOS_TAGS, synthetic_tagging
from hybridbatch_workloads.data.trees import Vocab
from hybridbatch_workloads.models.bilstm_tagger import BiLSTMTagger

SMALL = dict(embed=12, hidden=8, char_embed=5, char_hidden=6)


def _corpus(n=120, seed=3, max_len=12, vocab_size=30000):
    sents = synthetic_tagging(n, seed=seed, vocab_size=vocab_size)
    return [([t.form for t in s][:max_len], [t.upos for t in s][:max_len]) for s in sents]


def _model(chars, corpus, seed=0, hoist=True, **sizes):
    counts = Counter(w for words, _ in corpus for w in words)
    word_vocab = Vocab.build(counts, min_count=5)
    char_vocab = Vocab.build(Counter(ch for w in counts for ch in w)) if chars else None
    model = BiLSTMTagger(word_vocab, UPOS_TAGS, char_vocab, seed=seed, hoist=hoist, **(sizes or SMALL))
    model.hybridize()
    return model


def _run(model, batch, mode):
    params = model.parameters()
    for p in params:
        p.zero_grad()
    if mode == "eager":
        losses = [model.sentence_loss(w, t) for w, t in batch]
        total = hb.add_n(losses)
    else:
        with hb.batching(granularity=mode, policy="agenda"):
            losses = [model.sentence_loss(w, t) for w, t in batch]
            total = hb.add_n(losses)
    total.backward()
    return np.array([l.item() for l in losses]), [np.array(p.grad) for p in params]


HOIST = pytest.mark.parametrize("hoist", [True, False], ids=["hoisted", "lstmcell"])


@HOIST
@pytest.mark.parametrize("chars", [False, True], ids=["W2", "W3"])
def test_batched_losses_and_gradients_equal_eager(chars, hoist):
    corpus = _corpus()
    model = _model(chars, corpus, hoist=hoist)
    batch = corpus[:7]
    if chars:   # the batch really exercises the character path
        assert any(isinstance(t, tuple) for w, _ in batch for t in model.encode(w))
    ref_losses, ref_grads = _run(model, batch, "eager")
    assert np.all(np.isfinite(ref_losses)) and ref_losses.min() > 0
    for mode in ("block", "op", "auto"):
        losses, grads = _run(model, batch, mode)
        np.testing.assert_allclose(losses, ref_losses, rtol=1e-4, err_msg=mode)
        for p, g, r in zip(model.parameters(), grads, ref_grads):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6, err_msg=f"{mode}: {p.name}")


@HOIST
def test_block_granularity_records_few_nodes_per_token_for_w2(hoist):
    corpus = _corpus()
    model = _model(False, corpus, hoist=hoist)
    batch = corpus[:8]
    with hb.batching(granularity="block") as scope:
        hb.add_n([model.sentence_loss(w, t) for w, t in batch]).backward()
    tokens = sum(len(w) for w, _ in batch)
    # (input part,) forward step, backward step, output + loss per token; a sum per sentence
    # and one over the batch
    per_token = 4 if hoist else 3
    assert scope.stats.nodes == per_token * tokens + sum(len(w) > 1 for w, _ in batch) + 1
    assert scope.stats.batches == scope.stats.lower_bound


def _char_model(hoist):
    words = ["the", "dog", "runs", "."]
    word_vocab = Vocab(words)
    char_vocab = Vocab(sorted(set("".join(words) + "zyxwvq")))
    return BiLSTMTagger(word_vocab, UPOS_TAGS, char_vocab, seed=1, hoist=hoist, **SMALL)


@HOIST
@pytest.mark.parametrize("hybridized", [False, True])
def test_w3_embeds_rare_words_by_characters(hybridized, hoist):
    model = _char_model(hoist)
    if hybridized:
        model.hybridize()
    tags = ["DET", "NOUN", "VERB", "PUNCT"]
    enc = model.encode(["the", "zyx", "runs", "."])
    assert isinstance(enc[0], int) and enc[1] == tuple(model.char_vocab.id(c) for c in "zyx")
    # the character embedding first, then every weight of the character BiLSTM
    char_params = [model.char_embedding] + [p for name, p in model.collect_params().items()
                                            if name.startswith("char_") and name.endswith("weight")]
    assert len(char_params) == (4 if hoist else 3)

    def grads(words):
        for p in model.parameters():
            p.zero_grad()
        with hb.batching(granularity="block"):
            loss = model.sentence_loss(words, tags)
        loss.backward()
        return loss.item(), [np.array(p.grad) for p in char_params], np.array(model.word_embedding.grad)

    # no rare word: the character BiLSTM is not used
    l_known, g_known, _ = grads(["the", "dog", "runs", "."])
    assert all(not g.any() for g in g_known)
    # a rare word: it goes through the characters, never through the UNK row
    l_rare, g_rare, emb_grad = grads(["the", "zyx", "runs", "."])
    assert all(g.any() for g in g_rare)
    assert not emb_grad[model.word_vocab.unk_id].any() and emb_grad.any()
    rows = {model.char_vocab.id(c) for c in "zyx"}
    char_emb_grad = g_rare[0]
    assert {i for i in range(len(model.char_vocab)) if char_emb_grad[i].any()} == rows
    # its spelling matters (W2 would map both words to UNK and give equal losses)
    l_other, _, _ = grads(["the", "qvw", "runs", "."])
    assert l_other != pytest.approx(l_rare, rel=1e-6)
    w2 = BiLSTMTagger(model.word_vocab, UPOS_TAGS, None, seed=1, hoist=hoist, **SMALL)
    assert w2.encode(["zyx", "qvw"]) == [0, 0]
    assert w2.sentence_loss(["zyx"], ["NOUN"]).item() == pytest.approx(w2.sentence_loss(["qvw"], ["NOUN"]).item())


def test_w3_rejects_mismatched_char_size():
    with pytest.raises(ValueError):
        BiLSTMTagger(Vocab(["a"]), UPOS_TAGS, Vocab(["a"]), embed=10, hidden=8, char_embed=4, char_hidden=4)


@pytest.mark.parametrize("chars", [False, True], ids=["W2", "W3"])
def test_short_training_reduces_loss(chars):   # the default (hoisted) formulation
    corpus = _corpus(48, seed=5, max_len=10, vocab_size=300)   # few, frequent words: learnable
    model = _model(chars, corpus, seed=2, embed=16, hidden=16, char_embed=8, char_hidden=8)
    trainer = hb.Trainer(model.parameters(), "sgd", {"learning_rate": 1.0, "clip_global_norm": 5.0})

    def epoch(train):
        total = 0.0
        for i in range(0, len(corpus), 16):
            batch = corpus[i:i + 16]
            with hb.batching(granularity="block"):
                loss = hb.add_n([model.sentence_loss(w, t) for w, t in batch])
            if train:
                loss.backward()
                trainer.step(len(batch))
            total += loss.item()
        return total

    before = epoch(False)
    for _ in range(8):
        epoch(True)
    after = epoch(False)
    assert after < 0.7 * before


@pytest.mark.parametrize("cls", [W2Tagger, W3Tagger])
def test_workloads_follow_the_interface(cls):
    w = cls(hidden=8, seed=1, synthetic_train=60, synthetic_dev=10)
    assert isinstance(w, Workload) and w.name in ("W2", "W3") and w.description
    train, dev = w.train_instances(), w.dev_instances()
    assert len(train) == 60 and len(dev) == 10
    params = w.parameters()
    assert len({id(p) for p in params}) == len(params)
    w.hybridize()
    inst = train[0]
    eager_loss = w.loss(inst)
    assert isinstance(eager_loss, hb.Tensor) and eager_loss.shape == ()
    with hb.batching(granularity="block"):
        loss = w.loss(inst)
        logits = w.predict(inst)
    assert isinstance(loss, hb.Future)
    assert loss.item() == pytest.approx(eager_loss.item(), rel=1e-4)
    gold = w.gold(inst)
    assert len(logits) == len(gold) == len(inst.words)
    assert all(l.asnumpy().shape == (len(UPOS_TAGS),) for l in logits)
    assert all(0 <= g < len(UPOS_TAGS) for g in gold)
    flops = [w.forward_flops(x) for x in train[:5]]
    assert all(f > 0 for f in flops)
    H = 8
    per_token = 2 * 2 * 4 * H * 2 * H + 2 * 17 * 2 * H
    if cls is W2Tagger:
        assert flops[0] == len(inst.words) * per_token
    else:
        assert any(isinstance(t, tuple) for x in train for t in x.tokens)
        assert all(f >= len(x.words) * per_token for f, x in zip(flops, train))


def test_workload_reads_conllu_files(tmp_path):
    def conllu(sents):
        lines = []
        for words, tags in sents:
            for i, (w, t) in enumerate(zip(words, tags), 1):
                lines.append("\t".join([str(i), w, "_", t, "_", "_", str(i - 1), "dep" if i > 1 else "root",
                                        "_", "_"]))
            lines.append("")
        return "\n".join(lines) + "\n"
    train = [(["the", "dog", "barks"], ["DET", "NOUN", "VERB"])] * 5 + [(["a", "cat"], ["DET", "NOUN"])]
    (tmp_path / "ud_english_ewt").mkdir()
    (tmp_path / "ud_english_ewt" / "en_ewt-ud-train.conllu").write_text(conllu(train))
    (tmp_path / "ud_english_ewt" / "en_ewt-ud-dev.conllu").write_text(conllu(train[-2:]))
    w = W3Tagger(hidden=8, data_dir=str(tmp_path))
    assert len(w.train_instances()) == 6 and len(w.dev_instances()) == 2
    assert set(w.word_vocab.words[1:]) == {"the", "dog", "barks"}
    cat = w.train_instances()[-1]
    assert isinstance(cat.tokens[0], tuple) and isinstance(cat.tokens[1], tuple)
    assert w.gold(cat) == [UPOS_TAGS.index("DET"), UPOS_TAGS.index("NOUN")]
    assert w.forward_flops(cat) > W2Tagger(hidden=8, data_dir=str(tmp_path)).forward_flops(cat)
