"""-log softmax(x)[label] per row, forward and backward each in one compiled pass.

Why: in numpy the picked loss is about eight calls per batch (max, subtract, exp, sum, log,
pick, ...), each a few microseconds on arrays as small as (B, 5), and a tree model runs one
such batch per level, forward and backward. Each row is computed alone and the same way
for one row or many, so batched and eager results stay identical. The row sum is
accumulated in float64.
"""
import math

import numpy as np
from numba import njit


@njit(cache=True)
def _row_max_and_sum(x, b):
    """The row's max m and sum of exp(x - m); NaN or inf anywhere makes the sum NaN, as numpy does."""
    m = x[b, 0]
    for j in range(1, x.shape[1]):
        if x[b, j] > m:
            m = x[b, j]
    s = 0.0
    for j in range(x.shape[1]):
        s += math.exp(x[b, j] - m)
    return m, s


@njit(cache=True)
def _forward(x, labels, out):
    for b in range(x.shape[0]):
        m, s = _row_max_and_sum(x, b)
        out[b] = math.log(s) + m - x[b, labels[b]]


@njit(cache=True)
def _backward(x, labels, gy, g):
    for b in range(x.shape[0]):
        m, s = _row_max_and_sum(x, b)
        for j in range(x.shape[1]):
            g[b, j] = math.exp(x[b, j] - m) / s * gy[b]
        g[b, labels[b]] -= gy[b]


def _computable(x, dtype):
    """x contiguous in a dtype numba computes in: float16 has no numba type, so it is widened
    to float32 (the results are rounded back to float16)."""
    return np.ascontiguousarray(x, dtype if dtype in (np.float32, np.float64) else np.float32)


def pick_neg_log_softmax(x, labels):
    """(B,) losses of the (B, n) logits x at labels (B,)."""
    xc = _computable(x, x.dtype)
    out = np.empty(x.shape[0], xc.dtype)
    _forward(xc, labels, out)
    return out.astype(x.dtype, copy=False)


def pick_neg_log_softmax_grad(x, labels, gy):
    """d loss / d x, (B, n), for the output gradient gy (B,)."""
    xc = _computable(x, x.dtype)
    g = np.empty(x.shape, xc.dtype)
    _backward(xc, labels, _computable(gy, xc.dtype), g)
    return g.astype(x.dtype, copy=False)
