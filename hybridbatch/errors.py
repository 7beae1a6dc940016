"""Exceptions raised at the line of user code that caused them."""


class HybridBatchError(Exception):
    """Base class of every error hybridbatch raises on purpose."""


class ShapeError(HybridBatchError, ValueError):
    """An op was recorded with operands whose shapes do not fit together."""


class ScopeError(HybridBatchError, RuntimeError):
    """A future was used outside the scope that recorded it, or its scope failed."""


class BackwardError(HybridBatchError, RuntimeError):
    """backward() was called again from a value whose graph was not kept (retain_graph)."""


class NumericsError(HybridBatchError, FloatingPointError):
    """An op produced NaN or inf while `check_numerics` was on."""
