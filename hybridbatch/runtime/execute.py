"""Running a Plan: gather operands, one batched kernel per batch, outputs into arena rows."""
import time

import numpy as np

from ..errors import NumericsError
from ..kernels import blas, scatter_add_columns, scatter_add_rows
from ..ops import ColumnGrad
from ..train.parameter import by_id
from .plan import SLICE, TAKE
from . import backend, profile
from ..record import signature


def gather(gathers, arenas, g):
    """The operand array described by spec g of `gathers` (plan.Gathers): its rows."""
    a, s, size = gathers.arena[g], gathers.start[g], gathers.size[g]
    kind = gathers.kind[g]
    if kind == SLICE:
        return arenas[a][s:s + size]
    p = gathers.off[g]
    rows = gathers.rows[p:p + size]
    if kind == TAKE:
        return arenas[a].take(rows, axis=0)
    owners = gathers.owners[p:p + size]
    out = backend.xp().empty((size,) + arenas[a].shape[1:], arenas[a].dtype)
    for owner in np.unique(owners):
        mask = owners == owner
        out[mask] = arenas[owner][rows[mask]]
    return out


def scatter_add(gathers, grads, g, gx):
    """Add gx (one row per gathered row of spec g, or a ColumnGrad of those rows) into the
    gradient arenas behind spec g of `gathers`."""
    a, s, size = gathers.arena[g], gathers.start[g], gathers.size[g]
    kind = gathers.kind[g]
    if kind == SLICE:
        if gx.__class__ is ColumnGrad:
            grads[a][s:s + size, gx.first:gx.first + gx.values.shape[1]] += gx.values
        else:
            grads[a][s:s + size] += gx
        return
    p = gathers.off[g]
    rows = gathers.rows[p:p + size]
    if kind == TAKE:
        _scatter_rows(grads[a], rows, gx)
        return
    owners = gathers.owners[p:p + size]
    for owner in np.unique(owners):
        mask = owners == owner
        _scatter_rows(grads[owner], rows[mask], ColumnGrad(gx.first, gx.values[mask], gx.width)
                      if gx.__class__ is ColumnGrad else gx[mask])


def _scatter_rows(dst, rows, gx):
    if gx.__class__ is ColumnGrad:
        scatter_add_columns(dst, rows, gx.first, gx.values)
    else:
        scatter_add_rows(dst, rows, gx)


def operands(plan, arenas, b, sig):
    """Kernel operands of batch b: gathered values, or shared parameters as they are."""
    xs = []
    gathers = plan.gathers
    g = gathers.first[b]
    for pid in sig.params:
        if pid is None:
            xs.append(gather(gathers, arenas, g))
            g += 1
        else:
            xs.append(by_id(pid).data)
    return xs


def run_forward(plan, arenas, xp, origin=None):
    """Execute every batch of the plan. With `origin` (check_numerics), verify outputs."""
    with blas.packing():
        _run_batches(plan, arenas, xp, origin)


def _run_batches(plan, arenas, xp, origin):
    sigs = signature.SIGS
    prof = profile.active()
    for b, size in enumerate(plan.sizes):
        if prof is not None:
            start = time.perf_counter()
        sig = sigs[plan.run_sig[b]]
        op = sig.op
        dsts = [arenas[a][s:s + size] for a, s in plan.outs[b]]
        xs, aux = operands(plan, arenas, b, sig), plan.batch_aux(b, op)
        try:
            y = op.forward(xp, sig, xs, aux, out=dsts) if op.writes_out else op.forward(xp, sig, xs, aux)
        except Exception as e:      # raised in the flush, far from the line that recorded the node
            e.add_note(_running(plan, b, origin))
            raise
        if op.saves:
            y, plan.saved[b] = y
        for yj, dst in zip(y if op.n_out > 1 else (y,), dsts):
            if yj.shape != dst.shape:
                raise AssertionError(f"kernel {op.name} returned {yj.shape}, expected {dst.shape}")
            if origin is not None and not xp.isfinite(yj).all():   # check_numerics
                row = first_bad_row(yj, xp)
                given = _nonfinite_operand(plan, b, sig, xs, row, xp)
                what = "produced NaN/inf" if given is None else f"read NaN/inf already in {given}"
                raise_numerics(plan, b, sig, origin, what + _inside(plan, arenas, b, sig, row, xp), row)
            if yj is not dst:       # written in place by a writes_out op
                dst[...] = yj
        if prof is not None:
            prof.batch(plan, b, start, time.perf_counter(), "forward")


def _running(plan, b, origin):
    """Which batch a flush was running, for an exception its kernel raised: the recorded
    signature and its first node's recording line (with check_numerics)."""
    recorded = signature.SIGS[plan.batch_sig[b]]
    text = f"while the flush ran a batch of {plan.sizes[b]} {recorded.describe()}"
    if origin is None:
        return text + "; hb.batching(check_numerics=True) names the line that recorded each node"
    return text + f", its first node recorded at {origin[plan.start + int(plan.batch_nodes(b)[0])]}"


def _nonfinite_operand(plan, b, sig, xs, row, xp):
    """Where row `row` of batch b read a NaN/inf that was there before it ran: a Parameter
    (the op's or, for a block call, one its program reads) or an operand (a constant array:
    a computed one would have been caught where it was made), as text; None otherwise. A
    Parameter is named for a NaN/inf anywhere in it (a -inf mask it holds on purpose, a row
    not looked up), so this is the first suspect, not proof."""
    op = sig.op
    for j, (x, pid) in enumerate(zip(xs, sig.params)):
        if pid is None and x.dtype.kind == "f" and not xp.isfinite(x if op.ragged else x[row]).all():
            return f"its operand {plan.recorded_operand(b, j)}"
    for pid in op.params_used(sig):
        p = by_id(pid)
        if p.dtype.kind == "f" and not xp.isfinite(p.data).all():
            return parameter_named(p, op)
    return None


def parameter_named(p, op):
    """A parameter as an error names it: by its path in the block whose calls `op` runs (two
    children each have a 'bias'), else by its name."""
    owner = getattr(op, "owner_block", None)
    if owner is not None:
        for path, q in owner._named_params(""):
            if q is p:
                return f"parameter {path!r}"
    return f"parameter {p.name!r}"


def _inside(plan, arenas, b, sig, row, xp):
    """For a block call's batch: where in the block's forward the bad row first went
    NaN/inf (its steps rerun one by one on that row), as text for the error."""
    found = sig.op.locate_nonfinite(xp, sig, operands(plan, arenas, b, sig), plan.batch_aux(b, sig.op), row)
    return "" if found is None else f" (inside the block: first at {found[0]}, {found[1]})"


def first_bad_row(rows, xp):
    """Index of the first row (one per node of a batch) holding a NaN or inf."""
    return int(np.flatnonzero(~np.asarray(xp.isfinite(rows).reshape(len(rows), -1).all(axis=1)))[0])


def raise_numerics(plan, b, sig, origin, what, row=0):
    """NumericsError naming node `row` of batch b, its signature as recorded (not as a looked-up
    input made it run) and the line that recorded it."""
    nid = plan.start + int(plan.batch_nodes(b)[row])
    recorded = signature.SIGS[plan.batch_sig[b]]
    raise NumericsError(f"{sig.op.name} {what} in node {nid} ({recorded.describe()}), recorded at {origin[nid]}")
