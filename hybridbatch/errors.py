"""Exceptions raised at the line of user code that caused them."""


class HybridBatchError(Exception):
    """Base class of every error hybridbatch raises on purpose: catch it to tell a misuse
    of the library from a bug elsewhere. Each subclass is also the builtin error it is a kind
    of (ShapeError a ValueError, ScopeError a RuntimeError, ...).

    >>> try:
    ...     hb.add(hb.array(np.zeros(2)), hb.array(np.zeros(3)))
    ... except hb.HybridBatchError as e:
    ...     print(type(e).__name__)
    ShapeError
    """


class ShapeError(HybridBatchError, ValueError):
    """An op was recorded with operands whose shapes (or dtypes) do not fit together. It is
    raised at the call that recorded the op, eagerly or in a scope, not at the flush.

    >>> hb.add(hb.array(np.zeros(2)), hb.array(np.zeros(3)))
    Traceback (most recent call last):
    ...
    hybridbatch.errors.ShapeError: add: operands of shapes (2,) and (3,) do not fit: they do not broadcast
    """


class ScopeError(HybridBatchError, RuntimeError):
    """A future was used outside the scope that recorded it, or its scope failed. Read a
    Future's value (asnumpy) to use it elsewhere.

    >>> with hb.batching():
    ...     y = hb.tanh(hb.array([1.0]))
    >>> hb.exp(y)
    Traceback (most recent call last):
    ...
    hybridbatch.errors.ScopeError: a Future is used outside its batching scope; ...
    >>> hb.exp(y.asnumpy()).shape
    (1,)
    """


class BackwardError(HybridBatchError, RuntimeError):
    """backward() was called again from a value whose graph was not kept (retain_graph):
    it would add the same gradients into Parameter.grad a second time.

    >>> w = hb.Parameter("w", (2,), init=1.0)
    >>> loss = hb.sum(w * hb.array([3.0, 4.0]))
    >>> loss.backward()
    >>> loss.backward()
    Traceback (most recent call last):
    ...
    hybridbatch.errors.BackwardError: backward() already ran from this value; ...
    """


class NumericsError(HybridBatchError, FloatingPointError):
    """An op produced NaN or inf while `check_numerics` was on: the error names the op and
    the line that recorded it, where a NaN loss would say nothing.

    >>> with hb.batching(check_numerics=True):
    ...     y = hb.log(hb.array([-1.0]))
    ...     y.asnumpy()
    Traceback (most recent call last):
    ...
    hybridbatch.errors.NumericsError: log produced NaN/inf in node ...
    """
