"""Host matrix products (kernels/blas.py): MKL's packed and plain GEMM against numpy."""
import json
import math

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch_workloads.data import Vocab, synthetic_sst
from hybridbatch.kernels import blas
from hybridbatch_workloads.models import TreeLSTMSentiment
from helpers import needs_mkl, transposed_operands


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_gemm_matches_numpy_for_transposed_views(library, dtype, ta, tb):
    a, b = transposed_operands(np.random.default_rng(0), dtype, ta, tb, 5, 7, 3)
    out = blas.gemm(a, b)
    assert out.shape == (5, 3) and out.dtype == dtype
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), **_tol(dtype))


def test_gemm_falls_back_for_what_mkl_does_not_take(library):
    rng = np.random.default_rng(1)
    ints = rng.integers(0, 5, (4, 3))
    assert np.array_equal(blas.gemm(ints, ints.T), ints @ ints.T)
    strided = rng.standard_normal((6, 8)).astype(np.float32)[::2, ::2]      # neither C nor F
    b = rng.standard_normal((4, 2)).astype(np.float32)
    np.testing.assert_allclose(blas.gemm(strided, b), strided @ b, rtol=1e-5, atol=1e-5)
    empty = np.zeros((0, 4), np.float32)
    assert blas.gemm(empty, b).shape == (0, 2)
    assert blas.gemm(np.zeros((3, 0), np.float32), np.zeros((0, 2), np.float32)).tolist() == [[0, 0]] * 3


def test_products_of_mismatched_shapes_raise_as_numpy_does(library):
    """MKL was handed (3, 5) @ (4, 2) as is: it read past b and returned garbage."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)
    with pytest.raises(ValueError):
        blas.gemm(a, b)
    x, w = rng.standard_normal((5, 90)).astype(np.float32), rng.standard_normal((100, 80)).astype(np.float32)
    with blas.packing():
        for _ in range(3):      # plain, then packing, then the pack
            with pytest.raises(ValueError):
                blas.shared_product(x, w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_packed_products_match_for_every_batch_size(library, dtype):
    """One weight reused across many batch sizes in one scope, as a tree's levels do."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((40, 24)).astype(dtype)      # (out, in), used as x @ w.T and g @ w
    with blas.packing():
        for rows in (1, 3, 64, 17, 200, 2, 1500):
            x = rng.standard_normal((rows, 24)).astype(dtype)
            g = rng.standard_normal((rows, 40)).astype(dtype)
            np.testing.assert_allclose(blas.shared_product(x, w.T), x.astype(np.float64) @ w.T, **_tol(dtype))
            np.testing.assert_allclose(blas.shared_product(g, w), g.astype(np.float64) @ w, **_tol(dtype))


@needs_mkl
def test_a_weight_changed_between_scopes_is_packed_again():
    """Packs live for one scope: an update between runs is always seen."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    x = rng.standard_normal((5, 8)).astype(np.float32)
    with hb.settings(blas="mkl"):
        for step in range(3):
            with blas.packing():
                for _ in range(3):      # the second product packs, the third reuses the pack
                    np.testing.assert_allclose(blas.shared_product(x, w.T), x @ w.T, rtol=1e-5, atol=1e-5)
            w += 1.0                    # an in-place update, as the optimizer makes


@needs_mkl
def test_batched_tree_model_under_mkl_equals_eager_under_numpy():
    """Tree-LSTM losses and gradients: batched with MKL's packed products, eager with numpy."""
    trees = synthetic_sst(6, seed=4)
    model = TreeLSTMSentiment(Vocab.build(w.word for t in trees for w in t.leaves()), embed=16, hidden=16)
    model.hybridize()
    params = model.parameters()
    results = {}
    with hb.settings(blas="numpy"):     # on exit, the mode is put back whatever hb.set_blas chose
        for lib in ("numpy", "mkl"):
            hb.set_blas(lib)
            for p in params:
                p.zero_grad()
            if lib == "numpy":
                loss = hb.add_n([model.tree_loss(t) for t in trees])
            else:
                with hb.batching():
                    loss = hb.add_n([model.tree_loss(t) for t in trees])
            loss.backward()
            results[lib] = (float(loss.item()), [p.grad.copy() for p in params])
        assert hb.blas_library() == "mkl"
    (l_np, g_np), (l_mkl, g_mkl) = results["numpy"], results["mkl"]
    assert l_mkl == pytest.approx(l_np, rel=1e-5)
    for a, b in zip(g_np, g_mkl):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)


def test_use_names_the_choices():
    with pytest.raises(ValueError, match="expected 'auto', 'mkl' or 'numpy'"):
        hb.set_blas("openblas")


@pytest.fixture
def auto_mode():
    with hb.settings(blas="auto"):
        yield


@needs_mkl
@pytest.mark.parametrize("numpy_from", [(32, math.inf), (math.inf, 32), (0, 0)])
def test_auto_sends_products_by_their_rows_and_the_weight_layout(auto_mode, monkeypatch, numpy_from):
    """numpy_from: batch rows from which numpy takes a product with a C-ordered / transposed
    right operand; MKL takes the rest. A shared-weight product's rows are its left
    operand's; a weight gradient's (gemm, add_product) the rows it sums over."""
    monkeypatch.setattr(blas, "_numpy_from", numpy_from)
    monkeypatch.setattr(blas, "_one_row", ("mkl", "mkl"))
    monkeypatch.setattr(blas, "_kernel_below", (0, 0))
    calls = []
    call = blas._call
    monkeypatch.setattr(blas, "_call", lambda lib, *rest: calls.append(rest[1].shape) or call(lib, *rest))
    rng = np.random.default_rng(5)
    w = rng.standard_normal((512, 17)).astype(np.float32)       # a thin weight routes like any other
    expected = []
    for rows in (31, 32):
        x = rng.standard_normal((rows, 512)).astype(np.float32)
        g = rng.standard_normal((rows, 17)).astype(np.float32)
        for a, b in ((x, w), (g, w.T)):
            np.testing.assert_allclose(blas.shared_product(a, b), a @ b, rtol=1e-5, atol=1e-4)
            if rows < numpy_from[b is not w]:
                expected.append(a.shape)
        grad = np.zeros((17, 512), np.float32)
        blas.add_product(grad, g.T, x)                     # a weight's gradient over `rows` rows
        np.testing.assert_allclose(grad, g.T @ x, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(blas.gemm(g.T, x), g.T @ x, rtol=1e-4, atol=1e-3)
        if rows < numpy_from[0]:
            expected += [(17, rows)] * 2
        assert blas.mkl_sums(rows) == (rows < numpy_from[0])
    assert calls == expected
    assert blas.numpy_from() == numpy_from


@needs_mkl
@pytest.mark.parametrize("one_row", [("numpy", "mkl"), ("mkl", "numpy"), ("kernel", "mkl")])
def test_one_row_products_go_where_one_row_says(auto_mode, monkeypatch, one_row):
    """A single row (eager mode's every product) follows one_row() per layout; two rows
    follow the splits (here: MKL below 8 rows)."""
    monkeypatch.setattr(blas, "_numpy_from", (8, 8))
    monkeypatch.setattr(blas, "_kernel_below", (0, 0))
    monkeypatch.setattr(blas, "_one_row", one_row)
    took = []
    call, kernel = blas._call, blas.few_rows.product
    monkeypatch.setattr(blas, "_call", lambda lib, *rest: took.append("mkl") or call(lib, *rest))
    monkeypatch.setattr(blas.few_rows, "product", lambda *a: took.append("kernel") or kernel(*a))
    rng = np.random.default_rng(6)
    w = rng.standard_normal((512, 96)).astype(np.float32)
    for rows in (1, 2):
        x = rng.standard_normal((rows, 512)).astype(np.float32)
        g = rng.standard_normal((rows, 96)).astype(np.float32)
        for a, b, layout in ((x, w, 0), (g, w.T, 1)):
            took.clear()
            np.testing.assert_allclose(blas.shared_product(a, b), a @ b, rtol=1e-5, atol=1e-4)
            assert took == (["mkl"] if rows == 2 else [] if one_row[layout] == "numpy" else [one_row[layout]]), \
                (rows, layout)
    assert blas.one_row() == one_row


class _Subclass(np.ndarray):
    pass


@pytest.mark.parametrize("kernel_below", [(8, 0), (0, 8), (256, 256)])
def test_auto_sends_few_rows_to_the_kernel(auto_mode, monkeypatch, kernel_below):
    """From 2 rows up to kernel_below() (exclusive) for the weight's layout, a shared weight's
    product runs in the few-rows kernel; only there, and only in "auto"; what it cannot take
    (other dtypes or byte orders, a strided weight, an array subclass) goes to a library."""
    monkeypatch.setattr(blas, "_kernel_below", kernel_below)
    monkeypatch.setattr(blas, "_one_row", ("numpy", "numpy"))
    monkeypatch.setattr(blas, "_numpy_from", (0, 0))
    took = []
    kernel = blas.few_rows.product
    monkeypatch.setattr(blas.few_rows, "product", lambda x, w: took.append(x.shape[0]) or kernel(x, w))
    rng = np.random.default_rng(8)
    w = rng.standard_normal((64, 80)).astype(np.float32)
    expected = []
    for rows in (1, 2, 7, 8, 300):
        x = rng.standard_normal((rows, 64)).astype(np.float32)
        g = rng.standard_normal((rows, 80)).astype(np.float32)
        for a, b, layout in ((x, w, 0), (g, w.T, 1)):
            np.testing.assert_allclose(blas.shared_product(a, b), a @ b, rtol=1e-5, atol=1e-4)
            if 1 < rows < kernel_below[layout]:
                expected.append(rows)
    assert took == expected
    took.clear()
    x = rng.standard_normal((4, 64))
    swapped = w.astype(w.dtype.newbyteorder(">"))
    for a, b in ((x, w), (x.astype(np.float32), w.astype(np.float64)), (x.astype(np.float32), w[:, ::2]),
                 (x.astype(swapped.dtype), swapped), (x.astype(np.float32).view(_Subclass), w)):
        np.testing.assert_allclose(blas.shared_product(a, b), a @ b, rtol=1e-5, atol=1e-4)
    hb.settings.blas = "numpy"
    blas.shared_product(x, w.astype(np.float64))
    assert took == [] and blas.kernel_below() == (0, 0)


def test_routes_split_the_sizes_at_least_total_time():
    """The calibration's rule on given times for 1 and ROWS_TRIED (2, 4, ... 128) rows: MKL
    against numpy first, then the kernel against what that gives each size."""
    n = len(blas.ROWS_TRIED)
    assert blas.ROWS_TRIED[:4] == (2, 4, 8, 16)
    fast, slow = [1.0] * (n + 1), [2.0] * (n + 1)
    assert blas._routes(fast, slow, slow) == (2 * blas.ROWS_TRIED[-1], math.inf, "kernel")
    assert blas._routes(slow, fast, slow) == (0, math.inf, "mkl")       # MKL wins every size
    assert blas._routes(slow, slow, fast) == (0, 0, "numpy")
    # the kernel up to 8 rows; MKL up to 32, numpy from there; numpy for one row
    kernel = [2.0] + [1.0] * 3 + [3.0] * (n - 3)
    mkl = [2.0] + [2.0] * 3 + [1.0] * 2 + [3.0] * (n - 5)
    numpy = [1.0] + [3.0] * 3 + [2.5] * 2 + [1.0] * (n - 5)
    assert blas._routes(kernel, mkl, numpy) == (16, 64, "numpy")
    assert blas._routes(kernel, [math.inf] * (n + 1), numpy) == (16, 0, "numpy")     # no MKL


@needs_mkl
def test_numpy_from_is_measured_once_and_follows_the_mode(auto_mode, monkeypatch):
    monkeypatch.setattr(blas, "_numpy_from", None)
    monkeypatch.setattr(blas, "_one_row", None)
    monkeypatch.setattr(blas, "_kernel_below", None)
    measured = blas.numpy_from()          # times the libraries once
    assert blas._one_row is not None and blas._kernel_below is not None     # measured with it
    assert all(c in ("kernel", "mkl", "numpy") for c in blas.one_row())
    bounds = (0,) + blas.ROWS_TRIED[1:] + (2 * blas.ROWS_TRIED[-1],)
    assert len(measured) == 2 and all(r in bounds or r == math.inf for r in measured)
    assert all(k in bounds for k in blas.kernel_below())
    monkeypatch.setattr(blas, "_calibrate", lambda: pytest.fail("measured twice"))
    assert blas.numpy_from() == measured
    hb.settings.blas = "mkl"
    assert blas.numpy_from() == (math.inf, math.inf) and hb.blas_library() == "mkl"
    assert blas.one_row() == ("mkl", "mkl") and blas.kernel_below() == (0, 0)
    hb.settings.blas = "numpy"
    assert blas.numpy_from() == (0, 0) and hb.blas_library() == "numpy"
    assert blas.one_row() == ("numpy", "numpy") and blas.kernel_below() == (0, 0)


def test_use_mkl_without_mkl_says_how_to_get_it(monkeypatch):
    monkeypatch.setattr(blas, "_mkl", None)
    with pytest.raises(RuntimeError, match="install the `mkl` package"):
        hb.set_blas("mkl")


def test_an_unloadable_mkl_warns_and_leaves_numpy(monkeypatch):
    monkeypatch.delenv("HYBRIDBATCH_BLAS", raising=False)
    monkeypatch.setattr(blas, "_library_path", lambda: "/nonexistent/libmkl_rt.so.3")
    with pytest.warns(UserWarning, match="is not usable"):
        assert blas._load() is None
    monkeypatch.setenv("HYBRIDBATCH_BLAS", "numpy")
    assert blas._load() is None


@pytest.mark.parametrize("rows", [1, 20, 70, 130])
@pytest.mark.parametrize("flip_below", [0, 64, 256])
def test_numpy_products_match_in_both_forms(rows, flip_below, monkeypatch):
    """numpy's x @ W.T: plain, or read back from W X^T below flip_below() rows; g @ W plain."""
    monkeypatch.setattr(blas, "_flip_below", flip_below)
    flipped = []
    monkeypatch.setattr(blas, "_flipped", lambda x, w: flipped.append(w.shape) or np.ascontiguousarray((w.T @ x.T).T))
    rng = np.random.default_rng(7)
    w = rng.standard_normal((48, 24)).astype(np.float32)
    x = rng.standard_normal((rows, 24)).astype(np.float32)
    g = rng.standard_normal((rows, 48)).astype(np.float32)
    for got, want in ((blas._numpy_product(x, w.T), x @ w.T), (blas._numpy_product(g, w), g @ w)):
        assert got.flags.c_contiguous
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert flipped == ([(24, 48)] if rows < flip_below else [])


def test_flip_below_is_measured_once_in_every_mode(monkeypatch):
    for mode in ("numpy", "auto") if blas.available() else ("numpy",):
        monkeypatch.setattr(blas, "_flip_below", None)
        monkeypatch.setattr(blas, "_numpy_from", None)
        with hb.settings(blas=mode):
            found = blas.flip_below()
            assert found in (0,) + blas.ROWS_TRIED[1:] + (2 * blas.ROWS_TRIED[-1],)
            if mode == "auto":
                assert blas._numpy_from is not None     # measured with it
            monkeypatch.setattr(blas, "_calibrate", lambda: pytest.fail("measured twice"))
            assert blas.flip_below() == found
            monkeypatch.undo()


@pytest.fixture
def calibration(monkeypatch, tmp_path):
    """An empty kernel cache folder, no routes in this process, and the timings asked for
    (`blas._best` calls) from then on, each answered with a made-up time rather than run."""
    monkeypatch.setenv("HYBRIDBATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("HYBRIDBATCH_RECALIBRATE", raising=False)
    timed = []
    monkeypatch.setattr(blas, "_best", lambda product, rounds: timed.append(rounds) or float(len(timed) % 7))

    def forget():
        for name in ("_flip_below", "_numpy_from", "_one_row", "_kernel_below"):
            monkeypatch.setattr(blas, name, None)
    forget()
    with hb.settings(blas="auto"):
        yield tmp_path, timed, forget


def _routes_now():
    return blas.flip_below(), blas.kernel_below(), blas.numpy_from(), blas.one_row()


def test_a_stored_calibration_is_used_by_the_next_process(calibration):
    folder, timed, forget = calibration
    measured = _routes_now()
    assert timed and len(list(folder.glob("blas_calibration_*.json"))) == 1
    forget()                # a new process, as far as the routes go
    timed.clear()
    assert _routes_now() == measured and not timed


def test_a_changed_key_or_recalibrate_measures_again(calibration, monkeypatch):
    folder, timed, forget = calibration
    _routes_now()
    for variable, value in (("OPENBLAS_CORETYPE_CHOSEN", "Haswell"), ("HYBRIDBATCH_RECALIBRATE", "1")):
        forget()
        timed.clear()
        monkeypatch.setenv(variable, value)
        _routes_now()
        assert timed, f"{variable}={value} did not measure"
    # the changed thread variables' calibration is stored apart; recalibrating rewrote it
    assert len(list(folder.glob("blas_calibration_*.json"))) == 2


@pytest.mark.parametrize("content", ["", "{not json", '{"key": 1}', '[1, 2]'])
def test_a_corrupt_calibration_file_is_measured_and_rewritten(calibration, content):
    folder, timed, forget = calibration
    _routes_now()
    (stored,) = folder.glob("blas_calibration_*.json")
    stored.write_text(content)
    forget()
    timed.clear()
    measured = _routes_now()
    assert timed
    forget()
    timed.clear()
    assert _routes_now() == measured and not timed      # the rewritten file is read
    assert not list(folder.glob("*.tmp"))


def test_a_stored_route_out_of_range_is_not_used(calibration):
    folder, timed, forget = calibration
    _routes_now()
    (stored,) = folder.glob("blas_calibration_*.json")
    content = json.loads(stored.read_text())
    content["routes"]["flip_below"] = 3       # not a row count the calibration tries
    stored.write_text(json.dumps(content))
    forget()
    timed.clear()
    assert blas.flip_below() != 3 and timed


def test_a_cache_folder_that_cannot_be_written_warns_and_still_routes(calibration, monkeypatch):
    folder, timed, forget = calibration
    blocked = folder / "a_file"
    blocked.write_text("")
    monkeypatch.setenv("HYBRIDBATCH_CACHE_DIR", str(blocked / "kernels"))      # below a file: no folder
    with pytest.warns(UserWarning, match="cannot store the BLAS calibration"):
        routes = _routes_now()
    assert timed and routes[0] in (0,) + blas.ROWS_TRIED[1:] + (2 * blas.ROWS_TRIED[-1],)
