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
three batches per tree level instead of one. `tail_last` runs the graph's *tail* last. The
tail is peeled from the sinks of the signature graph (a -> b where an a-node feeds a
b-node): a signature joins once every other signature it feeds has joined, and one whose
nodes feed each other (a chain's step) only if it feeds no other (a minibatch's sum of the
instances' loss sums). No recurrence reads the tail: per-node classifiers, their losses,
the sums of those. Nothing outside the tail reads it, and a tail signature has no node
above another of its own unless it is a sink, so everything else runs first, in agenda's
order, then each tail signature, upstream first: once, or a sink along its longest chain.
That is agenda's batches outside the tail and Eq. 2's count on it, never more than agenda.
"""
from .frontier import AGENDA, TAIL_LAST, schedule


def agenda(view):
    """Ordered batches for a GraphView: (order, batch_ptr) over its local node ids."""
    order, bptr, _ = schedule(view, AGENDA)
    return order, bptr


def tail_last(view):
    """Agenda, with the tail's signatures after every other one, upstream first, each in one
    batch (a sink along its chain; an unbatchable one, one per node): (order, batch_ptr)
    over the view's local node ids."""
    order, bptr, _ = schedule(view, TAIL_LAST)
    return order, bptr
