"""Character lattices for W6 (Lattice LSTM, Zhang & Yang 2018): reader and synthetic generator.

A lattice is a sentence of characters with their NER tags plus every lexicon word that
occurs in it (`match_lexicon`): the Lattice LSTM runs a chain of character cells and one
word cell per matched word, jumping from the word's first character to its last.

Real data: `read_lattices(corpus, lexicon)` over a character-level NER file (one character
and its BIO tag per line, a blank line between sentences, e.g. Weibo NER) and a lexicon file
(one word per line). Without them, `synthetic_lattices(n)` draws sentences of mean length 50
characters with about one lexicon match per 1.6 characters, the rate of the Weibo corpus.
"""
from __future__ import annotations

import functools
import os
from typing import NamedTuple

import numpy as np

from .errors import DataFormatError, described
from .trees import _gc_paused, _read_text, _zipf_ranks

__all__ = ["LatticeWord", "Lattice", "match_lexicon", "read_char_ner", "read_lexicon",
           "read_lattices", "synthetic_lattices", "WEIBO_TAGS", "LATTICE_LENGTH"]


class LatticeWord(NamedTuple):
    """A lexicon word over characters start..end-1 (end exclusive; at least 2 characters)."""
    start: int
    end: int
    word: str


class Lattice(NamedTuple):
    chars: str
    tags: list
    words: list       # LatticeWord, by start then end


# Weibo NER's entity types (named and nominal mentions) in BIO: 17 tags
WEIBO_TAGS = ("O",) + tuple(f"{p}-{t}.{k}" for t in ("PER", "ORG", "LOC", "GPE")
                            for k in ("NAM", "NOM") for p in ("B", "I"))


def match_lexicon(chars: str, lexicon, max_len: int | None = None) -> list[LatticeWord]:
    """Every substring of `chars` of 2..max_len characters that is in `lexicon` (a set).

    One-character words are never matched: a character cell already covers them.
    `max_len` defaults to the longest word of the lexicon."""
    if max_len is None:
        max_len = max(map(len, lexicon), default=0)
    n = len(chars)
    return [LatticeWord(i, j, chars[i:j]) for i in range(n)
            for j in range(i + 2, min(n, i + max_len) + 1) if chars[i:j] in lexicon]


# ---------------------------------------------------------------------------------------------
# Readers
# ---------------------------------------------------------------------------------------------

def _fields(fields: list[str]) -> described:
    return described(f"{len(fields)} field" + "s" * (len(fields) != 1))


def _is_bio(tag: str) -> bool:
    return tag == "O" or (len(tag) > 2 and tag[:2] in ("B-", "I-"))


def read_char_ner(path: str | os.PathLike) -> list[tuple[str, list[str]]]:
    """(characters, tags) per sentence of a character-level NER file.

    Each line is a character and its tag separated by white space; a blank line ends a
    sentence (several blank lines, or none at the end, are fine). Checked, each a
    `DataFormatError` with file, line number and column: two fields; the first one character;
    the tag in BIO (`O`, `B-TYPE` or `I-TYPE`).
    """
    name = os.fspath(path)
    sents: list[tuple[str, list[str]]] = []
    chars: list[str] = []
    tags: list[str] = []
    with _gc_paused():
        for lineno, line in enumerate(_read_text(path).split("\n"), 1):
            line = line.rstrip("\r")
            fields = line.split()
            if not fields:
                if chars:
                    sents.append(("".join(chars), tags))
                    chars, tags = [], []
                continue
            if len(fields) != 2:
                raise DataFormatError("a character and its tag", found=_fields(fields), filename=name,
                                      lineno=lineno, column=1, line=line)
            ch, tag = fields
            if len(ch) != 1:
                raise DataFormatError("one character in the first field", found=ch, filename=name,
                                      lineno=lineno, column=line.index(ch) + 1, line=line)
            if not _is_bio(tag):
                raise DataFormatError("a BIO tag (O, B-TYPE or I-TYPE)", found=tag, filename=name,
                                      lineno=lineno, column=line.rindex(tag) + 1, line=line)
            chars.append(ch)
            tags.append(tag)
    if chars:
        sents.append(("".join(chars), tags))
    return sents


def read_lexicon(path: str | os.PathLike) -> list[str]:
    """The words of a lexicon file, one word per line (blank lines skipped, repeats once), in
    file order. A line holding more than one field is a `DataFormatError`."""
    name = os.fspath(path)
    words: dict[str, None] = {}
    for lineno, line in enumerate(_read_text(path).split("\n"), 1):
        fields = line.split()
        if len(fields) > 1:
            second = line.index(fields[1], line.index(fields[0]) + len(fields[0]))
            raise DataFormatError("one word per line", found=_fields(fields), filename=name,
                                  lineno=lineno, column=second + 1, line=line.rstrip("\r"))
        if fields:
            words[fields[0]] = None
    return list(words)


def read_lattices(corpus: str | os.PathLike, lexicon: str | os.PathLike) -> list[Lattice]:
    """The lattices of a character-level NER file under a lexicon file (see the readers)."""
    words = frozenset(read_lexicon(lexicon))
    max_len = max(map(len, words), default=0)
    return [Lattice(chars, tags, match_lexicon(chars, words, max_len))
            for chars, tags in read_char_ner(corpus)]


# ---------------------------------------------------------------------------------------------
# Synthetic lattices
# ---------------------------------------------------------------------------------------------

# Sentence length = min(max, 2 + round(Gamma(shape, scale))): mean 50 characters (docs/workloads.md),
# sd ~28, a long right tail as Weibo's posts.
LATTICE_LENGTH = {"min": 2, "max": 175, "shape": 3.0, "scale": 16.0}
# 3,000 characters and 8,000 base words of 2 / 3 / 4 characters (60 / 25 / 15%), both drawn
# Zipf-Mandelbrot (exponent, offset). A sentence is a run of segments: a base word w.p.
# _P_WORD, else a single character. Each shorter substring (>= 2 characters) of a base word is
# a lexicon word too w.p. _P_SUBWORD, as real lexicons list the parts of compounds; with
# these, lexicon matches (segments, their parts, and chance matches across segments) come
# at ~0.625 per character, i.e. one per 1.6 characters as in Weibo NER.
_CHARS = 3000
_CHAR_ZIPF = (1.0, 10.0)
_BASE_WORDS = 8000
_WORD_LENGTHS = ((2, 3, 4), (0.6, 0.25, 0.15))
_WORD_ZIPF = (1.0, 2.7)
_P_WORD = 0.68
_P_SUBWORD = 0.6
# share of base words that are entity mentions (one fixed Weibo type each)
_P_ENTITY = 0.1


@functools.lru_cache(maxsize=1)
def _synthetic_lexicon() -> tuple[list[str], list[str], list[str], frozenset, int]:
    """(characters, base words, each base word's entity type or "", the lexicon, its longest
    word). Fixed: independent of the generator's seed, so that train and dev sets share it."""
    rng = np.random.default_rng(5_000_011)
    chars = [chr(0x4E00 + k) for k in range(_CHARS)]     # CJK unified ideographs
    lengths = rng.choice(_WORD_LENGTHS[0], size=_BASE_WORDS, p=_WORD_LENGTHS[1]).tolist()
    ranks = _zipf_ranks(rng, _CHARS, _CHAR_ZIPF, sum(lengths)).tolist()
    base: dict[str, None] = {}
    at = 0
    for n in lengths:
        base["".join(chars[r] for r in ranks[at:at + n])] = None
        at += n
    base_words = list(base)
    lexicon = set(base_words)
    for w in base_words:
        for i in range(len(w)):
            for j in range(i + 2, len(w) + 1):
                if j - i < len(w) and rng.random() < _P_SUBWORD:
                    lexicon.add(w[i:j])
    types = [t[2:] for t in WEIBO_TAGS[1::2]]
    entity = rng.random(len(base_words)) < _P_ENTITY
    kind = rng.integers(0, len(types), len(base_words))
    word_types = [types[k] if e else "" for e, k in zip(entity.tolist(), kind.tolist())]
    return chars, base_words, word_types, frozenset(lexicon), max(map(len, lexicon))


def synthetic_lattices(n: int, seed: int = 0) -> list[Lattice]:
    """`n` synthetic lattices shaped like Weibo NER under its lexicon.

    - length: min(175, 2 + round(Gamma(3, 16))) characters (mean 50);
    - characters: runs of lexicon words (w.p. 0.68 per segment, Zipf over 8,000 words of 2-4
      characters) and single characters (Zipf over 3,000), cut at the length;
    - tags: a word that is an entity mention (10% of the words, each with a fixed Weibo type)
      is tagged B-TYPE I-TYPE ..., everything else O;
    - words: `match_lexicon` over the lexicon (base words and, w.p. 0.6 each, their parts):
      ~0.625 matches per character.

    Deterministic in `seed`; `synthetic_lattices(k, s)` is a prefix of `synthetic_lattices(n, s)`.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    lexicon = _synthetic_lexicon()
    rng = np.random.default_rng(seed)
    with _gc_paused():
        return [_lattice(rng, *lexicon) for _ in range(n)]


def _lattice(rng, chars, base_words, word_types, lexicon, max_len) -> Lattice:
    L = LATTICE_LENGTH
    length = min(L["max"], L["min"] + int(round(rng.gamma(L["shape"], L["scale"]))))
    # one draw per possible segment (a segment is at least one character)
    is_word = (rng.random(length) < _P_WORD).tolist()
    words = _zipf_ranks(rng, len(base_words), _WORD_ZIPF, length).tolist()
    singles = _zipf_ranks(rng, len(chars), _CHAR_ZIPF, length).tolist()
    text: list[str] = []
    tags: list[str] = []
    k = 0
    while len(tags) < length:
        if is_word[k]:
            w, t = base_words[words[k]], word_types[words[k]]
            text.append(w)
            tags.extend(["B-" + t] + ["I-" + t] * (len(w) - 1) if t else ["O"] * len(w))
        else:
            text.append(chars[singles[k]])
            tags.append("O")
        k += 1
    sentence = "".join(text)[:length]
    return Lattice(sentence, tags[:length], match_lexicon(sentence, lexicon, max_len))
