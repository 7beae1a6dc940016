"""Convolution and pooling layers over one instance's (channels, height, width) feature map."""
from .. import api as F
from ..hybrid.block import Block, HybridBlock
from ..ops.registry import as_int
from ..train.parameter import Parameter
from .basic import ACTIVATIONS, _rng


class Conv2D(HybridBlock):
    """y = activation(conv2d(x, W) + b): stride 1, zero padded to keep height and width, an
    odd kernel_size. A HybridBlock, so a batch of calls runs as one block call."""

    def __init__(self, channels, in_channels, kernel_size, activation=None, use_bias=True, seed=None):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(a for a in ACTIVATIONS if a)} or None")
        k = as_int("Conv2D's kernel_size", kernel_size)
        if k < 1 or k % 2 == 0:
            raise ValueError(f"Conv2D pads 'same', which needs an odd kernel_size, not {k}")
        self.activation = activation
        self.weight = Parameter("weight", (channels, in_channels, k, k), rng=_rng(seed))
        self.bias = Parameter("bias", (channels,), init="zeros") if use_bias else None

    def forward(self, x):
        return ACTIVATIONS[self.activation](F.conv2d(x, self.weight, self.bias))


class _Pool2D(Block):
    """One pooling op: a plain Block, so a hybridized block that calls it holds the op itself."""
    pool = None

    def __init__(self, k=2):
        super().__init__()
        self.k = F.pool_window(type(self).__name__, k)

    def forward(self, x):
        return self.pool(x, self.k)

    def __repr__(self):
        return f"{type(self).__name__}(k={self.k})"


class MaxPool2D(_Pool2D):
    """The largest element of each k x k window, stride k (hb.max_pool2d)."""
    pool = staticmethod(F.max_pool2d)


class AvgPool2D(_Pool2D):
    """The mean of each k x k window, stride k (hb.avg_pool2d)."""
    pool = staticmethod(F.avg_pool2d)
