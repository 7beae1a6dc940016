"""Models and nn containers refuse inputs that do not fit them (labels or tags of another
length, lattice words outside the sentence, node types that do not fit the tree, a Sequential
of what is not a Block) at the call, rather than giving a silently wrong loss."""
import numpy as np
import pytest

import hybridbatch as hb


def test_sequence_losses_refuse_labels_of_another_length():
    """zip() used to drop the steps (or labels) past the shorter one: a smaller loss, no error."""
    from hybridbatch_workloads.models.lattice_lstm import LatticeLSTMTagger
    from hybridbatch_workloads.models.seq2seq import Seq2SeqLSTM
    nmt = Seq2SeqLSTM(20, 15, embed=4, hidden=3)
    assert np.isfinite(float(nmt.loss([1, 2], [0, 3, 4], [3, 4, 1])))
    lattice = LatticeLSTMTagger(12, 9, 4, char_embed=3, word_embed=3, hidden=4)
    for bad in (lambda: nmt.loss([1, 2], [0, 3, 4], [3, 4]),
                lambda: nmt.loss([1, 2], [0, 3], [3, 4, 1]),
                lambda: lattice.loss([1, 2, 3], [(0, 2, 1)], [0, 1]),
                lambda: lattice.loss([], [], [])):
        with pytest.raises(ValueError, match="label"):
            bad()


def test_tagger_refuses_tags_of_another_length():
    """zip() used to drop the tokens past the last tag: a smaller loss, no error."""
    from hybridbatch_workloads.data import Vocab
    from hybridbatch_workloads.data.conllu import UPOS_TAGS
    from hybridbatch_workloads.models.bilstm_tagger import BiLSTMTagger
    tagger = BiLSTMTagger(Vocab.build(["a", "b"]), UPOS_TAGS, embed=4, hidden=3)
    assert np.isfinite(float(tagger.sentence_loss(["a", "b"], ["NOUN", "VERB"])))
    for tags in (["NOUN"], ["NOUN", "VERB", "ADJ"]):
        with pytest.raises(ValueError, match="tag"):
            tagger.sentence_loss(["a", "b"], tags)
    with pytest.raises(ValueError, match="tag"):
        tagger.encoded_loss([1, 2], [0])


@pytest.mark.parametrize("word", [(0, 1, 1), (2, 1, 1), (-1, 2, 1), (1, 4, 1)])
def test_lattice_refuses_a_word_outside_the_sentence_or_shorter_than_two(word):
    """A one-character, backward or negative-start word was silently never merged (or merged
    at a wrapped position); one past the end failed with a bare list IndexError."""
    from hybridbatch_workloads.models.lattice_lstm import LatticeLSTMTagger
    lattice = LatticeLSTMTagger(12, 9, 4, char_embed=3, word_embed=3, hidden=4)
    assert np.isfinite(float(lattice.loss([1, 2, 3], [(0, 2, 1), (1, 3, 2)], [0, 1, 2])))
    with pytest.raises(ValueError, match="word"):
        lattice.loss([1, 2, 3], [word], [0, 1, 2])


@pytest.mark.parametrize("change", ["long", "short", "negative"])
def test_two_type_tree_refuses_node_types_that_do_not_fit_the_tree(change):
    """Extra types were ignored, a negative one picked the last block, too few raised a bare
    StopIteration."""
    from hybridbatch_workloads.data import Tree, Vocab
    from hybridbatch_workloads.models.tree_lstm import TwoTypeTreeLSTM
    tree = Tree(1, children=(Tree(0, "a"), Tree(2, children=(Tree(3, "b"), Tree(4, "a")))))
    model = TwoTypeTreeLSTM(Vocab.build(["a", "b"]), embed=4, hidden=3)
    assert np.isfinite(float(model.tree_loss(tree, [1, 0])))
    types = {"long": [1, 0, 1], "short": [1], "negative": [1, -1]}[change]
    with pytest.raises(ValueError, match="types"):
        model.tree_loss(tree, types)
    with pytest.raises(ValueError, match="types"):
        model.root_logits(tree, types)


def test_sequential_refuses_what_is_not_a_block():
    """A function such as hb.tanh was stored as a plain attribute and silently skipped."""
    with pytest.raises(TypeError, match="Block"):
        hb.nn.Sequential(hb.nn.Dense(3, 2, seed=0), hb.tanh)
    seq = hb.nn.Sequential(hb.nn.Dense(3, 2, seed=0))
    with pytest.raises(TypeError, match="Block"):
        seq.add(hb.relu)
    assert len(seq) == 1
