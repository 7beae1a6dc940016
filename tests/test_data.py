"""hybridbatch_workloads.data: PTB / CoNLL-U / CLEVR readers, synthetic generators, and the real files.

The real-data tests read ../shared/data (or $HYBRIDBATCH_DATA) and check the counts that the
data's SOURCE.md files record; they skip, with the reason, where the data is absent.
"""
import collections
import json
import sys

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch_workloads.data import (CLEVR_FUNCTIONS, UPOS_TAGS, DataFormatError, ProgramNode, Token, Tree, Vocab, parse_ptb, program_depth, read_clevr_programs, read_conllu, read_ptb_trees, shared_data_dir, synthetic_programs, synthetic_sst, synthetic_tagging, synthetic_words)
from hybridbatch_workloads.data.trees import MAX_TREE_DEPTH


# ---------------------------------------------------------------------------------------------
# PTB trees
# ---------------------------------------------------------------------------------------------

def test_parse_ptb_builds_the_tree():
    t = parse_ptb("(3 (2 It) (4 (4 (2 's) (3 good)) (2 .)))")
    assert t.label == 3 and t.word is None and len(t.children) == 2
    assert t.words() == ["It", "'s", "good", "."]
    assert [leaf.label for leaf in t.leaves()] == [2, 2, 3, 2]
    assert t.size == 7 and t.n_leaves == 4 and t.depth == 4
    # post-order: children before parents, left subtree first, root last
    order = t.nodes()
    assert [n.word or n.label for n in order] == ["It", "'s", "good", 4, ".", 4, 3]
    pos = {id(n): i for i, n in enumerate(order)}
    assert all(pos[id(c)] < pos[id(n)] for n in order for c in n.children)
    assert t.to_ptb() == "(3 (2 It) (4 (4 (2 's) (3 good)) (2 .)))"


def test_parse_ptb_keeps_a_no_break_space_inside_a_leaf():
    # SST train has "8\u00a01\/2": str.split() would cut it, the parser must not
    line = "(3 (2 (2 8\u00a01\\/2) (2 hours)) (2 .))"
    assert len("8\u00a01\\/2".split()) == 2
    t = parse_ptb(line)
    assert t.words() == ["8\u00a01\\/2", "hours", "."]
    assert t.to_ptb() == line


def test_parse_ptb_single_leaf_and_line_endings():
    assert parse_ptb("(4 great)").words() == ["great"]
    assert parse_ptb("(3 (2 a) (4 b))\r\n").to_ptb() == "(3 (2 a) (4 b))"


@pytest.mark.parametrize("text, column, expected, found", [
    ("(3 (2 a)(4 b))", 9, "' ' and the second child of the node opened at column 1", "("),
    ("(3 (2 a) (4 b)", 15, "')' closing the node opened at column 1", ""),
    ("(3 (2 a) (4 b)))", 16, "end of line after the tree", ")"),
    ("(7 (2 a) (4 b))", 2, "a label 0-4", "7"),
    ("(32 a)", 2, "a label 0-4", "32"),
    ("(x a)", 2, "a label 0-4 after '('", "x"),
    ("(3(2 a) (4 b))", 3, "' ' after the label", "("),
    ("(3 (2 ) (4 b))", 7, "a word or '(' after the label", ")"),
    ("(3 (2 a (4 b))", 9, "')' closing the leaf opened at column 4", "("),
    ("(3 a b)", 5, "')' closing the leaf opened at column 1 (a leaf holds one word)", " "),
    ("(2 (2 8 1\\/2) (2 .))", 8, "')' closing the leaf opened at column 4 (a leaf holds one word)", " "),
    ("3 (2 a) (4 b))", 1, "'(' opening a tree", "3"),
    ("(3 (2 a) (4 b) (1 c))", 15, "')' closing the node opened at column 1", " "),
    ("(3 (2 a) ", 10, "'(' opening a child of the node opened at column 1", ""),
    ("(3 (2 a) (1 (2 b) (2 c)", 24, "')' closing the node opened at column 1", ""),
    ("", 1, "'(' opening a tree", ""),
])
def test_parse_ptb_malformed_input_names_line_and_column(text, column, expected, found):
    with pytest.raises(DataFormatError) as info:
        parse_ptb(text, filename="x.txt", lineno=12)
    e = info.value
    assert isinstance(e, ValueError) and isinstance(e, hb.HybridBatchError)
    assert (e.filename, e.lineno, e.column) == ("x.txt", 12, column)
    assert e.expected.startswith(expected)
    assert e.found == found
    assert str(e).startswith(f"x.txt:12:{column}: expected {expected}")
    # the message shows the line with a caret under the offending column
    excerpt, caret = str(e).split("\n")[1:3]
    assert excerpt == "    " + text and caret == "    " + " " * (column - 1) + "^"


def test_read_ptb_trees_reports_file_and_line(tmp_path):
    p = tmp_path / "trees.txt"
    p.write_text("(3 (2 a) (4 b))\n\n(2 (2 c) (2 d))\n(1 (2 e) (0 f)\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        read_ptb_trees(p)
    assert (info.value.lineno, info.value.column) == (4, 15)   # line 2 is blank, counted
    assert str(info.value).startswith(f"{p}:4:15: expected ')'")


def test_read_ptb_trees_skips_blank_lines_and_takes_crlf(tmp_path):
    p = tmp_path / "trees.txt"
    p.write_bytes(b"(3 (2 a) (4 b))\r\n\r\n(2 (2 c) (2 d))\r\n")
    trees = read_ptb_trees(p)
    assert [t.to_ptb() for t in trees] == ["(3 (2 a) (4 b))", "(2 (2 c) (2 d))"]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"(3 (2 a) (4 b))\n(2 (2 \xff) (2 d))\n")
    with pytest.raises(DataFormatError) as info:
        read_ptb_trees(bad)
    assert info.value.lineno == 2 and "UTF-8" in str(info.value)


def test_deep_trees_need_no_recursion():
    depth = sys.getrecursionlimit() + 500
    line = "(2 (2 w) " * (depth - 1) + "(2 w)" + ")" * (depth - 1)
    t = parse_ptb(line)
    assert t.depth == depth and t.n_leaves == depth and t.size == 2 * depth - 1
    assert len(t.nodes()) == 2 * depth - 1 and t.nodes()[-1] is t
    assert t.to_ptb() == line


def test_tree_checks_arity_and_hashes_by_identity():
    leaf = Tree(2, "a")
    with pytest.raises(ValueError):
        Tree(2, None, (leaf,))
    with pytest.raises(ValueError):
        Tree(2, "a", (leaf, leaf))
    a, b = parse_ptb("(2 (2 x) (2 x))").children
    state = {a: 1, b: 2}            # per-node state keyed by node, as a Tree-LSTM keeps it
    assert len(state) == 2 and a.to_ptb() == b.to_ptb()


def test_vocab_build_min_count_and_unk():
    counts = collections.Counter("the cat saw the dog and the cat ran".split())
    v = Vocab.build(counts, min_count=2)
    assert v.words == ["<unk>", "the", "cat"]          # most frequent first
    assert len(v) == 3 and v.unk_id == 0
    assert v["the"] == 1 and v["cat"] == 2 and v["dog"] == 0 and v.id("zebra") == 0
    assert "cat" in v and "dog" not in v and "<unk>" not in v
    np.testing.assert_array_equal(v.ids(["cat", "dog", "the"]), [2, 0, 1])
    assert v.word(2) == "cat"
    assert Vocab.build(counts).words[:3] == ["<unk>", "the", "cat"]
    assert len(Vocab.build(counts, max_size=4)) == 4
    assert Vocab.build(["b", "a", "b"]).words == ["<unk>", "b", "a"]    # an iterable of words


# ---------------------------------------------------------------------------------------------
# CoNLL-U
# ---------------------------------------------------------------------------------------------

CONLLU = """\
# sent_id = a-1
# text = I don't know.
1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tI\tI\tPRON\tPRP\t_\t3\tnsubj\t3:nsubj\t_
2\tdo\tdo\tAUX\tVBP\t_\t3\taux\t3:aux\t_
3\tknow\tknow\tVERB\tVB\t_\t0\troot\t0:root\t_
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t3:punct\t_

# sent_id = a-2
1\tGo\tgo\tVERB\tVB\t_\t0\troot\t0:root\t_
2\thome\thome\tADV\tRB\t_\t1\tadvmod\t1:advmod\t_
2.1\tgo\tgo\tVERB\tVB\t_\t_\t_\t1:conj\tCopyOf=1
3\tnow\tnow\tADV\tRB\t_\t1\tadvmod\t1:advmod\t_
"""


def test_read_conllu_skips_comments_multiword_lines_and_empty_nodes(tmp_path):
    p = tmp_path / "s.conllu"
    p.write_text(CONLLU, encoding="utf-8")          # no blank line after the last sentence
    sents = read_conllu(p)
    assert len(sents) == 2 and [len(s) for s in sents] == [4, 3]
    assert sents[0][0] == Token(1, "I", "PRON", 3, "nsubj")
    assert [t.form for t in sents[0]] == ["I", "do", "know", "."]
    assert [t.head for t in sents[0]] == [3, 3, 0, 3]
    assert [(t.id, t.form, t.upos, t.deprel) for t in sents[1]] == [
        (1, "Go", "VERB", "root"), (2, "home", "ADV", "advmod"), (3, "now", "ADV", "advmod")]
    crlf = tmp_path / "crlf.conllu"
    crlf.write_bytes(CONLLU.replace("\n", "\r\n").encode())
    assert read_conllu(crlf) == sents


@pytest.mark.parametrize("bad_line, column, expected, found", [
    ("3\tknow\tknow\tVERB\tVB\t_\t0\troot\t0:root", 1, "10 tab-separated columns", "9 columns"),
    ("3\tknow\tknow\tVERB\tVB\t_\tx\troot\t0:root\t_", 23, "an integer HEAD in column 7", "'x'"),
    ("3\tknow\tknow\tVERB\tVB\t_\t9\troot\t0:root\t_", 23, "HEAD between 0 and 4", "'9'"),
    ("5\tknow\tknow\tVERB\tVB\t_\t0\troot\t0:root\t_", 1, "ID 3", "'5'"),
    ("three\tknow\tknow\tVERB\tVB\t_\t0\troot\t0:root\t_", 1, "an integer ID", "'three'"),
    ("3-x\tknow\t_\t_\t_\t_\t_\t_\t_\t_", 1, "an integer ID", "'3-x'"),
    ("5-6\tknow\t_\t_\t_\t_\t_\t_\t_\t_", 1, "a multiword range '3-b' with b > 3", "'5-6'"),
    ("3-3\tknow\t_\t_\t_\t_\t_\t_\t_\t_", 1, "a multiword range '3-b' with b > 3", "'3-3'"),
    ("4.1\tknow\t_\t_\t_\t_\t_\t_\t_\t_", 1, "an empty node '2.k' with k >= 1", "'4.1'"),
    ("2.0\tknow\t_\t_\t_\t_\t_\t_\t_\t_", 1, "an empty node '2.k' with k >= 1", "'2.0'"),
    ("3\tknow\tknow\tVERB\tVB\t_\t3\troot\t0:root\t_", 23, "a HEAD other than the token's own ID 3",
     "'3'"),
    ("3\tknow\tknow\t\tVB\t_\t0\troot\t0:root\t_", 13, "a UPOS tag (ADJ ADP", "an empty field"),
    ("3\tknow\tknow\tVB\tVB\t_\t0\troot\t0:root\t_", 13, "a UPOS tag (ADJ ADP", "'VB'"),
    ("3\tknow\tknow\tVERB\tVB\t_\t0\t\t0:root\t_", 25, "a DEPREL (or '_') in column 8", "an empty field"),
    ("3\t\tknow\tVERB\tVB\t_\t0\troot\t0:root\t_", 3, "a FORM (or '_') in column 2", "an empty field"),
])
def test_read_conllu_malformed_line(tmp_path, bad_line, column, expected, found):
    lines = CONLLU.splitlines()
    lines[5] = bad_line                                  # line 6 of the file: token 3
    p = tmp_path / "bad.conllu"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        read_conllu(p)
    e = info.value
    assert (e.filename, e.lineno, e.column) == (str(p), 6, column)
    assert e.expected.startswith(expected)
    assert str(e).startswith(f"{p}:6:{column}: expected {expected}")
    assert f"found {found}" in str(e)


@pytest.mark.parametrize("heads, lineno, expected", [
    ({4: 0}, 6, "one root (HEAD 0) per sentence (this sentence has 2)"),      # "I" a second root
    ({6: 1, 7: 0}, 4, "HEADs leading to the root (word 1 is on a cycle of HEADs)"),   # 1 -> 3 -> 1
    ({6: 1}, 4, "one root (HEAD 0) per sentence (this sentence has 0)"),
], ids=["two_roots", "cycle", "no_root"])
def test_read_conllu_refuses_heads_that_are_not_one_tree(tmp_path, heads, lineno, expected):
    """Two roots, no root or a cycle of HEADs were read as a 'basic dependency tree'."""
    lines = CONLLU.splitlines()
    for i, head in heads.items():                    # line i of the file (1-based)
        fields = lines[i - 1].split("\t")
        fields[6] = str(head)
        lines[i - 1] = "\t".join(fields)
    p = tmp_path / "bad.conllu"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as info:
        read_conllu(p)
    head_column = sum(len(f) + 1 for f in lines[lineno - 1].split("\t")[:6]) + 1
    assert (info.value.lineno, info.value.column) == (lineno, head_column)
    assert info.value.expected == expected


def test_read_conllu_takes_underscore_for_unspecified_upos_and_deprel(tmp_path):
    p = tmp_path / "s.conllu"
    p.write_text(CONLLU.replace("3\tknow\tknow\tVERB\tVB\t_\t0\troot", "3\tknow\tknow\t_\tVB\t_\t0\t_"),
                 encoding="utf-8")
    assert read_conllu(p)[0][2] == Token(3, "know", "_", 0, "_")


def test_read_conllu_reports_the_line_of_invalid_utf8(tmp_path):
    p = tmp_path / "bad.conllu"
    p.write_bytes(CONLLU.replace("3\tknow", "3\tkn\xffw").encode("latin-1"))
    with pytest.raises(DataFormatError) as info:
        read_conllu(p)
    assert info.value.lineno == 6 and "UTF-8" in str(info.value)


# ---------------------------------------------------------------------------------------------
# CLEVR programs
# ---------------------------------------------------------------------------------------------

def _node(t, inputs, values=()):
    return {"type": t, "inputs": list(inputs), "value_inputs": list(values), "_output": None}


CLEVR_SAMPLE = {"info": {"license": "CC BY 4.0"}, "questions": [
    {"question": "How many red things?", "image_indices": [1, 2], "answers": [1, 0],
     "program": [
         [_node("scene", []), _node("filter_color", [0], ["red"]), _node("count", [1])],
         [_node("scene", []), _node("filter_color", [0], ["red"]), _node("count", [1])]]},
    {"question": "More cubes than spheres?", "image_indices": [3], "answers": [False],
     "program": [[
         _node("scene", []), _node("filter_shape", [0], ["cube"]), _node("count", [1]),
         _node("scene", []), _node("filter_shape", [3], ["sphere"]), _node("count", [4]),
         _node("greater_than", [2, 5])]]},
]}


def test_read_clevr_programs_one_program_per_image(tmp_path):
    p = tmp_path / "q.json"
    p.write_text(json.dumps(CLEVR_SAMPLE))
    progs = read_clevr_programs(p)
    assert len(progs) == 3 and [len(x) for x in progs] == [3, 3, 7]
    assert progs[0] == [("scene", ()), ("filter_color", (0,)), ("count", (1,))]
    assert progs[2][-1] == ProgramNode("greater_than", (2, 5))
    assert program_depth(progs[2]) == 4
    named = read_clevr_programs(p, with_values=True)
    assert [n.function for n in named[2]][:2] == ["scene", "filter_shape[cube]"]


def test_read_clevr_programs_official_layout_and_folders(tmp_path):
    official = {"questions": [{"program": [{"function": "scene", "inputs": [],
                                            "value_inputs": []},
                                           {"function": "exist", "inputs": [0],
                                            "value_inputs": []}]}]}
    (tmp_path / "b.json").write_text(json.dumps(official))
    (tmp_path / "a.json").write_text(json.dumps(CLEVR_SAMPLE))
    (tmp_path / "notes.txt").write_text("not json")
    progs = read_clevr_programs(tmp_path)                 # *.json, sorted: a then b
    assert len(progs) == 4 and progs[-1] == [("scene", ()), ("exist", (0,))]


def test_read_clevr_programs_errors(tmp_path):
    bad = json.loads(json.dumps(CLEVR_SAMPLE))
    bad["questions"][1]["program"][0][2]["inputs"] = [5]
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(DataFormatError, match=r"'inputs' of node 2 \(count\) listing earlier "
                       r"nodes \(0\.\.1\) at questions\[1\]\.program\[0\], found \[5\]"):
        read_clevr_programs(p)
    p.write_text('{"questions": [\n  {"program": [}\n]}')
    with pytest.raises(DataFormatError) as info:
        read_clevr_programs(p)
    assert (info.value.lineno, info.value.column) == (2, 16)          # the "}"
    with pytest.raises(FileNotFoundError):
        read_clevr_programs(tmp_path / "missing.json")


# ---------------------------------------------------------------------------------------------
# Synthetic generators
# ---------------------------------------------------------------------------------------------

def test_synthetic_words_are_distinct_letters_and_prefix_stable():
    w = synthetic_words(20000)
    assert len(set(w)) == 20000
    assert all(x.isascii() and x.isalpha() and x.islower() for x in w)
    assert synthetic_words(500) == w[:500]
    assert np.mean([len(x) for x in w[:100]]) < np.mean([len(x) for x in w[-100:]])


@pytest.fixture(scope="module")
def sst_synth():
    return synthetic_sst(3000, seed=0)


def test_synthetic_sst_sizes_match_sst_train(sst_synth):
    n = np.array([t.n_leaves for t in sst_synth])
    d = np.array([t.depth for t in sst_synth])
    # SST train: 163,563 leaves / 8,544 trees = 19.14 (sd 9.31), 2..52; depth mean 10.83
    assert abs(n.mean() - 19.14) < 0.7 and abs(n.std() - 9.31) < 0.8
    assert n.min() >= 2 and n.max() <= 52 and n.max() >= 42
    assert abs(d.mean() - 10.83) < 0.7 and d.max() <= 52
    assert all(t.size == 2 * t.n_leaves - 1 for t in sst_synth)


def test_synthetic_sst_labels_words_and_shape(sst_synth):
    kinds = collections.defaultdict(collections.Counter)
    for t in sst_synth:
        for node in t.nodes():
            kind = "root" if node is t else "leaf" if node.is_leaf else "internal"
            kinds[kind][node.label] += 1
    for kind in kinds:
        assert set(kinds[kind]) <= {0, 1, 2, 3, 4}
    share = {k: c[2] / sum(c.values()) for k, c in kinds.items()}
    # SST train: neutral share 86% of leaves, 53% of internal nodes, 19% of roots
    assert abs(share["leaf"] - 0.858) < 0.03
    assert share["root"] < 0.35 < share["internal"] < 0.7
    assert set(kinds["root"]) == {0, 1, 2, 3, 4}
    words = collections.Counter(w for t in sst_synth for w in t.words())
    assert set(words) <= set(synthetic_words(16000)) and len(words) > 5000
    top = [c for _, c in words.most_common(100)]
    assert top[0] > 5 * top[9] > 5 * top[99]                           # Zipf-like
    # a word keeps its leaf label (a learnable lexicon)
    leaf_labels = collections.defaultdict(set)
    for t in sst_synth:
        for leaf in t.leaves():
            leaf_labels[leaf.word].add(leaf.label)
    assert all(len(v) == 1 for v in leaf_labels.values())
    # ... across seeds too: a train and a test set share one lexicon
    other = {leaf.word: leaf.label for t in synthetic_sst(300, seed=5) for leaf in t.leaves()}
    shared = set(other) & set(leaf_labels)
    assert len(shared) > 500 and all(leaf_labels[w] == {other[w]} for w in shared)


def test_synthetic_sst_is_deterministic_and_prefix_stable(sst_synth):
    again = synthetic_sst(3000, seed=0)
    assert [t.to_ptb() for t in again] == [t.to_ptb() for t in sst_synth]
    assert [t.to_ptb() for t in synthetic_sst(50, seed=0)] == [t.to_ptb() for t in sst_synth[:50]]
    assert [t.to_ptb() for t in synthetic_sst(50, seed=1)] != [t.to_ptb() for t in sst_synth[:50]]
    small = synthetic_sst(200, seed=3, vocab_size=50)
    assert len({w for t in small for w in t.words()}) <= 50
    # round trip through the reader
    assert all(parse_ptb(t.to_ptb()).to_ptb() == t.to_ptb() for t in sst_synth[:200])


@pytest.fixture(scope="module")
def tagging_synth():
    return synthetic_tagging(3000, seed=0)


def test_synthetic_tagging_lengths_match_ewt_train(tagging_synth):
    n = np.array([len(s) for s in tagging_synth])
    # EWT train: 204,577 words / 12,544 sentences = 16.31, median 14, 19% <= 5 words, max 159
    assert abs(n.mean() - 16.31) < 1.0
    assert 11 <= np.median(n) <= 15 and abs((n <= 5).mean() - 0.193) < 0.03
    assert n.min() >= 1 and n.max() <= 159 and n.max() >= 60


def test_synthetic_tagging_tags_follow_words_and_trees_are_projective(tagging_synth):
    tags = collections.Counter(t.upos for s in tagging_synth for t in s)
    assert set(tags) == set(UPOS_TAGS) and len(UPOS_TAGS) == 17
    total = sum(tags.values())
    assert 0.14 < tags["NOUN"] / total < 0.20 and 0.09 < tags["PUNCT"] / total < 0.14
    # a word's most frequent tag covers ~93% of its tokens (EWT: 92.9%), so tags are learnable
    by_word = collections.defaultdict(collections.Counter)
    for s in tagging_synth:
        for t in s:
            by_word[t.form][t.upos] += 1
    agree = sum(c.most_common(1)[0][1] for c in by_word.values()) / total
    assert 0.88 < agree < 0.97
    for s in tagging_synth:
        n = len(s)
        assert [t.id for t in s] == list(range(1, n + 1))
        assert sum(t.head == 0 for t in s) == 1
        assert all((t.deprel == "root") == (t.head == 0) for t in s)
        for t in s:                                         # every word reaches the root
            j, steps = t.id, 0
            while j:
                j, steps = s[j - 1].head, steps + 1
                assert steps <= n
    for s in tagging_synth[:300]:                           # no crossing arcs
        arcs = [tuple(sorted((t.id, t.head))) for t in s if t.head]
        assert not any(a < c < b < d for a, b in arcs for c, d in arcs)


def test_synthetic_tagging_is_deterministic(tagging_synth):
    assert synthetic_tagging(3000, seed=0) == tagging_synth
    assert synthetic_tagging(40, seed=0) == tagging_synth[:40]
    assert synthetic_tagging(40, seed=1) != tagging_synth[:40]


def test_synthetic_programs_follow_w7():
    progs = synthetic_programs(2000, seed=0)
    assert len(CLEVR_FUNCTIONS) == 40 and set(CLEVR_FUNCTIONS.values()) == {0, 1, 2}
    lengths = np.array([len(p) for p in progs])
    assert lengths.min() == 10 and lengths.max() == 25
    used = collections.Counter(n.function for p in progs for n in p)
    assert set(used) == set(CLEVR_FUNCTIONS)
    for p in progs:
        for i, node in enumerate(p):
            assert len(node.inputs) == CLEVR_FUNCTIONS[node.function]
            assert all(0 <= j < i for j in node.inputs)
        # depth-first post-order: walking from the answer node reproduces the list order
        order = []
        stack = [(len(p) - 1, False)]
        while stack:
            i, done = stack.pop()
            if done:
                order.append(i)
            else:
                stack.append((i, True))
                stack.extend((j, False) for j in reversed(p[i].inputs))
        assert order == list(range(len(p)))
    # unbalanced, chain-like as CLEVR: the answer's depth is most of the program
    depth_ratio = np.mean([program_depth(p) / len(p) for p in progs])
    assert depth_ratio > 0.6
    assert synthetic_programs(30, seed=0) == progs[:30]
    assert synthetic_programs(30, seed=1) != progs[:30]


def test_shared_data_dir_honours_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HYBRIDBATCH_DATA", str(tmp_path))
    assert shared_data_dir() == tmp_path.resolve()
    monkeypatch.setenv("HYBRIDBATCH_DATA", str(tmp_path / "nope"))
    assert shared_data_dir() is None
    monkeypatch.delenv("HYBRIDBATCH_DATA")
    found = shared_data_dir()
    assert found is None or found.name == "data" and found.parent.name == "shared"


# ---------------------------------------------------------------------------------------------
# The real files (counts from each SOURCE.md's validation output)
# ---------------------------------------------------------------------------------------------

def _real(*parts):
    root = shared_data_dir()
    if root is None:
        pytest.skip("../shared/data not found: set HYBRIDBATCH_DATA to the folder holding "
                    "sst/, ud_english_ewt/ and clevr_programs/ to run the real-data checks")
    p = root.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"../shared/data not found: {p} is missing")
    return p


@pytest.fixture(scope="module")
def sst_train():
    return read_ptb_trees(_real("sst", "train.txt"))


def test_real_sst_train_counts(sst_train):
    trees = sst_train
    assert len(trees) == 8544
    assert sum(t.size for t in trees) == 318582
    assert sum(t.n_leaves for t in trees) == 163563
    assert max(t.n_leaves for t in trees) == 52 and max(t.depth for t in trees) == 30
    roots = collections.Counter(t.label for t in trees)
    assert dict(roots) == {0: 1092, 1: 2218, 2: 1624, 3: 2322, 4: 1288}
    nbsp = [w for t in trees for w in t.words() if "\u00a0" in w]
    assert nbsp == ["8\u00a01\\/2", "2\u00a01\\/2", "2\u00a01\\/2"]


@pytest.mark.parametrize("split, trees, nodes, leaves", [
    ("dev", 1101, 41447, 21274), ("test", 2210, 82600, 42405)])
def test_real_sst_dev_test_counts(split, trees, nodes, leaves):
    ts = read_ptb_trees(_real("sst", f"{split}.txt"))
    assert (len(ts), sum(t.size for t in ts), sum(t.n_leaves for t in ts)) == (trees, nodes, leaves)


def test_synthetic_sst_matches_the_real_train_set(sst_train, sst_synth):
    real = np.array([t.n_leaves for t in sst_train])
    fake = np.array([t.n_leaves for t in sst_synth])
    for q in (10, 25, 50, 75, 90):
        assert abs(np.percentile(real, q) - np.percentile(fake, q)) <= 2
    real_d = np.mean([t.depth for t in sst_train])
    assert abs(np.mean([t.depth for t in sst_synth]) - real_d) < 0.7


@pytest.fixture(scope="module")
def ewt_train():
    return read_conllu(_real("ud_english_ewt", "en_ewt-ud-train.conllu"))


def test_real_ewt_train_counts(ewt_train):
    sents = ewt_train
    assert len(sents) == 12544
    assert sum(len(s) for s in sents) == 204577
    assert max(len(s) for s in sents) == 159
    assert {t.upos for s in sents for t in s} == set(UPOS_TAGS)
    assert all(sum(t.head == 0 for t in s) == 1 for s in sents)
    assert all(t.id == i for s in sents for i, t in enumerate(s, 1))
    # W2's vocabulary: words seen >= 5 times
    vocab = Vocab.build(collections.Counter(t.form for s in sents for t in s), min_count=5)
    assert len(vocab) == 4146 + 1


@pytest.mark.parametrize("split, n_sents, n_words", [("dev", 2001, 25147), ("test", 2077, 25094)])
def test_real_ewt_dev_test_counts(split, n_sents, n_words):
    sents = read_conllu(_real("ud_english_ewt", f"en_ewt-ud-{split}.conllu"))
    assert (len(sents), sum(len(s) for s in sents)) == (n_sents, n_words)


def test_synthetic_tagging_matches_the_real_train_set(ewt_train, tagging_synth):
    real = np.array([len(s) for s in ewt_train])
    fake = np.array([len(s) for s in tagging_synth])
    for q in (10, 25, 50, 75, 90):
        assert abs(np.percentile(real, q) - np.percentile(fake, q)) <= 3


def test_real_clevr_program_counts():
    progs = read_clevr_programs(_real("clevr_programs"))
    assert len(progs) == 875
    assert sum(len(p) for p in progs) == 5940
    fns = collections.Counter(n.function for p in progs for n in p)
    assert len(fns) == 19 and fns["scene"] == 1100 and fns["unique"] == 800
    for p in progs:                       # one output: every node but the last is consumed
        consumed = {j for n in p for j in n.inputs}
        assert set(range(len(p))) - consumed == {len(p) - 1}
    assert max(program_depth(p) for p in progs) == 11
    one = read_clevr_programs(_real("clevr_programs", "CLEVR_train_1_zero_hop.json"))
    assert len(one) == 150 and all(3 <= len(p) <= 6 for p in one)


def test_a_tree_deeper_than_the_models_recurse_is_a_format_error(tmp_path):
    """It passed the reader, and training died in a RecursionError."""
    tree = "(1 a)"
    for _ in range(MAX_TREE_DEPTH):
        tree = f"(1 (1 a) {tree})"
    path = tmp_path / "train.txt"
    path.write_text("(1 (1 a) (1 b))\n" + tree + "\n")
    with pytest.raises(DataFormatError, match=rf"train.txt:2: expected a tree at most {MAX_TREE_DEPTH} deep"):
        read_ptb_trees(path)
