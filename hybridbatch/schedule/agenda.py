"""DyNet's agenda-based batching (Neubig et al. 2017, §3.2), and the default policy: agenda
with the graph's tail last.

Keep every node whose inputs are done on an agenda, one FIFO queue per signature. Each step
runs all ready nodes of the signature with the lowest average depth (ties: cheap ops
first), so nodes that become ready at different times (a loss after chains of different
lengths) wait and run together. Ready nodes of an unbatchable signature all run in that
step too, one batch each, so their consumers become ready together. The loop itself is
frontier.py's, shared with the other dynamic policies.

The average depth misleads where every node of a tree or chain has an output (ED-Batch
Fig. 1): a classifier on every Tree-LSTM node has a lower average depth than the internal
cells (half its nodes hang off leaves), so agenda runs it, its loss and then the next cells:
three batches per tree level instead of one. `tail_last` runs the graph's *tail* last: the
signatures from which no cycle of the signature graph (a -> b where an a-node feeds a
b-node) can be reached, so that no recurrence reads them (per-node classifiers, their
losses, the sums of those). Nothing outside the tail reads the tail, and no tail signature
has one of its nodes above another, so running everything else first, in agenda's order,
then each tail signature once, upstream first, gives agenda's batches outside the tail and
one batch per tail signature: never more batches than agenda, and Eq. 2 on the tail.
"""
from .frontier import AGENDA, TAIL_LAST, schedule


def agenda(view):
    """Ordered batches for a GraphView: (order, batch_ptr) over its local node ids."""
    order, bptr, _ = schedule(view, AGENDA)
    return order, bptr


def tail_last(view):
    """Agenda, with the tail's signatures after every other one, each in one batch (one per
    node if unbatchable): (order, batch_ptr) over the view's local node ids."""
    order, bptr, _ = schedule(view, TAIL_LAST)
    return order, bptr
