"""W2 and W3 of docs/workloads.md as benchmark workloads: the BiLSTM UPOS tagger, without and
with the character BiLSTM for rare words.

Data: `en_ewt-ud-train.conllu` / `en_ewt-ud-dev.conllu` from `data_dir` (the folder holding
them, or its parent holding `ud_english_ewt/`) when given; else `synthetic_tagging` of
`synthetic_train + synthetic_dev` sentences, the last `synthetic_dev` held out. Words seen
fewer than 5 times in the training sentences are UNK (W2) or spelled by characters (W3).
`hoist` picks the model's formulation (see hybridbatch/models/bilstm_tagger.py); the FLOPs
are the same either way.
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from ..data.conllu import UPOS_TAGS, read_conllu, synthetic_tagging
from ..data.trees import Vocab
from ..models.bilstm_tagger import BiLSTMTagger
from ..data.paths import read_data_file
from .workload import Workload

__all__ = ["TaggedSentence", "W2Tagger", "W3Tagger", "MIN_COUNT"]

MIN_COUNT = 5


class TaggedSentence(NamedTuple):
    """One instance: the words and UPOS tags (strings) and their model encodings."""
    words: list
    tags: list
    tokens: list      # per token: word id, or (W3, rare word) a tuple of character ids
    tag_ids: list


def ud_ewt_sentences(data_dir, seed, synthetic_train, synthetic_dev, train_sentences=None, dev_sentences=None):
    """(train, dev) sentences: UD English EWT's from `data_dir`, else `synthetic_tagging`'s,
    each list cut to its given length (None: whole)."""
    if data_dir is not None:
        train = read_data_file(data_dir, "ud_english_ewt", "en_ewt-ud-train.conllu", read_conllu)
        dev = read_data_file(data_dir, "ud_english_ewt", "en_ewt-ud-dev.conllu", read_conllu)
    else:
        sents = synthetic_tagging(synthetic_train + synthetic_dev, seed=seed)
        train, dev = sents[:synthetic_train], sents[synthetic_train:]
    return train[:train_sentences], dev[:dev_sentences]


class _TaggerWorkload(Workload):
    chars = False

    def __init__(self, hidden=256, data_dir=None, seed=0, train_sentences=None, dev_sentences=None,
                 synthetic_train=4000, synthetic_dev=500, hoist=True):
        super().__init__(hidden, data_dir, seed)
        train, dev = ud_ewt_sentences(data_dir, seed, synthetic_train, synthetic_dev, train_sentences, dev_sentences)
        counts = Counter(t.form for s in train for t in s)
        self.word_vocab = Vocab.build(counts, min_count=MIN_COUNT)
        self.char_vocab = Vocab.build(Counter(ch for w in counts for ch in w)) if self.chars else None
        # docs/workloads.md sizes: embedding = hidden (256); char embedding 64, char LSTM hidden / 2
        self.char_hidden = hidden // 2
        self.char_embed = 64
        self.hoist = hoist
        self.model = self.build_model()
        self._train = [self._instance(s) for s in train]
        self._dev = [self._instance(s) for s in dev]

    def build_model(self):
        """The tagger (called once the vocabularies exist); it encodes words and tags too."""
        return BiLSTMTagger(self.word_vocab, UPOS_TAGS, self.char_vocab, embed=self.hidden, hidden=self.hidden,
                            char_embed=self.char_embed, char_hidden=self.char_hidden, hoist=self.hoist,
                            seed=self.seed)

    def _instance(self, sent):
        words = [t.form for t in sent]
        tags = [t.upos for t in sent]
        return TaggedSentence(words, tags, self.model.encode(words), self.model.tag_ids(tags))

    def loss(self, instance):
        return self.model.encoded_loss(instance.tokens, instance.tag_ids)

    def predict(self, instance):
        return self.model.encoded_logits(instance.tokens)

    def gold(self, instance):
        return list(instance.tag_ids)

    def forward_flops(self, instance):
        """2 per MAC of: both word LSTM directions (4H x (E + H) per token), the output layer
        (T x 2H per token) and, W3, both character LSTM directions per character of a rare word."""
        H = E = self.hidden
        n = len(instance.tokens)
        word = 2 * (2 * 4 * H * (E + H))
        out = 2 * len(UPOS_TAGS) * 2 * H
        flops = n * (word + out)
        if self.chars:
            Hc, Ec = self.char_hidden, self.char_embed
            n_chars = sum(len(t) for t in instance.tokens if isinstance(t, tuple))
            flops += n_chars * 2 * (2 * 4 * Hc * (Ec + Hc))
        return flops


class W2Tagger(_TaggerWorkload):
    name = "W2"
    chars = False

    @property
    def description(self):
        return (f"BiLSTM UPOS tagger (UD EWT), embedding {self.hidden}, BiLSTM {self.hidden}+{self.hidden}, "
                f"rare words -> UNK")


class W3Tagger(_TaggerWorkload):
    name = "W3"
    chars = True

    @property
    def description(self):
        return (f"BiLSTM UPOS tagger (UD EWT) with a character BiLSTM ({self.char_embed} / "
                f"{self.char_hidden}+{self.char_hidden}) for words seen < 5 times")
