"""Row scatter-add (dst[rows[k]] += src[k], correct when rows repeat; np.add.at is slow) and
the in-place rank-k update (a loop for few rows: a GEMM of inner dimension 1-12 costs BLAS
an extra pass over its output)."""
import numpy as np
from numba import njit

from . import blas
from .prefetch import prefetch_row


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


FEW_ROWS = 12     # add_outer: up to this many rows, the row-by-row loop beats a GEMM
AHEAD = 4         # rows of dst asked for ahead of their update (prefetch.py)


@njit(cache=True)
def _add_outer(dst, left_t, right, keep, scale):
    """dst = keep * dst + scale * left_t @ right, row by row: each row of dst is read and
    written once (a weight too large for the cache streams through once, asked for AHEAD
    rows early), eight or four products a pass over it."""
    n_rows = right.shape[0]
    for i in range(dst.shape[0]):
        if i + AHEAD < dst.shape[0]:
            prefetch_row(dst, i + AHEAD)
        row = dst[i]
        if not keep:
            row[:] = 0
        k = 0
        while k + 8 <= n_rows:
            a0, a1, a2, a3 = left_t[i, k] * scale, left_t[i, k + 1] * scale, left_t[i, k + 2] * scale, \
                left_t[i, k + 3] * scale
            a4, a5, a6, a7 = left_t[i, k + 4] * scale, left_t[i, k + 5] * scale, left_t[i, k + 6] * scale, \
                left_t[i, k + 7] * scale
            r0, r1, r2, r3 = right[k], right[k + 1], right[k + 2], right[k + 3]
            r4, r5, r6, r7 = right[k + 4], right[k + 5], right[k + 6], right[k + 7]
            for j in range(row.shape[0]):
                row[j] += (((a0 * r0[j] + a1 * r1[j]) + (a2 * r2[j] + a3 * r3[j]))
                           + ((a4 * r4[j] + a5 * r5[j]) + (a6 * r6[j] + a7 * r7[j])))
            k += 8
        while k + 4 <= n_rows:
            a0, a1, a2, a3 = left_t[i, k] * scale, left_t[i, k + 1] * scale, left_t[i, k + 2] * scale, \
                left_t[i, k + 3] * scale
            r0, r1, r2, r3 = right[k], right[k + 1], right[k + 2], right[k + 3]
            for j in range(row.shape[0]):
                row[j] += (a0 * r0[j] + a1 * r1[j]) + (a2 * r2[j] + a3 * r3[j])
            k += 4
        while k < n_rows:
            a0, r0 = left_t[i, k] * scale, right[k]
            for j in range(row.shape[0]):
                row[j] += a0 * r0[j]
            k += 1


def add_outer(dst, left, right, void=False, scale=1.0):
    """dst += scale * left^T @ right, in place; with `void`, dst's numbers are not read (dst =
    scale * left^T @ right). Up to FEW_ROWS rows (one instance's outer product, a weight's
    few batch rows) it is this file's loop, one pass over dst where a GEMM makes two (BLAS
    clears or scales dst first) or a temporary; more rows are one GEMM summing into dst
    (blas.add_product: no product temporary with MKL) or written into it. The scale
    multiplies left's numbers in dst's precision. A left whose transpose is C-ordered (as
    Parameter keeps a gradient's factor) is read without a copy."""
    if (not isinstance(dst, np.ndarray) or left.shape[0] > FEW_ROWS or not _compiled(dst)
            or not dst.flags.c_contiguous or dst.ndim != 2):
        if scale != 1.0:
            left = left * dst.dtype.type(scale)
        blas.add_product(dst, left.T, right, accumulate=not void)
        return
    _add_outer(dst, np.ascontiguousarray(left.T, dst.dtype), np.ascontiguousarray(right, dst.dtype), not void,
               dst.dtype.type(scale))
