"""Synthetic parallel sentences for W5 (LSTM-NMT), with IWSLT-like lengths.

There is no real parallel corpus in the shared data; `synthetic_nmt(n)` draws sentence pairs
whose source and target lengths follow the docs/workloads.md distribution (mean 20, sd 10, 1..50)
and are correlated as in a real corpus, so that the encoder and decoder chains have the
real shape. Target words partly translate the aligned source word, so training has signal.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from .trees import _gc_paused, _zipf_ranks, synthetic_words

__all__ = ["SentencePair", "synthetic_nmt", "NMT_LENGTH"]


class SentencePair(NamedTuple):
    source: list[str]
    target: list[str]


# length = 1 + BetaBinomial(49, alpha, beta) on each side: mean 1 + 49 a / (a + b) = 20.0,
# sd 10.0, support 1..50. One Beta draw per pair is shared by both sides, so the lengths are
# correlated (~0.9, about what IWSLT's sentence pairs show) and each keeps that distribution.
NMT_LENGTH = {"min": 1, "max": 50, "alpha": 2.06, "beta": 3.26}
# Zipf-Mandelbrot (exponent, offset) over 30,000 words: 2,000 pairs (~40k tokens a side) hold
# ~10k word types, so the 8,000-word vocabularies fill up and ~6% of the tokens are <unk>.
_NMT_ZIPF = (1.0, 2.7)
_NMT_VOCAB = 30000
# share of target words that translate their aligned source word (the rest are Zipf draws)
_TRANSLATED = 0.5


@functools.lru_cache(maxsize=4)
def _lexicons(vocab_size: int) -> tuple[list[str], list[str]]:
    """(source words, target words) by rank; a source word's translation has the same rank
    and is spelled in capitals."""
    words = synthetic_words(vocab_size)
    return words, [w.upper() for w in words]


def synthetic_nmt(n: int, seed: int = 0, vocab_size: int = _NMT_VOCAB) -> list[SentencePair]:
    """`n` synthetic sentence pairs (lists of word strings, no sentence markers).

    - lengths: p ~ Beta(2.06, 3.26) per pair, each side 1 + Binomial(49, p): each side is
      1 + BetaBinomial(49, 2.06, 3.26) (mean 20, sd 10, 1..50), the two correlated;
    - source words: Zipf-Mandelbrot (exponent 1.0, offset 2.7) over `synthetic_words(vocab_size)`;
    - target word i: w.p. 1/2 the translation of the source word at the aligned position
      (i * source length // target length), else an independent Zipf draw.

    Deterministic in `seed`; `synthetic_nmt(k, s)` is a prefix of `synthetic_nmt(n, s)`.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if vocab_size < 1:
        raise ValueError("vocab_size must be >= 1")
    src_words, tgt_words = _lexicons(vocab_size)
    rng = np.random.default_rng(seed)
    with _gc_paused():
        return [_pair(rng, src_words, tgt_words) for _ in range(n)]


def _pair(rng: np.random.Generator, src_words: list[str], tgt_words: list[str]) -> SentencePair:
    lo, hi = NMT_LENGTH["min"], NMT_LENGTH["max"]
    p = rng.beta(NMT_LENGTH["alpha"], NMT_LENGTH["beta"])
    n_src, n_tgt = (lo + rng.binomial(hi - lo, p, 2)).tolist()
    size = len(src_words)
    src = _zipf_ranks(rng, size, _NMT_ZIPF, n_src).tolist()
    noise = _zipf_ranks(rng, size, _NMT_ZIPF, n_tgt).tolist()
    translated = (rng.random(n_tgt) < _TRANSLATED).tolist()
    tgt = [src[i * n_src // n_tgt] if t else r for i, (t, r) in enumerate(zip(translated, noise))]
    return SentencePair([src_words[r] for r in src], [tgt_words[r] for r in tgt])
