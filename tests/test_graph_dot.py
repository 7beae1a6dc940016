"""scope.to_dot(): the flushed graph as DOT, one colour per batch."""
import re
import shutil

import pytest

import hybridbatch as hb
from hybridbatch import nn
from helpers import lstm_chain_losses


def _scope():
    cell = nn.LSTMCell(3, 3, seed=0)
    cell.hybridize()
    with hb.batching() as scope:
        hb.add_n(lstm_chain_losses(cell, (1, 2)))
    return scope


def test_nodes_of_one_batch_share_a_colour_and_edges_follow_operands():
    scope = _scope()
    text = scope.to_dot()
    assert text.startswith("digraph hybridbatch {") and text.rstrip().endswith("}")
    nodes = dict(re.findall(r'  (n\d+) \[label="([^"]+)"', text))
    colours = dict(re.findall(r'  (n\d+) \[label="[^"]+", fillcolor="([^"]+)"', text))
    by_batch = {}
    for node, label in nodes.items():
        if "batch" in label:
            by_batch.setdefault(label.split("batch ")[1], set()).add(colours[node])
    assert len(by_batch) == scope.stats.batches
    assert all(len(c) == 1 for c in by_batch.values())            # one colour per batch
    assert sum(1 for label in nodes.values() if label.startswith("block:LSTMCell")) == 3
    edges = re.findall(r"  (n\d+) -> (n\d+);", text)
    assert edges and all(a in nodes and b in nodes for a, b in edges)


def test_an_svg_path_falls_back_to_dot_text_without_graphviz(tmp_path):
    scope = _scope()
    try:
        import graphviz  # noqa: F401
        renders = shutil.which("dot") is not None
    except ImportError:
        renders = False
    if renders:
        written = scope.to_dot(tmp_path / "g.svg")
        assert written.endswith(".svg") and "<svg" in open(written).read()
    else:
        with pytest.warns(UserWarning, match="wrote the DOT text"):
            written = scope.to_dot(tmp_path / "g.svg")
        assert written.endswith(".dot") and open(written).read() == scope.to_dot()
    assert scope.to_dot(tmp_path / "g.dot").endswith("g.dot")
