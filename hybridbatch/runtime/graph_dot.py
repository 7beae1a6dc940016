"""`scope.to_dot(path)`: a scope's flushed graph as Graphviz DOT, coloured by batch.

Every executed node is a box labelled with its op (a block call: the block's name) and its
batch, filled with its batch's colour, so the nodes that ran together share a colour; a
constant input is a small grey ellipse. Edges run from operands to the nodes that read
them. A path ending in .svg is rendered with graphviz (the `graph` extra and Graphviz's
`dot` program) where both are installed; otherwise the DOT text is written, beside it.
"""
import bisect
import os
import warnings

import numpy as np

from ..record import signature

GOLDEN = 0.618033988749895      # hue step: neighbouring batches get distant colours


def dot_text(scope):
    """The DOT source of everything the scope has flushed."""
    sigs = signature.SIGS
    lines = ["digraph hybridbatch {", "  rankdir=BT;",
             '  node [shape=box, style=filled, fontname="Helvetica", fontsize=10];']
    edges = []
    starts = [plan.start for plan in scope.plans]
    first = 0                   # the scope-wide number of each plan's first batch
    for plan in scope.plans:
        n = plan.stop - plan.start
        batch_of = np.full(n, -1, np.int64)
        for b in range(len(plan.sizes)):
            batch_of[plan.batch_nodes(b)] = b
        names = [sigs[s].op.name for s in plan.batch_sig]
        for v in range(n):
            if plan.extra_output[v]:
                continue            # output j of the node before: drawn as that node
            nid = plan.start + v
            b = int(batch_of[v])
            if b < 0:
                lines.append(f'  n{nid} [label="input", shape=ellipse, fillcolor="#dddddd", fontsize=8];')
            else:
                hue = ((first + b) * GOLDEN) % 1.0
                lines.append(f'  n{nid} [label="{names[b]}\\nbatch {first + b}", fillcolor="{hue:.3f} 0.35 1.0"];')
            for e in range(plan.arg_ptr[v], plan.arg_ptr[v + 1]):
                u = int(plan.args[e])
                if u >= 0:
                    edges.append(f"  n{_drawn(scope, starts, u)} -> n{nid};")
        first += len(plan.sizes)
    return "\n".join(lines + edges + ["}"]) + "\n"


def _drawn(scope, starts, nid):
    """The node drawn for node nid: its producer when it is an extra output (`starts`:
    the plans' first nodes, in order)."""
    plan = scope.plans[bisect.bisect_right(starts, nid) - 1]
    v = nid - plan.start
    while plan.extra_output[v]:
        v -= 1
    return plan.start + v


def write(scope, path):
    """Write the graph to `path` (SVG where it ends in .svg and graphviz can render, else
    DOT text); returns the path written."""
    text = dot_text(scope)
    path = os.fspath(path)
    if path.endswith(".svg"):
        try:
            import graphviz
            svg = graphviz.Source(text).pipe(format="svg")
        except Exception as e:      # noqa: BLE001 -- no package, no `dot` program, or dot failed
            path = path[:-4] + ".dot"
            warnings.warn(f"could not render SVG with graphviz ({type(e).__name__}: {e}); wrote the DOT text "
                          f"to {path} (pip install 'hybridbatch[graph]' and Graphviz's dot program to render)",
                          stacklevel=3)
        else:
            with open(path, "wb") as f:
                f.write(svg)
            return path
    with open(path, "w") as f:
        f.write(text)
    return path
