"""The few-rows kernel (kernels/few_rows.py) against numpy, alone and under a batched model."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import hybridbatch as hb
from hybridbatch_workloads.data import Vocab, synthetic_sst
from hybridbatch.kernels import blas, few_rows
from hybridbatch_workloads.models import TreeLSTMSentiment


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 6, 7, 9, 33])
@pytest.mark.parametrize("n,k", [(8, 16), (13, 7), (3, 1), (1, 5), (6, 0)])
def test_both_layouts_match_numpy(dtype, rows, n, k):
    """Every path: 4, 2 and 1 batch rows at a time, weights whose rows do not fill a group
    of 4, a strided batch (copied to rows first)."""
    rng = np.random.default_rng(rows * 100 + n)
    w = rng.standard_normal((n, k)).astype(dtype)       # (out, in): x @ w.T and g @ w
    x = rng.standard_normal((rows, 2 * k)).astype(dtype)[:, ::2]       # k = 0: sums of nothing
    g = rng.standard_normal((rows, n)).astype(dtype)
    for a, b in ((x, w.T), (g, w)):
        out = few_rows.product(a, b)
        assert out.shape == (rows, b.shape[1]) and out.dtype == dtype and out.flags.c_contiguous
        np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), **_tol(dtype))


@settings(max_examples=200, deadline=None)
@given(rows=st.integers(1, 40), n=st.integers(1, 23), k=st.integers(0, 37), transposed=st.booleans(),
       double=st.booleans(), seed=st.integers(0, 2 ** 32 - 1))
def test_random_shapes_match_numpy(rows, n, k, transposed, double, seed):
    """Any batch and weight shape, either layout, against numpy in float64."""
    dtype = np.float64 if double else np.float32
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)).astype(dtype)
    a = rng.standard_normal((rows, k if transposed else n)).astype(dtype)
    b = w.T if transposed else w
    np.testing.assert_allclose(few_rows.product(a, b), a.astype(np.float64) @ b.astype(np.float64), **_tol(dtype))


def test_nan_and_inf_propagate_as_in_numpy():
    """No 'nnan'/'ninf' fast-math: a NaN or inf input gives numpy's NaN and inf outputs."""
    w = np.ones((6, 5), np.float32)
    w[2, 1] = 0.0
    x = np.zeros((3, 5), np.float32)
    x[0, 0] = np.nan
    x[1, 1] = np.inf            # inf * 0 in output 2: NaN; inf elsewhere
    g = np.zeros((3, 6), np.float32)
    g[0, 3] = np.nan
    g[1, 2] = np.inf
    with np.errstate(invalid="ignore"):
        for a, b in ((x, w.T), (g, w)):
            np.testing.assert_array_equal(few_rows.product(a, b), a @ b)


@pytest.fixture
def kernel_everywhere(monkeypatch):
    """"auto" with every shared weight's product in the kernel, one row included."""
    monkeypatch.setattr(blas, "_kernel_below", (10 ** 9, 10 ** 9))
    monkeypatch.setattr(blas, "_one_row", ("kernel", "kernel"))
    calls = []
    kernel = few_rows.product
    monkeypatch.setattr(few_rows, "product", lambda x, w: calls.append(x.shape) or kernel(x, w))
    with hb.settings(blas="auto"):
        yield calls


def test_batched_tree_model_with_the_kernel_equals_eager_under_numpy(kernel_everywhere):
    """Tree-LSTM losses and gradients: batched and eager with the kernel's products, eager
    with numpy's."""
    trees = synthetic_sst(6, seed=4)
    model = TreeLSTMSentiment(Vocab.build(w.word for t in trees for w in t.leaves()), embed=32, hidden=32)
    model.hybridize()
    params = model.parameters()
    results = {}
    for run in ("numpy", "kernel eager", "kernel batched"):
        hb.settings.blas = "numpy" if run == "numpy" else "auto"
        for p in params:
            p.zero_grad()
        if run == "kernel batched":
            with hb.batching(granularity="block"):
                loss = hb.add_n([model.tree_loss(t) for t in trees])
        else:
            loss = hb.add_n([model.tree_loss(t) for t in trees])
        loss.backward()
        results[run] = (float(loss.item()), [p.grad.copy() for p in params])
    assert {shape[0] for shape in kernel_everywhere} > {1}      # one row (eager) and batches of rows
    l_np, g_np = results["numpy"]
    for run in ("kernel eager", "kernel batched"):
        l_k, g_k = results[run]
        assert l_k == pytest.approx(l_np, rel=1e-5), run
        for a, b in zip(g_np, g_k):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5, err_msg=run)
