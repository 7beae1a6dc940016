"""Rows with equal keys computed once: the part of a block program that depends only on one
integer argument runs once per distinct value of it in a batch.

A Tree-LSTM's leaf block looks its word up, multiplies it by W_iou and runs the gates, so
every leaf of one word computes the same h and c; a minibatch of 64 sentence trees repeats
about half of its 1,200 words. The leaf batch then runs that part on the distinct words and
copies rows out to the calls (forward), and sums the copies' gradients back per word
(backward). The math is the same: no step mixes rows, so a row's value depends on its own
key alone. `hb.settings.distinct_rows` turns it on and off (config.py).
"""
import numpy as np

from ..config import settings
from ..kernels import scatter_add_rows
from ..kernels.fused import FusedRun
from .arguments import int_column


class KeyedPart:
    """A program's units split in two, each list in program order.

    keyed: units whose values depend only on integer column `column` and on Parameters;
    rest: the others. slots: the values keyed units make. boundary: those that `rest` or the
    program's outputs read (copied out to every row); inner: the other keyed slots, which
    keep one row per key.
    """

    def __init__(self, keyed, rest, slots, boundary, column):
        self.keyed, self.rest = keyed, rest
        self.slots, self.boundary, self.column = slots, boundary, column
        self.inner = slots - set(boundary)

    def split(self, ints, size):
        """(first row of each distinct key, each row's key index), or None where sharing
        rows does not pay (settings.distinct_min_rows, distinct_max_share). Keys are
        numbered in the order of their first rows."""
        if size < settings.distinct_min_rows:
            return None
        first, inverse = _by_first_row(ints if ints.ndim == 1 else ints[:, self.column])
        if len(first) > settings.distinct_max_share * size:
            return None
        return first, inverse


def keyed_part(units, outputs):
    """The KeyedPart of a program's units, or None when none pays: the keyed units read one
    integer column (units reading another stay in rest) and hold a product (`op.product`:
    the work worth sharing; a part without one is not split)."""
    slots, keyed, rest = set(), [], []
    key, product = None, False      # the first integer column read decides the key
    for unit in units:
        reads = _reads(unit)
        if isinstance(unit, FusedRun):
            ok = bool(reads) and all(r in slots for r in reads)
            made = [step.slot for step in unit.steps]
        else:
            op = unit.sig.op
            column = int_column(unit.aux) if op.uses_aux else None
            ok = (op.batchable and all(r in slots for r in reads) and (bool(reads) or column is not None)
                  and (column is None or key is None or column == key))
            if ok and column is not None:
                key = column
            product |= ok and op.product
            made = [unit.slot]
        if ok:
            slots.update(made)
            keyed.append(unit)
        else:
            rest.append(unit)
    if key is None or not product:
        return None
    read_later = {r for unit in rest for r in _reads(unit)} | set(outputs)
    boundary = tuple(s for s in sorted(slots) if s in read_later)
    return KeyedPart(keyed, rest, slots, boundary, key)


def _by_first_row(key):
    """(first row of each distinct value of `key`, each row's value index), the values
    numbered in the order of their first rows: key index k < j means key k's first row comes
    first, so check_numerics, mapping the first bad key row to its first row, names the
    first bad call."""
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return first[order], rank[inverse.reshape(-1)]


def _reads(unit):
    if isinstance(unit, FusedRun):
        return [k for kind, k in unit.inputs if kind == "slot"]
    return [r for r in unit.refs if r is not None]


class Distinct:
    """One batch's sharing: the part, each key's first row and each row's key index, the
    key rows' integers, and the boundary values with one row per key (backward runs the
    keyed units on those)."""

    __slots__ = ("part", "first", "inverse", "ints", "values")

    def __init__(self, part, first, inverse, ints, values):
        self.part, self.first, self.inverse, self.ints, self.values = part, first, inverse, ints, values

    def expand(self, vals):
        """Copy each boundary value out to every row of the batch (in vals)."""
        for s in self.part.boundary:
            vals[s] = vals[s].take(self.inverse, axis=0)

    def sum_back(self, grads):
        """Replace each boundary gradient (one row per call) by its sum per key."""
        n = len(self.ints)
        for s in self.part.boundary:
            g = grads[s]
            if g is not None:
                summed = np.zeros((n,) + g.shape[1:], g.dtype)
                scatter_add_rows(summed, self.inverse, g)
                grads.own(s, summed)

    def rows(self, live):
        """This sharing for the batch rows in boolean mask `live`, and the key indices kept."""
        keys = self.inverse[live]
        first, inverse = _by_first_row(keys)
        used = keys[first]
        values = {s: v[used] for s, v in self.values.items()}
        return Distinct(self.part, first, inverse, self.ints[used], values), used
