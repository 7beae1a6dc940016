"""Beam search with W5's LSTM encoder-decoder (`Seq2SeqLSTM`), one sentence per call.

Each step advances every live hypothesis by one decoder step, reads its log-probabilities
over the target vocabulary, and keeps the `beam` best extensions of all of them; a
hypothesis that emits </s> is finished. Written for one sentence: `hb.map` decodes a
minibatch side by side inside `hb.batching()`, so each step's decoder cells and output
layers of every sentence and hypothesis run as one batch.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

import hybridbatch as hb

__all__ = ["Hypothesis", "beam_search"]


class Hypothesis(NamedTuple):
    """Summed log-probability, the words so far (<s> first) and the decoder state after them."""
    score: float
    words: tuple
    state: tuple


def beam_search(model, source, bos, eos, beam=4, max_length=50):
    """The best translation of `source` (word ids) as target word ids, without <s> and </s>.

    Stops when `beam` hypotheses have finished or after `max_length` words; the result is
    the finished hypothesis with the highest summed log-probability (the best live one if
    none finished). Ties between equal scores go to the earlier hypothesis and word."""
    state = ()
    for w in source:
        state = model.encoder(w, *state)
    live, finished = [Hypothesis(0.0, (bos,), state)], []
    for _ in range(max_length):
        states = [model.decoder(h.words[-1], *h.state) for h in live]
        log_probs = [hb.log_softmax(model.output(s[0])) for s in states]
        candidates = []
        for h, s, lp in zip(live, states, log_probs):
            values = lp.asnumpy()
            best = np.argpartition(-values, min(beam, values.size) - 1)[:beam]
            best = best[np.lexsort((best, -values[best]))]
            candidates += [Hypothesis(h.score + float(values[w]), h.words + (int(w),), s) for w in best]
        candidates.sort(key=lambda c: -c.score)
        live = []
        for c in candidates[:beam]:
            (finished if c.words[-1] == eos else live).append(c)
        if len(finished) >= beam or not live:
            break
    best = max(finished or live, key=lambda c: c.score)
    return list(best.words[1:-1] if best.words[-1] == eos else best.words[1:])
