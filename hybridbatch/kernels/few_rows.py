"""x @ w for a batch of a few rows by a shared weight, compiled (numba).

Why: a tree's deep levels and a sequence batch's last steps multiply a large weight (say
1280 x 512, 2.6 MB) by 1-60 rows. BLAS libraries tune for many rows: OpenBLAS copies
(packs) the whole weight on every call and MKL's packed product has a high fixed cost, so
both ran such products at 12-70 GFLOP/s on this project's machine. Here the weight streams
through once: each group of 4 weight rows is loaded into L1 and used by every batch row
before the next group, with 8-16 independent sums in registers. That ran 2-4x faster below 16
rows, and x @ W.T 10-35% faster up to 1,024 rows where numpy's OpenBLAS is pinned to its AVX2
kernels (numba compiles for the CPU itself). Whether a product comes here is measured
(`blas.kernel_below()`). With AVX-512 both kernels compile with 512-bit vectors
(`vector_width.py`): g @ W ran about 25% faster.

Sums are reordered for vectors ('reassoc'), as any BLAS does; NaN and inf propagate as in
numpy (no 'nnan'/'ninf'). Both kernels ask for the weight's rows AHEAD of their use
(prefetch.py): from memory, the arithmetic on each group of rows otherwise left the
hardware prefetcher behind.
"""
import numpy as np
from numba import njit

from .prefetch import prefetch_row
from .vector_width import WIDE_VECTORS, compiled_wide

_FAST = {"reassoc", "contract", "nsz", "arcp"}
AHEAD = 8       # weight rows (two groups of 4) asked for ahead of their use: see prefetch.py


@njit(inline="always")
def _prefetch_group(w, first):
    """Ask for w's rows first..first+3, those that exist."""
    for o in range(first, min(first + 4, w.shape[0])):
        prefetch_row(w, o)


def product(x, w):
    """x @ w for x (B, K) and w (K, N) that is C-ordered or the transposed view of a
    C-ordered (N, K) array (a layer's weight in its forward, W.T); float32 or float64."""
    x = np.ascontiguousarray(x)
    out = np.empty((x.shape[0], w.shape[1]), x.dtype)
    if w.flags.c_contiguous:
        _times(x, w, out)
    else:
        _times_transposed(x, w.T, out)
    return out


@njit(cache=True, fastmath=_FAST, error_model="numpy", boundscheck=False)
def _times_transposed(x, w, out):
    """out = x @ w.T, w (N, K) C-ordered: dot products along w's rows, 4 batch rows by 4
    weight rows at a time. A last group of 2 or 3 rows repeats its last row to fill the 4
    (stored once); a last single row runs alone: at one row the weight's stream is the cost."""
    R, K = x.shape
    N = w.shape[0]
    z = x.dtype.type(0)
    for o in range(0, N - N % 4, 4):
        _prefetch_group(w, o + AHEAD)
        r = 0
        while r + 1 < R:
            r1, r2, r3 = r + 1, min(r + 2, R - 1), min(r + 3, R - 1)
            s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = z
            s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = z
            for k in range(K):
                b0, b1, b2, b3 = w[o, k], w[o + 1, k], w[o + 2, k], w[o + 3, k]
                a = x[r, k]
                s00 += a * b0; s01 += a * b1; s02 += a * b2; s03 += a * b3
                a = x[r1, k]
                s10 += a * b0; s11 += a * b1; s12 += a * b2; s13 += a * b3
                a = x[r2, k]
                s20 += a * b0; s21 += a * b1; s22 += a * b2; s23 += a * b3
                a = x[r3, k]
                s30 += a * b0; s31 += a * b1; s32 += a * b2; s33 += a * b3
            out[r, o], out[r, o + 1], out[r, o + 2], out[r, o + 3] = s00, s01, s02, s03
            out[r1, o], out[r1, o + 1], out[r1, o + 2], out[r1, o + 3] = s10, s11, s12, s13
            out[r2, o], out[r2, o + 1], out[r2, o + 2], out[r2, o + 3] = s20, s21, s22, s23
            out[r3, o], out[r3, o + 1], out[r3, o + 2], out[r3, o + 3] = s30, s31, s32, s33
            r += 4
        if r < R:
            s00 = s01 = s02 = s03 = z
            for k in range(K):
                a = x[r, k]
                s00 += a * w[o, k]; s01 += a * w[o + 1, k]; s02 += a * w[o + 2, k]; s03 += a * w[o + 3, k]
            out[r, o], out[r, o + 1], out[r, o + 2], out[r, o + 3] = s00, s01, s02, s03
    for o in range(N - N % 4, N):
        for r in range(R):
            s = z
            for k in range(K):
                s += x[r, k] * w[o, k]
            out[r, o] = s


@njit(cache=True, fastmath=_FAST, error_model="numpy", boundscheck=False)
def _times(g, w, out):
    """out = g @ w, w (N, K) C-ordered: each batch row adds 4 weight rows scaled by its
    entries at a time, 4 batch rows (or 2, or 1) sharing the weight rows' loads."""
    R, N = g.shape
    K = w.shape[1]
    out[:] = 0
    for o in range(0, N - N % 4, 4):
        _prefetch_group(w, o + AHEAD)
        r = 0
        while r + 4 <= R:
            c0, c1, c2, c3 = g[r, o], g[r, o + 1], g[r, o + 2], g[r, o + 3]
            d0, d1, d2, d3 = g[r + 1, o], g[r + 1, o + 1], g[r + 1, o + 2], g[r + 1, o + 3]
            e0, e1, e2, e3 = g[r + 2, o], g[r + 2, o + 1], g[r + 2, o + 2], g[r + 2, o + 3]
            f0, f1, f2, f3 = g[r + 3, o], g[r + 3, o + 1], g[r + 3, o + 2], g[r + 3, o + 3]
            for k in range(K):
                b0, b1, b2, b3 = w[o, k], w[o + 1, k], w[o + 2, k], w[o + 3, k]
                out[r, k] += (c0 * b0 + c1 * b1) + (c2 * b2 + c3 * b3)
                out[r + 1, k] += (d0 * b0 + d1 * b1) + (d2 * b2 + d3 * b3)
                out[r + 2, k] += (e0 * b0 + e1 * b1) + (e2 * b2 + e3 * b3)
                out[r + 3, k] += (f0 * b0 + f1 * b1) + (f2 * b2 + f3 * b3)
            r += 4
        if r + 2 <= R:
            c0, c1, c2, c3 = g[r, o], g[r, o + 1], g[r, o + 2], g[r, o + 3]
            d0, d1, d2, d3 = g[r + 1, o], g[r + 1, o + 1], g[r + 1, o + 2], g[r + 1, o + 3]
            for k in range(K):
                b0, b1, b2, b3 = w[o, k], w[o + 1, k], w[o + 2, k], w[o + 3, k]
                out[r, k] += (c0 * b0 + c1 * b1) + (c2 * b2 + c3 * b3)
                out[r + 1, k] += (d0 * b0 + d1 * b1) + (d2 * b2 + d3 * b3)
            r += 2
        if r < R:
            c0, c1, c2, c3 = g[r, o], g[r, o + 1], g[r, o + 2], g[r, o + 3]
            for k in range(K):
                out[r, k] += (c0 * w[o, k] + c1 * w[o + 1, k]) + (c2 * w[o + 2, k] + c3 * w[o + 3, k])
    for o in range(N - N % 4, N):
        for r in range(R):
            c = g[r, o]
            for k in range(K):
                out[r, k] += c * w[o, k]


if WIDE_VECTORS:
    compiled_wide(_times_transposed)
    compiled_wide(_times)
