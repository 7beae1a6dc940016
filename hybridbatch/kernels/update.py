"""The plain SGD step in one compiled pass, where numpy makes two over the gradient (scale,
subtract). A dense gradient is then cleared by Parameter.zero_grad (marked void, without a
pass, where nothing else holds it); a gradient's rows are cleared in the pass that reads
them."""
import numpy as np
from numba import njit

_COMPILED = (np.dtype(np.float32), np.dtype(np.float64))


@njit(cache=True)
def _descend(weight, grad, coef):
    for i in range(weight.shape[0]):
        weight[i] -= coef * grad[i]


@njit(cache=True)
def _descend_rows(weight, grad, rows, coef):
    for k in range(rows.shape[0]):
        r = rows[k]
        for j in range(weight.shape[1]):
            weight[r, j] -= coef * grad[r, j]
            grad[r, j] = 0


def descend(weight, grad, coef, rows=None):
    """weight -= coef * grad everywhere; or in the leading-axis `rows` only, then grad = 0
    there. Returns False, having done nothing, where numba cannot write the arrays in place
    (cupy, float16, a strided view, dtypes that differ): the caller's numpy path does it."""
    if not (isinstance(weight, np.ndarray) and isinstance(grad, np.ndarray)
            and weight.dtype == grad.dtype and weight.dtype in _COMPILED
            and weight.flags.c_contiguous and grad.flags.c_contiguous):
        return False
    coef = weight.dtype.type(coef)       # the arithmetic stays in the weight's precision
    if rows is None:
        _descend(weight.reshape(-1), grad.reshape(-1), coef)
    elif len(rows):
        n = weight.shape[0]
        _descend_rows(weight.reshape(n, -1), grad.reshape(n, -1), rows, coef)
    return True
