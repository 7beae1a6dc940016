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
