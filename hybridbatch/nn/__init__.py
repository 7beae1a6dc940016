"""Ready-made blocks: layers and recurrent / tree cells written per instance, so that a
model is built from parts that batch (and, hybridized, fuse) without writing their ops.

    >>> layer = hb.nn.Dense(2, 3, activation="relu", seed=0)
    >>> layer(hb.array([1.0, 2.0, 3.0])).shape
    (2,)
    >>> cell = hb.nn.LSTMCell(4, 3, seed=0)
    >>> zeros = np.zeros(4, np.float32)
    >>> h, c = cell(hb.array([1.0, 2.0, 3.0]), zeros, zeros)
    >>> h.shape, c.shape
    ((4,), (4,))
"""
from .basic import Dense, Embedding, Sequential
from .conv import Conv2D, MaxPool2D, AvgPool2D
from .cells import LSTMCell, GRUCell, TreeLSTMCell, ChildSumTreeLSTMCell
from .dropout import Dropout
from .normalization import LayerNorm
from .attention import Attention

__all__ = ["Dense", "Embedding", "Sequential", "LSTMCell", "GRUCell", "TreeLSTMCell", "ChildSumTreeLSTMCell",
           "Dropout", "LayerNorm", "Conv2D", "MaxPool2D", "AvgPool2D", "Attention"]
