"""Row scatter-add (dst[rows[k]] += src[k], correct when rows repeat; np.add.at is slow) and
the in-place rank-k update (a loop for few rows: a GEMM with inner dimension 1 is slow in BLAS)."""
import numpy as np
from numba import njit

from . import blas


def _compiled(dst):
    """Whether the numba kernels take dst's dtype: numba has no float16 (numpy does it)."""
    return dst.dtype != np.float16


@njit(cache=True)
def _scatter_add_2d(dst, rows, src):
    width = dst.shape[1]
    for k in range(rows.shape[0]):
        r = rows[k]
        for j in range(width):
            dst[r, j] += src[k, j]


@njit(cache=True)
def _scatter_add_ranges(dst, rows, dst_first, src, src_first, width):
    """dst[rows[k], dst_first:+width] += src[k, src_first:+width], both C-contiguous: row
    slices keep the loop vectorized (a strided view is typed 'A' layout: scalar loads). It
    reads a column range of src through its parent (a concat's gradient halves) and adds into
    a column range of dst (a block input it only slices, scatter_add_columns)."""
    for k in range(rows.shape[0]):
        row = src[k, src_first:src_first + width]
        out = dst[rows[k], dst_first:dst_first + width]
        for j in range(width):
            out[j] += row[j]


def _column_range(src):
    """(parent, first column) when 2-D src is a range of whole-height columns of a
    C-contiguous array (a concat's gradient is such halves of one array), else None."""
    parent = src.base
    if (not isinstance(parent, np.ndarray) or parent.ndim != 2 or not parent.flags.c_contiguous
            or parent.dtype != src.dtype or parent.shape[0] != src.shape[0] or parent.strides != src.strides):
        return None
    first, extra = divmod(blas.address(src) - blas.address(parent), src.itemsize)
    return (parent, first) if extra == 0 and 0 <= first and first + src.shape[1] <= parent.shape[1] else None


def scatter_add_rows(dst, rows, src):
    """Add each row of `src` into `dst` at `rows` (leading axis); other axes flattened."""
    if not isinstance(dst, np.ndarray):     # cupy: its own atomic scatter-add (ufunc.at)
        import cupy
        cupy.add.at(dst, rows, src)
        return
    if not _compiled(dst):
        np.add.at(dst, np.asarray(rows, np.int64), src)
        return
    d2 = dst.reshape(dst.shape[0], -1)
    rows = np.asarray(rows, np.int64)
    # a 2-D src is read in place, strided or not
    s2 = src if src.ndim == 2 else np.ascontiguousarray(src).reshape(len(rows), -1)
    if d2.dtype != s2.dtype:
        s2 = s2.astype(d2.dtype)
    columns = None if s2.flags.c_contiguous else _column_range(s2)
    if columns is not None and len(rows):
        _scatter_add_ranges(d2, rows, 0, columns[0], columns[1], d2.shape[1])
    else:
        _scatter_add_2d(d2, rows, s2)


def scatter_add_columns(dst, rows, first, src):
    """Add each row of 2-D `src` into columns first.. of `dst`'s rows `rows` (dst 2-D)."""
    rows = np.asarray(rows, np.int64)
    if isinstance(dst, np.ndarray) and _compiled(dst) and dst.flags.c_contiguous and src.dtype == dst.dtype:
        _scatter_add_ranges(dst, rows, first, np.ascontiguousarray(src), 0, src.shape[1])
    else:
        scatter_add_rows(dst[:, first:first + src.shape[1]], rows, src)


@njit(cache=True)
def _add_outer(dst, left, right):
    for k in range(left.shape[0]):
        for i in range(dst.shape[0]):
            a = left[k, i]
            for j in range(dst.shape[1]):
                dst[i, j] += a * right[k, j]


def add_outer(dst, left, right, void=False):
    """dst += left^T @ right, in place; with `void`, dst's numbers are not read (dst =
    left^T @ right). A handful of rows (one instance's outer product) is this file's loop,
    cheaper than a GEMM call; more rows (a weight's batches) are one GEMM summing into dst
    (blas.add_product: no product temporary with MKL) or written into it."""
    if not isinstance(dst, np.ndarray) or left.shape[0] > 4 or not _compiled(dst):
        blas.add_product(dst, left.T, right, beta=0.0 if void else 1.0)
        return
    if void:
        dst[...] = 0
    _add_outer(dst, np.ascontiguousarray(left, dst.dtype), np.ascontiguousarray(right, dst.dtype))
