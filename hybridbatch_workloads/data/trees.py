"""Binary sentiment trees (SST, PTB brackets): `Tree`, the reader, a synthetic generator, `Vocab`.

Real data: `read_ptb_trees("../shared/data/sst/train.txt")` (8,544 trees). Without it,
`synthetic_sst(n)` draws trees with the same sentence-length distribution and a similar
shape (depth), so that benchmarks run the same amount of work on any machine.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import os
from collections import Counter
from typing import Iterable, Iterator, Mapping

import numpy as np

from .errors import DataFormatError, described

__all__ = ["Tree", "parse_ptb", "read_ptb_trees", "synthetic_sst", "synthetic_words", "Vocab",
           "SST_LENGTH", "SST_SHAPE"]


@contextlib.contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector while building many small acyclic objects (trees,
    tokens): its full passes over a growing heap would otherwise cost a third of the time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# ---------------------------------------------------------------------------------------------
# Tree
# ---------------------------------------------------------------------------------------------

class Tree:
    """A node of a binary tree: a leaf (`word` set, no children) or an internal node (2 children).

    `label` is the node's class (0-4 in SST). Equality is identity (trees are often dict keys
    of per-node state); compare `to_ptb()` strings for structural equality.
    """

    __slots__ = ("label", "word", "children")

    def __init__(self, label: int, word: str | None = None, children: tuple[Tree, ...] = ()):
        children = tuple(children)
        if word is None:
            if len(children) != 2:
                raise ValueError(f"an internal node needs 2 children, got {len(children)}")
        elif children:
            raise ValueError("a leaf (a node with a word) cannot have children")
        self.label = int(label)
        self.word = word
        self.children = children

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def _preorder(self) -> Iterator[Tree]:
        stack = [self]
        while stack:
            t = stack.pop()
            yield t
            if t.children:
                stack.append(t.children[1])
                stack.append(t.children[0])

    def leaves(self) -> list[Tree]:
        """Leaf nodes, left to right."""
        return [t for t in self._preorder() if not t.children]

    def words(self) -> list[str]:
        """The sentence: leaf words, left to right."""
        return [t.word for t in self._preorder() if not t.children]

    def nodes(self) -> list[Tree]:
        """Every node in post-order (children before their parent, left subtree first; the
        root is last), the order a bottom-up model such as a Tree-LSTM evaluates them in."""
        out: list[Tree] = []
        stack: list[tuple[Tree, bool]] = [(self, False)]
        while stack:
            t, expanded = stack.pop()
            if expanded or not t.children:
                out.append(t)
            else:
                stack.append((t, True))
                stack.append((t.children[1], False))
                stack.append((t.children[0], False))
        return out

    @property
    def size(self) -> int:
        """Number of nodes (2 * leaves - 1 for a binary tree)."""
        return sum(1 for _ in self._preorder())

    @property
    def n_leaves(self) -> int:
        return sum(1 for t in self._preorder() if not t.children)

    @property
    def depth(self) -> int:
        """Height in nodes: a single leaf has depth 1."""
        best = 0
        stack = [(self, 1)]
        while stack:
            t, d = stack.pop()
            if t.children:
                stack.append((t.children[0], d + 1))
                stack.append((t.children[1], d + 1))
            elif d > best:
                best = d
        return best

    def to_ptb(self) -> str:
        """The PTB-bracketed string `parse_ptb` reads back (`(3 (2 a) (4 b))`)."""
        parts: list[str] = []
        stack: list[object] = [self]
        while stack:
            t = stack.pop()
            if isinstance(t, str):
                parts.append(t)
            elif not t.children:
                parts.append(f"({t.label} {t.word})")
            else:
                stack.extend([")", t.children[1], " ", t.children[0]])
                parts.append(f"({t.label} ")
        return "".join(parts)

    def __repr__(self) -> str:
        if not self.children:
            return f"Tree({self.label}, {self.word!r})"
        return f"Tree(label={self.label}, leaves={self.n_leaves}, depth={self.depth})"


# ---------------------------------------------------------------------------------------------
# PTB reader
# ---------------------------------------------------------------------------------------------

_LABELS = "01234"


def parse_ptb(line: str, *, filename: str | None = None, lineno: int = 1) -> Tree:
    """Parse one PTB-bracketed binary tree: `(LABEL WORD)` or `(LABEL CHILD CHILD)`.

    Following the SST files: a leaf word is everything between ``"(LABEL "`` and the next
    ``")"``, one token: an ASCII space inside is an error, as ``(3 a b)`` would otherwise
    read as the single word "a b" (SST has tokens with a U+00A0 no-break space inside, which
    are kept); a node is internal when ``"("`` follows the label's space; the two children
    are separated by exactly one ASCII space. Labels are 0-4. A trailing
    ``"\\n"`` / ``"\\r\\n"`` is ignored, any other trailing text is an error.

    Raises `DataFormatError` naming the file (`filename`, default ``<string>``), `lineno` and
    the 1-based column, with what was expected there and what was found.
    """
    s = line
    if s.endswith("\n"):
        s = s[:-1]
    if s.endswith("\r"):
        s = s[:-1]
    n = len(s)

    def fail(pos: int, expected: str, found: object = None) -> DataFormatError:
        if found is None:
            found = s[pos] if pos < n else ""
        return DataFormatError(expected, found=found, filename=filename, lineno=lineno,
                               column=pos + 1, line=s)

    # stack frames: [label, first child or None, column of "("]
    stack: list[list] = []
    pos = 0
    find = s.find
    while True:
        # ---- a node starts at pos
        if pos >= n or s[pos] != "(":
            if not stack:
                raise fail(pos, "'(' opening a tree")
            raise fail(pos, f"'(' opening a child of the node opened at column {stack[-1][2] + 1}")
        open_pos = pos
        j = pos + 1
        while j < n and "0" <= s[j] <= "9":
            j += 1
        if j == pos + 1:
            raise fail(j, "a label 0-4 after '('")
        if j - pos - 1 != 1 or s[pos + 1] not in _LABELS:
            raise fail(pos + 1, "a label 0-4", found=s[pos + 1: j])
        if j >= n or s[j] != " ":
            raise fail(j, "' ' after the label")
        label = ord(s[pos + 1]) - 48
        pos = j + 1
        if pos < n and s[pos] == "(":
            stack.append([label, None, open_pos])
            continue
        # ---- a leaf: the word runs to the next ")"
        end = find(")", pos)
        if end < 0:
            op = find("(", pos)
            if op >= 0:
                raise fail(op, "')' closing the leaf opened at column "
                           f"{open_pos + 1} (a word cannot contain '(')")
            raise fail(n, f"')' closing the leaf opened at column {open_pos + 1}")
        if end == pos:
            raise fail(pos, "a word or '(' after the label")
        word = s[pos:end]
        for ch, why in (("(", "a word cannot contain '('"), (" ", "a leaf holds one word")):
            at = word.find(ch)
            if at >= 0:
                raise fail(pos + at, f"')' closing the leaf opened at column {open_pos + 1} ({why})")
        node = Tree.__new__(Tree)
        node.label, node.word, node.children = label, word, ()
        pos = end + 1
        # ---- climb: attach the finished node to its parent(s)
        while stack:
            frame = stack[-1]
            if frame[1] is None:
                frame[1] = node
                if pos >= n or s[pos] != " ":
                    raise fail(pos, "' ' and the second child of the node opened at column "
                               f"{frame[2] + 1}")
                pos += 1
                break
            if pos >= n or s[pos] != ")":
                raise fail(pos, f"')' closing the node opened at column {frame[2] + 1}")
            pos += 1
            stack.pop()
            parent = Tree.__new__(Tree)
            parent.label, parent.word, parent.children = frame[0], None, (frame[1], node)
            node = parent
        else:
            if pos != n:
                raise fail(pos, "end of line after the tree")
            return node


def _utf8_error(data: bytes, filename: str, e: UnicodeDecodeError) -> DataFormatError:
    lineno = data.count(b"\n", 0, e.start) + 1
    col = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
    return DataFormatError("UTF-8 text",
                           found=described(f"byte 0x{data[e.start]:02x} at byte column {col}"),
                           filename=filename, lineno=lineno)


def _read_text(path: str | os.PathLike) -> str:
    """The file as UTF-8, without the byte order mark some Windows editors write first."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise _utf8_error(e.object, os.fspath(path), e) from None     # e.object: without the mark


MAX_TREE_DEPTH = 400     # the tree models recurse once a level: deeper would exhaust Python's recursion


def read_ptb_trees(path: str | os.PathLike) -> list[Tree]:
    """Every tree of a PTB file, one tree a line (blank lines are skipped).

    Errors are `DataFormatError` with the file name, line number and column; a tree deeper
    than MAX_TREE_DEPTH is one (SST's deepest is 30)."""
    name = os.fspath(path)
    text = _read_text(path)
    trees = []
    with _gc_paused():
        for i, line in enumerate(text.split("\n"), 1):
            if not line.strip(" \t\r"):
                continue
            tree = parse_ptb(line, filename=name, lineno=i)
            if tree.depth > MAX_TREE_DEPTH:
                raise DataFormatError(f"a tree at most {MAX_TREE_DEPTH} deep (the tree models recurse once a level)",
                                      found=described(f"one {tree.depth} deep"), filename=name, lineno=i)
            trees.append(tree)
    return trees


# ---------------------------------------------------------------------------------------------
# Synthetic vocabulary
# ---------------------------------------------------------------------------------------------

_ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
           "w", "z", "br", "ch", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "st", "th", "tr", "sp"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "y"]
_CODAS = ["", "n", "s", "t", "r", "l", "nd", "ck"]
_SYLLABLES = [o + v + c for o in _ONSETS for v in _VOWELS for c in _CODAS]   # 2,304


@functools.lru_cache(maxsize=1)
def _syllable_table() -> list[str]:
    # a fixed shuffle (so that frequent words are not all "a", "an", "as", ...), then shorter
    # syllables first (stable sort), so that frequent words get short spellings
    order = np.random.default_rng(20240611).permutation(len(_SYLLABLES))
    return sorted((_SYLLABLES[i] for i in order), key=len)


@functools.lru_cache(maxsize=8)
def _words_upto(size: int) -> tuple[str, ...]:
    table = _syllable_table()
    b = len(table)
    out: list[str] = []
    seen: set[str] = set()
    r, k, start, block = 0, 1, 0, b
    # numbering: 1 syllable for the first b numbers, 2 syllables for the next b**2, ...;
    # a spelling that repeats an earlier one ("ba"+"ta" = "bat"+"a") is skipped
    while len(out) < size:
        if r - start >= block:
            start += block
            k += 1
            block *= b
        x = r - start
        parts = []
        for _ in range(k):
            x, d = divmod(x, b)
            parts.append(table[d])
        w = "".join(parts)
        if w not in seen:
            seen.add(w)
            out.append(w)
        r += 1
    return tuple(out)


def synthetic_words(size: int) -> list[str]:
    """`size` distinct pronounceable lowercase pseudo-words, frequent ranks (low index) short.

    Deterministic: the same `size` always gives the same list, and a shorter list is a
    prefix of a longer one. Words are ASCII letters only (no spaces or brackets)."""
    if size < 0:
        raise ValueError("size must be >= 0")
    return list(_words_upto(size))


@functools.lru_cache(maxsize=16)
def _zipf_cdf(size: int, exponent: float, offset: float) -> np.ndarray:
    p = 1.0 / (np.arange(1, size + 1, dtype=np.float64) + offset) ** exponent
    c = np.cumsum(p)
    c /= c[-1]
    return c


def _zipf_ranks(rng: np.random.Generator, size: int, zipf: tuple[float, float],
                k: int) -> np.ndarray:
    """k word ranks (0-based), P(rank r) proportional to 1 / (r + 1 + offset) ** exponent
    (Zipf-Mandelbrot), `zipf = (exponent, offset)`."""
    cdf = _zipf_cdf(size, zipf[0], zipf[1])
    return np.minimum(np.searchsorted(cdf, rng.random(k), side="right"), size - 1)


# ---------------------------------------------------------------------------------------------
# Synthetic SST
# ---------------------------------------------------------------------------------------------

# Sentence length (leaves) = 2 + BetaBinomial(50, alpha, beta), support 2..52, moment-fitted to
# SST train (8,544 trees, 163,563 leaves: mean 19.14, sd 9.31, min 2, max 52).
SST_LENGTH = {"min": 2, "max": 52, "alpha": 2.17, "beta": 4.16}
# Shape: a node of n >= 2 leaves splits off a single left word with probability p_left1
# ("the [movie ...]"), a single right word with p_right1 ("[...] ."), else at a uniform point.
# Fitted to SST train: mean depth 10.83 (sd 3.86, max 30); 45% of splits of spans >= 6 leaves
# put one word on the left, 19% one word on the right.
SST_SHAPE = {"p_left1": 0.41, "p_right1": 0.145}
# Word frequencies: Zipf-Mandelbrot (exponent, offset). SST train's rank-frequency slope is
# -1.01 (ranks 10-5000) and its top word has 4.9% of the tokens; (1.0, 1.0) over 16,000 words
# gives 5.2%.
_SST_ZIPF = (1.0, 1.0)
# Word polarity (leaf labels): share of non-neutral leaf tokens in SST train is 14.2%,
# split 0/1/3/4 = .007/.048/.070/.017 of all leaves. The 100 most frequent synthetic words are
# neutral (function words); rarer words are non-neutral with the probability that gives ~14%.
_SST_LEAF_POLAR = np.array([0.007, 0.048, 0.0, 0.070, 0.017])
_SST_NEUTRAL_TOP = 100
# Phrase labels: score = scale * (summed word polarity below - its expectation)
#                        + bias * (span / sentence length) + N(0, noise_sd),
# bias ~ N(0, sentence_sd) one draw per sentence (its overall sentiment); label = 2, or 1 / 3
# when |score| > cuts[0], or 0 / 4 when |score| > cuts[1]. Tuned by hand on SST train's label
# shares: roots 0-4 = .13/.26/.19/.27/.15 (these give .14/.24/.22/.26/.15), other internal
# nodes .04/.17/.53/.21/.06 (these give .02/.21/.54/.21/.02).
_SST_PHRASE = {"scale": 0.5, "sentence_sd": 1.5, "noise_sd": 0.3, "cuts": (0.5, 2.0)}


@functools.lru_cache(maxsize=8)
def _sst_lexicon(vocab_size: int) -> tuple[list[str], list[int], float]:
    """The synthetic words, each word's fixed polarity (label - 2) and the mean polarity of a
    token. Independent of `seed`, so that differently seeded sets (train / test) share it."""
    words = synthetic_words(vocab_size)
    rng = np.random.default_rng(1_000_003 + vocab_size)
    p = _zipf_cdf(vocab_size, *_SST_ZIPF)
    top = min(_SST_NEUTRAL_TOP, vocab_size)
    tail_mass = 1.0 - (p[top - 1] if top > 0 else 0.0)
    polar_total = _SST_LEAF_POLAR.sum()
    p_polar = min(polar_total / tail_mass, 1.0) if tail_mass > 0 else 0.0
    probs = _SST_LEAF_POLAR / polar_total * p_polar
    probs[2] = 1.0 - p_polar
    labels = rng.choice(5, size=vocab_size, p=probs)
    labels[:top] = 2
    polarity = labels.astype(np.int64) - 2
    pmf = np.diff(p, prepend=0.0)
    return words, polarity.tolist(), float(pmf @ polarity)


def synthetic_sst(n: int, seed: int = 0, vocab_size: int = 16000) -> list[Tree]:
    """`n` random binary sentiment trees shaped like SST train (labels 0-4 on every node).

    - leaves per tree: 2 + BetaBinomial(50, 2.17, 4.16) (mean 19.1, sd 9.3, 2..52, as SST train);
    - shape: split off one left word w.p. 0.41, one right word w.p. 0.145, else a uniform
      split point (mean depth ~10.8 as SST train);
    - words: Zipf-Mandelbrot (exponent 1.0, offset 1.0) over `synthetic_words(vocab_size)`;
    - labels: each word has a fixed polarity (86% of leaf tokens neutral, as SST); a phrase's
      label follows the summed polarity of its words plus a per-sentence sentiment, so ~22%
      of roots are neutral against ~54% of other phrases (SST: 19%, 53%); the word part is
      learnable, the per-sentence part is noise.

    Deterministic in `seed`; `synthetic_sst(k, s)` is a prefix of `synthetic_sst(n, s)` for
    k <= n.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if vocab_size < 1:
        raise ValueError("vocab_size must be >= 1")
    words, polarity, mean_pol = _sst_lexicon(vocab_size)
    rng = np.random.default_rng(seed)
    with _gc_paused():
        return [_sst_tree(rng, words, polarity, mean_pol) for _ in range(n)]


def _sst_tree(rng: np.random.Generator, words: list[str], polarity: list[int],
              mean_pol: float) -> Tree:
    a, b = SST_LENGTH["alpha"], SST_LENGTH["beta"]
    lo, hi = SST_LENGTH["min"], SST_LENGTH["max"]
    pl, pr = SST_SHAPE["p_left1"], SST_SHAPE["p_right1"]
    ph = _SST_PHRASE
    scale, (c1, c2) = ph["scale"], ph["cuts"]
    length = lo + int(rng.binomial(hi - lo, rng.beta(a, b)))
    ranks = _zipf_ranks(rng, len(words), _SST_ZIPF, length).tolist()
    bias = float(rng.normal(0.0, ph["sentence_sd"]))
    # split decisions and label noise for the length-1 internal nodes, drawn in one go
    # (as Python floats: numpy scalars would make the loop below several times slower)
    u = rng.random(length - 1).tolist()
    v = rng.random(length - 1).tolist()
    noise = rng.normal(0.0, ph["noise_sd"], length - 1).tolist()
    counter = iter(range(length - 1))

    def build(start: int, end: int) -> tuple[Tree, float]:
        """The subtree over leaves start..end-1 and the summed polarity of its words."""
        m = end - start
        if m == 1:
            r = ranks[start]
            pol = polarity[r]
            leaf = Tree.__new__(Tree)
            leaf.label, leaf.word, leaf.children = 2 + pol, words[r], ()
            return leaf, float(pol)
        i = next(counter)
        if u[i] < pl:
            k = 1
        elif u[i] < pl + pr:
            k = m - 1
        else:
            k = 1 + int(v[i] * (m - 1))
        left, sl = build(start, start + k)
        right, sr = build(start + k, end)
        s = sl + sr
        score = scale * (s - mean_pol * m) + bias * (m / length) + noise[i]
        node = Tree.__new__(Tree)
        node.label = 2 + (score > c1) + (score > c2) - (score < -c1) - (score < -c2)
        node.word, node.children = None, (left, right)
        return node, s

    return build(0, length)[0]


# ---------------------------------------------------------------------------------------------
# Vocab
# ---------------------------------------------------------------------------------------------

class Vocab:
    """Word <-> id, with id 0 reserved for unknown words (`unk`).

    `Vocab.build(Counter(words), min_count=5)` keeps words seen at least `min_count` times,
    most frequent first (ties by word); every other word maps to `unk_id` (0).
    `vocab[word]` / `vocab.id(word)` -> id, `vocab.ids(words)` -> int64 array, `vocab.word(i)`.
    """

    def __init__(self, words: Iterable[str] = (), unk: str = "<unk>"):
        self.unk = unk
        self.unk_id = 0
        self._words: list[str] = [unk]
        self._index: dict[str, int] = {unk: 0}
        for w in words:
            self.add(w)

    @classmethod
    def build(cls, counter: Mapping[str, int] | Iterable[str], min_count: int = 1,
              max_size: int | None = None, unk: str = "<unk>") -> "Vocab":
        """From a word -> count mapping (or an iterable of words, counted here)."""
        if not isinstance(counter, Mapping):
            counter = Counter(counter)
        items = sorted(((w, c) for w, c in counter.items() if c >= min_count and w != unk),
                       key=lambda wc: (-wc[1], wc[0]))
        if max_size is not None:
            items = items[:max(0, max_size - 1)]
        return cls((w for w, _ in items), unk=unk)

    def add(self, word: str) -> int:
        i = self._index.get(word)
        if i is None:
            i = self._index[word] = len(self._words)
            self._words.append(word)
        return i

    def __len__(self) -> int:
        return len(self._words)

    def __contains__(self, word: object) -> bool:
        return word in self._index and word != self.unk

    def __getitem__(self, word: str) -> int:
        return self._index.get(word, 0)

    def id(self, word: str) -> int:
        return self._index.get(word, 0)

    def ids(self, words: Iterable[str]) -> np.ndarray:
        get = self._index.get
        return np.fromiter((get(w, 0) for w in words), dtype=np.int64)

    def word(self, i: int) -> str:
        return self._words[i]

    @property
    def words(self) -> list[str]:
        """Every entry by id (`words[0]` is `unk`)."""
        return list(self._words)

    def __iter__(self) -> Iterator[str]:
        return iter(self._words)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} entries incl. {self.unk!r})"
