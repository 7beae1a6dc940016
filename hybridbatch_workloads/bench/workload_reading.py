"""Workloads whose per-instance code reads values as it runs, batched through `hb.map`.

- `W9`: the BIST-style arc-hybrid parser (`models/parser.py`) on UD EWT (`--data`, the
  folder holding `en_ewt-ud-{train,dev}.conllu` or its parent) or on `synthetic_tagging`.
  Every transition reads its scores. Training: the static oracle's transitions with hinge
  losses, on the projective training sentences only (`skipped_nonprojective` counts the
  others). Inference: greedy decoding; the accuracy is LAS on every word.
- `W8-GATE`: the mixture of experts (`models/moe.py`), 64 experts of 256 -> 256 -> 256, top 2,
  a 10-class classifier on the mixture, on `synthetic_vectors`; each example reads its gate.
  Docs/workloads.md's acceptance point is `--batch 256`.
- `W8`: the same model at W8's largest point, 1,024 experts (run it at `--batch 4096`);
  `benchmarks/moe_sweep.py` sweeps experts and batch sizes and times the experts alone.
- `BEAM`: beam search (beam 4) with W5's encoder-decoder (`models/beam.py`) on W5's
  synthetic pairs. Inference decodes each source sentence (at most `max_length` words, 50
  by default, W5's longest target); its accuracy is the share of target positions whose
  word the decoded sentence has at the same position. Training is W5's teacher-forced
  training (no reads), measured so that the table stays whole. Its FLOPs are W5's
  teacher-forced forward: a decode's own count depends on when its hypotheses finish.
"""
from __future__ import annotations

from ..data.vectors import synthetic_vectors
from ..models.beam import beam_search
from ..models.moe import MixtureOfExperts
from ..models.parser import ArcHybridParser, ParserVocab, is_projective
from .workload import ReadingWorkload, SyntheticOnly, scaled
from .workload_nmt import W5NMT
from .workload_tagger import ud_ewt_sentences

__all__ = ["W9Parser", "W8Gate", "W8", "Beam"]


class W9Parser(ReadingWorkload):
    name = "W9"

    @property
    def description(self):
        words, tags = self.model.word_embedding.weight.shape[1], self.model.tag_embedding.weight.shape[1]
        return (f"BIST arc-hybrid parser (UD EWT): word {words} + POS {tags}, BiLSTM 2 x {self.lstm}, MLP "
                f"{self.mlp} over s2 s1 s0 b0, reading the scores at every transition; static-oracle hinge loss")

    def __init__(self, hidden=256, data_dir=None, seed=0, train_sentences=None, dev_sentences=None,
                 synthetic_train=4000, synthetic_dev=500, min_count=2):
        super().__init__(hidden, data_dir, seed)
        train, dev = ud_ewt_sentences(data_dir, seed, synthetic_train, synthetic_dev, train_sentences, dev_sentences)
        if data_dir is not None:
            self.data_source = "UD English EWT"
        self.vocab = ParserVocab(train, min_count=min_count)
        # docs/workloads.md sizes at hidden 256; --hidden scales them
        self.lstm = scaled(200, hidden)
        self.mlp = scaled(100, hidden)
        self.model = ArcHybridParser(self.vocab, word_dim=scaled(100, hidden), tag_dim=scaled(25, hidden),
                                     hidden=self.lstm, mlp=self.mlp, seed=seed)
        encoded = [self.vocab.encode(s) for s in train]
        self._train = [s for s in encoded if is_projective(s.heads)]
        self.skipped_nonprojective = len(encoded) - len(self._train)
        self._dev = [self.vocab.encode(s) for s in dev]

    def loss(self, instance):
        return self.model.sentence_loss(instance)

    def predict(self, instance):
        return self.model.parse(instance)

    def score(self, instance, parse):
        """(words with the right head and label, words): LAS's terms."""
        right = sum(parse.heads[k] == instance.heads[k] and parse.labels[k] == instance.labels[k]
                    for k in range(1, len(instance.words)))
        return right, len(instance.words) - 1

    def forward_flops(self, instance):
        """2 per MAC: both directions of both LSTM layers per token (ROOT included), and per
        transition (2 per word) the MLP over four 2H vectors and its output layer."""
        H, M = self.lstm, self.mlp
        E = self.model.word_embedding.weight.shape[1] + self.model.tag_embedding.weight.shape[1]
        tokens = len(instance.words)
        lstm = 2 * 4 * H * (E + H) + 2 * 4 * H * (3 * H)
        step = M * 8 * H + (1 + 2 * self.model.n_labels) * M
        return 2 * (tokens * lstm + 2 * (tokens - 1) * step)


class W8Gate(ReadingWorkload):
    name = "W8-GATE"
    data_source = "synthetic_vectors"
    classes = 10

    @property
    def description(self):
        d = self.hidden
        return (f"mixture of {self.model.n_experts:,} experts ({d} -> {d} relu -> {d}), top-{self.k} gate read "
                f"per example, {self.classes}-class classifier on the mixture")

    def __init__(self, hidden=256, data_dir=None, seed=0, synthetic_train=4096, synthetic_dev=512,
                 experts=64, k=2):
        if data_dir is not None:
            raise SyntheticOnly(f"{self.name} has no real-data reader: it runs on synthetic_vectors (drop --data)")
        super().__init__(hidden, data_dir, seed)
        self.k = k
        self.model = MixtureOfExperts(experts=experts, dim=hidden, k=k, classes=self.classes, seed=seed)
        self._train = synthetic_vectors(synthetic_train, dim=hidden, classes=self.classes, seed=seed)
        self._dev = synthetic_vectors(synthetic_dev, dim=hidden, classes=self.classes, seed=seed + 1)

    def loss(self, instance):
        return self.model.loss(instance.x, instance.label)

    def predict(self, instance):
        return self.model.logits(instance.x).asnumpy()

    def score(self, instance, logits):
        return int(logits.argmax() == instance.label), 1

    def forward_flops(self, instance):
        """2 per MAC: the gate, k experts (two dim x dim layers each) and the classifier."""
        d = self.hidden
        return 2 * (self.model.n_experts * d + self.k * 2 * d * d + self.classes * d)


class W8(W8Gate):
    name = "W8"

    def __init__(self, hidden=256, data_dir=None, seed=0, synthetic_train=8192, synthetic_dev=512,
                 experts=1024, k=2):
        super().__init__(hidden, data_dir, seed, synthetic_train, synthetic_dev, experts, k)


class Beam(ReadingWorkload, W5NMT):
    name = "BEAM"
    description = "beam search (beam 4) with W5's LSTM encoder-decoder, reading log-probabilities per step"
    beam = 4

    def __init__(self, hidden=256, data_dir=None, seed=0, synthetic_train=2000, synthetic_dev=200,
                 max_length=50):
        super().__init__(hidden, data_dir, seed, synthetic_train=synthetic_train,
                         synthetic_dev=synthetic_dev)
        self.max_length = max_length

    def predict(self, instance):
        return beam_search(self.model, instance.source, self.bos, self.eos, self.beam, self.max_length)

    def score(self, instance, words):
        gold = instance.target_out[:-1]
        return sum(a == b for a, b in zip(words, gold)), len(gold)
