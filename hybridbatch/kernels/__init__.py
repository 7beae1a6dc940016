"""Compiled kernels (numba) for the copies around batched ops."""
from .scatter import add_outer, scatter_add_columns, scatter_add_rows  # noqa: F401
