"""Tagged and parsed sentences (UD English EWT, CoNLL-U): reader and synthetic generator.

Real data: `read_conllu("../shared/data/ud_english_ewt/en_ewt-ud-train.conllu")` (12,544
sentences). Without it, `synthetic_tagging(n)` draws sentences with the same length
distribution, Zipf word frequencies, word-correlated UPOS tags and projective trees.
"""
from __future__ import annotations

import bisect
import functools
import math
import os
from typing import NamedTuple

import numpy as np

from .errors import DataFormatError, described
from .trees import _gc_paused, _read_text, _zipf_cdf, _zipf_ranks, synthetic_words

__all__ = ["Token", "read_conllu", "synthetic_tagging", "UPOS_TAGS", "EWT_LENGTH"]


class Token(NamedTuple):
    """One syntactic word: `id` (1-based position), `form`, `upos`, `head` (0 = root), `deprel`."""
    id: int
    form: str
    upos: str
    head: int
    deprel: str


# the 17 Universal POS tags
UPOS_TAGS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON",
             "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X")
# what a UPOS field may hold: a tag, or '_' (unspecified)
_UPOS_FIELD = frozenset(UPOS_TAGS + ("_",))


def _column(fields: list[str], i: int) -> int:
    """1-based character column where field `i` starts."""
    return sum(len(f) for f in fields[:i]) + i + 1


def _not_a_tree(sent: list[Token]) -> tuple[int, str] | None:
    """(index of the first offending token, what was expected) when the HEADs of a sentence
    are not one tree (exactly one root, every word reaching it), else None."""
    roots = [k for k, tok in enumerate(sent) if tok.head == 0]
    if len(roots) != 1:
        k = roots[1] if roots else 0
        return k, f"one root (HEAD 0) per sentence (this sentence has {len(roots)})"
    state = [0] * (len(sent) + 1)     # by word id: 0 unseen, 1 on the walk, 2 reaches the root
    state[0] = 2
    for k in range(len(sent)):
        walk, i = [], k + 1
        while state[i] == 0:
            state[i] = 1
            walk.append(i)
            i = sent[i - 1].head
        if state[i] == 1:
            return k, f"HEADs leading to the root (word {k + 1} is on a cycle of HEADs)"
        for j in walk:
            state[j] = 2
    return None


def read_conllu(path: str | os.PathLike) -> list[list[Token]]:
    """The sentences of a CoNLL-U file, each a list of `Token` (basic dependency tree).

    Comment lines (`#`), multiword-token lines (`1-2`) and empty nodes of the enhanced graph
    (`8.1`) are skipped; a blank line ends a sentence (a missing final blank line is fine).
    Checked, each a `DataFormatError` with file, line number and column: 10 tab-separated
    columns; ID an integer counting 1, 2, ... within the sentence (or a valid `a-b` / `a.b`);
    FORM not empty; UPOS one of `UPOS_TAGS` or `_`; HEAD an integer between 0 and the
    sentence length, not the token's own ID (a word cannot head itself), exactly one root
    per sentence and no cycle of HEADs; DEPREL not empty (`_` if unspecified).
    """
    name = os.fspath(path)
    sents: list[list[Token]] = []
    cur: list[Token] = []
    cur_lines: list[tuple[int, str]] = []

    def fail(lineno: int, line: str, expected: str, found: object, field: int | None = None,
             fields: list[str] | None = None) -> DataFormatError:
        col = _column(fields, field) if fields is not None and field is not None else 1
        return DataFormatError(expected, found=found, filename=name, lineno=lineno, column=col,
                               line=line)

    def finish() -> None:
        n = len(cur)
        for tok, (lineno, line) in zip(cur, cur_lines):
            if tok.head > n:
                fields = line.split("\t")
                raise fail(lineno, line, f"HEAD between 0 and {n} (the sentence length)",
                           fields[6], 6, fields)
        bad = _not_a_tree(cur)
        if bad is not None:
            k, expected = bad
            lineno, line = cur_lines[k]
            fields = line.split("\t")
            raise fail(lineno, line, expected, fields[6], 6, fields)
        sents.append(list(cur))
        cur.clear()
        cur_lines.clear()

    with open(path, encoding="utf-8-sig", newline=None) as f, _gc_paused():     # -sig: skip a BOM
        lineno = 0
        try:
            for line in f:
                lineno += 1
                line = line.rstrip("\n")
                if not line or line.isspace():
                    if cur:
                        finish()
                    continue
                if line[0] == "#":
                    continue
                fields = line.split("\t")
                if len(fields) != 10:
                    raise fail(lineno, line, "10 tab-separated columns "
                               "(ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC)",
                               described(f"{len(fields)} column" + "s" * (len(fields) != 1)))
                tid = fields[0]
                if not (tid.isascii() and tid.isdigit()):
                    sep = "-" if "-" in tid else "." if "." in tid else None
                    parts = tid.split(sep) if sep else []
                    if not (len(parts) == 2 and all(p.isascii() and p.isdigit() for p in parts)):
                        raise fail(lineno, line, "an integer ID, a range 'a-b' or an empty node "
                                   "'a.b' in column 1", tid, 0, fields)
                    a, b, n = int(parts[0]), int(parts[1]), len(cur)
                    if sep == "-" and not (a == n + 1 and b > a):
                        raise fail(lineno, line, f"a multiword range '{n + 1}-b' with b > {n + 1} in column 1 "
                                   f"(it starts at the next word)", tid, 0, fields)
                    if sep == "." and not (a == n and b >= 1):
                        raise fail(lineno, line, f"an empty node '{n}.k' with k >= 1 in column 1 (after word {n})",
                                   tid, 0, fields)
                    continue      # a multiword token (1-2) or an empty node (8.1)
                n = len(cur) + 1
                if int(tid) != n:
                    raise fail(lineno, line, f"ID {n} (IDs count 1, 2, ... in a sentence)",
                               tid, 0, fields)
                if not fields[1]:
                    raise fail(lineno, line, "a FORM (or '_') in column 2", described("an empty field"), 1, fields)
                if fields[3] not in _UPOS_FIELD:
                    raise fail(lineno, line, f"a UPOS tag ({' '.join(UPOS_TAGS)}) or '_' in column 4",
                               fields[3] or described("an empty field"), 3, fields)
                head = fields[6]
                if not (head.isascii() and head.isdigit()):
                    raise fail(lineno, line, "an integer HEAD in column 7", head, 6, fields)
                if int(head) == n:
                    raise fail(lineno, line, f"a HEAD other than the token's own ID {n} in column 7",
                               head, 6, fields)
                if not fields[7]:
                    raise fail(lineno, line, "a DEPREL (or '_') in column 8",
                               described("an empty field"), 7, fields)
                cur.append(Token(n, fields[1], fields[3], int(head), fields[7]))
                cur_lines.append((lineno, line))
        except UnicodeDecodeError:
            _read_text(path)        # raises the error with the offending line
            raise
    if cur:
        finish()
    return sents


# ---------------------------------------------------------------------------------------------
# Synthetic tagging data
# ---------------------------------------------------------------------------------------------

# Sentence length = 1 + BetaBinomial(158, a, b) (support 1..159), a mixture fitted to EWT train
# (12,544 sentences, 204,577 words: mean 16.31, sd 12.40, median 14, 19% of sentences have
# <= 5 words, max 159): 98% body (1.4, 13.4) + 2% long tail (1.0, 4.0).
EWT_LENGTH = {"min": 1, "max": 159, "body": (1.4, 13.4), "tail": (1.0, 4.0), "p_tail": 0.02}
# Zipf-Mandelbrot (exponent, offset) over 30,000 synthetic words, fitted to EWT train's
# 19,674 word types (9,801 seen once; words seen >= 5 times cover 87.9% of the tokens).
_EWT_ZIPF = (1.10, 2.7)
_EWT_VOCAB = 30000
# token share of each UPOS tag in EWT train
_UPOS_SHARE = {"NOUN": .1699, "PUNCT": .1153, "VERB": .1104, "PRON": .0913, "ADP": .0867,
               "DET": .0797, "ADJ": .0642, "AUX": .0626, "PROPN": .0617, "ADV": .0497,
               "CCONJ": .0327, "PART": .0281, "NUM": .0202, "SCONJ": .0187, "SYM": .0035,
               "INTJ": .0034, "X": .0020}
_CLOSED = ("PUNCT", "PRON", "ADP", "DET", "AUX", "CCONJ", "PART", "SCONJ")
# share of word types whose tag can change with context (see _tag_lexicon)
_AMBIGUOUS = 0.8
# deprel of a dependent by its UPOS: (labels, probabilities)
_DEPRELS = {
    "PUNCT": (("punct",), (1.0,)), "DET": (("det",), (1.0,)), "ADP": (("case",), (1.0,)),
    "PRON": (("nsubj", "obj", "nmod:poss"), (.6, .25, .15)), "AUX": (("aux", "cop"), (.6, .4)),
    "CCONJ": (("cc",), (1.0,)), "PART": (("mark", "advmod"), (.5, .5)),
    "SCONJ": (("mark",), (1.0,)), "ADJ": (("amod", "xcomp", "conj"), (.7, .15, .15)),
    "ADV": (("advmod",), (1.0,)), "NUM": (("nummod",), (1.0,)),
    "NOUN": (("nsubj", "obj", "obl", "nmod", "compound"), (.2, .2, .25, .2, .15)),
    "VERB": (("conj", "advcl", "xcomp", "ccomp", "acl"), (.25, .25, .2, .15, .15)),
    "PROPN": (("compound", "flat", "nsubj", "obl", "appos"), (.3, .2, .2, .15, .15)),
    "SYM": (("dep",), (1.0,)), "INTJ": (("discourse",), (1.0,)), "X": (("dep",), (1.0,)),
}


@functools.lru_cache(maxsize=4)
def _tag_lexicon(vocab_size: int) -> tuple[list[str], list[int], list[int], list[int]]:
    """Per word: primary tag, secondary tag, trigger tag (indices into UPOS_TAGS).

    A token's tag is its word's secondary tag when the previous token's tag is the word's
    trigger tag (only for the `_AMBIGUOUS` share of words), else its primary tag: about 7% of
    tokens differ from their word's most frequent tag, as in EWT (92.9% agree). Frequent words
    get closed-class tags (punctuation, pronouns, ...) until those hold their token share.
    Fixed for a vocabulary size (independent of the generator's seed)."""
    words = synthetic_words(vocab_size)
    cdf = _zipf_cdf(vocab_size, *_EWT_ZIPF)
    pmf = np.diff(cdf, prepend=0.0)
    rng = np.random.default_rng(7_000_001 + vocab_size)
    n_tags = len(UPOS_TAGS)
    share = np.array([_UPOS_SHARE[t] for t in UPOS_TAGS])
    share = share / share.sum()
    closed = np.array([t in _CLOSED for t in UPOS_TAGS])
    primary = np.empty(vocab_size, np.int64)
    # most frequent words first: closed-class tags, each drawn in proportion to what its
    # token share still lacks, until the closed classes hold their share of the tokens
    deficit = np.where(closed, share, 0.0)
    r = 0
    while r < vocab_size and deficit.sum() > pmf[r] / 2:
        w = np.maximum(deficit, 0.0) + np.where(closed, 1e-12, 0.0)
        t = int(rng.choice(n_tags, p=w / w.sum()))
        primary[r] = t
        deficit[t] -= pmf[r]
        r += 1
    # the rest: open-class tags in proportion to their shares
    w = np.where(closed, 0.0, share)
    primary[r:] = rng.choice(n_tags, size=vocab_size - r, p=w / w.sum())
    secondary = rng.choice(n_tags, size=vocab_size, p=share)
    same = secondary == primary
    secondary[same] = (secondary[same] + rng.integers(1, n_tags, same.sum())) % n_tags
    trigger = rng.choice(n_tags, size=vocab_size, p=share)
    trigger[rng.random(vocab_size) >= _AMBIGUOUS] = -1     # never triggered
    return words, primary.tolist(), secondary.tolist(), trigger.tolist()


# random projective trees (see _projective_heads), fitted to EWT train: head distance 1 / 2 /
# 3 / >= 10 words for 39% / 24% / 13% / 6.5% of the arcs (mean 3.37; these parameters give
# about 39% / 21% / 12% / 7%, mean 3.5); the root sits at 38% of the sentence on average
_TREE = {"root_at": 0.25, "p_cut": 0.1, "p_near": 0.1}


def _projective_heads(n: int, rng: np.random.Generator) -> list[int]:
    """heads[i] for words 1..n (index 0 unused): a random projective tree with one root.

    The root sits about a third into the sentence (1 + Binomial(n - 1, root_at)); the words
    on each side of a head are cut into contiguous segments (a cut between neighbours with
    probability p_cut), each segment gets a head (geometrically nearer the parent's side,
    p_near) that attaches to the parent, and the words of the segment left and right of its
    head recurse on it."""
    heads = [0] * (n + 1)
    if n == 1:
        return heads
    p_cut, log_far = _TREE["p_cut"], math.log1p(-_TREE["p_near"])
    root = 1 + int(rng.binomial(n - 1, _TREE["root_at"]))
    pool = rng.random(4 * n).tolist()   # uniforms, consumed in order (Python floats: fast)
    at = 0
    spans = [(1, root - 1, root), (root + 1, n, root)]
    while spans:
        a, b, h = spans.pop()
        if a > b:
            continue
        if at + (b - a) + 2 * (b - a + 1) > len(pool):
            pool = pool[at:] + rng.random(4 * n).tolist()
            at = 0
        s = a
        for j in range(a, b + 1):
            # segment [s, j] ends at j if j == b or the gap after j is cut
            if j < b:
                u = pool[at]
                at += 1
                if u >= p_cut:
                    continue
            size = j - s + 1
            # offset from the segment's end nearest the parent: geometric, capped by the size
            off = min(int(math.log(1.0 - pool[at]) / log_far), size - 1)
            at += 1
            k = j - off if j < h else s + off
            heads[k] = h
            spans.append((s, k - 1, k))
            spans.append((k + 1, j, k))
            s = j + 1
    return heads


def synthetic_tagging(n: int, seed: int = 0, vocab_size: int = _EWT_VOCAB) -> list[list[Token]]:
    """`n` synthetic sentences shaped like UD English EWT train, as `read_conllu` returns them.

    - length: 1 + BetaBinomial(158, 1.4, 13.4) w.p. 0.98, else 1 + BetaBinomial(158, 1.0, 4.0)
      (mean 16.3, median 14, ~19% of sentences <= 5 words, 1..159; EWT train: 16.3, 14, 19%);
    - words: Zipf-Mandelbrot (exponent 1.10, offset 2.7) over `synthetic_words(vocab_size)`;
    - UPOS: each word has a primary tag (token shares as EWT, closed classes on frequent
      words) and, for most words, a secondary tag used right after a given previous tag, so
      a context-free tagger reaches ~93% and a BiLSTM can do better;
    - heads: a random projective tree (one root), deprels from the dependent's UPOS.

    Deterministic in `seed`; `synthetic_tagging(k, s)` is a prefix of `synthetic_tagging(n, s)`.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if vocab_size < 1:
        raise ValueError("vocab_size must be >= 1")
    lexicon = _tag_lexicon(vocab_size)
    rng = np.random.default_rng(seed)
    with _gc_paused():
        return [_tagged_sentence(rng, lexicon) for _ in range(n)]


_DEPREL_CUM = {t: (labels, np.cumsum(p).tolist()) for t, (labels, p) in _DEPRELS.items()}


def _tagged_sentence(rng: np.random.Generator, lexicon) -> list[Token]:
    words, primary, secondary, trigger = lexicon
    lo, hi = EWT_LENGTH["min"], EWT_LENGTH["max"]
    a, b = EWT_LENGTH["tail"] if rng.random() < EWT_LENGTH["p_tail"] else EWT_LENGTH["body"]
    length = lo + int(rng.binomial(hi - lo, rng.beta(a, b)))
    ranks = _zipf_ranks(rng, len(words), _EWT_ZIPF, length).tolist()
    heads = _projective_heads(length, rng)
    u = rng.random(length).tolist()
    sent = []
    prev = -2
    for i, r in enumerate(ranks, 1):
        # the word's secondary tag right after its trigger tag, else its primary tag
        t = secondary[r] if trigger[r] == prev else primary[r]
        prev = t
        tag = UPOS_TAGS[t]
        if heads[i] == 0:
            rel = "root"
        else:
            labels, cum = _DEPREL_CUM[tag]
            rel = labels[min(bisect.bisect_right(cum, u[i - 1] * cum[-1]), len(labels) - 1)]
        sent.append(Token(i, words[r], tag, heads[i], rel))
    return sent
