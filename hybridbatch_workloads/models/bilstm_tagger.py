"""W2 / W3: BiLSTM part-of-speech tagger (UPOS), docs/workloads.md sizes.

W2: word embedding 256 (words seen < 5 times -> UNK), one LSTM layer of 256 per direction,
[h_fwd; h_bwd] (512) -> linear -> 17 tags, softmax loss per token summed over the sentence.
W3: as W2, but every rare (or unseen) word is embedded by a character BiLSTM (char embedding
64, LSTM 128 per direction, final hidden states concatenated -> 256) instead of UNK.

Written per instance: plain Python loops over one sentence. Every recurrent step is ONE call
of a hybridized block returning (h, c), so block granularity records one node per step (its
second output rides along as a light extra-output node, never a batch of its own), and a
token's output layer and loss are one block call taking the gold tag as an integer argument.
Two formulations of the same LSTM:

- `hoist=True` (default): the LSTM's gate pre-activations W [x; h] + b are split into an
  input part and a recurrent part. A token's input part for BOTH directions,
  [W_f x + b_f; W_b x + b_b], is one block call (embedding lookup inside, the word id an
  integer argument; a W3 rare word passes its two final character hidden states); it
  depends on no recurrence, so all tokens of the minibatch run as one large GEMM. Each
  recurrent step then only multiplies U h (4H x H). Block granularity: 4 nodes per token
  (input part, forward step, backward step, output + loss); a W3 rare word of k characters
  adds 3k (a character's input part and two character steps).
- `hoist=False`: each step is `nn.LSTMCell` over [x; h], the word id an integer argument
  looked up inside the step (W2: 3 nodes per token); W3 adds one input node per token (a
  lookup, or the concatenation of the final character hidden states) so that frequent and
  rare words' steps share one signature, plus 2k character steps for a rare word.

Both compute the same function (W = [W_x U]); `hoist=False` keeps one (4H, E + H) weight per
direction as nn.LSTMCell does. The first step of a chain takes no state: its zero state is
a constant of the traced program, not an input node per sentence.
"""
import math

import numpy as np

from hybridbatch import api as hb
from hybridbatch.hybrid.block import Block, HybridBlock
from hybridbatch.nn import Dense, LSTMCell
from hybridbatch.train.parameter import Parameter, Uniform
from hybridbatch.hybrid.arguments import BlockInt

_INDEX = (int, np.integer, BlockInt)    # a row id: a Python / numpy int, or its trace placeholder


def _lstm_init(hidden, input_size):
    """nn.LSTMCell's Xavier bound for a (4H, input + H) weight, for its two column blocks."""
    return Uniform(math.sqrt(6.0 / (4 * hidden + input_size + hidden)))


# -- hoist=True: input part per token, recurrent part per step ---------------------------------

class InputProjection(HybridBlock):
    """One token's input part of the gates of both directions: [W_f x + b_f; W_b x + b_b].

    proj(id): x = row `id` of `embedding`; proj(h_cf, h_cb) (W3 rare word): x = [h_cf; h_cb],
    the final hidden states of the character LSTMs.
    """

    def __init__(self, vocab_size, embed, hidden, rng=None):
        super().__init__()
        self.hidden = hidden
        self.embedding = Parameter("embedding", (vocab_size, embed), init="uniform", rng=rng)
        self.weight = Parameter("weight", (8 * hidden, embed), init=_lstm_init(hidden, embed), rng=rng)
        self.bias = Parameter("bias", (8 * hidden,), init="zeros")

    def forward(self, *args):
        x = hb.lookup(self.embedding, args[0]) if isinstance(args[0], _INDEX) else hb.concat(list(args))
        return hb.affine(self.weight, x, self.bias)


class RecurrentStep(HybridBlock):
    """One LSTM step of one direction: (input part p[, h, c]) -> (h, c).

    z = p[offset : offset + 4H] + U h, gates [i, f, o | g]: c = σ(f)⊙c + σ(i)⊙tanh(g),
    h = σ(o)⊙tanh(c). Without a state the step starts from zeros (and skips U h).
    """

    def __init__(self, hidden, input_size, offset, rng=None):
        super().__init__()
        self.hidden, self.offset = hidden, offset
        self.weight = Parameter("weight", (4 * hidden, hidden), init=_lstm_init(hidden, input_size), rng=rng)

    def forward(self, p, h=None, c=None):
        H, o = self.hidden, self.offset
        z = p[o:o + 4 * H]
        if h is not None:
            z = hb.affine(self.weight, h, z)
        # one sigmoid per gate (not one over 3H): every op of the gate math then has length
        # H, so the block's elementwise tail fuses into one kernel
        i, f, o_, g = (z[k * H:(k + 1) * H] for k in range(4))
        c = hb.sigmoid(i) * hb.tanh(g) if h is None else hb.sigmoid(f) * c + hb.sigmoid(i) * hb.tanh(g)
        return hb.sigmoid(o_) * hb.tanh(c), c


# -- hoist=False: nn.LSTMCell over [x; h] per step ---------------------------------------------

class EmbedLSTMStep(HybridBlock):
    """One nn.LSTMCell step: (x[, h, c]) -> (h, c); x is an integer (a row of `embedding`,
    looked up inside) or an input vector."""

    def __init__(self, vocab_size, embed, hidden, rng=None):
        super().__init__()
        self.hidden = hidden
        self.embedding = Parameter("embedding", (vocab_size, embed), init="uniform", rng=rng)
        self.cell = LSTMCell(hidden, embed, seed=int(rng.integers(2 ** 31)) if rng is not None else None)

    def forward(self, x, h=None, c=None):
        if isinstance(x, _INDEX):
            x = hb.lookup(self.embedding, x)
        if h is None:
            h = c = np.zeros(self.hidden, np.float32)
        return self.cell(x, h, c)


# -- shared -------------------------------------------------------------------------------------

class TokenOutput(HybridBlock):
    """(h_fwd, h_bwd[, tag]) -> logits of [h_fwd; h_bwd], or with `tag` its softmax loss."""

    def __init__(self, hidden, classes, seed=0):
        super().__init__()
        self.dense = Dense(classes, 2 * hidden, seed=seed)

    def forward(self, h_f, h_b, tag=None):
        logits = self.dense(hb.concat([h_f, h_b]))
        return logits if tag is None else hb.pick_neg_log_softmax(logits, tag)


def _bilstm_blocks(vocab_size, embed, hidden, hoist, rng):
    """(input projection or None, forward step, backward step) of one BiLSTM over a vocabulary."""
    if hoist:
        return (InputProjection(vocab_size, embed, hidden, rng), RecurrentStep(hidden, embed, 0, rng),
                RecurrentStep(hidden, embed, 4 * hidden, rng))
    fwd = EmbedLSTMStep(vocab_size, embed, hidden, rng)
    bwd = EmbedLSTMStep(vocab_size, embed, hidden, rng)
    bwd.embedding = fwd.embedding       # one embedding table for both directions
    return None, fwd, bwd


class BiLSTMTagger(Block):
    """W2 (char_vocab=None) or W3 (char_vocab given) tagger.

    word_vocab: a `Vocab` (id 0 = UNK) of the frequent words; tag_vocab: the tag strings
    (UPOS_TAGS: 17 classes); char_vocab: a `Vocab` of characters (id 0 = unknown character).
    hoist: the formulation (module docstring); the same model either way.

    - `sentence_loss(words, tags)`: summed per-token loss of one sentence (strings);
    - `tag_logits(words)`: one logits handle per token;
    - `encode(words)` / `tag_ids(tags)` pre-encode a sentence; `encoded_loss(tokens, tag_ids)`
      and `encoded_logits(tokens)` take those (what the benchmark workloads time).
    """

    def __init__(self, word_vocab, tag_vocab, char_vocab=None, embed=256, hidden=256,
                 char_embed=64, char_hidden=128, hoist=True, seed=0):
        super().__init__()
        self.word_vocab = word_vocab
        self.tags = list(tag_vocab)
        self.tag_index = {t: i for i, t in enumerate(self.tags)}
        self.char_vocab = char_vocab
        self.hidden = hidden
        self.hoist = hoist
        self.use_chars = char_vocab is not None
        if self.use_chars and embed != 2 * char_hidden:
            raise ValueError(f"the char BiLSTM gives 2 * char_hidden = {2 * char_hidden} values per "
                             f"word; it replaces a word embedding of size {embed}")
        rng = np.random.default_rng(seed)
        proj, self.fwd, self.bwd = _bilstm_blocks(len(word_vocab), embed, hidden, hoist, rng)
        if hoist:
            self.proj = proj
        self.output = TokenOutput(hidden, len(self.tags), seed=seed + 1)
        if self.use_chars:
            proj, self.char_fwd, self.char_bwd = _bilstm_blocks(len(char_vocab), char_embed, char_hidden, hoist, rng)
            if hoist:
                self.char_proj = proj

    @property
    def word_embedding(self):
        return (self.proj if self.hoist else self.fwd).embedding

    @property
    def char_embedding(self):
        return (self.char_proj if self.hoist else self.char_fwd).embedding

    # -- encoding ----------------------------------------------------------------------
    def encode(self, words):
        """Per token: its word id (int) or, for a W3 word outside the vocabulary, a tuple of
        character ids (the word's spelling)."""
        get = self.word_vocab.id
        if not self.use_chars:
            return [get(w) for w in words]
        cget = self.char_vocab.id
        out = []
        for w in words:
            i = get(w)
            out.append(i if i else tuple(cget(ch) for ch in w) or (0,))
        return out

    def tag_ids(self, tags):
        return [self.tag_index[t] for t in tags]

    # -- the model, per instance --------------------------------------------------------
    @staticmethod
    def _bidirectional(fwd_step, bwd_step, inputs):
        """(forward h's, backward h's) of one BiLSTM over `inputs`, one per position."""
        fwd, state = [], ()
        for x in inputs:
            state = fwd_step(x, *state)
            fwd.append(state[0])
        bwd, state = [None] * len(inputs), ()
        for i in range(len(inputs) - 1, -1, -1):
            state = bwd_step(inputs[i], *state)
            bwd[i] = state[0]
        return fwd, bwd

    def _char_word(self, chars):
        """W3: a rare word's input from its spelling (the char BiLSTM's final hidden states)."""
        inputs = [self.char_proj(ch) for ch in chars] if self.hoist else chars
        fwd, bwd = self._bidirectional(self.char_fwd, self.char_bwd, inputs)
        if self.hoist:
            return self.proj(fwd[-1], bwd[0])
        return hb.concat([fwd[-1], bwd[0]])

    def _states(self, tokens):
        if self.hoist:
            inputs = [self._char_word(t) if isinstance(t, tuple) else self.proj(t) for t in tokens]
        elif self.use_chars:      # one input vector per token, so all steps share a signature
            E = self.fwd.embedding
            inputs = [self._char_word(t) if isinstance(t, tuple) else hb.lookup(E, t) for t in tokens]
        else:                     # word ids: each step looks its embedding up inside
            inputs = tokens
        return self._bidirectional(self.fwd, self.bwd, inputs)

    def encoded_loss(self, tokens, tags):
        if len(tokens) != len(tags):     # zip would silently drop the tokens past the last tag
            raise ValueError(f"one tag per token: got {len(tokens)} tokens and {len(tags)} tags")
        fwd, bwd = self._states(tokens)
        return hb.add_n([self.output(sf, sb, y) for sf, sb, y in zip(fwd, bwd, tags)])

    def encoded_logits(self, tokens):
        fwd, bwd = self._states(tokens)
        return [self.output(sf, sb) for sf, sb in zip(fwd, bwd)]

    def sentence_loss(self, words, tags):
        """Σ over tokens of −log softmax(logits)[tag] (tags as strings or ids)."""
        tags = [int(t) if isinstance(t, (int, np.integer)) else self.tag_index[t] for t in tags]
        return self.encoded_loss(self.encode(words), tags)

    def tag_logits(self, words):
        return self.encoded_logits(self.encode(words))

    def forward(self, words, tags=None):
        return self.tag_logits(words) if tags is None else self.sentence_loss(words, tags)
