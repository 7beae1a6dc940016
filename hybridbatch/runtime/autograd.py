"""Reverse mode over the executed plans: the same batches, in reverse, one vjp kernel each.

Gradients of values live in gradient arenas shaped like the value arenas, so each batch's
output gradient is a slice and each operand's gradient is one scatter-add. Shared
parameters get one reduced gradient per batch (dW = dZ^T X), not one per node.
"""
import math
import threading
import time
from contextlib import contextmanager

import numpy as np
from numba import njit

from ..errors import BackwardError, NumericsError
from .execute import operands, parameter_named, scatter_add, first_bad_row, raise_numerics
from ..kernels import blas
from ..ops import ColumnGrad, OuterGrad, RowGrad
from ..train.parameter import by_id
from . import memory, profile
from .plan import MIXED, looked_up_inside
from ..record import signature


@njit(cache=True)
def _mark_ancestors(mark, read, start, arg_ptr, args, extra_output, sig, n_out, use_off, use, inside):
    """Propagate `mark` (global, by node id) from nodes of this flush to their operands.
    `read`: marked through a consumer other than one of its extra-output nodes, so that
    output 0 of a multi-output node is read (outputs j >= 1 are nodes of their own). A block
    call marks only the inputs its reached outputs depend on (Program.input_use); an operand
    its batch looks up inside (bit i of `inside`) is not reached through it."""
    for v in range(arg_ptr.shape[0] - 2, -1, -1):
        if mark[start + v]:
            off = use_off[sig[v]]
            k = arg_ptr[v + 1] - arg_ptr[v]
            for i in range(k):
                if looked_up_inside(inside, v, i):
                    continue
                if off >= 0 and not _input_used(read, mark, start + v, n_out[sig[v]], use, off, k, i):
                    continue
                a = args[arg_ptr[v] + i]
                mark[a] = True
                if not extra_output[v]:
                    read[a] = True


@njit(cache=True)
def _input_used(read, mark, node, n_out, use, off, k, i):
    """Whether an output of block call `node` that the seed reaches depends on its input i."""
    for o in range(n_out):
        if (read[node] if o == 0 else mark[node + o]) and use[off + o * k + i]:
            return True
    return False


_pending = threading.local()


# backward() from a value whose graph an earlier call did not keep: as in PyTorch, an error
# (BackwardError) rather than the same gradients added into Parameter.grad again.
SECOND_BACKWARD = ("backward() already ran from this value; running it again would add the same gradients into "
                   "Parameter.grad a second time. Pass retain_graph=True to the earlier backward() to allow "
                   "another (the gradients then accumulate), or compute the loss anew")
PARTIAL_BACKWARD = ("backward() stopped part way: the gradients of some parameters already hold part of this "
                    "value's gradient. Zero them (trainer.zero_grad() or Parameter.zero_grad()) before the next "
                    "step; backward() from this value is refused from now on, since it would add that part again")


def check_unchanged(read):
    """BackwardError where a Parameter has changed since the forward read it: `read` holds
    (parameter, its version then). The gradients would mix values from before and after
    (a block's fused backward recomputes its gates from the parameters as they are now)."""
    for p, version in read:
        if p.version != version:
            raise BackwardError(f"parameter {p.name!r} changed after the forward pass read it (its data assigned, "
                                f"or a Trainer step) and before backward(), which would mix its old and new values; "
                                f"call backward() before updating, or compute the loss anew")


class _Numerics:
    """check_numerics in reverse mode: the batch being differentiated, so that the first
    NaN/inf gradient names its node and the line that recorded it."""

    def __init__(self, origin, xp):
        self.origin, self.xp = origin, xp
        self.batch = None       # (plan, batch index, signature, the batch rows run or None: all)

    def check(self, g, what, summed=False):
        """Raise NumericsError if gradient g (an array, a RowGrad or an OuterGrad) is not
        finite, naming the node of its first bad row. what: the gradient's name, or a
        function making it (made only for the error). summed: g is a dense parameter
        gradient, the batch's sum, named by the batch's first node."""
        parts = (g.left, g.right) if isinstance(g, OuterGrad) else (g.values,) if isinstance(g, (RowGrad, ColumnGrad)) else (g,)
        plan, b, sig, rows = self.batch
        n = plan.sizes[b] if rows is None else len(rows)
        for part in parts:
            if not self.xp.isfinite(part).all():
                row = 0 if summed or len(part) != n else first_bad_row(part, self.xp)
                if rows is not None:
                    row = int(rows[row])
                raise_numerics(plan, b, sig, self.origin,
                               f"gave a NaN/inf gradient for {what() if callable(what) else what}", row)


@contextmanager
def rows_named_by(first):
    """Within: gradients have one row per key of a distinct-rows batch (distinct.py), and
    check_numerics names key k's first call, batch row first[k]."""
    numerics = getattr(_pending, "numerics", None)
    if numerics is None:
        yield
        return
    batch = plan, b, sig, rows = numerics.batch
    numerics.batch = plan, b, sig, first if rows is None else rows[first]
    try:
        yield
    finally:
        numerics.batch = batch


def accumulate_param(pid, g):
    """Add a gradient into Parameter pid's .grad (dense, RowGrad rows, or an OuterGrad)."""
    p = by_id(pid)
    if p.grad_req == "null":
        return
    numerics = getattr(_pending, "numerics", None)
    if numerics is not None:
        numerics.check(g, lambda: parameter_named(p, numerics.batch[2].op),
                       summed=not isinstance(g, (RowGrad, OuterGrad)))
    if isinstance(g, RowGrad):
        p.add_grad_rows(g.rows, g.values)
    elif isinstance(g, OuterGrad):
        sink = getattr(_pending, "outer", None)
        if sink is None:
            p.add_grad_outer(g.left, g.right)
        else:
            sink.setdefault(pid, []).append(g)
    else:
        p.add_grad(g)


@contextmanager
def one_gemm_per_weight(xp):
    """Within: OuterGrads wait; at the end each weight gets G^T X over all its batches.

    Fewer, larger GEMMs (one over its batches of few rows, stacked, and one per batch of
    many), summed straight into the weight's gradient (beta 1; written into it, beta 0, where
    zero_grad left it void, or kept as its factors: Parameter.add_grad_outer) instead of one
    pass over it per batch. Batched reverse mode only: eager mode adds each instance's outer
    product as it comes.
    """
    _pending.outer = {}
    try:
        yield
        numerics = getattr(_pending, "numerics", None)
        for pid, parts in _pending.outer.items():
            p = by_id(pid)
            if numerics is None:
                _add_parts(p, parts, xp)
            else:
                p.add_grad(_finite_sum(p, *_stacked(parts, xp), xp))
    finally:
        _pending.outer = None


def _add_parts(p, parts, xp):
    """p.grad += the parts' G^T X: a part of many rows by a GEMM of its own, the rest stacked
    into one."""
    own = _own_gemm_rows(p, xp)
    stacked = []
    for g in parts:
        if len(g.left) >= own:
            p.add_grad_outer(g.left, g.right)
        else:
            stacked.append(g)
    if stacked:
        p.add_grad_outer(*_stacked(stacked, xp))


def _own_gemm_rows(p, xp):
    """Rows from which a part of p's gradient gets a GEMM of its own. Stacking copies a row's
    m + n numbers (p is m x n); a GEMM of its own passes over p's m x n gradient once more.
    With MKL summing into it (beta=1) that pays from about a third of m*n / (m+n) rows: 122
    for a 1280 x 512 weight ( exit path A/B 0.968 against stacking all). numpy's grad += G^T X
    makes and adds a product per GEMM: where numpy would take such a part every part is
    stacked (own GEMMs: 1.017)."""
    m, n = p.shape
    own = m * n / (3 * (m + n))
    if xp is not np or not blas.mkl_sums(own):
        return math.inf
    return own


def _stacked(parts, xp):
    """(G, X): the parts' rows, one after another."""
    if len(parts) == 1:
        return parts[0].left, parts[0].right
    return xp.concatenate([g.left for g in parts]), xp.concatenate([g.right for g in parts])


def _finite_sum(p, left, right, xp):
    """left^T @ right for check_numerics: made apart so that a NaN/inf raises before it
    reaches p's gradient."""
    grad = blas.gemm(left.T, right)
    if not xp.isfinite(grad).all():
        raise NumericsError(f"the gradient of parameter {p.name!r}, summed over its batches, "
                            f"overflowed to NaN/inf (each batch's factors were finite)")
    return grad


def run_backward(plans, arenas, seed_node, loc_arena, loc_row, n_nodes, xp, origin=None):
    """Backpropagate d(value of seed_node) = 1 into every Parameter.grad it depends on.

    origin (check_numerics: the recording line per node): a NaN/inf gradient raises
    NumericsError naming the node it came from. Parameters' .grad may then hold the part of
    this backward done before it."""
    _pending.numerics = None if origin is None else _Numerics(origin, xp)
    prof = profile.active()
    try:
        with one_gemm_per_weight(xp), blas.packing():
            _reverse(plans, arenas, seed_node, loc_arena, loc_row, n_nodes, xp, _pending.numerics)
            if prof is not None:    # the last batch ends here: the deferred products are timed apart
                prof.backward_batch()
                start = time.perf_counter()
        if prof is not None:
            prof.weight_gradients(start, time.perf_counter())
    finally:
        _pending.numerics = None
        if prof is not None:        # where a batch raised, it ends here
            prof.backward_batch()


def _reverse(plans, arenas, seed_node, loc_arena, loc_row, n_nodes, xp, numerics):
    mark = np.zeros(n_nodes, np.bool_)
    mark[seed_node] = True
    read = np.zeros(n_nodes, np.bool_)
    read[seed_node] = True
    grads = [None] * len(arenas)

    def grad_arena(a):
        if grads[a] is None:
            grads[a] = memory.zeros(xp, arenas[a].shape, arenas[a].dtype)
        return grads[a]

    reached = _reached(plans, seed_node, mark, read)
    grad_arena(loc_arena[seed_node])[loc_row[seed_node]] = 1
    sigs = signature.SIGS
    prof = profile.active()     # times each batch from its turn to the next one's
    for plan in reached:
        if prof is not None:
            prof.backward_batch()
        for b in range(plan.n_batches - 1, -1, -1):
            if prof is not None:
                prof.backward_batch(plan, b)
            outs = plan.outs[b]
            nodes = plan.start + plan.batch_nodes(b)
            live = mark[nodes]
            n_live = np.count_nonzero(live)     # one C call: ndarray.any/.all go through Python
            if n_live == 0 or all(grads[a] is None for a, _ in outs):
                continue
            sig = sigs[plan.run_sig[b]]
            op = sig.op
            size = plan.sizes[b]
            gathers = plan.gathers
            g0 = gathers.first[b]
            needs, k = [], g0
            for pid in sig.params:
                if pid is None:
                    needs.append(not gathers.const[k])
                    k += 1
                else:
                    needs.append(by_id(pid).grad_req != "null")
            if not any(needs) and not op.saves:
                continue
            xs = None if op.saves else operands(plan, arenas, b, sig)   # saved: its own inputs
            ys = [arenas[a][s:s + size] for a, s in outs]
            gys = [grad_arena(a)[s:s + size] for a, s in outs]
            aux = plan.batch_aux(b, op)
            saved = plan.saved.get(b) if op.saves else None
            groups = _output_groups(op, nodes, live, mark, read)
            if groups is None:
                # rows the seed does not reach: eager never visits them, and their zero output
                # gradient times an inf local derivative would put NaN into shared gradients.
                # A ragged op's operand rows are not its nodes; it is linear, so it is
                # differentiated whole (the rows not reached add zeros).
                groups = [(live if n_live < size and not op.ragged else None, None)]
            for mask, given in groups:
                rows, g_xs, g_ys, g_gys, g_aux, g_saved = None, xs, ys, gys, aux, saved
                if mask is not None:
                    rows = np.flatnonzero(mask)
                    g_xs, g_ys, g_gys, g_aux, g_saved = _live_rows(op, sig, mask, xs, ys, gys, aux, saved)
                if given is not None:
                    g_gys = [g if read_j else None for g, read_j in zip(g_gys, given)]
                extra = {"saved": g_saved} if op.saves else {}
                if numerics is not None:
                    numerics.batch = (plan, b, sig, rows)
                if op.n_out > 1:
                    gxs = op.backward(xp, sig, g_xs, g_aux, g_ys, g_gys, needs, **extra)
                else:
                    gxs = op.backward(xp, sig, g_xs, g_aux, g_ys[0], g_gys[0], needs, **extra)
                next_spec = g0
                for j, (pid, need, gx) in enumerate(zip(sig.params, needs, gxs)):
                    if pid is None:
                        k, next_spec = next_spec, next_spec + 1     # this operand's gather spec
                    if not need or gx is None:      # None: a block's input its read outputs do not use
                        continue
                    if pid is not None:
                        accumulate_param(pid, gx)
                        continue
                    if numerics is not None:
                        numerics.check(gx, f"operand {plan.recorded_operand(b, j)}")   # shared parameters count
                    if rows is not None:
                        gx = _at_rows(gx, rows, size, xp)
                    grad_arena(gathers.arena[k])   # the spec's first arena; MIXED ones below
                    if gathers.kind[k] == MIXED:
                        p = gathers.off[k]
                        for owner in np.unique(gathers.owners[p:p + gathers.size[k]]):
                            grad_arena(owner)
                    scatter_add(gathers, grads, k, gx)


def _reached(plans, seed_node, mark, read):
    """The plans holding nodes the seed reaches, last first, `mark` and `read` filled for
    them all before any gradient is added; BackwardError where a parameter that a reached
    signature read has changed since its flush (Plan.params_read)."""
    reached = []
    for plan in reversed(plans):
        if plan.start > seed_node:
            continue
        _mark_ancestors(mark, read, plan.start, plan.arg_ptr, plan.args, plan.extra_output, plan.view.sig,
                        plan.sig_n_out, plan.use_off, plan.use, plan.inside)
        reached_here = mark[plan.start:plan.stop]
        if reached_here.any():
            for s in np.unique(plan.view.sig[reached_here]).tolist():
                check_unchanged(plan.params_read[s])
            reached.append(plan)
    return reached


def _at_rows(gx, rows, size, xp):
    """A gradient of the batch rows `rows` as one of all `size` rows (zero elsewhere)."""
    if gx.__class__ is ColumnGrad:
        return ColumnGrad(gx.first, _at_rows(gx.values, rows, size, xp), gx.width)
    full = xp.zeros((size,) + gx.shape[1:], gx.dtype)
    full[rows] = gx
    return full


def _output_groups(op, nodes, live, mark, read):
    """[(row mask, per output whether those rows read it)]: the groups a multi-output batch
    is differentiated in, or None for one group of the live rows with every output.

    A row that does not read an output gets a zero gradient for it. That is exact for a
    zero_exact op (short of an overflow), but another one (a block with a log or a division)
    could turn 0 * inf into NaN where eager never differentiates that output. Its
    rows are then grouped by the outputs they read, and each group's unread outputs get no
    gradient at all (None)."""
    if op.n_out == 1 or op.zero_exact:
        return None
    pattern = read[nodes].astype(np.int64)      # bit j: the row reads output j
    for j in range(1, op.n_out):
        pattern |= mark[nodes + j].astype(np.int64) << j
    every = (1 << op.n_out) - 1
    if (pattern[live] == every).all():
        return None
    return [(pattern == p, [bool(p >> j & 1) for j in range(op.n_out)])
            for p in np.unique(pattern[live]).tolist()]


def _live_rows(op, sig, live, xs, ys, gys, aux, saved):
    """The batch restricted to the rows in boolean mask `live`: gathered operands (shared
    parameters stay whole), outputs, output gradients, integers and the op's saved state."""
    if xs is not None:
        xs = [x if pid is not None else x[live] for x, pid in zip(xs, sig.params)]
    ys = [y[live] for y in ys]
    gys = [g[live] for g in gys]
    if aux is not None:
        aux = aux[live]
    if saved is not None:
        saved = op.saved_rows(saved, live)
    return xs, ys, gys, aux, saved
