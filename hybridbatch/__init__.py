"""hybridbatch: write the per-instance model, run it batched.

    with hb.batching():          # calls return Futures; a flush runs them in batches
        losses = [model(x) for x in minibatch]
"""
from .runtime import memory  # noqa: F401  (keeps freed arenas in the heap: see memory.py)
from .api import (array, matmul, affine, add, sub, mul, div, tanh, sigmoid, relu, exp, log, add_n,
                  concat, slice, split, reshape, sum, lookup, pick, log_softmax, pick_neg_log_softmax,
                  py_func, learn_policy, FSMPolicy)
from .hybrid.block import Block, HybridBlock
from .record.eager import Tensor
from . import nn
from .errors import HybridBatchError, ShapeError, ScopeError, NumericsError
from .record.future import Future
from .train.parameter import Parameter
from .train.parameter_dict import ParameterDict
from .train.optim import Trainer
from .record.scope import batching, Stats
from .runtime.plan_cache import set_plan_cache_size
from .hybrid.passes import set_fusion
from .hybrid.distinct import set_distinct_rows
from .kernels.blas import use as set_blas, name as blas_library

__all__ = [
    "array", "matmul", "affine", "add", "sub", "mul", "div", "tanh", "sigmoid", "relu", "exp", "log",
    "add_n", "concat", "slice", "split", "reshape", "sum", "lookup", "pick", "log_softmax",
    "pick_neg_log_softmax", "py_func", "Tensor", "HybridBatchError", "ShapeError", "ScopeError",
    "NumericsError", "Future", "Parameter", "batching", "Stats",
    "ParameterDict", "Trainer", "Block", "HybridBlock", "nn", "set_plan_cache_size", "set_fusion",
    "set_distinct_rows",
    "learn_policy", "FSMPolicy", "set_blas", "blas_library",
]
