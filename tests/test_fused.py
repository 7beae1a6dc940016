"""Fused elementwise kernels of block programs: same numbers as unfused, compiled once per machine."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch import nn
from hybridbatch.kernels import fused, vector_width
from hybridbatch.kernels.fused import FusedRun
from hybridbatch.kernels.vector_width import WIDE_VECTORS
from helpers import _LogOfRelu, recorded


def _tree_lstm_step(fused, hidden=6):
    cell, head = nn.TreeLSTMCell(hidden, 4, seed=0), nn.Dense(3, hidden, seed=1)
    cell.hybridize()
    head.hybridize()
    params = list(cell.collect_params().values()) + list(head.collect_params().values())
    rng = np.random.default_rng(0)
    with hb.settings(fusion=fused):
        with hb.batching(granularity="block"):
            leaves = [cell(rng.standard_normal(4).astype(np.float32)) for _ in range(6)]
            a = cell(leaves[0], leaves[1])
            b = cell(a, leaves[2])
            c = cell(leaves[3], leaves[4])
            loss = hb.add_n([hb.pick_neg_log_softmax(head(h), i % 3) for i, (h, _) in enumerate([a, b, c] + leaves)])
        loss.backward()
        units = next(iter(cell.internal._programs.values())).op.units(np)
    return loss.asnumpy(), [p.grad.copy() for p in params], units


def test_fused_and_unfused_programs_agree():
    fused_loss, fused_grads, units = _tree_lstm_step(True)
    assert any(isinstance(u, FusedRun) for u in units)
    plain_loss, plain_grads, _ = _tree_lstm_step(False)
    np.testing.assert_allclose(fused_loss, plain_loss, rtol=1e-5)
    for a, b in zip(fused_grads, plain_grads):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_lstm_gate_math_fuses_into_one_run():
    cell = nn.LSTMCell(5, 3)
    cell.hybridize()
    with hb.batching(granularity="block"):
        cell(np.ones(3, np.float32), np.zeros(5, np.float32), np.zeros(5, np.float32))
    program = next(iter(cell._programs.values()))
    with hb.settings(fusion=True):
        runs = [u for u in program.op.units(np) if isinstance(u, FusedRun)]
    assert len(runs) == 1                                 # everything after the affine
    assert len(runs[0].steps) >= 10 and sorted(runs[0].outputs) == sorted(program.outputs)


def test_a_child_sum_cell_shares_its_kernels_across_arities():
    """One trace per arity, but a run's kernel source does not depend on where its steps sit
    in the program: every arity's gate runs use the same few kernels (a child-sum Tree-LSTM
    with 0-10 children compiled 48 kernel pairs when temporaries were named by slot)."""
    cell = nn.ChildSumTreeLSTMCell(8, 4, seed=0)
    cell.hybridize()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(4).astype(np.float32)
    with hb.batching(granularity="block"):
        leaf = cell(x)
        for arity in range(1, 5):
            cell(x, *[v for _ in range(arity) for v in leaf])
    kernels = {}
    for program in cell._programs.values():
        for run in program.op.units(np):
            if isinstance(run, FusedRun):
                kernels.setdefault(len(program.steps) > 10, set()).add(run.forward_kernel)
    assert len(kernels[True]) == 3       # the i/o/u gates, one forget gate (once per child), the output


class _TwiceOut(hb.HybridBlock):
    """(c, h, c): a fused run's two outputs, one returned twice."""

    def forward(self, x, y):
        c = hb.sigmoid(x) * hb.tanh(y)
        return c, hb.tanh(c) * hb.sigmoid(y), c


def test_a_fused_run_writes_block_outputs_into_their_arena_rows():
    """The run's kernel writes a block call's outputs where the batch keeps them (no copy);
    an output returned twice is written once and copied once; values stay eager mode's."""
    block = _TwiceOut()
    block.hybridize()
    rng = np.random.default_rng(2)
    xs = [(rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)) for _ in range(5)]
    eager = [[o.asnumpy() for o in block(x, y)] for x, y in xs]
    with hb.batching(granularity="block") as scope:
        outs = [block(hb.array(x), hb.array(y)) for x, y in xs]
        scope.forward()
    plan = scope.plans[0]
    (b,) = [b for b in range(plan.n_batches) if plan.batch_sig[b] == scope.graph.sig[-1]]
    saved, program = plan.saved[b], next(iter(block._programs.values()))
    for slot, (a, s) in zip(program.outputs[:2], plan.outs[b]):
        assert np.shares_memory(saved[slot], scope.arenas[a][s:s + 5])
    a, s = plan.outs[b][2]
    assert not np.shares_memory(saved[program.outputs[2]], scope.arenas[a][s:s + 5])
    for got, want in zip(outs, eager):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.asnumpy(), w, rtol=1e-6)


def test_fusion_is_on_by_default():
    assert hb.settings.fusion


class GateMath(hb.HybridBlock):
    """Every fusable op once, so special values meet each formula."""

    def forward(self, x, y):
        s = hb.sigmoid(x) * hb.tanh(y) + hb.relu(x) - hb.exp(y * 0.01)
        powers = hb.sqrt(hb.abs(y)) + hb.abs(x) ** 1.5 + hb.pow(hb.abs(y), x)
        # a NaN in either operand is the value, each operand's apart
        return (s / (x + 1.0), hb.log(hb.exp(x) + 1.0), hb.maximum(x, y) * 2.0, hb.minimum(x, y) * 2.0,
                hb.maximum(y, x) * 2.0, hb.minimum(y, x) * 2.0, powers)


def _gate_math(fused, x, y):
    block = GateMath()
    block.hybridize()
    with hb.settings(fusion=fused):
        with hb.batching(granularity="block"):
            outs = [block(a, b) for a, b in zip(x, y)]
            vals = [[o.asnumpy() for o in out] for out in outs]
    return np.array(vals)


def test_fused_kernels_keep_nan_inf_and_division_by_zero_like_numpy():
    special = np.array([np.nan, np.inf, -np.inf, -1.0, 0.0, 1e-30, 30.0, -30.0], np.float32)
    x = np.tile(special, (8, 1))
    y = np.tile(special[:, None], (1, 8))
    with np.errstate(all="ignore"):
        fused, plain = _gate_math(True, x, y), _gate_math(False, x, y)
    np.testing.assert_array_equal(np.isnan(fused), np.isnan(plain))
    np.testing.assert_array_equal(np.isinf(fused), np.isinf(plain))
    finite = np.isfinite(plain)
    np.testing.assert_allclose(fused[finite], plain[finite], rtol=2e-6, atol=1e-6)


class _Powers(hb.HybridBlock):
    """x ** p for each power spelled its own way in the kernels, and log and division, on
    x times a weight so that the weight's gradient runs each derivative."""

    POWERS = (-2.5, -1.5, -0.5, 0.5, 1.5, 3, 4, -2, -3, -4, 0.3)

    def __init__(self):
        super().__init__()
        self.w = hb.Parameter("w", (8,), init=1.0)

    def forward(self, x):
        v = x * self.w
        return tuple(v ** p for p in self.POWERS) + (hb.log(v), 1.0 / v, v / (v * 1e-30))


def _powers(fused, x):
    block = _Powers()
    block.hybridize()
    with hb.settings(fusion=fused), np.errstate(all="ignore"):
        with hb.batching(granularity="block"):
            outs = [block(row) for row in x]
            hb.add_n([hb.sum(o) for out in outs for o in out]).backward()
            vals = np.array([[o.asnumpy() for o in out] for out in outs])
    return vals, block.w.grad.copy()


def test_fused_powers_log_and_division_give_numpys_numbers_at_the_extremes():
    # pow's overflow-prone range, a subnormal (whose reciprocal overflows), 0, -0 and inf
    special = np.array([1e-21, 1e20, 1e13, 1e-40, 0.0, -0.0, np.inf, -np.inf], np.float32)
    x = np.stack([special, special[::-1]])
    (fused, gf), (plain, gp) = _powers(True, x), _powers(False, x)
    for got, want in ((fused, plain), (gf, gp)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=3e-7, atol=0)


def test_float64_blocks_keep_float64_precision():
    """The fused tanh is a float32-accurate approximation (3.4e-7): a float64 program must
    not go through it, or values and gradients lose half their digits (a float64 gradient
    check would fail)."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 6, 5))
    w = hb.Parameter("w", (5,), dtype=np.float64, rng=rng)

    class Gate(hb.HybridBlock):
        def __init__(self):
            super().__init__()
            self.w = w

        def forward(self, a, b):
            return hb.sigmoid(a * self.w) * hb.tanh(b) + hb.exp(b * 0.5)

    def run(fused):
        block = Gate()
        block.hybridize()
        w.zero_grad()
        with hb.settings(fusion=fused), hb.batching(granularity="block"):
            loss = hb.sum(hb.add_n([block(a, b) for a, b in zip(x, y)]))
        loss.backward()
        return loss.item(), w.grad.copy()

    (fused_loss, fused_grad), (plain_loss, plain_grad) = run(True), run(False)
    assert fused_loss == pytest.approx(plain_loss, rel=1e-13)
    np.testing.assert_allclose(fused_grad, plain_grad, rtol=1e-12)


SCRIPT = textwrap.dedent("""
    import json, sys, numpy as np, hybridbatch as hb
    from numba.core.registry import CPUDispatcher
    from hybridbatch.kernels.fused import compile_stats
    hb.set_fusion(True)
    hb.settings.compile_in_background = False
    cell = hb.nn.LSTMCell(7, 3, seed=0); cell.hybridize()
    with hb.batching(granularity="block") as scope:
        h = c = np.zeros(7, np.float32)
        for _ in range(3):
            h, c = cell(np.ones(3, np.float32), h, c)
        loss = hb.sum(h)
    loss.backward()
    scope.stats.lower_bound
    package = [f for name, m in list(sys.modules.items()) if name.startswith("hybridbatch.")
               for f in vars(m).values() if isinstance(f, CPUDispatcher)]
    compiled = sum(sum(f.stats.cache_misses.values()) for f in package)
    print(json.dumps(list(compile_stats()) + [compiled, len(package)]))
""")


def test_second_process_loads_compiled_kernels_from_disk(tmp_path):
    env = dict(os.environ, HYBRIDBATCH_CACHE_DIR=str(tmp_path))
    runs = [json.loads(subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1]) for _ in range(2)]
    (_, fused_compiled1, _, _), (fused_hits2, fused_compiled2, package_compiled2, n_kernels) = runs
    assert fused_compiled1 > 0                    # the first process compiles the fused pair
    assert fused_compiled2 == 0 and fused_hits2 > 0   # the second only loads them
    assert n_kernels >= 5 and package_compiled2 == 0   # nor any scheduler/plan/scatter kernel
    assert list(tmp_path.glob("fused_*.py"))


class Gates(hb.HybridBlock):
    """An affine layer whose output feeds the gate math; `leak` also uses it outside the run
    (so its bias must stay in the affine step), `own_bias` takes a per-instance bias."""

    def __init__(self, w, b, variant):
        super().__init__()
        self.w, self.b, self.variant = w, b, variant

    def forward(self, x, c):
        bias = c if self.variant == "own_bias" else self.b
        z = hb.affine(self.w, x, bias)
        i, g = hb.split(z, 2)
        h = hb.sigmoid(i) * hb.tanh(g) + c[:4] * 0.5
        if self.variant == "whole":            # the run reads the affine output unsliced
            return h, hb.tanh(hb.affine(self.w, x, self.b)) * c
        if self.variant == "leak":
            return h, hb.sum(z)
        return h


def _gates_step(variant, fused):
    rng = np.random.default_rng(3)
    w = hb.Parameter("w", (8, 5), init="uniform", rng=rng)
    b = hb.Parameter("b", (8,), init="uniform", rng=rng)
    emb = hb.Parameter("emb", (6, 5), init="uniform", rng=rng)   # its gradient is x's
    block = Gates(w, b, variant)
    block.hybridize()
    cs = rng.standard_normal((6, 8)).astype(np.float32)
    with hb.settings(fusion=fused), hb.batching(granularity="block"):
        outs = [block(hb.lookup(emb, k), c) for k, c in enumerate(cs)]
        parts = [hb.sum(o * o) if not isinstance(o, tuple) else hb.sum(o[0] * o[0]) + hb.sum(o[1] * 1.5)
                 for o in outs]
        loss = hb.add_n(parts)
    with hb.settings(fusion=not fused):     # backward follows the forward's plan, whatever the switch says now
        loss.backward()
    with hb.settings(fusion=fused):
        units = next(iter(block._programs.values())).op.units(np)
    return loss.item(), [p.grad.copy() for p in (w, b, emb)], units


@pytest.mark.parametrize("variant", ["slices", "whole", "leak", "own_bias"])
def test_affine_bias_folded_into_fused_run_keeps_values_and_gradients(variant):
    fused_loss, fused_grads, units = _gates_step(variant, True)
    plain_loss, plain_grads, _ = _gates_step(variant, False)
    names = [u[1].op.name for u in units if not isinstance(u, FusedRun)]
    runs = [u for u in units if isinstance(u, FusedRun)]
    assert runs
    params = {key for run in runs for kind, key in run.inputs if kind == "param"}
    if variant in ("slices", "whole"):       # every affine folded: the runs read the bias
        assert "affine" not in names and "matmul" in names and len(params) == 1
    else:                                    # used outside the run / per-instance bias: kept
        assert "affine" in names and not params
    assert fused_loss == pytest.approx(plain_loss, rel=1e-5)
    for name, a, b in zip("w b x".split(), fused_grads, plain_grads):
        assert np.abs(a).max() > 0 or (variant, name) == ("own_bias", "b"), name
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=name)


def test_fused_kernels_keep_the_ops_order_near_float32_max():
    """2 * (b * x) with b = 0 and x = 3e38 is 0 in the ops' order; reassociated into
    (2 * x) * b it overflows to inf * 0 = NaN. Fused and eager must agree."""
    b = hb.Parameter("b", (3,), init=0.0)

    class Scale(hb.HybridBlock):
        def forward(self, x):
            return 2.0 * (b * x)

    block = Scale()
    block.hybridize()
    big = np.full(3, 3e38, np.float32)
    eager = block(big).asnumpy()
    with hb.batching(granularity="block"):
        y = block(big)
    np.testing.assert_array_equal(eager, [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(y.asnumpy(), eager)


class Slices(hb.HybridBlock):
    """Gate math on two 4-wide slices of an 8-wide input starting at 0 and `second`: at 4
    the run reads every column once; at 2 it reads columns 2-3 twice and 6-7 never."""

    def __init__(self, second):
        super().__init__()
        self.second = second

    def forward(self, x):
        return hb.sigmoid(x[:4]) * hb.tanh(x[self.second:self.second + 4])


def _slices_step(second, mode, rows, reached=range(6)):
    """(per-call outputs, the rows' gradient, the program's units) of a loss reading the
    calls in `reached`; mode: eager, fused or plain (block granularity, unfused)."""
    emb = hb.Parameter("emb", rows.shape, init=0.0)
    emb.data[...] = rows
    block = Slices(second)
    block.hybridize()
    with hb.settings(fusion=mode == "fused"), np.errstate(all="ignore"):
        if mode == "eager":
            outs = [block(hb.lookup(emb, k)) for k in range(len(rows))]
            loss = hb.add_n([hb.sum(outs[k] * (1.0 + k)) for k in reached])
        else:
            with hb.batching(granularity="block"):
                outs = [block(hb.lookup(emb, k)) for k in range(len(rows))]
                loss = hb.add_n([hb.sum(outs[k] * (1.0 + k)) for k in reached])
        loss.backward()
        units = [] if mode == "eager" else next(iter(block._programs.values())).op.units(np)
    return np.stack([o.asnumpy() for o in outs]), emb.grad.copy(), units


@pytest.mark.parametrize("second, once", [(4, True), (2, False)])
@pytest.mark.parametrize("reached", [range(6), [0, 3, 4]])
def test_input_gradients_written_once_only_where_every_column_is_read_once(second, once, reached):
    rows = np.random.default_rng(5).standard_normal((6, 8)).astype(np.float32)
    fused, grad, units = _slices_step(second, "fused", rows, reached)
    (run,) = [u for u in units if isinstance(u, FusedRun)]
    assert run.write_once == (once,)
    for mode in ("eager", "plain"):
        values, expected, _ = _slices_step(second, mode, rows, reached)
        np.testing.assert_allclose(fused, values, rtol=2e-6, atol=1e-6)
        np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)
    unreached = [k for k in range(6) if k not in reached]
    assert np.abs(grad[list(reached)][:, :second + 4]).min() > 0
    assert not grad[unreached].any()
    assert not grad[:, second + 4:].any()          # columns the run never reads


def test_affine_output_split_into_gates_is_written_once_bias_and_sliced_input_added():
    *_, units = _gates_step("slices", True)
    (run,) = [u for u in units if isinstance(u, FusedRun)]
    flags = [(kind, once) for (kind, _), once in zip(run.inputs, run.write_once)]
    assert flags == [("slot", True), ("param", False), ("slot", False)]     # z, its bias, c[:4]


def test_fused_gradients_keep_nan_and_inf_like_numpy():
    rows = np.random.default_rng(6).standard_normal((6, 8)).astype(np.float32)
    rows[1, 0], rows[2, 5], rows[3, 2], rows[4, 7] = np.nan, np.inf, -np.inf, np.nan
    _, fused, _ = _slices_step(4, "fused", rows)
    _, plain, _ = _slices_step(4, "plain", rows)
    assert np.isnan(fused).any()
    np.testing.assert_array_equal(np.isnan(fused), np.isnan(plain))
    np.testing.assert_array_equal(np.isinf(fused), np.isinf(plain))
    finite = np.isfinite(plain)
    np.testing.assert_allclose(fused[finite], plain[finite], rtol=1e-5, atol=1e-6)


class _DeadGateMath(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.W = hb.Parameter("W", (3, 3))
        self.b = hb.Parameter("b", (3,), init=0.1)

    def forward(self, x):
        unused = hb.tanh(hb.affine(self.W, x, self.b)) * 2.0     # computed, never read
        return hb.sigmoid(self.W @ x) * x


def test_a_program_drops_the_steps_no_output_reads():
    """A dead elementwise run once made a kernel with no outputs (a SyntaxError in the
    generated source); now a program keeps no dead steps at all."""
    block = _DeadGateMath()
    block.hybridize()
    xs = [np.full(3, 0.3 * (i + 1), np.float32) for i in range(4)]
    got = {}
    def build():
        outs = [block(x) for x in xs]
        return outs, hb.add_n([hb.sum(o) for o in outs])

    for mode in ("eager", "op", "block"):
        block.W.zero_grad()
        outs, loss = recorded(mode, build)
        loss.backward()
        got[mode] = (np.stack([o.asnumpy() for o in outs]), block.W.grad.copy())
    for mode in ("op", "block"):
        np.testing.assert_allclose(got[mode][0], got["eager"][0], rtol=1e-6, err_msg=mode)
        np.testing.assert_allclose(got[mode][1], got["eager"][1], rtol=1e-5, err_msg=mode)
    program = next(iter(block._programs.values()))
    assert [step.sig.op.name for step in program.steps] == ["matmul", "sigmoid", "mul"]
    assert all(unit.outputs for unit in program.op.units(np) if isinstance(unit, FusedRun))


class _DeadLogBranch(_LogOfRelu):
    def forward(self, x):
        z = self.W @ x
        live = hb.tanh(z) * hb.sigmoid(z)
        dead = self.U @ hb.log(hb.relu(z))      # log(0) = -inf where z <= 0; never returned
        return hb.sum(live)


@pytest.mark.parametrize("fused", [True, False])
def test_a_dead_branch_leaves_the_live_gradients_finite(fused):
    """Its zero gradient times log's inf derivative at 0 was NaN in W's gradient when the
    dead value shared a fused run with the live one."""
    block = _DeadLogBranch()
    xs = [np.array([1.0, -2.0, 0.5], np.float32), np.array([-1.0, 0.3, 2.0], np.float32)]
    grads = {}
    with hb.settings(fusion=fused), np.errstate(divide="ignore", invalid="ignore"):
        block.hybridize()
        for mode in ("eager", "op", "block"):
            block.W.zero_grad()
            recorded(mode, lambda: hb.add_n([block(x) for x in xs])).backward()
            grads[mode] = block.W.grad.copy()
    assert np.isfinite(grads["eager"]).all()
    for mode in ("op", "block"):
        np.testing.assert_allclose(grads[mode], grads["eager"], rtol=1e-5, err_msg=mode)


class _DeadLookup(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.E = hb.Parameter("E", (4, 3))

    def forward(self, x, i):
        dead = hb.lookup(self.E, i)     # never returned, but its index is still checked
        return hb.tanh(x)


@pytest.mark.parametrize("mode", ["eager", "op", "block"])
def test_an_index_only_a_dead_step_reads_is_still_checked(mode):
    block = _DeadLookup()
    block.hybridize()
    x = np.zeros(3, np.float32)
    with pytest.raises(IndexError):
        recorded(mode, lambda: block(x, 7))


@pytest.mark.skipif(not WIDE_VECTORS, reason="no AVX-512 on this CPU: fused kernels keep LLVM's vector width")
def test_wide_vector_kernels_compute_what_default_width_kernels_do(monkeypatch):
    """Lanes are independent, so 512-bit vectors change the speed, not the numbers: only
    where an element falls in a loop's scalar remainder instead of a vector (here columns
    16-19 of 20) can its rounding differ, as it already could between vector and scalar code."""
    *_, units = _tree_lstm_step(True, hidden=20)      # rows of 20: one 16-lane vector and 4 left
    wide = next(u for u in units if isinstance(u, FusedRun))
    assert fused._lanes(np.dtype(np.float32), wide.n) == 16
    monkeypatch.setattr(fused, "_lanes", lambda dtype, n: None)
    narrow = fused.build_run(*wide._spec)
    assert narrow.forward_kernel is not wide.forward_kernel
    rng = np.random.default_rng(0)
    B = 37
    # every batched input as wide as the widest (the gates' product): a kernel reads its own columns
    ins = [rng.standard_normal((B, 5 * wide.n) if kind == "slot" else 5 * wide.n).astype(np.float32)
           for kind, _ in wide.inputs]
    gys = [rng.standard_normal((B, wide.n)).astype(np.float32) for _ in wide.outputs]
    results = []
    for run in (wide, narrow):
        outs = [np.empty((B, run.n), np.float32) for _ in run.outputs]
        run.forward_kernel(B, *ins, *outs)
        gins = [np.zeros_like(x) for x in ins]
        run.backward_kernel(B, *ins, *gys, *gins)
        results.append(outs + gins)
    for a, b in zip(*results):
        np.testing.assert_array_equal(a[..., :16], b[..., :16])
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not WIDE_VECTORS, reason="no AVX-512 on this CPU: fused kernels keep LLVM's vector width")
def test_wide_vectors_stay_inside_fused_kernels(tmp_path):
    """The width is a global LLVM option: numba code compiled after a fused kernel is compiled
    as the code compiled before it. Rows shorter than a vector keep LLVM's width, which
    spares stderr a remark per loop LLVM then declines to vectorize."""
    script = textwrap.dedent("""
        import collections, json, re
        import numpy as np
        from numba import njit
        import hybridbatch as hb
        from test_fused import _tree_lstm_step

        hb.settings.compile_in_background = False

        def widths(fn):
            return collections.Counter(re.findall(r"%([xyz]mm)\\d+", fn.inspect_asm(fn.signatures[0])))

        def saxpy_before(a, x, y):
            for i in range(x.shape[0]):
                y[i] += a * x[i]

        def saxpy_after(a, x, y):
            for i in range(x.shape[0]):
                y[i] += a * x[i]

        x = np.ones(64, np.float32)
        before = njit(saxpy_before)
        before(np.float32(2), x, x.copy())
        _tree_lstm_step(True, hidden=20)   # compiles fused kernels with wide vectors
        _tree_lstm_step(True, hidden=4)    # and with LLVM's own
        after = njit(saxpy_after)
        after(np.float32(2), x, x.copy())
        print(json.dumps([widths(before), widths(after)]))
    """)
    env = dict(os.environ, HYBRIDBATCH_CACHE_DIR=str(tmp_path), PYTHONPATH=os.path.dirname(__file__))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "remark" not in out.stderr
    before, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert before == after
    assert list(tmp_path.glob("fused_*.py")), "the fused kernels were not compiled in that process"


@pytest.mark.parametrize("env, wide", [({"ENABLE_AVX": False}, False),
                                       ({"CPU_FEATURES": "+avx2,+fma"}, False),
                                       ({"CPU_FEATURES": "+avx2,+avx512f"}, True),
                                       ({"CPU_NAME": "generic"}, False)])
def test_wide_vectors_follow_numbas_target_not_only_the_host(monkeypatch, env, wide):
    """A user who sets NUMBA_CPU_NAME/NUMBA_CPU_FEATURES (say, for a cache shared between
    machines) or turns AVX off gets LLVM's width unless that target has AVX-512."""
    for name, value in env.items():
        monkeypatch.setattr(vector_width.numba_config, name, value)
    assert vector_width.targets_avx512() is wide


class _Chooses(hb.HybridBlock):
    def forward(self, a, b):
        return hb.maximum(a, b) * 2.0 + hb.minimum(b, a) * 3.0


@pytest.mark.parametrize("fused", [True, False])
def test_a_nan_operand_of_maximum_or_minimum_takes_the_gradient_as_in_eager(fused):
    """Where either operand is NaN the second takes all of the gradient (eager's rule); the
    fused rule had given it to neither."""
    x = np.array([1.0, -5.0, 3.0, np.nan, 2.0], np.float32)
    y = np.array([np.nan, np.nan, 0.0, 2.0, 2.0], np.float32)

    def grads(mode):
        a, b = hb.Parameter("a", (5,), init=0.0), hb.Parameter("b", (5,), init=0.0)
        a.data, b.data = x, y
        block = _Chooses()
        block.hybridize()
        with hb.settings(fusion=fused), np.errstate(invalid="ignore"):
            recorded(mode, lambda: hb.sum(block(a * 1.0, b * 1.0)) * 1.0).backward()
        return a.grad.copy(), b.grad.copy()

    (ga, gb), (ea, eb) = grads("block"), grads("eager")
    np.testing.assert_array_equal(ga, ea)
    np.testing.assert_array_equal(gb, eb)
    np.testing.assert_array_equal(ea, [3.0, 3.0, 2.0, 3.0, 2.5])     # min(b, a): a takes it past a NaN


class _Squashes(hb.HybridBlock):
    def forward(self, x):
        return hb.tanh(x) * 1.0, hb.log(1.0 - hb.sigmoid(x)) * 1.0


def test_the_fused_tanh_never_leaves_minus_one_to_one():
    """Its fit reached 1.0000001 near |x| = 8.8: 1 - tanh^2 turned negative, and 1 - sigmoid
    below zero made log(1 - sigmoid(x)) NaN where eager is finite."""
    x = np.linspace(7.0, 20.0, 2001).astype(np.float32)
    x = np.concatenate([x, -x])
    block = _Squashes()
    block.hybridize()
    with np.errstate(divide="ignore"):         # log(0) past x = 17
        with hb.batching(granularity="block"):
            outs = [block(x) for _ in range(2)]
        squashed, logs = (v.asnumpy() for v in outs[0])
        eager = block(x)[1].asnumpy()
    assert np.abs(squashed).max() <= 1.0
    assert not (np.isnan(logs) & ~np.isnan(eager)).any()
