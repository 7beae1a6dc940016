"""Row scatter-add (kernels/scatter.py): dst[rows[k]] += src[k], with rows that repeat, for
every layout of src the backward hands it."""
import numpy as np
import pytest

from hybridbatch.kernels import scatter


def _expected(dst, rows, src):
    out = dst.copy()
    np.add.at(out, rows, src)
    return out


@pytest.mark.parametrize("layout", ["contiguous", "left columns", "right columns", "middle columns",
                                    "every other column", "rows of a taller array", "3-d"])
def test_scatter_add_rows_adds_every_row_of_every_layout(layout):
    rng = np.random.default_rng(0)
    rows = np.array([3, 0, 3, 7, 1, 3])         # 3 repeats: its rows add up
    dst = rng.standard_normal((9, 4)).astype(np.float32)
    parent = rng.standard_normal((6, 12)).astype(np.float32)
    src = {"contiguous": parent[:, :4].copy(),
           "left columns": parent[:, :4],
           "right columns": parent[:, 8:],
           "middle columns": parent[:, 5:9],
           "every other column": parent[:, ::3],
           "rows of a taller array": rng.standard_normal((8, 4)).astype(np.float32)[1:7],
           "3-d": parent.reshape(6, 4, 3)[:, :, 0]}[layout]
    if layout == "3-d":
        dst3 = rng.standard_normal((9, 2, 2)).astype(np.float32)
        src3 = rng.standard_normal((6, 4, 3)).astype(np.float32)[:, :, 1].reshape(6, 2, 2)
        want = _expected(dst3, rows, src3)
        scatter.scatter_add_rows(dst3, rows, src3)
        np.testing.assert_allclose(dst3, want, rtol=1e-6)
        return
    want = _expected(dst, rows, src)
    scatter.scatter_add_rows(dst, rows, src)
    np.testing.assert_allclose(dst, want, rtol=1e-6)


def test_a_column_range_is_read_from_its_parent_only_when_it_spans_whole_rows_of_it():
    parent = np.zeros((5, 8), np.float32)
    assert scatter._column_range(parent[:, 2:6])[1] == 2
    assert scatter._column_range(parent[:, 4:])[1] == 4
    assert scatter._column_range(parent[1:4, 2:6]) is None       # not its first rows
    assert scatter._column_range(parent[:, ::2]) is None         # columns not adjacent
    assert scatter._column_range(np.zeros((5, 4), np.float32)) is None    # no parent


def test_scatter_add_rows_of_no_rows_changes_nothing():
    dst = np.ones((3, 4), np.float32)
    scatter.scatter_add_rows(dst, np.zeros(0, np.int64), np.zeros((2, 8), np.float32)[:0, :4])
    np.testing.assert_array_equal(dst, 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [1, 3, 4, 7, scatter.FEW_ROWS, scatter.FEW_ROWS + 1])
def test_add_outer_adds_scaled_products_of_few_and_many_rows(rows, dtype):
    """dst += scale * left^T right by the row loop (up to FEW_ROWS rows) or a GEMM, and
    dst = scale * left^T right with void (dst's numbers never read: NaN stays out)."""
    rng = np.random.default_rng(rows)
    dst = rng.standard_normal((37, 21)).astype(dtype)
    right = rng.standard_normal((rows, 21)).astype(dtype)[:, ::-1]       # a strided factor
    c_left = rng.standard_normal((rows, 37)).astype(dtype)
    for left in (c_left, np.array(c_left.T, order="C").T):     # C-ordered, and as Parameter keeps G
        before = left.copy(), right.copy()
        for scale in (1.0, -0.25):
            got = dst.copy()
            scatter.add_outer(got, left, right, scale=scale)
            np.testing.assert_allclose(got, dst + scale * (left.T @ right), rtol=1e-5, atol=1e-5)
            got = np.full_like(dst, np.nan)
            scatter.add_outer(got, left, right, void=True, scale=scale)
            np.testing.assert_allclose(got, scale * (left.T @ right), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(left, before[0])      # the factors never written
        np.testing.assert_array_equal(right, before[1])
