"""Compiled kernels (numba): the copies around batched ops (gather, scatter, segment sums),
fused elementwise runs, softmax losses, the few-rows product, optimizer updates, and the BLAS
routing (`blas.py`)."""
from .scatter import add_outer, scatter_add_columns, scatter_add_rows  # noqa: F401
