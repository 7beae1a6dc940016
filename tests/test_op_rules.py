"""Every fusable op's scalar rule (`Op.scalar`, what fused kernels are generated from) agrees
with its numpy forward and backward, and the op joins a fused run in a block program, there
giving eager mode's values and gradients.

The ops come from the registry and their attributes from the spec table of
test_ops_gradcheck.py (the ops exactly as users record them), so a new fusable op is
checked here without an entry of its own.
"""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.api import apply
from hybridbatch.kernels import fused
from hybridbatch.ops import OPS, Op
from hybridbatch.record import signature
from op_specs import SPECS, draw

N = 64          # elements per row: a multiple of the widest vector, as W1/W2's gates
ROWS = 3
CALLS = 3
FUSABLE = [op for op in OPS if op.fusable]


def _recorded(spec_, rng):
    """The root signature of one eager call of a spec, its operands per-instance values."""
    d = spec_.dims(rng)
    xs = [hb.array(draw(rng, shape, dom, np.float32)) for shape, dom in zip(spec_.shapes(d), spec_.doms())]
    return spec_.call(xs, d, spec_.aux(rng, d) if spec_.aux else None).sig


def _samples():
    """(op, attrs, operand domains) of each fusable op as the specs record it, from the
    first spec whose operands are the op's."""
    rng = np.random.default_rng(0)
    found = {}
    for spec_ in SPECS:
        if spec_.doms() and "table" not in spec_.doms():
            sig = _recorded(spec_, rng)
            if sig.op.fusable and len(sig.codes) == len(spec_.doms()):
                found.setdefault((sig.op.id, sig.attrs), (sig.op, sig.attrs, spec_.doms()))
    return list(found.values())


SAMPLES = _samples()


@pytest.mark.parametrize("op", FUSABLE, ids=[op.name for op in FUSABLE])
def test_every_fusable_op_has_a_scalar_rule_and_a_spec(op):
    assert type(op).scalar is not Op.scalar, f"{op.name} is fusable but gives no scalar rule (Op.scalar)"
    assert any(s[0] is op for s in SAMPLES), f"no spec in test_ops_gradcheck.py records {op.name}"


def _operand_values(rng, k):
    """k operands of (ROWS, N) float32: both signs away from 0, exact zeros in column 0 (abs's
    derivative there, log's and sqrt's infinities, division by zero)."""
    xs = []
    for _ in range(k):
        x = rng.choice([-1.0, 1.0], (ROWS, N)) * rng.uniform(0.25, 2.0, (ROWS, N))
        x[:, 0] = 0.0
        xs.append(x.astype(np.float32))
    return xs


def test_scalar_rules_agree_with_forward_and_backward():
    """One fused run holding every sample, each on its own inputs: its values and input
    gradients equal the op's forward and backward, NaN and inf where numpy has them."""
    rng = np.random.default_rng(1)
    tid = signature.type_id((N,), np.dtype(np.float32))
    steps, inputs = [], {}
    for op, attrs, doms in SAMPLES:
        k = len(doms)
        refs = tuple(range(len(inputs), len(inputs) + k))
        for r, x in zip(refs, _operand_values(rng, k)):
            inputs[r] = x
        steps.append((None, signature.intern(op, attrs, (tid,) * k), refs, None))
    first = len(inputs)
    steps = [(first + i, sig, refs, aux) for i, (_, sig, refs, aux) in enumerate(steps)]
    run = fused.build_run(steps, N, {slot for slot, *_ in steps})
    assert run.outputs == [slot for slot, *_ in steps]

    ins = [inputs[key] for _, key in run.inputs]
    outs = [np.empty((ROWS, N), np.float32) for _ in steps]
    gys = [rng.normal(size=(ROWS, N)).astype(np.float32) for _ in steps]
    gins = [np.zeros((ROWS, N), np.float32) for _ in ins]
    with np.errstate(all="ignore"):
        run.forward_kernel(ROWS, *ins, *outs)
        run.backward_kernel(ROWS, *ins, *gys, *gins)
        grad_of = {key: g for (_, key), g in zip(run.inputs, gins)}
        for (slot, sig, refs, _), out, gy in zip(steps, outs, gys):
            xs = [inputs[r] for r in refs]
            y = sig.op.forward(np, sig, xs, None)
            where = f"{sig.op.name}{sig.attrs}"
            np.testing.assert_allclose(out, y, rtol=1e-5, atol=1e-6, err_msg=f"{where}: value")
            want = sig.op.backward(np, sig, xs, None, y, gy, (True,) * len(xs))
            for i, (r, g) in enumerate(zip(refs, want)):
                np.testing.assert_allclose(grad_of[r], g, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{where}: derivative by operand {i}")


class _AllSamples(hb.HybridBlock):
    """Every sample op on its own inputs, each value an output: at block granularity with
    fusion on, one fused run."""

    def __init__(self):
        super().__init__()
        self.hybridize()

    def forward(self, *xs):
        operands = iter(xs)
        return tuple(apply(op, tuple(next(operands) for _ in doms), attrs) for op, attrs, doms in SAMPLES)


def _block_run(mode, W, scales, weights):
    """(outputs per call, W's gradient) of CALLS calls eagerly or at block granularity with
    fusion on or off; each call's inputs are W's rows times its scales."""
    W.zero_grad()
    block = _AllSamples()
    with hb.settings(fusion=mode == "fused"):
        def calls():
            outs = [block(*[W[r] * scales[i, r] for r in range(W.shape[0])]) for i in range(CALLS)]
            return outs, hb.add_n([hb.sum(y * weights[i, j]) for i, ys in enumerate(outs) for j, y in enumerate(ys)])
        if mode == "eager":
            outs, loss = calls()
        else:
            with hb.batching(granularity="block"):
                outs, loss = calls()
        loss.backward()
    units = next(iter(block._programs.values())).op._units if mode == "fused" else None
    return [[y.asnumpy() for y in ys] for ys in outs], W.grad.copy(), units


def test_every_fusable_op_runs_fused_in_a_block_as_it_runs_eagerly():
    """Values and gradients of every sample in a fused block run equal eager mode's and the
    unfused block's, in each op's domain (log's and sqrt's above 0, div's divisor away from 0)."""
    rng = np.random.default_rng(2)
    rows = [(s, dom) for s, (_, _, doms) in enumerate(SAMPLES) for dom in doms]
    W = hb.Parameter("fusable_operands", (len(rows), N), init=0.0)
    W.data = np.stack([draw(rng, (N,), dom, np.float32) for _, dom in rows])
    scales = rng.uniform(0.5, 1.5, (CALLS, len(rows), N)).astype(np.float32)
    weights = rng.normal(size=(CALLS, len(SAMPLES), N)).astype(np.float32)
    eager_out, eager_grad, _ = _block_run("eager", W, scales, weights)
    fused_out, fused_grad, units = _block_run("fused", W, scales, weights)
    plain_out, plain_grad, _ = _block_run("plain", W, scales, weights)
    in_runs = {step[1].op for u in units if isinstance(u, fused.FusedRun) for step in u.steps}
    assert {op for op, _, _ in SAMPLES} <= in_runs, "a fusable op did not join the fused run"
    for j, (op, attrs, _) in enumerate(SAMPLES):
        where = f"{op.name}{attrs}"
        for i in range(CALLS):
            np.testing.assert_allclose(fused_out[i][j], eager_out[i][j], rtol=1e-5, atol=1e-6, err_msg=where)
            np.testing.assert_allclose(plain_out[i][j], eager_out[i][j], rtol=1e-5, atol=1e-6, err_msg=where)
        mine = [r for r, (s, _) in enumerate(rows) if s == j]
        np.testing.assert_allclose(fused_grad[mine], eager_grad[mine], rtol=1e-4, atol=1e-5, err_msg=where)
        np.testing.assert_allclose(plain_grad[mine], eager_grad[mine], rtol=1e-4, atol=1e-5, err_msg=where)
