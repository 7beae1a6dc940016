"""Layer normalization, composed of hb ops so that it batches and fuses like any block."""
from .. import api as F
from ..errors import ShapeError
from ..hybrid.block import HybridBlock
from ..train.parameter import Parameter


class LayerNorm(HybridBlock):
    """(x - mean) / sqrt(var + eps) * gain + bias over the last axis of length `dim` (Ba et
    al. 2016), with a learned gain (ones at first) and bias (zeros)."""

    def __init__(self, dim, eps=1e-5):
        super().__init__()
        if eps <= 0:
            raise ValueError(f"LayerNorm's eps must be positive, got {eps}")
        self.dim, self.eps = dim, float(eps)
        self.gain = Parameter("gain", (dim,), init=1.0)
        self.bias = Parameter("bias", (dim,), init="zeros")

    def forward(self, x):
        shape = tuple(x.shape)
        if not shape or shape[-1] != self.dim:
            raise ShapeError(f"LayerNorm({self.dim}) normalizes a last axis of length {self.dim}; "
                             f"the operand has shape {shape}")
        centered = x - F.mean(x, axis=-1, keepdims=True)
        scale = F.sqrt(F.mean(centered * centered, axis=-1, keepdims=True) + self.eps)
        return centered / scale * self.gain + self.bias
