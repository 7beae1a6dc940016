"""Future: a handle to a value recorded in a batching scope and computed at its next flush."""
import math

import numpy as np

from . import signature


class Future:
    """A value recorded in a batching scope, computed at the scope's next flush: (scope,
    node id) and nothing else; shape and dtype come from the node's type, known at once.
    A read (asnumpy(), item(), float(), bool(), a comparison) flushes if it is pending.

    >>> with hb.batching():
    ...     y = hb.tanh(hb.array([0.0, 1.0])) * 2
    ...     y.shape, y.dtype                      # known before any flush
    ((2,), dtype('float32'))
    >>> y.asnumpy().round(3)
    array([0.   , 1.523], dtype=float32)
    """

    __slots__ = ("scope", "id")

    def __init__(self, scope, nid):
        self.scope = scope
        self.id = nid

    @property
    def shape(self):
        """The per-instance shape, known from the moment the op is recorded (no read)."""
        return signature.TYPES[self.scope.graph.type[self.id]][0]

    @property
    def dtype(self):
        """The numpy dtype, known from the moment the op is recorded (no read)."""
        return signature.TYPES[self.scope.graph.type[self.id]][1]

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        """The number of elements per instance, as numpy's size (no read)."""
        return math.prod(self.shape)

    def __len__(self):
        """The length of the first axis, as numpy's len(); a 0-d value has none: a TypeError,
        as numpy raises for a 0-d array, rather than the IndexError of shape[0]."""
        if not self.shape:
            raise TypeError("len() of a 0-d value")
        return self.shape[0]

    def asnumpy(self):
        """The value, as a new numpy array. A read: if the value is still pending it flushes
        the scope, or inside hb.map suspends this instance until the map's next flush.
        item(), int(), float(), bool(), round(), a format spec and <, <=, >, >= read the
        same way."""
        return self.scope.value(self.id)

    def item(self):
        """The value as a Python number: a read, as asnumpy()."""
        return self.asnumpy().item()

    def __float__(self):
        return float(self.asnumpy())

    def __int__(self):
        return int(self.asnumpy())

    def __bool__(self):
        """numpy's truth value of the numbers (a read), as an eager Tensor's."""
        return bool(self.asnumpy())

    def __format__(self, spec):
        """f"{loss:.4f}" formats a 0-d value as its number (a read), as numpy does; an empty
        spec gives str(), which reads nothing."""
        if not spec:
            return str(self)
        if self.shape:
            raise TypeError(f"format spec {spec!r} needs a 0-d value, not one of shape {self.shape}; "
                            f"format the numbers of .asnumpy()")
        return format(self.asnumpy(), spec)

    def __round__(self, ndigits=None):
        """round(loss, 2) rounds a 0-d value as its number (a read)."""
        if self.shape:
            raise TypeError(f"round() needs a 0-d value, not one of shape {self.shape}; "
                            f"use np.round(x.asnumpy(), ndigits)")
        return round(self.asnumpy()[()], ndigits)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.asnumpy(), dtype=dtype)

    def backward(self, retain_graph=False):
        """Gradients of this scalar into every Parameter it depends on (accumulates).

        Once per value, as in PyTorch: another call raises BackwardError, unless the call
        before it passed retain_graph=True; a call so allowed adds the same gradients again."""
        self.scope.backward(self.id, retain_graph)

    def __repr__(self):
        return f"Future(node={self.id}, shape={self.shape}, dtype={self.dtype.name})"


_new = object.__new__


def future_of(scope, nid):
    """Node nid's Future, made without Future.__init__'s frame (recording's hot path)."""
    f = _new(Future)
    f.scope = scope
    f.id = nid
    return f


def _two(scope, nid):
    a = _new(Future)
    b = _new(Future)
    a.scope = b.scope = scope
    a.id, b.id = nid, nid + 1
    return a, b


def _three(scope, nid):
    a = _new(Future)
    b = _new(Future)
    c = _new(Future)
    a.scope = b.scope = c.scope = scope
    a.id, b.id, c.id = nid, nid + 1, nid + 2
    return a, b, c


def maker(n, container):
    """A function (scope, nid) -> the Future of node nid (container None) or the tuple or
    list (container) of the n Futures of nodes nid.. (a block call's outputs). Recording's
    hot path: it sets the two slots itself, a third cheaper than calling Future (whose
    __init__ is a Python frame)."""
    if container is None:
        return future_of
    if container is list:
        return lambda scope, nid: [future_of(scope, nid + j) for j in range(n)]
    if n == 2:
        return _two
    if n == 3:
        return _three
    return lambda scope, nid: tuple([future_of(scope, nid + j) for j in range(n)])
