"""Primitive ops, one class each; importing this package registers them all."""
from .registry import OPS, ColumnGrad, Op, OuterGrad, RowGrad, register  # noqa: F401
from . import elementwise, linalg, shape, reduce, softmax, lists, index, custom, affine_loss  # noqa: F401
from . import random, conv  # noqa: F401
