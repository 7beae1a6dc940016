"""Row scatter-add: dst[rows[k]] += src[k], correct when rows repeat (np.add.at is slow)."""
import numpy as np
from numba import njit


@njit(cache=True)
def _scatter_add_2d(dst, rows, src):
    width = dst.shape[1]
    for k in range(rows.shape[0]):
        r = rows[k]
        for j in range(width):
            dst[r, j] += src[k, j]


def scatter_add_rows(dst, rows, src):
    """Add each row of `src` into `dst` at `rows` (leading axis); other axes flattened."""
    if not isinstance(dst, np.ndarray):     # cupy: its own atomic scatter-add
        import cupyx
        cupyx.scatter_add(dst, rows, src)
        return
    d2 = dst.reshape(dst.shape[0], -1)
    s2 = np.ascontiguousarray(src).reshape(len(rows), -1)
    if d2.dtype != s2.dtype:
        s2 = s2.astype(d2.dtype)
    _scatter_add_2d(d2, np.asarray(rows, np.int64), s2)
