"""The recorded graph: flat per-node arrays, appended to as ops are recorded.

Recording appends to plain lists (the cheapest append Python has); a flush turns the
pending delta into numpy arrays once. Node ids are a topological order: an op's operands
are always recorded before it. Depths are not recorded: the flush derives them from the
operands in one compiled pass (`plan._depths`), which costs recording nothing per call.
"""
import numpy as np


class Growable:
    """A numpy array with amortized O(1) append of blocks (capacity doubling)."""

    __slots__ = ("data", "n")

    def __init__(self, dtype, fill=0):
        self.data = np.full(64, fill, dtype)
        self.n = 0

    def extend(self, values):
        k = len(values)
        if self.n + k > len(self.data):
            grown = np.empty(max(2 * len(self.data), self.n + k), self.data.dtype)
            grown[:self.n] = self.data[:self.n]
            self.data = grown
        self.data[self.n:self.n + k] = values
        self.n += k

    @property
    def view(self):
        return self.data[:self.n]


class Graph:
    """Per node: signature id, output type id, operand ids (CSR) and one integer aux; and,
    once flushed, its depth.

    type[i] is always SIGS[sig[i]].out_type (kept for recording's operand lookups).

    A node that carries several integers stores them in aux_flat; its aux is their offset.
    """

    __slots__ = ("sig", "type", "depths", "aux", "aux_flat", "args", "arg_end", "constants", "origin")

    def __init__(self, track_origin=False):
        self.sig = []
        self.type = []
        self.depths = Growable(np.int64)    # per flushed node: 0 for inputs, else 1 + its operands' deepest
        self.aux = []
        self.aux_flat = []    # several integers of one node (a block call with int arguments)
        self.args = []        # operand node ids, all nodes back to back
        self.arg_end = []     # node i's operands are args[arg_end[i-1]:arg_end[i]]
        self.constants = {}   # node id -> value, for input nodes not yet flushed
        self.origin = [] if track_origin else None   # "file:line" per node, for error messages

    def __len__(self):
        return len(self.sig)

    def add(self, sig, out_type, operands, aux, extra_outs=()):
        """Append a node; returns its id. extra_outs: (sig, out_type) of a multi-output
        node's outputs 1.. (a block call), each appended right after it, reading it."""
        nid = len(self.sig)
        self.sig.append(sig)
        self.type.append(out_type)
        self.aux.append(aux)
        self.args.extend(operands)
        self.arg_end.append(len(self.args))
        for out_sig, out_t in extra_outs:
            self.sig.append(out_sig)
            self.type.append(out_t)
            self.aux.append(-1)
            self.args.append(nid)
            self.arg_end.append(len(self.args))
        return nid

    def delta(self, start):
        """numpy arrays for nodes [start, n): sig, aux, arg_ptr (0-based), args.

        No type array: a node's type is its signature's out_type, so a flush derives it per
        signature. np.fromiter with a known count is the fastest list -> array conversion.
        """
        a0 = self.arg_end[start - 1] if start else 0
        arg_ptr = np.empty(len(self.sig) - start + 1, np.int64)
        arg_ptr[0] = 0
        arg_ptr[1:] = _ints(self.arg_end, start)
        arg_ptr[1:] -= a0
        return _ints(self.sig, start), _ints(self.aux, start), arg_ptr, _ints(self.args, a0)


def _ints(values, start):
    """values[start:] (a list of ints) as an int64 array."""
    if start:
        values = values[start:]
    return np.fromiter(values, np.int64, len(values))
