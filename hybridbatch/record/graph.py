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

    def write(self, start, values):
        """values at [start, start + len(values)), and nothing after: what a rebuilt flush
        writes replaces what the first build wrote."""
        self.n = start
        self.extend(values)

    @property
    def view(self):
        return self.data[:self.n]


class Graph:
    """Per recorded call: signature id, operand ids (CSR) and one integer aux. Per node:
    output type id and, once flushed, depth.

    A call is one node, except a block call of k outputs: nodes nid..nid+k-1, the call's
    and one `Output` node per further output (reading the call's). Recording appends such a
    call once (with its k types); the flush expands it into its nodes (`plan._expand_calls`),
    a third of the list appends a Tree-LSTM block call made as nodes. A call that carries several
    integers stores them in aux_flat; its aux is their offset.
    """

    __slots__ = ("sig", "type", "depths", "aux", "aux_flat", "args", "arg_end", "constants", "origin",
                 "_first_call", "__weakref__")

    def __init__(self, track_origin=False):
        self.sig = []         # per call
        self.type = []        # per node
        self.depths = Growable(np.int64)    # per flushed node: 0 for inputs, else 1 + its operands' deepest
        self.aux = []         # per call
        self.aux_flat = []    # several integers of one call (a block call with int arguments)
        self.args = []        # operand node ids, all calls back to back
        self.arg_end = []     # call c's operands are args[arg_end[c-1]:arg_end[c]]
        self.constants = {}   # node id -> value, for input nodes not yet flushed
        self.origin = [] if track_origin else None   # "file:line" per node, for error messages
        self._first_call = {0: 0}   # node id where a flush starts -> its first call

    def __len__(self):
        """The number of nodes."""
        return len(self.type)

    def add(self, sig, out_types, operands, aux):
        """Append a call of one node per type in out_types (a tuple); returns the first's id."""
        nid = len(self.type)
        self.sig.append(sig)
        self.type.extend(out_types)
        self.aux.append(aux)
        self.args.extend(operands)
        self.arg_end.append(len(self.args))
        return nid

    def delta(self, start):
        """numpy arrays for the calls of nodes [start, n): sig, aux, arg_ptr (0-based),
        args. start is where the last delta ended (the next flush), or where it began (the
        same flush built again after a failure); 0 at first.

        No type array: a node's type is its signature's out_type, so a flush derives it per
        signature. np.fromiter with a known count is the fastest list -> array conversion.
        """
        c0 = self._first_call.get(start)
        if c0 is None:
            raise ValueError(f"graph.delta({start}): a delta starts where the last one began or ended "
                             f"({sorted(self._first_call)})")
        a0 = self.arg_end[c0 - 1] if c0 else 0
        arg_ptr = np.empty(len(self.sig) - c0 + 1, np.int64)
        arg_ptr[0] = 0
        arg_ptr[1:] = _ints(self.arg_end, c0)
        arg_ptr[1:] -= a0
        self._first_call = {start: c0, len(self.type): len(self.sig)}   # this delta again, or the next
        return _ints(self.sig, c0), _ints(self.aux, c0), arg_ptr, _ints(self.args, a0)

    def calls_until(self, stop):
        """delta's arrays for the calls of nodes [0, stop), stop a node where a flush ended:
        the whole graph flushed so far, without moving where the next delta starts."""
        c = self._first_call[stop]
        arg_ptr = np.zeros(c + 1, np.int64)
        arg_ptr[1:] = _ints(self.arg_end[:c], 0)
        return (_ints(self.sig[:c], 0), _ints(self.aux[:c], 0), arg_ptr,
                _ints(self.args[:arg_ptr[-1]], 0))


def _ints(values, start):
    """values[start:] (a list of ints) as an int64 array."""
    if start:
        values = values[start:]
    return np.fromiter(values, np.int64, len(values))
