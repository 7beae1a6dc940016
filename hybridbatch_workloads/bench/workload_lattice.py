"""W6 of docs/workloads.md as a benchmark workload: the Lattice LSTM NER tagger.

Data: `train.txt` / `dev.txt` (character-level NER, one character and its BIO tag per line)
and `lexicon.txt` (one word per line) from `data_dir` (the folder, or its parent holding
`lattice_ner/`) when given; else `synthetic_lattices` (`synthetic_train` for training, then
`synthetic_dev` more, drawn with another seed, held out). Vocabularies: every training
character, every lexicon word matched in the training sentences (id 0 = unknown); tags
`WEIBO_TAGS` (synthetic) or those of the files. Sizes: character and word embedding 50,
hidden 100 at the reference hidden 256 (they scale with hidden / 256, see `workload.scaled`).
Accuracy is per-character tag accuracy.
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from ..data.lattice import WEIBO_TAGS, read_lattices, synthetic_lattices
from ..data.paths import find_data_file, read_data_file
from ..data.trees import Vocab
from ..models.lattice_lstm import LatticeLSTMTagger
from .workload import Workload, scaled

__all__ = ["EncodedLattice", "W6Lattice"]


class EncodedLattice(NamedTuple):
    """One instance as ids: per character its id and tag id; per lexicon match (start, end, word id)."""
    chars: list
    words: list
    tags: list


def _real(data_dir):
    lexicon = find_data_file(data_dir, "lattice_ner", "lexicon.txt")
    return tuple(read_data_file(data_dir, "lattice_ner", name, lambda path: read_lattices(path, lexicon))
                 for name in ("train.txt", "dev.txt"))


class W6Lattice(Workload):
    name = "W6"

    def __init__(self, hidden=256, data_dir=None, seed=0, train_sentences=None, dev_sentences=None,
                 synthetic_train=2000, synthetic_dev=200):
        super().__init__(hidden, data_dir, seed)
        if data_dir is not None:
            train, dev = _real(data_dir)
            tags = ("O",) + tuple(sorted({t for s in train + dev for t in s.tags} - {"O"}))
        else:
            train = synthetic_lattices(synthetic_train, seed=seed)
            dev = synthetic_lattices(synthetic_dev, seed=seed + 7919)
            tags = WEIBO_TAGS
        train, dev = train[:train_sentences], dev[:dev_sentences]
        self.lstm_hidden, self.embed = scaled(100, hidden), scaled(50, hidden)
        self.description = (f"Lattice LSTM NER tagger (char + lexicon word cells), embedding {self.embed}, "
                            f"hidden {self.lstm_hidden}, softmax loss per character")
        self.char_vocab = Vocab.build(Counter(ch for s in train for ch in s.chars))
        self.word_vocab = Vocab.build(Counter(w.word for s in train for w in s.words))
        self.tags = tags
        self.tag_index = {t: i for i, t in enumerate(tags)}
        self.model = LatticeLSTMTagger(len(self.char_vocab), len(self.word_vocab), len(tags),
                                       char_embed=self.embed, word_embed=self.embed,
                                       hidden=self.lstm_hidden, seed=seed)
        self._train = [self.encode(s) for s in train]
        self._dev = [self.encode(s) for s in dev]

    @property
    def data_source(self):
        return "synthetic_lattices" if self.data_dir is None else f"lattices {self.data_dir}"

    def encode(self, lattice):
        return EncodedLattice(self.char_vocab.ids(lattice.chars).tolist(),
                              [(w.start, w.end, self.word_vocab.id(w.word)) for w in lattice.words],
                              [self.tag_index[t] for t in lattice.tags])

    def loss(self, instance):
        return self.model.loss(instance.chars, instance.words, instance.tags)

    def predict(self, instance):
        return self.model.logits(instance.chars, instance.words)

    def gold(self, instance):
        return list(instance.tags)

    def forward_flops(self, instance):
        """2 per MAC: per character the character LSTM (4H x (E + H)) and the output layer
        (T x H); per lexicon match its word cell (3H x (E + H)) and, where it ends, its merge
        gate (H x (E + H)). With E = 50, H = 100, T = 17: 400x150, 17x100, 300x150, 100x150."""
        H, E = self.lstm_hidden, self.embed
        n, m = len(instance.chars), len(instance.words)
        return 2 * (n * (4 * H * (E + H) + len(self.tags) * H) + m * 4 * H * (E + H))
