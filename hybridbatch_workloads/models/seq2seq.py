"""W5: LSTM encoder-decoder (NMT) with teacher forcing, docs/workloads.md sizes.

Embedding 256, hidden 256, 8,000 words each side. The encoder LSTM reads the source; its
final (h, c) starts the decoder LSTM, which reads <s> y_1 ... y_m (the gold target, teacher
forcing) and predicts y_1 ... y_m </s>; the loss is −log softmax(W_out h + b_out)[gold] per
target position, summed over the sentence.

Written per instance. Every LSTM step is ONE call of a hybridized block (the tagger's
`EmbedLSTMStep`: the word id an integer argument looked up inside, nn.LSTMCell over [x; h]),
and every target position's output layer + loss is one more call (`StepOutput`, the running
total chained through the calls). The 8,000 x 256 output product is 2/3 of the FLOPs; at
block granularity the output calls of one decoder position across the minibatch are one GEMM.
"""
import numpy as np

from hybridbatch.hybrid.block import Block
from .bilstm_tagger import EmbedLSTMStep
from .step_output import StepOutput


class Seq2SeqLSTM(Block):
    """`loss(source, target_in, target_out)` / `logits(source, target_in)` over word ids:
    `target_in` = [<s>] + target, `target_out` = target + [</s>]."""

    def __init__(self, source_vocab_size, target_vocab_size, embed=256, hidden=256, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.encoder = EmbedLSTMStep(source_vocab_size, embed, hidden, rng)
        self.decoder = EmbedLSTMStep(target_vocab_size, embed, hidden, rng)
        self.output = StepOutput(target_vocab_size, hidden, seed=seed + 1)

    def _decoder_states(self, source, target_in):
        state = ()
        for w in source:
            state = self.encoder(w, *state)
        hs = []
        for w in target_in:
            state = self.decoder(w, *state)
            hs.append(state[0])
        return hs

    def loss(self, source, target_in, target_out):
        return self.output.sequence_loss(self._decoder_states(source, target_in), target_out)

    def logits(self, source, target_in):
        """One logits handle per target position."""
        return [self.output(h) for h in self._decoder_states(source, target_in)]
