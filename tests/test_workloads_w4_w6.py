"""W4 (Tree-GRU, two-type Tree-LSTM, MV-RNN), W5 (LSTM-NMT) and W6 (Lattice LSTM): batched equals
eager, the structure the scheduler sees, FLOP counts, the generators' size distributions and
the lattice reader."""
import numpy as np
import pytest

import hybridbatch as hb
from helpers import check_harness_runs
from hybridbatch_workloads.bench.registry import DEFAULT_GRANULARITY, WORKLOADS, make_workload
from hybridbatch_workloads.bench.workload import scaled
from hybridbatch_workloads.bench.workload_lattice import EncodedLattice, W6Lattice
from hybridbatch_workloads.bench.workload_nmt import EncodedPair, W5NMT
from hybridbatch_workloads.bench.workload_tree_variants import W4MVRNN, W4TreeGRU, W4TreeLSTM2Type
from hybridbatch_workloads.data import DataFormatError, Tree
from hybridbatch_workloads.data.lattice import (LatticeWord, WEIBO_TAGS, match_lexicon, read_char_ner, read_lattices, read_lexicon, synthetic_lattices)
from hybridbatch_workloads.data.synthetic_nmt import synthetic_nmt

W4_TO_W6 = ("W4-TREEGRU", "W4-2TYPE", "W4-MVRNN", "W5", "W6")


def _tiny(name, **extra):
    return make_workload(name, hidden=16, synthetic_train=5, synthetic_dev=2, **extra)


@pytest.fixture(scope="module", params=W4_TO_W6)
def workload(request):
    wl = _tiny(request.param)
    wl.hybridize()
    return wl


def _loss_and_grads(wl, instances, granularity=None):
    params = wl.parameters()
    for p in params:
        p.zero_grad()
    scope = None
    if granularity is None:
        loss = hb.add_n([wl.loss(x) for x in instances])
    else:
        with hb.batching(granularity=granularity) as scope:
            loss = hb.add_n([wl.loss(x) for x in instances])
    loss.backward()
    return loss.item(), [p.grad.copy() for p in params], scope


# ---------------------------------------------------------------------------------------------
# models: batched == eager
# ---------------------------------------------------------------------------------------------

def test_batched_equals_eager_loss_and_gradients(workload):
    xs = workload.train_instances()
    ref_loss, ref_grads, _ = _loss_and_grads(workload, xs)
    assert np.isfinite(ref_loss) and ref_loss > 0
    assert any(np.abs(g).max() > 0 for g in ref_grads)
    for granularity in ("block", "op"):
        loss, grads, scope = _loss_and_grads(workload, xs, granularity)
        np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
        for g, r in zip(grads, ref_grads):
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6)
        assert scope.stats.batches >= scope.stats.lower_bound > 0


def test_predict_gives_one_logits_per_gold_label(workload):
    x = workload.dev_instances()[0]
    with hb.batching(granularity="block"):
        handles = workload.predict(x)
    gold = workload.gold(x)
    assert len(handles) == len(gold)
    values = [h.asnumpy() for h in handles]
    assert all(v.ndim == 1 and 0 <= g < v.shape[0] for v, g in zip(values, gold))


def test_parameters_are_distinct_and_all_trained(workload):
    params = workload.parameters()
    assert len({id(p) for p in params}) == len(params)
    _, grads, _ = _loss_and_grads(workload, workload.train_instances(), "block")
    assert all(np.abs(g).max() > 0 for g in grads)


# ---------------------------------------------------------------------------------------------
# the structure the scheduler sees
# ---------------------------------------------------------------------------------------------

def test_tree_variants_record_one_node_per_tree_node():
    for cls in (W4TreeGRU, W4TreeLSTM2Type, W4MVRNN):
        wl = cls(hidden=8, synthetic_train=4, synthetic_dev=1)
        wl.hybridize()
        trees = wl.train_instances()
        _, _, scope = _loss_and_grads(wl, trees, "block")
        assert scope.stats.nodes == sum(len(t.nodes()) for t in trees) + 1     # + the add_n


def test_two_type_draws_both_types_per_internal_node_seeded():
    wl = W4TreeLSTM2Type(hidden=8, synthetic_train=40, synthetic_dev=5)
    types = [wl.node_types(t) for t in wl.train_instances()]
    assert all(len(ts) == t.n_leaves - 1 for ts, t in zip(types, wl.train_instances()))
    flat = np.concatenate(types)
    assert set(flat.tolist()) == {0, 1} and abs(flat.mean() - 0.5) < 0.06
    again = W4TreeLSTM2Type(hidden=8, synthetic_train=40, synthetic_dev=5)
    assert [again.node_types(t) for t in again.train_instances()] == types
    # the two internal blocks are two programs (two signatures) with their own U, b only
    model = wl.model
    own = {id(p) for p in model.node_b.collect_params().values()}
    first = {id(p) for p in model.node.collect_params().values()}
    assert own - first == {id(model.node_b.cell.internal.weight), id(model.node_b.cell.internal.bias)}


def test_nmt_records_encoder_decoder_and_output_per_word():
    wl = _tiny("W5")
    wl.hybridize()
    pairs = wl.train_instances()
    _, _, scope = _loss_and_grads(wl, pairs, "block")
    assert scope.stats.nodes == sum(len(p.source) + 2 * len(p.target_in) for p in pairs) + 1
    p = pairs[0]
    assert p.target_in[0] == wl.bos and p.target_out[-1] == wl.eos
    assert p.target_in[1:] == p.target_out[:-1]


def test_lattice_merge_is_traced_per_arity():
    wl = W6Lattice(hidden=16, synthetic_train=20, synthetic_dev=1)
    wl.hybridize()
    _loss_and_grads(wl, wl.train_instances(), "block")
    ends = [np.bincount([e - 1 for _, e, _ in x.words], minlength=len(x.chars)) for x in wl.train_instances()]
    arities = sorted(set(np.concatenate(ends).tolist()) - {0})
    assert len(arities) >= 3
    assert len(wl.model.merge._programs) == len(arities)     # one trace (signature) per k


def test_lattice_model_matches_a_hand_computed_merge():
    """A 3-character lattice with one word over characters 0..1: character 1 merges it."""
    wl = W6Lattice(hidden=16, synthetic_train=3, synthetic_dev=1)
    m = wl.model
    x = EncodedLattice([1, 2, 3], [(0, 2, 1)], [0, 1, 2])
    H = wl.lstm_hidden
    sig = lambda v: 1 / (1 + np.exp(-v))                              # noqa: E731
    E, W, b = m.char_step.embedding.data, m.char_step.cell.weight.data, m.char_step.cell.bias.data

    def gates(ch, h):
        return np.split(W @ np.concatenate([E[ch], h]) + b, 4)        # i, f, g, o

    i, f, g, o = gates(1, np.zeros(H))
    c0 = sig(i) * np.tanh(g)
    h0 = sig(o) * np.tanh(c0)
    wi, wf, wg = np.split(m.word.weight.data @ np.concatenate([m.word.embedding.data[1], h0]) + m.word.bias.data, 3)
    cw = sig(wf) * c0 + sig(wi) * np.tanh(wg)
    i, f, g, o = gates(2, h0)
    a = sig(m.merge.gate.data @ np.concatenate([E[2], cw]) + m.merge.gate_bias.data)
    c1 = (np.exp(sig(i)) * np.tanh(g) + np.exp(a) * cw) / (np.exp(sig(i)) + np.exp(a))
    h1 = sig(o) * np.tanh(c1)
    logits = m.output.dense.weight.data @ h1 + m.output.dense.bias.data
    np.testing.assert_allclose(m.logits(x.chars, x.words)[1].asnumpy(), logits, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# FLOPs and sizes
# ---------------------------------------------------------------------------------------------

def _three_leaf_tree():
    leaf = lambda w: Tree(2, w)                                       # noqa: E731
    return Tree(3, children=(leaf("a"), Tree(2, children=(leaf("b"), leaf("c")))))


def test_forward_flops_exact():
    tree = _three_leaf_tree()                                         # 3 leaves, 2 internal nodes
    gru = W4TreeGRU(hidden=256, synthetic_train=2, synthetic_dev=1)
    assert gru.forward_flops(tree) == 2 * (3 * 512 * 256 + 2 * (768 * 512 + 256 * 512) + 5 * 5 * 256)
    mv = W4MVRNN(hidden=256, synthetic_train=2, synthetic_dev=1)
    assert mv.dim == 64
    assert mv.forward_flops(tree) == 2 * (2 * (2 * 64 * 64 + 64 * 128 + 64 * 128 * 64) + 5 * 5 * 64)
    assert mv.predict_flops(tree) == mv.forward_flops(tree) + 2 * 5 * 64
    two = W4TreeLSTM2Type(hidden=256, synthetic_train=2, synthetic_dev=1)
    assert two.forward_flops(tree) == 2 * (3 * 768 * 256 + 2 * 1280 * 512 + 5 * 5 * 256)

    nmt = W5NMT(hidden=256, synthetic_train=3, synthetic_dev=1)
    pair = EncodedPair([1, 2, 3], [0, 4, 5], [4, 5, 1])                # 3 source words, 3 target positions
    V = len(nmt.target_vocab)
    assert nmt.forward_flops(pair) == 2 * (3 * 1024 * 512 + 3 * (1024 * 512 + V * 256))

    lat = W6Lattice(hidden=256, synthetic_train=3, synthetic_dev=1)
    assert (lat.embed, lat.lstm_hidden, len(lat.tags)) == (50, 100, 17)
    x = EncodedLattice([1, 2, 3, 4], [(0, 2, 1), (1, 4, 2)], [0, 0, 0, 0])
    assert lat.forward_flops(x) == 2 * (4 * (400 * 150 + 17 * 100) + 2 * (300 * 150 + 100 * 150))


def test_reference_sizes_scale_with_hidden():
    assert (scaled(64, 256), scaled(100, 256), scaled(50, 256)) == (64, 100, 50)
    assert (scaled(64, 32), scaled(100, 512), scaled(50, 1)) == (8, 200, 1)


def test_registry_names_and_granularity():
    for name in W4_TO_W6:
        assert name in WORKLOADS and DEFAULT_GRANULARITY[name] == "block"
    assert type(make_workload("w4-treegru", hidden=8, synthetic_train=2, synthetic_dev=1)) is W4TreeGRU


@pytest.mark.parametrize("name", W4_TO_W6)
def test_harness_runs_and_checks_each_workload(name):
    check_harness_runs(name)


def test_nmt_refuses_a_data_dir(tmp_path):
    with pytest.raises(ValueError, match="no real-data reader"):
        W5NMT(hidden=8, data_dir=str(tmp_path))


# ---------------------------------------------------------------------------------------------
# generators
# ---------------------------------------------------------------------------------------------

def test_synthetic_nmt_lengths_and_seeding():
    pairs = synthetic_nmt(3000, seed=1)
    src = np.array([len(p.source) for p in pairs])
    tgt = np.array([len(p.target) for p in pairs])
    for lengths in (src, tgt):
        assert abs(lengths.mean() - 20) < 0.6 and abs(lengths.std() - 10) < 0.6
        assert lengths.min() >= 1 and lengths.max() <= 50
    assert np.corrcoef(src, tgt)[0, 1] > 0.8
    assert synthetic_nmt(20, seed=1) == pairs[:20]
    assert synthetic_nmt(20, seed=2) != pairs[:20]
    # about half of the target words translate (upper-case) a source word of the pair
    share = np.mean([w.lower() in set(p.source) for p in pairs[:300] for w in p.target])
    assert 0.45 < share < 0.75


def test_nmt_vocabularies_hold_8000_words():
    wl = W5NMT(hidden=8, synthetic_train=2000, synthetic_dev=1)
    assert len(wl.source_vocab) == len(wl.target_vocab) == 8000
    assert wl.target_vocab.word(wl.bos) == "<s>" and wl.target_vocab.word(wl.eos) == "</s>"


def test_synthetic_lattices_sizes_and_seeding():
    lattices = synthetic_lattices(1500, seed=3)
    n_chars = sum(len(x.chars) for x in lattices)
    n_words = sum(len(x.words) for x in lattices)
    assert abs(n_chars / len(lattices) - 50) < 2.5
    assert 1.45 < n_chars / n_words < 1.75                            # ~1 word cell per 1.6 characters
    assert all(len(x.tags) == len(x.chars) for x in lattices)
    assert all(x.chars[w.start:w.end] == w.word and w.end - w.start >= 2 for x in lattices[:50] for w in x.words)
    assert {t for x in lattices for t in x.tags} <= set(WEIBO_TAGS)
    assert synthetic_lattices(10, seed=3) == lattices[:10]
    assert synthetic_lattices(10, seed=4) != lattices[:10]


def test_match_lexicon_finds_every_multi_character_word():
    got = match_lexicon("南京市长江大桥", {"南京", "南京市", "市长", "长江", "长江大桥", "大桥", "江", "桥"})
    assert got == [LatticeWord(0, 2, "南京"), LatticeWord(0, 3, "南京市"), LatticeWord(2, 4, "市长"),
                   LatticeWord(3, 5, "长江"), LatticeWord(3, 7, "长江大桥"), LatticeWord(5, 7, "大桥")]


# ---------------------------------------------------------------------------------------------
# lattice reader
# ---------------------------------------------------------------------------------------------

CORPUS = "南 B-GPE.NAM\n京 I-GPE.NAM\n市 O\n长 O\n江 O\n\n\n大\tO\n桥 O\n"
LEXICON = "南京\n市长\n长江\n\n大桥\n南京\n江\n"


def test_read_lattices_from_a_tiny_corpus(tmp_path):
    corpus, lexicon = tmp_path / "train.txt", tmp_path / "lexicon.txt"
    corpus.write_text(CORPUS, encoding="utf-8")
    lexicon.write_text(LEXICON, encoding="utf-8")
    assert read_lexicon(lexicon) == ["南京", "市长", "长江", "大桥", "江"]
    assert read_char_ner(corpus) == [("南京市长江", ["B-GPE.NAM", "I-GPE.NAM", "O", "O", "O"]), ("大桥", ["O", "O"])]
    first, second = read_lattices(corpus, lexicon)
    assert [w.word for w in first.words] == ["南京", "市长", "长江"] and first.words[1] == LatticeWord(2, 4, "市长")
    assert second.words == [LatticeWord(0, 2, "大桥")]


def test_w6_reads_the_real_layout(tmp_path):
    folder = tmp_path / "lattice_ner"
    folder.mkdir()
    (folder / "train.txt").write_text(CORPUS, encoding="utf-8")
    (folder / "dev.txt").write_text("长 O\n江 B-LOC.NAM\n", encoding="utf-8")
    (folder / "lexicon.txt").write_text(LEXICON, encoding="utf-8")
    for d in (tmp_path, folder):
        wl = W6Lattice(hidden=8, data_dir=str(d))
        assert len(wl.train_instances()) == 2 and len(wl.dev_instances()) == 1
        assert wl.tags == ("O", "B-GPE.NAM", "B-LOC.NAM", "I-GPE.NAM")
        assert len(wl.word_vocab) == 5                                 # <unk> + the 4 matched words
        assert wl.gold(wl.dev_instances()[0]) == [0, 2]


@pytest.mark.parametrize("text, lineno, column, expected, found", [
    ("南 O\n京 O O\n", 2, 1, "a character and its tag", "3 fields"),
    ("南 O\n\n京市 O\n", 3, 1, "one character in the first field", "京市"),
    ("南 O\n京 X-LOC\n", 2, 3, "a BIO tag", "X-LOC"),
    ("南 O\n京 B-\n", 2, 3, "a BIO tag", "B-"),
    ("南\n", 1, 1, "a character and its tag", "1 field"),
])
def test_read_char_ner_errors_name_file_line_and_column(tmp_path, text, lineno, column, expected, found):
    p = tmp_path / "bad.txt"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        read_char_ner(p)
    e = info.value
    assert (e.filename, e.lineno, e.column) == (str(p), lineno, column)
    assert e.expected.startswith(expected) and str(e.found) == found
    assert str(e).startswith(f"{p}:{lineno}:{column}: expected {expected}")


def test_read_lexicon_rejects_a_line_with_several_fields(tmp_path):
    p = tmp_path / "lexicon.txt"
    p.write_text("南京\n长江 江 0.2\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        read_lexicon(p)
    assert (info.value.lineno, info.value.column) == (2, 4)
    assert str(info.value).startswith(f"{p}:2:4: expected one word per line, found 3 fields")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("南京\n".encode() + b"\xff\n")
    with pytest.raises(DataFormatError) as info:
        read_lexicon(bad)
    assert info.value.lineno == 2 and "UTF-8" in str(info.value)
