"""W6: Lattice LSTM tagger (Zhang & Yang 2018), docs/workloads.md sizes.

Character embedding 50, word embedding 50, hidden 100. A chain of character cells reads the
sentence; every lexicon word w over characters b..e (a `LatticeWord`) adds a word cell that
starts from the character state at b and flows into the character cell at e:

- word cell: [i, f, g] = W_w [E_w[w]; h_b] + b_w; c_w = σ(f) ⊙ c_b + σ(i) ⊙ tanh(g);
- character j with no word ending there: an LSTM step (nn.LSTMCell over [E_c[x_j]; h_{j-1}]);
- character j where k >= 1 words end: the same LSTM gates give i, o and g (f is unused: the
  previous cell state is replaced by the words'), each word cell gets a gate
  a_w = σ(W_l [E_c[x_j]; c_w] + b_l), and c_j = (e^σ(i) ⊙ tanh(g) + Σ_w e^a_w ⊙ c_w) /
  (e^σ(i) + Σ_w e^a_w) elementwise; h_j = σ(o) ⊙ tanh(c_j);
- every character: tag logits W_out h_j + b_out, loss −log softmax(logits)[tag], summed.

The merge normalizes over exactly k + 1 terms, as the paper does, so the merging character
cell is traced once per arity k: the scheduler sees one signature per k (1, 2, 3, ... words
ending at a character) besides the plain character step, the first character (zero state),
the word cell and the output. Padding to a fixed k would give one signature but change the
normalization (or waste a gate per missing word); the per-arity trace is the faithful one.

Written per instance; every cell is ONE call of a hybridized block and every character's
output layer + loss one more (`StepOutput`, the running total chained through the calls).
"""
import numpy as np

from hybridbatch import api as hb
from hybridbatch.hybrid.block import Block, HybridBlock
from hybridbatch.train.parameter import Parameter
from .bilstm_tagger import EmbedLSTMStep
from .step_output import StepOutput


class WordCell(HybridBlock):
    """(word id, h_b, c_b) -> the word's cell state c_w."""

    def __init__(self, vocab_size, embed, hidden, rng=None):
        super().__init__()
        self.embedding = Parameter("embedding", (vocab_size, embed), init="uniform", rng=rng)
        self.weight = Parameter("weight", (3 * hidden, embed + hidden), rng=rng)
        self.bias = Parameter("bias", (3 * hidden,), init="zeros")

    def forward(self, word, h, c):
        i, f, g = hb.split(hb.affine(self.weight, hb.concat([hb.lookup(self.embedding, word), h]), self.bias), 3)
        return hb.sigmoid(f) * c + hb.sigmoid(i) * hb.tanh(g)


class MergeStep(HybridBlock):
    """(char id, h_{j-1}, c_w1, ..., c_wk) -> (h_j, c_j): a character step where k >= 1 word
    cells end, with the character LSTM's weights (shared with `char_step`)."""

    def __init__(self, char_step, hidden, rng=None):
        super().__init__()
        self.embedding = char_step.embedding
        self.lstm_weight, self.lstm_bias = char_step.cell.weight, char_step.cell.bias
        embed = self.embedding.shape[1]
        self.gate = Parameter("gate", (hidden, embed + hidden), rng=rng)
        self.gate_bias = Parameter("gate_bias", (hidden,), init="zeros")

    def forward(self, char, h, *word_cells):
        x = hb.lookup(self.embedding, char)
        i, _, g, o = hb.split(hb.affine(self.lstm_weight, hb.concat([x, h]), self.lstm_bias), 4)
        weights = [hb.exp(hb.sigmoid(i))] + [
            hb.exp(hb.sigmoid(hb.affine(self.gate, hb.concat([x, c_w]), self.gate_bias))) for c_w in word_cells]
        values = [hb.tanh(g)] + list(word_cells)
        c = hb.add_n([w * v for w, v in zip(weights, values)]) / hb.add_n(weights)
        return hb.sigmoid(o) * hb.tanh(c), c


class LatticeLSTMTagger(Block):
    """`loss(chars, words, tags)` / `logits(chars, words)` over ids: `chars` and `tags` one id
    per character, `words` (start, end, word id) per lexicon match (end exclusive, >= start + 2)."""

    def __init__(self, char_vocab_size, word_vocab_size, tags, char_embed=50, word_embed=50, hidden=100,
                 seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.char_step = EmbedLSTMStep(char_vocab_size, char_embed, hidden, rng)
        self.merge = MergeStep(self.char_step, hidden, rng)
        self.word = WordCell(word_vocab_size, word_embed, hidden, rng)
        self.output = StepOutput(tags, hidden, seed=seed + 1)

    def _states(self, chars, words):
        starting = [[] for _ in chars]
        for start, end, word in words:
            # a shorter or out-of-range span would never merge, or merge at a wrapped index
            if not 0 <= start <= end - 2 or end > len(chars):
                raise ValueError(f"lattice word {(start, end, word)} must span 2 or more of the "
                                 f"{len(chars)} characters: 0 <= start, start + 2 <= end <= {len(chars)}")
            starting[start].append((end, word))
        ending = [[] for _ in chars]
        hs, state = [], ()
        for j, ch in enumerate(chars):
            state = self.merge(ch, state[0], *ending[j]) if ending[j] else self.char_step(ch, *state)
            hs.append(state[0])
            for end, word in starting[j]:
                ending[end - 1].append(self.word(word, *state))
        return hs

    def loss(self, chars, words, tags):
        return self.output.sequence_loss(self._states(chars, words), tags)

    def logits(self, chars, words):
        """One logits handle per character."""
        return [self.output(h) for h in self._states(chars, words)]
