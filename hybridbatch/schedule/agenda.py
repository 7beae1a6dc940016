"""DyNet's agenda-based batching (Neubig et al. 2017, §3.2).

Keep every node whose inputs are done on an agenda, one FIFO queue per signature. Each step
runs all ready nodes of the signature with the lowest average depth (ties: cheap ops
first), so nodes that become ready at different times (a loss after chains of different
lengths) wait and run together. Ready nodes of an unbatchable signature all run in that
step too, one batch each, so their consumers become ready together. The loop itself is
frontier.py's, shared with the other dynamic policies.
"""
from .frontier import AGENDA, schedule


def agenda(view):
    """Ordered batches for a GraphView: (order, batch_ptr) over its local node ids."""
    order, bptr, _ = schedule(view, AGENDA)
    return order, bptr
