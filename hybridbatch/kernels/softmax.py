"""-log softmax(x)[label] per row, forward and backward each in one compiled pass.

Why: in numpy the picked loss is about eight calls per batch (max, subtract, exp, sum, log,
pick, ...), each a few microseconds on arrays as small as (B, 5), and a tree model runs one
such batch per level, forward and backward. Each row is computed alone and the same way
for one row or many, so batched and eager results stay identical. The row sum is
accumulated in float64. The classifier layer folded with the loss (below) sums its dot
products in another order than numpy's product, so it agrees with eager mode to rounding.
"""
import math

import numpy as np
from numba import njit


@njit(cache=True)
def _row_exp(x, b, e):
    """The row's max m and sum s of e = exp(x - m) (float64, kept in e: backward divides
    them by s instead of computing each exp twice, a libm call per element); NaN or inf
    anywhere makes the sum NaN, as numpy does."""
    m = x[b, 0]
    for j in range(1, x.shape[1]):
        if x[b, j] > m:
            m = x[b, j]
    s = 0.0
    for j in range(x.shape[1]):
        e[j] = math.exp(x[b, j] - m)
        s += e[j]
    return m, s


@njit(cache=True)
def _forward(x, labels, out):
    e = np.empty(x.shape[1])
    for b in range(x.shape[0]):
        m, s = _row_exp(x, b, e)
        out[b] = math.log(s) + m - x[b, labels[b]]


@njit(cache=True)
def _backward(x, labels, gy, g):
    e = np.empty(x.shape[1])
    for b in range(x.shape[0]):
        m, s = _row_exp(x, b, e)
        for j in range(x.shape[1]):
            g[b, j] = e[j] / s * gy[b]
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


# -- a classifier layer and its picked loss, -log softmax(W x + b)[label], in one pass ------
# A tree model's 5-class output layer is a (B, 256) @ (256, 5) product per level: BLAS
# spends more on the call than on the product, and the layer, its bias and the loss were
# three ops with their own Python and temporaries, forward and backward. Dot products may
# be summed in any order (reassoc vectorizes them); NaN and inf still propagate.
@njit(cache=True, fastmath={"reassoc", "contract"}, error_model="numpy", inline="always")
def _logits(x, r, w, bias, z):
    """z[0, j] = bias[j] + w[j] . x[r]."""
    for j in range(w.shape[0]):
        s = bias[j]
        for k in range(w.shape[1]):
            s += w[j, k] * x[r, k]
        z[0, j] = s


@njit(cache=True, fastmath={"reassoc", "contract"}, error_model="numpy")
def _affine_forward(x, w, bias, labels, out):
    z = np.empty((1, w.shape[0]), out.dtype)
    e = np.empty(w.shape[0])
    for r in range(x.shape[0]):
        _logits(x, r, w, bias, z)
        m, s = _row_exp(z, 0, e)
        out[r] = math.log(s) + m - z[0, labels[r]]


@njit(cache=True, fastmath={"reassoc", "contract"}, error_model="numpy")
def _affine_backward(x, w, bias, labels, gy, gx, gw, gbias):
    z = np.empty((1, w.shape[0]), gx.dtype)
    e = np.empty(w.shape[0])
    for r in range(x.shape[0]):
        _logits(x, r, w, bias, z)
        m, s = _row_exp(z, 0, e)
        for j in range(w.shape[0]):        # z becomes d loss / d logits
            z[0, j] = e[j] / s * gy[r]
        z[0, labels[r]] -= gy[r]
        for k in range(w.shape[1]):
            gx[r, k] = 0
        for j in range(w.shape[0]):
            g = z[0, j]
            gbias[j] += g
            for k in range(w.shape[1]):
                gx[r, k] += g * w[j, k]
                gw[j, k] += g * x[r, k]


def affine_pick_neg_log_softmax(x, w, bias, labels):
    """(B,) losses -log softmax(w @ x[r] + bias)[labels[r]] of the rows x (B, k)."""
    out = np.empty(x.shape[0], x.dtype)
    _affine_forward(x, w, bias, labels, out)
    return out


def affine_pick_neg_log_softmax_grad(x, w, bias, labels, gy):
    """(gx (B, k), gw (n, k), gbias (n,)) for the output gradient gy (B,). The thin weight's
    gradient is summed in the same pass (it stays in L1), where an outer product for the
    one GEMM per weight had to copy every batch's rows into one stack first."""
    gx = np.empty(x.shape, x.dtype)
    gw = np.zeros(w.shape, x.dtype)
    gbias = np.zeros(w.shape[0], x.dtype)
    _affine_backward(x, w, bias, labels, np.ascontiguousarray(gy, x.dtype), gx, gw, gbias)
    return gx, gw, gbias
