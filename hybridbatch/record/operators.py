"""Python operators (+ - * / ** @, unary -, abs(), indexing, .T) for every value handle.

Installed onto Future, Tensor and Parameter by the api module, so `W @ h + b` reads the
same inside and outside a batching scope.
"""
import math

import numpy as np


def install(cls, api, named=False):
    """named: cls is a named container (Parameter), kept in lists and compared by identity;
    on values (Future, Tensor) `==` and `!=` raise, and `<`, `<=`, `>`, `>=` read the
    numbers and compare them as numpy does (a read: see Future.asnumpy)."""
    def reflected(fn):
        return lambda self, other: fn(other, self)

    cls.__add__ = api.add       # a function as a class attribute: a.__add__(b) is add(a, b), one frame
    cls.__radd__ = lambda self, other: self if _sum_start(other, self) else api.add(other, self)
    cls.__sub__ = api.sub
    cls.__rsub__ = reflected(api.sub)
    cls.__mul__ = api.mul
    cls.__rmul__ = reflected(api.mul)
    cls.__truediv__ = api.div
    cls.__rtruediv__ = reflected(api.div)
    cls.__matmul__ = api.matmul
    cls.__rmatmul__ = reflected(api.matmul)
    cls.__pow__ = api.pow
    cls.__rpow__ = reflected(api.pow)
    cls.__neg__ = api._negative
    cls.__pos__ = lambda self: self             # +x: the value itself (values are never written)
    cls.__abs__ = lambda self: api.abs(self)      # hb.abs is made after install runs
    # numpy's methods of the same names, for code written against arrays; keepdims by keyword
    # only, as numpy's second argument is a dtype
    def reshape(self, *shape):
        """value.reshape(3, 2) or value.reshape((3, 2)), as numpy's."""
        if not shape:
            raise TypeError("reshape() needs the new shape: value.reshape(3, 2) or value.reshape((3, 2))")
        return api.reshape(self, shape[0] if len(shape) == 1 else shape)
    cls.reshape = reshape
    cls.sum = lambda self, axis=None, *, keepdims=False: api.sum(self, axis, keepdims)
    cls.mean = lambda self, axis=None, *, keepdims=False: api.mean(self, axis, keepdims)
    cls.max = lambda self, axis=None, *, keepdims=False: api.max(self, axis, keepdims)
    cls.min = lambda self, axis=None, *, keepdims=False: api.min(self, axis, keepdims)
    cls.T = property(api.transpose)
    cls.__getitem__ = lambda self, key: api.slice(self, key)
    cls.__iter__ = _iterate
    cls.__array_priority__ = 1000   # ndarray op handle -> our reflected operator
    if not named:
        cls.__eq__ = cls.__ne__ = _refuse_comparison
        cls.__lt__ = lambda self, other: self.asnumpy() < _numbers(other)
        cls.__le__ = lambda self, other: self.asnumpy() <= _numbers(other)
        cls.__gt__ = lambda self, other: self.asnumpy() > _numbers(other)
        cls.__ge__ = lambda self, other: self.asnumpy() >= _numbers(other)
        cls.__hash__ = object.__hash__  # handles stay usable as dict keys and set members
    # numpy functions refuse handles (TypeError): np.tanh(W @ x) read the value through
    # __array__, silently dropping W's gradient, and np.sum(W) returned W itself; so did
    # np.dot and np.concatenate. A ufunc answers `array op value` with the handle's reflected
    # operator. np.asarray(h) still reads the numbers, as asked.
    cls.__array_ufunc__ = _ufunc_on_handle
    cls.__array_function__ = _refuse_numpy_function


def _refuse_comparison(value, other):
    """`==` and `!=` compared handles, not numbers: `h == 0` was False and `h != h2` True,
    silently, where numpy compares element by element (`<` and the others already raise)."""
    raise TypeError(f"== and != on a {type(value).__name__} would compare the handles, not their numbers: "
                    f"read the numbers first (.asnumpy()) to compare them, or use `is` to ask whether "
                    f"two handles are the same")


def _numbers(other):
    """An operand of <, <=, >, >= as numbers: a value handle is read (as numpy would)."""
    return other.asnumpy() if hasattr(other, "asnumpy") else other


# `array op value` reaches the handle as a ufunc: the handle's reflected operator answers it
_REFLECTED = {np.add: "__radd__", np.subtract: "__rsub__", np.multiply: "__rmul__", np.true_divide: "__rtruediv__",
              np.matmul: "__rmatmul__", np.power: "__rpow__", np.equal: "__eq__", np.not_equal: "__ne__",
              np.less: "__gt__", np.less_equal: "__ge__", np.greater: "__lt__", np.greater_equal: "__le__"}
_IDENTITY = {np.equal: False, np.not_equal: True}   # `array == Parameter`: Python's answer for unlike objects
_HB_NAME = {"absolute": "abs", "multiply": "mul", "subtract": "sub", "true_divide": "div", "divide": "div",
            "power": "pow"}


def _ufunc_on_handle(value, ufunc, method, *inputs, **kwargs):
    """A numpy ufunc given a handle. `array op value` is the handle's reflected operator, so
    the op is recorded; anything else raises, naming the hb op to use: np.tanh(h), and an
    in-place `acc += h` or `acc[i] += h`, which would store the numbers into the array
    (the gradient lost) where Python hands the result to a subscript."""
    reflected = _REFLECTED.get(ufunc)
    if reflected is not None and method == "__call__" and len(inputs) == 2 and inputs[1] is value \
            and inputs[0] is not value:
        if kwargs.keys() == {"out"}:
            raise TypeError(f"an array updated in place by a {type(value).__name__} (acc += h, acc[i] += h) would "
                            f"hold its numbers and drop its gradient: write acc = acc + h, a new value")
        if not kwargs:
            result = getattr(value, reflected)(inputs[0])
            return _IDENTITY[ufunc] if result is NotImplemented and ufunc in _IDENTITY else result
    from .. import api
    name = ufunc.__name__
    hb_name = _HB_NAME.get(name, name)
    use = f"hb.{hb_name}" if method == "__call__" and hasattr(api, hb_name) else "the hb op (hb.tanh, hb.sum, ...)"
    if method != "__call__":
        name += f".{method}"
    raise TypeError(f"numpy's {name} on a {type(value).__name__} would compute on its numbers and drop its "
                    f"gradient: use {use}, or read the numbers first (.asnumpy(), or a Parameter's .data)")


def _refuse_numpy_function(value, func, types, args, kwargs):
    shape_only = _SHAPE_ONLY.get(func)
    if shape_only is not None:              # reads no number, drops no gradient
        return shape_only(*args, **kwargs)
    raise TypeError(f"numpy's {func.__name__} on a {type(value).__name__} would compute on its numbers and drop "
                    f"its gradient: use the hb op (hb.matmul, hb.concat, hb.sum, ...), or read the numbers "
                    f"first (.asnumpy(), or a Parameter's .data)")


_SHAPE_ONLY = {
    np.shape: lambda a: tuple(a.shape),
    np.ndim: lambda a: len(a.shape),
    np.size: lambda a, axis=None: math.prod(a.shape) if axis is None else a.shape[axis],
    np.result_type: lambda *xs: np.result_type(*(_dtype_or_self(x) for x in xs)),
}


def _dtype_or_self(x):
    dtype = getattr(x, "dtype", None)     # np.float64 (a type) has a dtype descriptor, not a dtype
    return dtype if isinstance(dtype, np.dtype) else x


def _sum_start(other, value):
    """Whether `other + value` is sum()'s int 0 start, which adds nothing: no node. Not for
    bools, which numpy counts (0 + b is an integer array) where b + b is their OR; nor a
    float 0.0, which numpy adds (an integer value then becomes float64)."""
    return other.__class__ is int and other == 0 and value.dtype != bool


def _iterate(value):
    """The values along the first axis, as numpy iterates. Without it Python's fallback
    (x[0], x[1], ... until IndexError) made a loop over a 0-d value silently empty."""
    if not value.shape:
        raise TypeError("iteration over a 0-d value")
    return (value[i] for i in range(value.shape[0]))
