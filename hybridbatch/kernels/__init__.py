"""Compiled kernels (numba) for the copies around batched ops."""
from .scatter import scatter_add_rows  # noqa: F401
