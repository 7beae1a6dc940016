"""The plain formulations of `models/natural.py` as benchmark workloads, beside the tuned ones.

- `W1-NATURAL`: W1's data, sizes and FLOPs with `NaturalTreeLSTM`; a training minibatch's
  loss is ONE `add_n` over every node loss of its trees.
- `W2-NATURAL`: W2's data, sizes and FLOPs with `NaturalTagger`; a sentence's loss is the
  `add_n` of its token losses, summed over the minibatch.
- `CHILDSUM`: `ChildSumTreeLSTM` (embedding = hidden = 256, 17 UPOS tags) on the dependency
  trees of UD EWT (`--data`, as W2) or of `synthetic_tagging`; words seen fewer than 5 times
  are UNK. A training minibatch's loss is one `add_n` over every node loss, as W1-NATURAL.
"""
from __future__ import annotations

from typing import NamedTuple

from hybridbatch import api as hb
from ..data.conllu import UPOS_TAGS
from ..models.natural import ChildSumTreeLSTM, NaturalTagger, NaturalTreeLSTM, dependency_children
from .workload_tagger import W2Tagger, _TaggerWorkload
from .workload_treelstm import CLASSES, W1TreeLSTM, tree_counts

__all__ = ["W1Natural", "W2Natural", "ChildSum", "ParsedSentence"]


class W1Natural(W1TreeLSTM):
    name = "W1-NATURAL"
    description = ("binary Tree-LSTM sentiment written plainly: nn.TreeLSTMCell, nn.Dense and a loss "
                   "per node, one add_n per minibatch")

    def build_model(self):
        return NaturalTreeLSTM(self.vocab, embed=self.embed, hidden=self.hidden, classes=CLASSES,
                               seed=self.seed)

    def loss(self, instance):
        return self.model.tree_loss(instance)

    def minibatch_loss(self, instances):
        return hb.add_n([l for x in instances for l in self.model.node_losses(x)])

    def predict(self, instance):
        return [self.model.root_logits(instance)]

    def predict_flops(self, instance):
        """The cells of every node, then the classifier at the root only."""
        H, E = self.hidden, self.embed
        leaves, internal = tree_counts(instance)
        return 2 * (leaves * 3 * H * E + internal * 5 * H * 2 * H + CLASSES * H)


class W2Natural(W2Tagger):
    name = "W2-NATURAL"
    description = "BiLSTM UPOS tagger written plainly: nn.LSTMCell per step, nn.Dense and a loss per token"

    def build_model(self):
        return NaturalTagger(self.word_vocab, UPOS_TAGS, embed=self.hidden, hidden=self.hidden, seed=self.seed)

    def loss(self, instance):
        return self.model.sentence_loss(instance.tokens, instance.tag_ids)

    def predict(self, instance):
        return self.model.logits(instance.tokens)


class ParsedSentence(NamedTuple):
    """One instance: words and UPOS tags (strings), word ids, tag ids, and per word 0..n the
    ids of its dependents (`dependency_children`)."""
    words: list
    tags: list
    tokens: list
    tag_ids: list
    children: tuple


class ChildSum(_TaggerWorkload):
    name = "CHILDSUM"
    description = ("child-sum Tree-LSTM over dependency trees (UD EWT), a UPOS tag per node, "
                   "embedding = hidden")

    def build_model(self):
        return ChildSumTreeLSTM(self.word_vocab, UPOS_TAGS, embed=self.hidden, hidden=self.hidden, seed=self.seed)

    def _instance(self, sent):
        words = [t.form for t in sent]
        tags = [t.upos for t in sent]
        return ParsedSentence(words, tags, [self.word_vocab.id(w) for w in words],
                              [UPOS_TAGS.index(t) for t in tags], dependency_children([t.head for t in sent]))

    def loss(self, instance):
        return self.model.sentence_loss(instance.tokens, instance.children, instance.tag_ids)

    def minibatch_loss(self, instances):
        return hb.add_n([l for x in instances
                         for l in self.model.node_losses(x.tokens, x.children, x.tag_ids)])

    def predict(self, instance):
        return self.model.logits(instance.tokens, instance.children)

    def forward_flops(self, instance):
        """2 per MAC, per word with k dependents: W_iou (3H x E) and the classifier (17 x H);
        with k > 0 also U_iou (3H x H) on the summed h, W_f (H x E) and U_f (H x H) per child."""
        H = E = self.hidden
        macs = 0
        for k in map(len, instance.children[1:]):
            macs += 3 * H * E + len(UPOS_TAGS) * H
            if k:
                macs += 3 * H * H + H * E + k * H * H
        return 2 * macs
