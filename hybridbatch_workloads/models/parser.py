"""W9: a BIST-style arc-hybrid transition parser (Kiperwasser & Goldberg 2016), one sentence
per call.

A sentence's words (embedding 100) and UPOS tags (25) go through two BiLSTM layers (200 each
direction); the artificial ROOT is a token of its own, read last, as in BIST. Parsing walks
the arc-hybrid system: a stack, a buffer (the words left to right, then ROOT) and the
transitions SHIFT, LEFT-ARC(label) (s0 gets head b0) and RIGHT-ARC(label) (s0 gets head
s1). Every step scores all labeled transitions with an MLP (hidden 100, tanh) over the BiLSTM
vectors of stack top 3 and buffer top 1 (a learned pad vector where the stack is shorter)
and reads the scores: greedy decoding takes the best valid one; training follows the static
oracle and, where the oracle's transition does not beat the best wrong valid one by a
margin of 1, adds the hinge loss 1 + score(wrong) - score(oracle).

The code is written for one sentence with plain Python control flow; `hb.map` runs a
minibatch of sentences side by side inside `hb.batching()`, each read suspending its
sentence until the scores of all of them are computed together.
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple

import numpy as np

import hybridbatch as hb
from hybridbatch import nn
from ..data.trees import Vocab
from .natural import bilstm

__all__ = ["ArcHybridParser", "ParserVocab", "Sentence", "Parse", "TransitionScorer",
           "is_projective", "SHIFT"]

ROOT = "<root>"
SHIFT = 0       # action ids: 0 = SHIFT, 1 + l = LEFT-ARC(l), 1 + L + l = RIGHT-ARC(l)


class Sentence(NamedTuple):
    """Token ids with the ROOT token at index 0 and word k at index k; gold `heads` (index
    of the head, 0 = ROOT; `heads[0]` unused) and `labels` (label ids), or None to parse."""
    words: tuple
    tags: tuple
    heads: tuple | None = None
    labels: tuple | None = None


class Parse(NamedTuple):
    """What parsing one sentence gave: the actions taken, per token (index 0 unused) the head
    and label id, and the summed hinge loss (training; None where no step violated the margin
    or when decoding)."""
    actions: list
    heads: list
    labels: list
    loss: object


def is_projective(heads) -> bool:
    """Whether the tree `heads` (heads[k] = head of word k, 0 = ROOT; heads[0] unused) has no
    crossing arcs, ROOT's arc included. The static oracle reaches only projective trees."""
    arcs = [(min(h, d), max(h, d)) for d, h in enumerate(heads) if d]
    return not any(a < c < b < e for a, b in arcs for c, e in arcs)


class ParserVocab:
    """Words (seen at least `min_count` times, else UNK), UPOS tags and dependency labels of
    the training sentences, each with its ROOT entry; `encode` turns CoNLL-U tokens into a
    `Sentence`."""

    def __init__(self, sentences, min_count=2):
        self.words = Vocab.build(Counter(t.form for s in sentences for t in s), min_count=min_count)
        self.tags = Vocab.build(Counter(t.upos for s in sentences for t in s))
        self.root_word, self.root_tag = self.words.add(ROOT), self.tags.add(ROOT)
        self.labels = sorted({t.deprel for s in sentences for t in s})
        self._label_ids = {l: i for i, l in enumerate(self.labels)}

    def encode(self, tokens, with_tree=True) -> Sentence:
        """A CoNLL-U sentence as ids; a label unseen in training is -1 (never predicted)."""
        words = (self.root_word,) + tuple(self.words.id(t.form) for t in tokens)
        tags = (self.root_tag,) + tuple(self.tags.id(t.upos) for t in tokens)
        if not with_tree:
            return Sentence(words, tags)
        heads = (0,) + tuple(t.head for t in tokens)
        labels = (-1,) + tuple(self._label_ids.get(t.deprel, -1) for t in tokens)
        return Sentence(words, tags, heads, labels)


class TransitionScorer(hb.HybridBlock):
    """Features [s2; s1; s0; b0] -> one score per labeled transition (MLP, tanh hidden)."""

    def __init__(self, actions, features, hidden, seed=0):
        super().__init__()
        self.hidden = nn.Dense(hidden, features, activation="tanh", seed=seed)
        self.output = nn.Dense(actions, hidden, seed=seed + 1)

    def forward(self, features):
        return self.output(self.hidden(features))


class ArcHybridParser(hb.Block):
    """`parse(sentence)` decodes greedily; `train_parse(sentence)` follows the static oracle
    and sums the hinge losses; `sentence_loss(sentence)` is that loss as a value."""

    def __init__(self, vocab: ParserVocab, word_dim=100, tag_dim=25, hidden=200, mlp=100, seed=0):
        super().__init__()
        self.vocab = vocab
        self.n_labels = len(vocab.labels)
        self.word_embedding = nn.Embedding(len(vocab.words), word_dim, seed=seed)
        self.tag_embedding = nn.Embedding(len(vocab.tags), tag_dim, seed=seed + 1)
        self.forward1 = nn.LSTMCell(hidden, word_dim + tag_dim, seed=seed + 2)
        self.backward1 = nn.LSTMCell(hidden, word_dim + tag_dim, seed=seed + 3)
        self.forward2 = nn.LSTMCell(hidden, 2 * hidden, seed=seed + 4)
        self.backward2 = nn.LSTMCell(hidden, 2 * hidden, seed=seed + 5)
        self.pad = hb.Parameter("pad", (2 * hidden,), init="uniform", rng=np.random.default_rng(seed + 6))
        self.scorer = TransitionScorer(1 + 2 * self.n_labels, 4 * 2 * hidden, mlp, seed=seed + 7)

    # -- encoder ---------------------------------------------------------------------------

    def encode(self, sentence: Sentence):
        """One BiLSTM vector per token index (0 = ROOT), ROOT read after the last word."""
        order = list(range(1, len(sentence.words))) + [0]
        xs = [hb.concat([self.word_embedding(sentence.words[k]), self.tag_embedding(sentence.tags[k])])
              for k in order]
        first = bilstm(self.forward1, self.backward1, xs)
        top = bilstm(self.forward2, self.backward2, first)
        vectors = [None] * len(order)
        for k, v in zip(order, top):
            vectors[k] = v
        return vectors

    # -- transitions -----------------------------------------------------------------------

    def _valid(self, stack, b0):
        """Mask over actions: SHIFT while a word is left in the buffer; LEFT-ARC with a stack,
        onto ROOT only for the last stack item (one root); RIGHT-ARC with two on the stack."""
        valid = np.zeros(1 + 2 * self.n_labels, bool)
        valid[SHIFT] = b0 != 0
        valid[1:1 + self.n_labels] = bool(stack) and (b0 != 0 or len(stack) == 1)
        valid[1 + self.n_labels:] = len(stack) >= 2
        return valid

    def _oracle(self, sentence, stack, b0, pending):
        """The static oracle's action: LEFT-ARC when s0's head is b0, RIGHT-ARC when it is s1
        and no dependent of s0 is left to attach, else SHIFT."""
        if stack:
            s0 = stack[-1]
            if sentence.heads[s0] == b0:
                return 1 + sentence.labels[s0]
            if len(stack) >= 2 and sentence.heads[s0] == stack[-2] and not pending[s0]:
                return 1 + self.n_labels + sentence.labels[s0]
        return SHIFT

    def _walk(self, sentence: Sentence, train: bool) -> Parse:
        vectors = self.encode(sentence)
        n = len(sentence.words) - 1
        heads, labels = [0] * (n + 1), [-1] * (n + 1)
        pending = Counter(sentence.heads[1:]) if train else None
        stack, b, actions, losses = [], 1, [], []
        while stack or b <= n:
            b0 = b if b <= n else 0
            features = hb.concat([vectors[stack[-k]] if len(stack) >= k else self.pad for k in (3, 2, 1)]
                                 + [vectors[b0]])
            scores = self.scorer(features)
            values = scores.asnumpy()
            valid = self._valid(stack, b0)
            if train:
                action = self._oracle(sentence, stack, b0, pending)
                if not valid[action]:
                    raise ValueError("the static oracle reaches projective trees only: this sentence's "
                                     "tree has crossing arcs (check with is_projective)")
                valid[action] = False
                if valid.any():
                    wrong = int(np.argmax(np.where(valid, values, -np.inf)))
                    if values[action] - values[wrong] < 1.0:
                        losses.append(1.0 + hb.pick(scores, wrong) - hb.pick(scores, action))
            else:
                action = int(np.argmax(np.where(valid, values, -np.inf)))
            actions.append(action)
            if action == SHIFT:
                stack.append(b)
                b += 1
                continue
            s0 = stack.pop()
            if action <= self.n_labels:
                heads[s0], labels[s0] = b0, action - 1
            else:
                heads[s0], labels[s0] = stack[-1], action - 1 - self.n_labels
            if train:
                pending[heads[s0]] -= 1
        return Parse(actions, heads, labels, hb.add_n(losses) if losses else None)

    def parse(self, sentence: Sentence) -> Parse:
        """Greedy decoding: the best valid transition at every step."""
        return self._walk(sentence, train=False)

    def train_parse(self, sentence: Sentence) -> Parse:
        """The static oracle's transitions, with the hinge loss of every step that violated the
        margin (the sentence must be projective, with gold heads and labels)."""
        if sentence.heads is None:
            raise ValueError("training needs the sentence's gold heads and labels")
        if min(sentence.labels[1:], default=0) < 0:
            raise ValueError("training needs every label in the parser's label vocabulary")
        return self._walk(sentence, train=True)

    def sentence_loss(self, sentence: Sentence):
        """The summed hinge loss, a zero constant when no step violated the margin."""
        loss = self.train_parse(sentence).loss
        return loss if loss is not None else hb.array(np.float32(0.0))
