"""Dropout as a layer, on in training mode and the identity after eval()."""
from .. import api as F
from ..hybrid.block import Block


class Dropout(Block):
    """hb.dropout(x, p) while training (Block.train()), x itself after eval().

    A plain Block: inside a hybridized block it is inlined, its mode baked into that
    block's trace for the current modes (train() and eval() switch traces)."""

    def __init__(self, p=0.5):
        super().__init__()
        self.p = F.dropout_rate(p)      # a bad rate raises here, not at the first call

    def forward(self, x):
        return F.dropout(x, self.p) if self.training else x

    def __repr__(self):
        return f"Dropout(p={self.p})"
