"""Ready-made blocks: layers and recurrent / tree cells written per instance."""
from .basic import Dense, Embedding, Sequential
from .conv import Conv2D, MaxPool2D, AvgPool2D
from .cells import LSTMCell, GRUCell, TreeLSTMCell, ChildSumTreeLSTMCell
from .dropout import Dropout
from .normalization import LayerNorm

__all__ = ["Dense", "Embedding", "Sequential", "LSTMCell", "GRUCell", "TreeLSTMCell", "ChildSumTreeLSTMCell",
           "Dropout", "LayerNorm", "Conv2D", "MaxPool2D", "AvgPool2D"]
