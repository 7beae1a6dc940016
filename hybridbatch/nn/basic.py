"""Dense, Embedding and Sequential."""
import numpy as np

from .. import api as F
from ..hybrid.block import Block, HybridBlock
from ..train.parameter import Parameter

ACTIVATIONS = {None: lambda x: x, "tanh": F.tanh, "sigmoid": F.sigmoid, "relu": F.relu, "gelu": F.gelu,
               "leaky_relu": F.leaky_relu, "softplus": F.softplus}


def _rng(seed):
    return np.random.default_rng(seed) if seed is not None else None


class Dense(HybridBlock):
    """y = activation(W x + b) for one instance's vector x."""

    def __init__(self, units, in_units, activation=None, use_bias=True, seed=None):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(a for a in ACTIVATIONS if a)} or None")
        rng = _rng(seed)
        self.activation = activation
        self.weight = Parameter("weight", (units, in_units), rng=rng)
        self.bias = Parameter("bias", (units,), init="zeros") if use_bias else None

    def forward(self, x):
        y = F.affine(self.weight, x, self.bias) if self.bias is not None else self.weight @ x
        return ACTIVATIONS[self.activation](y)


class Embedding(Block):
    """Row `index` of a table: per-node integers batch as one gather (not hybridizable)."""

    def __init__(self, vocab, dim, init="uniform", seed=None):
        super().__init__()
        self.weight = Parameter("weight", (vocab, dim), init=init, rng=_rng(seed))

    def forward(self, index):
        return F.lookup(self.weight, index)


class Sequential(Block):
    """Blocks applied in order."""

    def __init__(self, *blocks):
        super().__init__()
        for b in blocks:
            self.add(b)

    def add(self, *blocks):
        """Append blocks; anything else (a function such as hb.tanh) would not be registered
        as a child, so forward would silently skip it."""
        for b in blocks:
            if not isinstance(b, Block):
                raise TypeError(f"Sequential holds Blocks, not {type(b).__name__} {b!r}; wrap a "
                                f"function in a HybridBlock")
        for b in blocks:
            setattr(self, str(len(self._children)), b)

    def forward(self, x):
        for b in self._children.values():
            x = b(x)
        return x

    def __len__(self):
        return len(self._children)
