"""hybridbatch: write the per-instance model, run it batched.

    with hb.batching():          # calls return Futures; a flush runs them in batches
        losses = [model(x) for x in minibatch]
"""
__version__ = "0.1.0"   # the one source of the version: pyproject.toml reads it from here

import importlib as _importlib

from .runtime import memory as _memory  # noqa: F401  (keeps freed arenas in the heap: see memory.py)
from .api import (UNARY as _UNARY, array, matmul, affine, add, sub, mul, div, pow, maximum, minimum, clip, where,
                  leaky_relu,
                  cast, add_n, weighted_sum, concat, stack, slice, split, reshape, flatten, expand_dims, squeeze,
                  transpose, sum, mean, var, std, logsumexp, max, min, argmax, argmin, topk, lookup, pick, softmax, log_softmax,
                  pick_neg_log_softmax, py_func, conv2d, max_pool2d, avg_pool2d, learn_policy, FSMPolicy)
from .api import dropout, seed
from .runtime.profile import Profile, profile
from .hybrid.block import Block, HybridBlock
from .record.eager import Tensor
from . import nn
from .errors import HybridBatchError, ShapeError, ScopeError, BackwardError, NumericsError
from .record.future import Future
from .train.parameter import Parameter
from .train.parameter_dict import ParameterDict
from .train.optim import Trainer
from .train import distributed
from .record.scope import batching, Stats
from .record.mapping import map
from .config import settings, set_fusion, set_distinct_rows, set_plan_cache_size, set_blas, blas_library

globals().update(_UNARY)      # hb.tanh, hb.exp, ...: one per unary elementwise op (api.UNARY)

from .kernels import preload as _preload   # noqa: E402  (after every module: it loads theirs)
_preload.start()

__all__ = [
    "array", "matmul", "affine", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "clip", "where", "cast",
    "leaky_relu",
    *_UNARY, "add_n", "weighted_sum", "concat", "stack", "slice", "split", "reshape", "flatten", "expand_dims",
    "squeeze", "transpose", "sum", "mean", "var", "std", "logsumexp", "max", "min", "argmax", "argmin", "topk", "lookup", "pick",
    "softmax", "log_softmax", "pick_neg_log_softmax", "py_func", "conv2d", "max_pool2d", "avg_pool2d", "Tensor",
    "HybridBatchError", "ShapeError", "ScopeError", "BackwardError", "NumericsError", "Future", "Parameter", "batching",
    "Stats", "map", "ParameterDict", "Trainer", "Block", "HybridBlock", "nn", "set_plan_cache_size", "set_fusion",
    "set_distinct_rows", "learn_policy", "FSMPolicy", "set_blas", "blas_library", "settings",
    "dropout", "seed", "profile", "Profile", "distributed",
]


def __getattr__(name):
    """hb.serve, imported on first use: its asyncio and threads stay out of every process
    that only trains (the kernel compile worker imports hybridbatch too); for that it is not
    in __all__, which `from hybridbatch import *` would import."""
    if name == "serve":
        return _importlib.import_module(".serve", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
