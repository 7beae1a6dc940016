"""W5 of docs/workloads.md as a benchmark workload: the LSTM encoder-decoder (NMT).

Data: `synthetic_nmt` sentence pairs (`synthetic_train` for training, then `synthetic_dev`
more held out; there is no real parallel corpus in the shared data, so `data_dir` is
refused). Vocabularies: the 8,000 most frequent training words on the source side; the
7,998 most frequent target words plus <s> and </s> on the target side (id 0 = <unk> on
both). The model is `Seq2SeqLSTM` with embedding = hidden (256). Accuracy is next-word
accuracy over every target position, </s> included.
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from ..data.synthetic_nmt import synthetic_nmt
from ..data.trees import Vocab
from ..models.seq2seq import Seq2SeqLSTM
from .workload import SyntheticOnly, Workload

__all__ = ["EncodedPair", "W5NMT", "VOCAB", "BOS", "EOS"]

VOCAB = 8000
BOS, EOS = "<s>", "</s>"


class EncodedPair(NamedTuple):
    """One instance as word ids: the source, the decoder's inputs and its gold outputs."""
    source: list
    target_in: list
    target_out: list


class W5NMT(Workload):
    name = "W5"
    description = ("LSTM encoder-decoder NMT (teacher forcing), 8,000 words a side, "
                   "embedding = hidden, softmax loss per target word")
    data_source = "synthetic_nmt"

    def __init__(self, hidden=256, data_dir=None, seed=0, synthetic_train=2000, synthetic_dev=200,
                 vocab=VOCAB):
        if data_dir is not None:
            raise SyntheticOnly("W5 has no real-data reader: it runs on synthetic_nmt sentence pairs (drop --data)")
        super().__init__(hidden, data_dir, seed)
        pairs = synthetic_nmt(synthetic_train + synthetic_dev, seed=seed)
        train, dev = pairs[:synthetic_train], pairs[synthetic_train:]
        self.source_vocab = Vocab.build(Counter(w for p in train for w in p.source), max_size=vocab)
        self.target_vocab = Vocab.build(Counter(w for p in train for w in p.target), max_size=vocab - 2)
        self.bos, self.eos = self.target_vocab.add(BOS), self.target_vocab.add(EOS)
        self.model = Seq2SeqLSTM(len(self.source_vocab), len(self.target_vocab), embed=hidden,
                                 hidden=hidden, seed=seed)
        self._train = [self.encode(p) for p in train]
        self._dev = [self.encode(p) for p in dev]

    def encode(self, pair):
        target = self.target_vocab.ids(pair.target).tolist()
        return EncodedPair(self.source_vocab.ids(pair.source).tolist(), [self.bos] + target,
                           target + [self.eos])

    def loss(self, instance):
        return self.model.loss(instance.source, instance.target_in, instance.target_out)

    def predict(self, instance):
        return self.model.logits(instance.source, instance.target_in)

    def gold(self, instance):
        return list(instance.target_out)

    def forward_flops(self, instance):
        """2 per MAC: per source word the encoder LSTM (4H x (E + H)); per target position the
        decoder LSTM (4H x (E + H)) and the output layer (V x H). With E = H = 256 and
        V = 8,000: 1024x512 and 8000x256."""
        H = E = self.hidden
        lstm = 4 * H * (E + H)
        n, m = len(instance.source), len(instance.target_in)
        return 2 * (n * lstm + m * (lstm + len(self.target_vocab) * H))
