"""Reverse mode over the executed plans: the same batches, in reverse, one vjp kernel each.

Gradients of values live in gradient arenas shaped like the value arenas, so each batch's
output gradient is a slice and each operand's gradient is one scatter-add. Shared
parameters get one reduced gradient per batch (dW = dZ^T X), not one per node.
"""
import threading
from contextlib import contextmanager

import numpy as np
from numba import njit

from .execute import operands, batch_aux, scatter_add
from .kernels import blas
from .ops import OuterGrad, RowGrad
from .parameter import by_id
from . import signature


@njit(cache=True)
def _mark_ancestors(mark, start, arg_ptr, args):
    """Propagate `mark` (global, by node id) from nodes of this flush to their operands."""
    for v in range(arg_ptr.shape[0] - 2, -1, -1):
        if mark[start + v]:
            for e in range(arg_ptr[v], arg_ptr[v + 1]):
                mark[args[e]] = True


_pending = threading.local()


def accumulate_param(pid, g):
    """Add a gradient into Parameter pid's .grad (dense, RowGrad rows, or an OuterGrad)."""
    p = by_id(pid)
    if p.grad_req == "null":
        return
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
    """Within: OuterGrads wait; at the end each weight gets ONE G^T X over all its batches.

    Fewer, larger GEMMs, and one pass over the weight's gradient instead of one per batch.
    Batched reverse mode only: eager mode adds each instance's outer product as it comes.
    """
    _pending.outer = {}
    try:
        yield
        for pid, parts in _pending.outer.items():
            left = parts[0].left if len(parts) == 1 else xp.concatenate([g.left for g in parts])
            right = parts[0].right if len(parts) == 1 else xp.concatenate([g.right for g in parts])
            by_id(pid).add_grad(blas.gemm(left.T, right))
    finally:
        _pending.outer = None


def run_backward(plans, arenas, seed_node, loc_arena, loc_row, n_nodes, xp):
    """Backpropagate d(value of seed_node) = 1 into every Parameter.grad it depends on."""
    with one_gemm_per_weight(xp), blas.packing():
        _reverse(plans, arenas, seed_node, loc_arena, loc_row, n_nodes, xp)


def _reverse(plans, arenas, seed_node, loc_arena, loc_row, n_nodes, xp):
    mark = np.zeros(n_nodes, np.bool_)
    mark[seed_node] = True
    grads = [None] * len(arenas)

    def grad_arena(a):
        if grads[a] is None:
            grads[a] = xp.zeros_like(arenas[a])
        return grads[a]

    grad_arena(loc_arena[seed_node])[loc_row[seed_node]] = 1
    sigs = signature.SIGS
    for plan in reversed(plans):
        if plan.start > seed_node:
            continue
        _mark_ancestors(mark, plan.start, plan.arg_ptr, plan.args)
        for b in range(plan.n_batches - 1, -1, -1):
            outs = plan.outs[b]
            if all(grads[a] is None for a, _ in outs) or not mark[plan.start + plan.batch_nodes(b)].any():
                continue
            sig = sigs[plan.batch_sig[b]]
            op = sig.op
            size = plan.sizes[b]
            g0 = plan.g_ptr[b]
            needs, k = [], g0
            for pid in sig.params:
                if pid is None:
                    needs.append(not plan.g_const[k])
                    k += 1
                else:
                    needs.append(by_id(pid).grad_req != "null")
            if not any(needs) and not op.saves:
                continue
            xs = operands(plan, arenas, b, sig, size)
            ys = [arenas[a][s:s + size] for a, s in outs]
            gys = [grad_arena(a)[s:s + size] for a, s in outs]
            extra = {"saved": plan.saved.get(b)} if op.saves else {}
            if op.n_out > 1:
                gxs = op.backward(xp, sig, xs, batch_aux(plan, b, op), ys, gys, needs, **extra)
            else:
                gxs = op.backward(xp, sig, xs, batch_aux(plan, b, op), ys[0], gys[0], needs, **extra)
            k = g0
            for pid, need, gx in zip(sig.params, needs, gxs):
                if pid is not None:
                    if need:
                        accumulate_param(pid, gx)
                    continue
                if need:
                    grad_arena(plan.g_arena[k])   # the spec's first arena; MIXED ones below
                    if plan.g_kind[k] == 2:
                        p = plan.g_off[k]
                        for owner in np.unique(plan.row_arena[p:p + size]):
                            grad_arena(owner)
                    scatter_add(plan, grads, k, size, gx)
                k += 1
