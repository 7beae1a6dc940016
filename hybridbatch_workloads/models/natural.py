"""The reference models written the plain way docs/user_guide.md teaches, to measure beside
the tuned ones.

The tuned W1 (`tree_lstm.py`) folds the classifier and the loss into its node block and
carries each subtree's loss up the tree; the tuned W2 (`bilstm_tagger.py`) hoists the input
projection of both directions into one block per token. These models do neither. They are
built from the library's public layers (`nn.Embedding`, `nn.TreeLSTMCell`, `nn.LSTMCell`,
`nn.ChildSumTreeLSTMCell`, `nn.Dense`) and score every node or token with its own
`hb.pick_neg_log_softmax` call, and the losses are summed with `hb.add_n`. Only the cells and
the classifier are HybridBlocks (`model.hybridize()`); the embedding lookup is an op.

- `NaturalTreeLSTM`: W1 of docs/workloads.md (binary Tree-LSTM, 5 classes on every node).
- `NaturalTagger`: W2 (BiLSTM UPOS tagger, words seen < 5 times are UNK in the workload).
- `ChildSumTreeLSTM`: a child-sum Tree-LSTM (Tai et al. 2015) over dependency trees, a UPOS
  tag classified at every node.

Each model returns a per-instance loss (`*_loss`, an `add_n` over its nodes or tokens) and
the per-node losses as a list (`node_losses`), so that a training loop may also sum a whole
minibatch's node losses with one `add_n`.
"""
import numpy as np

import hybridbatch as hb
from hybridbatch import nn


class NaturalTreeLSTM(hb.Block):
    """W1: `nn.TreeLSTMCell` (a leaf block and an internal block), `nn.Dense` on every node.

    Parameters are drawn as the tuned `TreeLSTMSentiment` draws them from the same seed, so
    the two compute the same losses.
    """

    def __init__(self, vocab, embed=256, hidden=256, classes=5, seed=0):
        super().__init__()
        self.vocab = vocab
        self.embedding = nn.Embedding(len(vocab), embed, seed=seed)
        self.cell = nn.TreeLSTMCell(hidden, embed, seed=seed + 1)
        self.classifier = nn.Dense(classes, hidden, seed=seed + 2)

    def encode(self, tree, losses=None):
        """(h, c) of the tree's root; with `losses` (a list), appends every node's loss to it
        in post-order."""
        if tree.is_leaf:
            h, c = self.cell(self.embedding(self.vocab.id(tree.word)))
        else:
            left, right = (self.encode(child, losses) for child in tree.children)
            h, c = self.cell(left, right)
        if losses is not None:
            losses.append(hb.pick_neg_log_softmax(self.classifier(h), tree.label))
        return h, c

    def node_losses(self, tree):
        losses = []
        self.encode(tree, losses)
        return losses

    def tree_loss(self, tree):
        return hb.add_n(self.node_losses(tree))

    def root_logits(self, tree):
        return self.classifier(self.encode(tree)[0])


def bilstm(forward, backward, xs):
    """[h_fwd; h_bwd] per element of xs: LSTM cells `forward` and `backward` run each way
    from a zero state."""
    zero = np.zeros(forward.hidden, np.float32)
    h, c, fwd = zero, zero, []
    for x in xs:
        h, c = forward(x, h, c)
        fwd.append(h)
    h, c, bwd = zero, zero, []
    for x in reversed(xs):
        h, c = backward(x, h, c)
        bwd.append(h)
    bwd.reverse()
    return [hb.concat([f, b]) for f, b in zip(fwd, bwd)]


class NaturalTagger(hb.Block):
    """W2: `nn.LSTMCell` per step in each direction from a zero state, `nn.Dense` over
    [h_fwd; h_bwd] per token. Takes word ids (`encode`) and tag ids."""

    def __init__(self, word_vocab, tags, embed=256, hidden=256, seed=0):
        super().__init__()
        self.word_vocab = word_vocab
        self.tags = list(tags)
        self.embedding = nn.Embedding(len(word_vocab), embed, seed=seed)
        self.fwd = nn.LSTMCell(hidden, embed, seed=seed + 1)
        self.bwd = nn.LSTMCell(hidden, embed, seed=seed + 2)
        self.classifier = nn.Dense(len(self.tags), 2 * hidden, seed=seed + 3)

    def encode(self, words):
        return [self.word_vocab.id(w) for w in words]

    def tag_ids(self, tags):
        index = {t: i for i, t in enumerate(self.tags)}
        return [index[t] for t in tags]

    def logits(self, tokens):
        xs = [self.embedding(w) for w in tokens]
        return [self.classifier(v) for v in bilstm(self.fwd, self.bwd, xs)]

    def node_losses(self, tokens, tags):
        if len(tokens) != len(tags):
            raise ValueError(f"one tag per token: got {len(tokens)} tokens and {len(tags)} tags")
        return [hb.pick_neg_log_softmax(y, t) for y, t in zip(self.logits(tokens), tags)]

    def sentence_loss(self, tokens, tags):
        return hb.add_n(self.node_losses(tokens, tags))


def dependency_children(heads):
    """Per word 0..n (0 = the artificial root), the tuple of its dependents' ids in sentence
    order, from `heads[k]` = the head of word k + 1 (0 for the root word)."""
    children = [[] for _ in range(len(heads) + 1)]
    for k, h in enumerate(heads, 1):
        children[h].append(k)
    return tuple(map(tuple, children))


class ChildSumTreeLSTM(hb.Block):
    """Child-sum Tree-LSTM tagger over a dependency tree: `nn.ChildSumTreeLSTMCell` at every
    word on its embedding and its dependents' states (0..n children; the cell is traced once
    per arity), `nn.Dense` to the tags on its h.

    A sentence is given as word ids, and `children` from `dependency_children`.
    """

    def __init__(self, word_vocab, tags, embed=256, hidden=256, seed=0):
        super().__init__()
        self.word_vocab = word_vocab
        self.tags = list(tags)
        self.embedding = nn.Embedding(len(word_vocab), embed, seed=seed)
        self.cell = nn.ChildSumTreeLSTMCell(hidden, embed, seed=seed + 1)
        self.classifier = nn.Dense(len(self.tags), hidden, seed=seed + 2)

    def subtree(self, tokens, children, word, out=None, tags=None):
        """(h, c) of `word` (1-based) from its subtree. With `out` (a dict), stores each
        word's logits there, or with `tags` its loss."""
        states = []
        for child in children[word]:
            states.extend(self.subtree(tokens, children, child, out, tags))
        h, c = self.cell(self.embedding(tokens[word - 1]), *states)
        if out is not None:
            logits = self.classifier(h)
            out[word] = logits if tags is None else hb.pick_neg_log_softmax(logits, tags[word - 1])
        return h, c

    def _walk(self, tokens, children, tags=None):
        if len(children) != len(tokens) + 1 or len(children[0]) != 1:
            raise ValueError("children must come from dependency_children of the sentence's heads "
                             "(one list per word and one root)")
        out = {}
        self.subtree(tokens, children, children[0][0], out, tags)
        return [out[k] for k in range(1, len(tokens) + 1)]

    def logits(self, tokens, children):
        """One logits value per word, in sentence order."""
        return self._walk(tokens, children)

    def node_losses(self, tokens, children, tags):
        if len(tokens) != len(tags):
            raise ValueError(f"one tag per token: got {len(tokens)} tokens and {len(tags)} tags")
        return self._walk(tokens, children, tags)

    def sentence_loss(self, tokens, children, tags):
        return hb.add_n(self.node_losses(tokens, children, tags))
