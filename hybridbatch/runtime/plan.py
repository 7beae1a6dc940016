"""A flush's batches made executable: where every value lives and what each batch gathers.

Values live in arenas, one array per (flush, type) whose rows are the flush's nodes of
that type in execution order. A batch's outputs are therefore contiguous rows: writing
them is one slice assignment, and an operand whose rows come from one earlier batch in
order is a view, not a copy (gather kind 0). Other operands are one `take` from a single
arena (kind 1) or, across flushes, a few (kind 2). `Plan.gathers` says how.
"""
from dataclasses import dataclass

import numpy as np
from numba import njit

from .layout import rows_by_next_reader
from ..config import settings
from ..ops.index import Lookup
from ..ops.shape import Input, Output
from .plan_cache import CACHE
from ..schedule import GraphView, lower_bound
from ..schedule.lower_bound import _chains, _lower_bound
from .type_keys import type_keys
from . import backend, memory
from ..record import signature
from ..train.parameter import by_id

SLICE, TAKE, MIXED = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Gathers:
    """How every batch of a plan reads its operands: what execution and backward take from
    planning. Spec g is one operand position of one batch (a ragged batch has one, holding
    the operands of all its nodes); batch b's specs are first[b] .. first[b + 1] - 1, in
    operand order. The per-spec fields are Python lists, read one element at a time (slots
    read as fast as plain attributes; a NamedTuple's fields read about half as fast):

    kind: SLICE, rows start .. start + size of one arena (a view); TAKE, the rows
    rows[off:off + size] of that arena; MIXED, row rows[i] of arena owners[i] for those i.
    arena: the arena (MIXED: its first row's). start: the first row. off: where the spec's
    rows begin in `rows` and `owners`. size: rows gathered, the batch size or a ragged
    batch's operand count. const: every row is an input, so no gradient flows back.
    """

    first: list
    kind: list
    arena: list
    start: list
    off: list
    size: list
    const: list
    rows: np.ndarray      # the arena row of each gathered row, spec after spec
    owners: np.ndarray    # the arena of each gathered row


@njit(cache=True)
def _assign_rows(order, bptr, type_local, is_input, n_out, sig_local, n_types):
    """Arena row per node: inputs first (by id), then executed nodes in schedule order.

    A node with several outputs owns the nodes right after it (its extra outputs); each
    output of a batch gets its own contiguous run of rows. n_out is per compact signature.
    """
    n = type_local.shape[0]
    counts = np.zeros(n_types, np.int64)
    rows = np.empty(n, np.int64)
    for v in range(n):
        if is_input[v]:
            t = type_local[v]
            rows[v] = counts[t]
            counts[t] += 1
    for b in range(bptr.shape[0] - 1):
        for j in range(n_out[sig_local[order[bptr[b]]]]):
            for k in range(bptr[b], bptr[b + 1]):
                v = order[k] + j
                t = type_local[v]
                rows[v] = counts[t]
                counts[t] += 1
    return rows, counts


@njit(cache=True)
def _expand_calls(sig, aux, arg_ptr, args, start, local, n_extra, extra_sig):
    """Per node sig, aux, arg_ptr and args of the calls (graph.delta) from node start on:
    a call is its node, then one node per extra output (local: the call's compact
    signature; n_extra, extra_sig: per compact signature, its extra outputs' sig ids),
    each with aux -1 and the call's node as its one operand."""
    n_calls = sig.shape[0]
    n = n_calls
    for c in range(n_calls):
        n += n_extra[local[c]]
    node_sig = np.empty(n, np.int64)
    node_aux = np.empty(n, np.int64)
    node_ptr = np.empty(n + 1, np.int64)
    node_args = np.empty(args.shape[0] + n - n_calls, np.int64)
    node_ptr[0] = 0
    v = a = 0
    for c in range(n_calls):
        node_sig[v] = sig[c]
        node_aux[v] = aux[c]
        for k in range(arg_ptr[c], arg_ptr[c + 1]):
            node_args[a] = args[k]
            a += 1
        v += 1
        node_ptr[v] = a
        owner = start + v - 1
        s = local[c]
        for j in range(n_extra[s]):
            node_sig[v] = extra_sig[s, j]
            node_aux[v] = -1
            node_args[a] = owner
            a += 1
            v += 1
            node_ptr[v] = a
    return node_sig, node_aux, node_ptr, node_args


def _nodes(calls, start):
    """graph.delta's per-call arrays (sig, aux, arg_ptr, args) as per-node arrays."""
    sig = calls[0]
    usig, local = _compact(sig, len(signature.SIGS))
    extras = [[s.id for s in signature.SIGS[s].op.extra_out_sigs] for s in usig.tolist()]
    n_extra = np.array([len(e) for e in extras], np.int64)
    if not n_extra.any():
        return calls
    extra_sig = np.zeros((len(extras), n_extra.max()), np.int64)
    for s, e in enumerate(extras):
        extra_sig[s, :len(e)] = e
    return _expand_calls(*calls, start, local, n_extra, extra_sig)


def graph_lower_bound(graph, stop):
    """ED-Batch's bound (schedule.lower_bound) over nodes [0, stop) of graph as one graph,
    whatever flushes they ran in; stop is where a flush ended."""
    if not stop:
        return 0
    return int(_lower_bound(*_bound_arrays(graph, stop)[1:]))


def graph_chains(graph, stop):
    """{signature id: the longest chain of its nodes} over nodes [0, stop) of graph, as one
    graph: each batchable signature's term of the bound, the fewest batches it can run in."""
    if not stop:
        return {}
    usig, *arrays = _bound_arrays(graph, stop)
    chains, _ = _chains(*arrays)
    return dict(zip(usig.tolist(), chains.tolist()))


def _bound_arrays(graph, stop):
    """(the signature ids present, then the bound's arguments) for nodes [0, stop) of graph."""
    sig, _, arg_ptr, args = _nodes(graph.calls_until(stop), 0)
    usig, sig_local = _compact(sig, len(signature.SIGS))
    ops = [signature.SIGS[s].op for s in usig.tolist()]
    executable = np.array([op.executed for op in ops], np.bool_)[sig_local]
    unbatchable = np.array([not op.batchable for op in ops], np.bool_)
    return usig, sig_local, executable, unbatchable, arg_ptr, args, len(ops)


@njit(cache=True)
def _depths(earlier, start, arg_ptr, args, is_input, passes_on):
    """Depth per node of the delta [start, ...): 0 for an input, its operand's for an extra
    output (passes_on), else 1 + its deepest operand's (`earlier`: flushed nodes' depths)."""
    n = arg_ptr.shape[0] - 1
    depth = np.empty(n, np.int64)
    for v in range(n):
        if is_input[v]:
            depth[v] = 0
            continue
        d = 0
        for k in range(arg_ptr[v], arg_ptr[v + 1]):
            u = args[k]
            du = depth[u - start] if u >= start else earlier[u]
            if du > d:
                d = du
        depth[v] = d if passes_on[v] else d + 1
    return depth


INSIDE_BITS = 63    # operand positions a per-node `inside` mask (int64) can mark: 0..62


@njit(inline="always")
def looked_up_inside(inside, v, j):
    """Whether node v's operand j is looked up inside its batch (bit j of inside[v]). Only
    positions below INSIDE_BITS are ever folded: a shift by 64 or more is undefined in the
    compiled code, and a node may have hundreds of operands (a concat, a block's *args).
    Inlined into cached kernels here and in autograd.py: after a change, clear both files'
    numba caches (numba keys a kernel on its own file only)."""
    return j < INSIDE_BITS and (inside[v] >> j) & 1 == 1


@njit(cache=True)
def _gather_specs(order, bptr, arg_ptr, args, loc_arena, loc_row, is_const, ragged, inside):
    """For each (batch, operand position): how to gather the operand rows of the batch. A
    batch of a ragged op (`ragged`, per node) has one position: every operand of its nodes,
    node after node. Positions whose bit is set in `inside` (per node) are computed inside
    the batch's kernel (a looked-up input) and gather nothing."""
    nb = bptr.shape[0] - 1
    g_ptr = np.zeros(nb + 1, np.int64)
    total = 0
    for b in range(nb):
        v0 = order[bptr[b]]
        if ragged[v0]:
            g_ptr[b + 1] = g_ptr[b] + 1
            for i in range(bptr[b], bptr[b + 1]):
                total += arg_ptr[order[i] + 1] - arg_ptr[order[i]]
        else:
            k = 0
            for j in range(arg_ptr[v0 + 1] - arg_ptr[v0]):
                k += not looked_up_inside(inside, v0, j)
            g_ptr[b + 1] = g_ptr[b] + k
            total += k * (bptr[b + 1] - bptr[b])
    ng = g_ptr[nb]
    # the operand node of every gathered row, spec after spec
    operand = np.empty(total, np.int64)
    off = np.empty(ng + 1, np.int64)
    p = 0
    for b in range(nb):
        lo, hi = bptr[b], bptr[b + 1]
        if ragged[order[lo]]:
            off[g_ptr[b]] = p
            for i in range(lo, hi):
                for e in range(arg_ptr[order[i]], arg_ptr[order[i] + 1]):
                    operand[p] = args[e]
                    p += 1
            continue
        g = g_ptr[b]
        for j in range(arg_ptr[order[lo] + 1] - arg_ptr[order[lo]]):
            if looked_up_inside(inside, order[lo], j):
                continue
            off[g] = p
            g += 1
            for i in range(lo, hi):
                operand[p] = args[arg_ptr[order[i]] + j]
                p += 1
    off[ng] = p
    kind = np.empty(ng, np.int64)
    arena = np.empty(ng, np.int64)
    start = np.empty(ng, np.int64)
    const = np.empty(ng, np.bool_)
    rows = np.empty(total, np.int64)
    row_arena = np.empty(total, np.int64)
    for g in range(ng):
        u0 = operand[off[g]]
        a0, r0 = loc_arena[u0], loc_row[u0]
        single = consecutive = all_const = True
        for i in range(off[g + 1] - off[g]):
            u = operand[off[g] + i]
            rows[off[g] + i] = loc_row[u]
            row_arena[off[g] + i] = loc_arena[u]
            single &= loc_arena[u] == a0
            consecutive &= loc_row[u] == r0 + i
            all_const &= is_const[u]
        kind[g] = 0 if (single and consecutive) else (1 if single else 2)
        arena[g] = a0
        start[g] = r0
        const[g] = all_const
    return g_ptr, kind, arena, start, off[:ng], np.diff(off), const, rows, row_arena


@njit(cache=True)
def _read_lookups(order, bptr, sig_local, arg_ptr, args_local, lookup, ragged):
    """(batch, operand position, compact signature) wherever every node of a batch reads, at
    that position, a node of this flush of one lookup signature (`lookup`, per compact
    signature: a lookup of a shared table). Ragged batches have no positions."""
    nb = bptr.shape[0] - 1
    n = 0
    for b in range(nb):
        v0 = order[bptr[b]]
        if not ragged[v0]:
            n += arg_ptr[v0 + 1] - arg_ptr[v0]
    found_b = np.empty(n, np.int64)
    found_i = np.empty(n, np.int64)
    found_s = np.empty(n, np.int64)
    m = 0
    for b in range(nb):
        v0 = order[bptr[b]]
        if ragged[v0]:
            continue
        for i in range(arg_ptr[v0 + 1] - arg_ptr[v0]):
            u = args_local[arg_ptr[v0] + i]
            if u < 0 or not lookup[sig_local[u]]:
                continue
            s = sig_local[u]
            every = True
            for k in range(bptr[b] + 1, bptr[b + 1]):
                u = args_local[arg_ptr[order[k]] + i]
                if u < 0 or sig_local[u] != s:
                    every = False
                    break
            if every:
                found_b[m], found_i[m], found_s[m] = b, i, s
                m += 1
    return found_b[:m], found_i[:m], found_s[:m]


def _compact(ids, n_ids):
    """(sorted distinct ids, each id's index among them): np.unique's result for small
    interned ids, by a presence table instead of a sort."""
    present = np.zeros(n_ids, np.bool_)
    present[ids] = True
    distinct = np.flatnonzero(present)
    index = np.empty(n_ids, np.int64)
    index[distinct] = np.arange(len(distinct))
    return distinct, index[ids]


def _stack(xp, values, shape):
    """values (arrays of one shape) as one (k,)+shape array: concatenate, several times
    faster than stack for many small arrays (stack adds an axis to each value first)."""
    if not shape:
        return xp.stack(values)
    return xp.concatenate(values).reshape((len(values),) + shape)


def _write_constants(constants, start, arenas, base, type_local, rows):
    """Copy the flush's input values into their arena rows: one assignment per type."""
    if not constants:
        return
    xp = backend.xp()
    nodes = np.fromiter(constants, np.int64, len(constants)) - start
    values = list(constants.values())
    of_type = type_local[nodes]
    for t in np.flatnonzero(np.bincount(of_type)):
        pick = np.flatnonzero(of_type == t)
        arena = arenas[base + t]
        vals = values if len(pick) == len(values) else [values[i] for i in pick.tolist()]
        arena[rows[nodes[pick]]] = _stack(xp, vals, arena.shape[1:])


def _input_use_tables(ops):
    """(offset per compact signature, flat bools): where a block's outputs do not all depend on
    all its inputs, its op's input_use row-major at that offset; -1 elsewhere."""
    off = np.full(len(ops), -1, np.int64)
    parts, at = [], 0
    for s, op in enumerate(ops):
        use = op.input_use
        if use is not None:
            off[s] = at
            parts.append(use.ravel())
            at += use.size
    return off, (np.concatenate(parts) if parts else np.zeros(0, np.bool_))


class Plan:
    """One flush: nodes [start, stop), their batches, arenas and gather specs.

    Per-node facts come from per-signature tables indexed by the node's compact signature:
    Python work is per distinct signature, never per node.
    """

    def __init__(self, graph, start, policy, arenas, loc_arena, loc_row, is_const):
        self.start, self.stop = start, len(graph)
        sig, self.aux, arg_ptr, args = _nodes(graph.delta(start), start)
        self.aux_flat = np.fromiter(graph.aux_flat, np.int64, len(graph.aux_flat))
        usig, sig_local = _compact(sig, len(signature.SIGS))
        sigs = [signature.SIGS[s] for s in usig.tolist()]
        ops = [s.op for s in sigs]
        # per compact signature, the parameters its nodes read, each with its version now
        # (a backward checks those of the signatures it reaches)
        self.params_read = [[(p, p.version) for p in map(by_id, s.op.params_used(s))] for s in sigs]
        executable = np.array([op.executed for op in ops], np.bool_)[sig_local]
        is_input = np.array([op is Input for op in ops], np.bool_)[sig_local]
        n_out = np.array([op.n_out for op in ops], np.int64)
        # an extra output (node v + j of a multi-output node v) stands for v when scheduling
        out_index = np.array([s.attrs[0] if s.op is Output else 0 for s in sigs], np.int64)
        self.extra_output = out_index[sig_local] > 0    # per node: output j >= 1 of the node before
        depth = _depths(graph.depths.view, start, arg_ptr, args, is_input, self.extra_output)
        graph.depths.write(start, depth)
        self.sig_n_out = n_out
        self.use_off, self.use = _input_use_tables(ops)
        args_local = np.maximum(args - start, -1)
        if out_index.any():
            inside = args_local >= 0
            args_local[inside] -= out_index[sig_local[args_local[inside]]]
        self.view = GraphView(sig_local, depth, arg_ptr, args_local, executable,
                              np.array([not op.batchable for op in ops], np.bool_),
                              np.array([op.cost for op in ops], np.int64), type_keys(sigs))
        xp = backend.xp()
        order, bptr, self.cache_hit = CACHE.schedule(policy, self.view, sig)
        order = rows_by_next_reader(order, bptr, self.view.arg_ptr, self.view.args)
        self.order, self.bptr = order, bptr
        self.args, self.arg_ptr = args, arg_ptr

        # arenas: one per type of this flush, rows in execution order. A node's type is its
        # signature's output type, so types too are compacted per signature.
        utype, sig_type = np.unique(np.array([s.out_type for s in sigs], np.int64), return_inverse=True)
        type_local = sig_type[sig_local]
        rows, counts = _assign_rows(order, bptr, type_local, is_input, n_out, sig_local, len(utype))
        base = len(arenas)
        for t, count in zip(utype.tolist(), counts.tolist()):
            shape, dtype = signature.TYPES[t]
            arenas.append(memory.empty(xp, (count,) + shape, dtype))
        loc = base + type_local
        loc_arena.extend(loc)
        loc_row.extend(rows)
        is_const.extend(is_input)
        _write_constants(graph.constants, start, arenas, base, type_local, rows)
        graph.constants.clear()

        first = order[bptr[:-1]]
        self.batch_sig = sig[first].tolist()
        # (arena, row) of output j of each batch's first node v: node v + j. Flat position
        # ends[b] - k[b] + j holds batch b's output j, so subtracting the batch's offset
        # from v and adding the flat position gives v + j.
        k = n_out[sig_local[first]]
        ends = np.cumsum(k)
        out_nodes = np.repeat(first - (ends - k), k) + np.arange(int(k.sum()))
        pairs = list(zip(loc[out_nodes].tolist(), rows[out_nodes].tolist()))
        self.outs = [pairs[e - n:e] for e, n in zip(ends.tolist(), k.tolist())]
        self.sizes = np.diff(bptr).tolist()
        self.saved = {}
        # seconds per batch, kept where hb.profile() timed them (scope.explain reads them)
        self.forward_seconds = self.backward_seconds = None
        ragged = np.array([op.ragged for op in ops], np.bool_)[sig_local]
        self.inside = np.zeros(len(sig_local), np.int64)   # per node: bit i, operand i looked up inside
        self.run_sig = self.batch_sig   # the signature each batch runs as: batch_sig itself until one is folded
        self.folded = {}     # batch -> the operand position looked up inside
        lookup = np.array([op is Lookup and s.shared[0] for op, s in zip(ops, sigs)], np.bool_)
        if lookup.any() and settings.distinct_rows and xp is np:
            self._look_up_inside(sigs, sig_local, lookup, ragged)
        first, kind, arena, first_row, off, size, const, rows, owners = _gather_specs(
            order, bptr, arg_ptr, args, loc_arena.view, loc_row.view, is_const.view, ragged, self.inside)
        self.gathers = Gathers(first.tolist(), kind.tolist(), arena.tolist(), first_row.tolist(), off.tolist(),
                               size.tolist(), const.tolist(), rows, owners)

    def _look_up_inside(self, sigs, sig_local, lookup, ragged):
        """Where every node of a batch reads a lookup of one table at one operand position and
        the op can take the row's index instead (Op.with_input_looked_up: a block call whose
        per-word part then runs once per distinct word), run the batch that way: its
        signature, the lookups' rows as a last integer column, and no gather, no gradient
        and no reach (autograd) through that operand. The lookup nodes still run, for any
        other reader. At most one position a batch: a block keyed on one looked-up input is
        not keyed on another."""
        args_local = self.view.args
        for b, i, s in zip(*(a.tolist() for a in _read_lookups(
                self.order, self.bptr, sig_local, self.arg_ptr, args_local, lookup, ragged))):
            if b in self.folded or i >= INSIDE_BITS:
                continue
            recorded = signature.SIGS[self.batch_sig[b]]
            sig = recorded.op.with_input_looked_up(recorded, i, sigs[s])
            if sig is None:
                continue
            nodes = self.batch_nodes(b)
            words = self.aux[args_local[self.arg_ptr[nodes] + i]]
            if recorded.op.uses_aux:     # a new last column after the call's own integers
                ints = np.column_stack([self.batch_aux(b, recorded.op), words])
                self.aux[nodes] = len(self.aux_flat) + ints.shape[1] * np.arange(len(nodes))
                self.aux_flat = np.concatenate([self.aux_flat, ints.ravel()])
            else:
                self.aux[nodes] = words
            if self.run_sig is self.batch_sig:
                self.run_sig = list(self.batch_sig)
            self.run_sig[b] = sig.id
            self.folded[b] = i
            self.inside[nodes] |= 1 << i

    def recorded_operand(self, b, j):
        """Operand j of batch b as it runs, numbered as recorded: an input looked up inside
        moved the ones after it down."""
        folded = self.folded.get(b)
        return j if folded is None or j < folded else j + 1

    def batch_aux(self, b, op):
        """Batch b's integers for `op`: (B,) for one per node, (B, k) for ops taking k (block
        calls), a ragged op's operand count per node."""
        if op.ragged:
            return self.operand_counts(b)
        if not op.uses_aux:
            return None
        aux = self.aux[self.batch_nodes(b)]
        if op.aux_width == 1:
            return aux
        return self.aux_flat[aux[:, None] + np.arange(op.aux_width)]

    @property
    def n_batches(self):
        return len(self.sizes)

    @property
    def n_executed(self):
        return len(self.order)

    def lower_bound(self):
        return lower_bound(self.view)

    def batch_nodes(self, b):
        """Local ids of batch b's nodes, in row order."""
        return self.order[self.bptr[b]:self.bptr[b + 1]]

    def operand_counts(self, b):
        """Per node of batch b, its number of operands (what a ragged op's kernel sums)."""
        nodes = self.batch_nodes(b)
        return self.arg_ptr[nodes + 1] - self.arg_ptr[nodes]
