"""2-D convolution and pooling of per-instance feature maps (channels, height, width).

conv2d is stride 1 with "same" zero padding, for an odd kernel size k. im2col gathers each
output pixel's C * k * k inputs into a row, so a batch with a shared weight is ONE GEMM of
B * H * W rows by the weight, as a Dense layer's batch is (kernels/blas.py routes it). Its
input gradient is the same correlation of the output gradient with the weight flipped in
space and its channel axes swapped, so it is one GEMM too. A weight that differs per
instance takes a batched matmul instead.

Pooling takes non-overlapping k x k windows (stride k) of maps whose height and width k
divides. Max pooling's gradient goes to the elements equal to the window's maximum, shared
equally where several tie, as hb.max's does (a relu before pooling ties at 0).
"""
from ..kernels import blas
from .reduce import tie_shared
from .registry import Op, as_batched, batch_size, check, check_float, check_one_dtype, register


def _rows(xp, x, k):
    """im2col: x (B, C, H, W) as (B * H * W, k * k * C) rows, zero padded to keep H x W; a
    row's columns in (i, j, c) order, a weight's as `_weight_rows` lays them out. The rows are
    one contiguous copy of the k x k windows of a channels-last copy of x: 2.5-4x faster than
    a copy per window offset into (c, i, j) columns, strided on both sides (32 channels on
    8 x 8, 6 to 64 maps)."""
    B, C, H, W = x.shape
    p = k // 2
    padded = channels_last = x.transpose(0, 2, 3, 1)
    if p:
        padded = xp.zeros((B, H + 2 * p, W + 2 * p, C), x.dtype)
        padded[:, p:p + H, p:p + W] = channels_last
    windows = xp.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(1, 2))   # (B, H, W, C, k, k)
    return xp.ascontiguousarray(windows.transpose(0, 1, 2, 4, 5, 3)).reshape(B * H * W, k * k * C)


def _weight_rows(xp, w, flip=False):
    """w (..., O, C, k, k) as (..., O, k * k * C), C-ordered: its columns in `_rows`' order.
    flip: of the weight that correlates an output gradient back to the input (flipped in
    space, its channel axes swapped)."""
    if flip:
        w = w[..., ::-1, ::-1].swapaxes(-4, -3)
    return xp.ascontiguousarray(xp.moveaxis(w, -3, -1)).reshape(w.shape[:-3] + (-1,))


def _weight_from_rows(xp, g, shape):
    """The inverse of `_weight_rows`: g (..., O, k * k * C) as `shape` (..., O, C, k, k)."""
    *lead, C, k, _ = shape
    return xp.ascontiguousarray(xp.moveaxis(g.reshape(tuple(lead) + (k, k, C)), -1, -3))


def _correlate(xp, x, w, w_shared, flip=False):
    """y[b, o] = sum over c of x[b, c] correlated with w[o, c] ([b, o, c] per instance), same
    padding: (B, O, H, W); with flip, correlated with the flipped weight (`_weight_rows`). A
    shared weight is reordered once per packing scope (`blas.scoped`), so that MKL packs it
    from its second product on, as it packs a layer's weight."""
    B, _, H, W = x.shape
    k = w.shape[-1]
    rows = _rows(xp, x, k)
    if w_shared:
        w_rows = blas.scoped(w, ("conv2d", flip), lambda: _weight_rows(xp, w, flip))
        y = blas.shared_product(rows, w_rows.T)
    else:
        w_rows = _weight_rows(xp, w, flip)
        y = xp.matmul(rows.reshape(B, H * W, -1), w_rows.transpose(0, 2, 1))
    return y.reshape(B, H, W, w_rows.shape[-2]).transpose(0, 3, 1, 2)


@register
class Conv2D(Op):
    """The 2-D convolution (cross-correlation, as deep-learning libraries compute it) of a
    (C, H, W) feature map with an (O, C, k, k) weight for odd k, stride 1, zero padded to keep
    H x W, plus an (O,) bias when given: (O, H, W)."""
    name = "conv2d"
    cost = 1
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        x, w = shapes[:2]
        check(len(x) == 3, self.name, shapes, "takes a (channels, height, width) feature map per instance")
        check(len(w) == 4 and w[2] == w[3] and w[2] % 2 == 1, self.name, shapes,
              "takes an (out_channels, in_channels, k, k) weight with an odd k (same padding)")
        check(w[1] == x[0], self.name, shapes, f"the weight reads {w[1]} channels, the feature map has {x[0]}")
        if len(shapes) == 3:
            check(shapes[2] == (w[0],), self.name, shapes, f"the bias must be ({w[0]},), one per output channel")
        check_one_dtype(self.name, shapes, dtypes)
        check_float(self.name, shapes, dtypes)
        return (w[0],) + x[1:], dtypes[0]

    def forward(self, xp, sig, xs, aux):
        x = as_batched(xp, xs[0], sig.shared[0], batch_size(xs, sig))
        y = _correlate(xp, x, xs[1], sig.shared[1])
        if len(xs) == 3:
            y = y + (xs[2][:, None, None] if sig.shared[2] else xs[2][:, :, None, None])
        return y

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        x_shared, w_shared = sig.shared[:2]
        w = xs[1]
        grads = [None] * len(xs)
        if needs[0]:
            gx = _correlate(xp, gy, w, w_shared, flip=True)
            grads[0] = gx.sum(axis=0) if x_shared else gx
        if needs[1]:
            B, O, H, W = gy.shape
            rows = _rows(xp, as_batched(xp, xs[0], x_shared, B), w.shape[-1])
            g = gy.transpose(0, 2, 3, 1).reshape(B * H * W, O)
            if w_shared:
                gw = blas.gemm(g.T, rows)
            else:
                gw = xp.matmul(g.reshape(B, H * W, O).transpose(0, 2, 1), rows.reshape(B, H * W, -1))
            grads[1] = _weight_from_rows(xp, gw, w.shape)
        if len(xs) == 3 and needs[2]:
            gb = gy.sum(axis=(2, 3))
            grads[2] = gb.sum(axis=0) if sig.shared[2] else gb
        return tuple(grads)


class _Pool(Op):
    """Non-overlapping k x k windows of a (C, H, W) map, attrs (k,): (C, H / k, W / k)."""
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        (k,), (x,) = attrs, shapes
        check(len(x) == 3, self.name, shapes, "takes a (channels, height, width) feature map per instance")
        check(x[1] % k == 0 and x[2] % k == 0, self.name, shapes,
              f"the window {k} must divide the height {x[1]} and the width {x[2]}")
        check_float(self.name, shapes, dtypes)
        return (x[0], x[1] // k, x[2] // k), dtypes[0]

    @staticmethod
    def windows(x, k):
        """x (B, C, H, W) as (B, C, H / k, k, W / k, k): window axes 3 and 5."""
        B, C, H, W = x.shape
        return x.reshape(B, C, H // k, k, W // k, k)

    @staticmethod
    def spread(g):
        """A (B, C, Ho, Wo) value aligned with the windows' elements."""
        return g[:, :, :, None, :, None]


@register
class MaxPool2D(_Pool):
    """The largest element of each k x k window; the gradient goes to the elements equal to
    it, shared equally where several tie."""
    name = "max_pool2d"

    def forward(self, xp, sig, xs, aux):
        return self.windows(xs[0], sig.attrs[0]).max(axis=(3, 5))

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        g = tie_shared(self.windows(xs[0], sig.attrs[0]), self.spread(y), self.spread(gy), (3, 5))
        return (g.reshape(xs[0].shape),)


@register
class AvgPool2D(_Pool):
    """The mean of each k x k window."""
    name = "avg_pool2d"

    def forward(self, xp, sig, xs, aux):
        return self.windows(xs[0], sig.attrs[0]).mean(axis=(3, 5))

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        k = sig.attrs[0]
        B, C, Ho, Wo = gy.shape
        share = xp.broadcast_to(self.spread(gy) / (k * k), (B, C, Ho, k, Wo, k))
        return (share.reshape(xs[0].shape),)
