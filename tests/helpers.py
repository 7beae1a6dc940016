"""Helpers shared by the test modules (fixtures are in conftest.py, graphs for the scheduling
tests in graphs.py): running a function eagerly and at each granularity, the MKL marker and
operands for host products, a block whose second output has an infinite
derivative, and the example scripts run as a user runs them."""
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.kernels import blas

# ---------------------------------------------------------------------------------------
# One function eagerly and recorded at op and block granularity, compared with numpy
# ---------------------------------------------------------------------------------------
MODES = ("eager", "op", "block")


class _Fn(hb.HybridBlock):
    """A hybridized block whose forward is `fn`, so block granularity records one node per call."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn
        self.hybridize()

    def forward(self, *args):
        return self.fn(*args)


def lstm_chain_losses(cell, lengths):
    """hb.sum of the last h of an LSTM chain per length (input t at step t), for tests that
    need a few batches of a block of several sizes."""
    size = cell.hidden
    losses = []
    for n in lengths:
        h = c = np.zeros(size, np.float32)
        for t in range(n):
            h, c = cell(np.full(size, t, np.float32), h, c)
        losses.append(hb.sum(h))
    return losses


def central_differences(loss, p, eps=1e-6):
    """d loss() / d p.data by central differences, one element at a time (p.data restored)."""
    numeric = np.zeros(p.shape)
    base = p.data.copy()
    for idx in np.ndindex(*p.shape):
        for sign in (1, -1):
            moved = base.copy()
            moved[idx] += sign * eps
            p.data = moved
            numeric[idx] += sign * loss().item() / (2 * eps)
        p.data = base
    return numeric


def recorded(mode, build):
    """build() eagerly (mode "eager") or inside a batching scope of that granularity."""
    if mode == "eager":
        return build()
    with hb.batching(granularity=mode):
        return build()


def _values(fn, instances, mode):
    """fn over every instance (a tuple of arrays) in one mode, as numpy arrays."""
    if mode == "eager":
        return [fn(*[hb.array(a) for a in inst]).asnumpy() for inst in instances]
    block = _Fn(fn)
    with hb.batching(granularity=mode):
        outs = [block(*inst) for inst in instances]
    return [o.asnumpy() for o in outs]


def _assert_like_numpy(fn, ref, instances):
    """Every mode gives numpy's value and dtype per instance."""
    for mode in MODES:
        for inst, got in zip(instances, _values(fn, instances, mode)):
            want = np.asarray(ref(*inst))
            assert got.dtype == want.dtype, (mode, got.dtype, want.dtype)
            np.testing.assert_array_equal(got, want, err_msg=mode)


def _raises_at_the_call(fn, instance, error=hb.ShapeError, match=None):
    """fn raises `error` where it is called, in every mode (not later, at a flush)."""
    for mode in MODES:
        if mode == "eager":
            with pytest.raises(error, match=match):
                fn(*[hb.array(a) for a in instance])
            continue
        block = _Fn(fn)
        with hb.batching(granularity=mode):
            with pytest.raises(error, match=match):
                block(*instance)


BOOLS = (np.array([True, False, True]),)


# ---------------------------------------------------------------------------------------
# Host products (kernels/blas.py)
# ---------------------------------------------------------------------------------------
needs_mkl = pytest.mark.skipif(not blas.available(), reason="MKL is not loaded: not installed (pip install 'hybridbatch[mkl]') or HYBRIDBATCH_BLAS=numpy")


def transposed_operands(rng, dtype, ta, tb, m, k, n):
    """a (m, k) and b (k, n) of random values, each a transposed view where ta / tb asks."""
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    return (a.T if ta else a), (b.T if tb else b)


# ---------------------------------------------------------------------------------------
# Blocks and switches
# ---------------------------------------------------------------------------------------
class _LogOfRelu(hb.HybridBlock):
    """A second output with an infinite local derivative where relu gives 0."""

    def __init__(self):
        super().__init__()
        self.W = hb.Parameter("W", (3, 3), rng=np.random.default_rng(1))
        self.U = hb.Parameter("U", (3, 3), rng=np.random.default_rng(2))

    def forward(self, x):
        return hb.tanh(self.W @ x), hb.log(hb.relu(self.U @ x))


# ---------------------------------------------------------------------------------------
# Example scripts
# ---------------------------------------------------------------------------------------
EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def run_example(script, *args):
    """examples/<script> run with these arguments as a user runs it: without this run's PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                          env=env, timeout=300)


# ---------------------------------------------------------------------------------------
# The benchmark harness on a tiny configuration
# ---------------------------------------------------------------------------------------
def check_harness_runs(name):
    """Run the bench harness on workload `name` at hidden 8 on a dozen synthetic instances and
    check what every workload's run must give: its default block granularity, batched losses
    equal to eager ones, FLOPs, speedups and batches at or above the lower bound."""
    from hybridbatch_workloads.bench.harness import Config, run_benchmark
    res = run_benchmark(Config(workload=name.lower(), hidden=8, batch=3, instances=6, warmup=3, repeats=1,
                               eager_instances=3, eager_warmup=1, gemm_repeats=1,
                               workload_options={"synthetic_train": 12, "synthetic_dev": 2}),
                        progress=False, info=False)
    assert res["workload"] == name and res["config"]["granularity"] == "block"
    assert res["check"]["max_rel_loss_diff"] < 1e-4
    for phase in ("train", "infer"):
        assert res["batched"][phase]["flops"] > 0 and res["speedup"][phase] > 0
        assert res["batched"][phase]["batches"] >= res["batched"][phase]["lower_bound"] > 0
    return res
