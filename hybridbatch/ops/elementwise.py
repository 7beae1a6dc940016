"""Elementwise ops: the same work per element whatever the batch layout.

Binary ops broadcast per instance like numpy (a bias vector against a matrix); `expand`
keeps the batch axis first so per-instance broadcasting still lines up after stacking.

Each op keeps all its rules together: `infer` (shape), `f` (forward), `df` (derivative) and
`scalar`, the same math per element as source for the fused kernels (kernels/fused.py);
tests/test_op_rules.py checks that `scalar` agrees with `f` and `df`.
"""
import math
import struct

import numpy as np

from ..kernels.segments import segment_of_rows, segment_sums
from .registry import (Op, register, as_int, expand, unbroadcast, broadcast_shape, check, check_float, check_not_bool,
                       check_one_dtype)


class _Unary(Op):
    float_only = True    # the value is not an integer (see check_float)
    fusable = True
    public = True        # hb.<name>(x) exists (api.UNARY)

    def infer(self, attrs, shapes, dtypes):
        if self.float_only:
            check_float(self.name, shapes, dtypes)
        return shapes[0], dtypes[0]

    def forward(self, xp, sig, xs, aux):
        return self.f(xp, xs[0], sig.attrs)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return (self.df(xp, xs[0], y, gy, sig.attrs),)


@register
class Tanh(_Unary):
    """tanh(x), elementwise: the squashing of RNN and Tree-LSTM states.

    >>> hb.tanh(hb.array([-1.0, 0.0, 2.0])).asnumpy().round(3)
    array([-0.762,  0.   ,  0.964], dtype=float32)
    >>> with hb.batching():         # two instances' tanh run as one batch
    ...     ys = [hb.tanh(hb.array([v])) for v in (0.5, 1.0)]
    >>> [round(y.item(), 3) for y in ys]
    [0.462, 0.762]
    """
    name = "tanh"
    zero_exact = True

    def f(self, xp, x, attrs):
        return xp.tanh(x)

    def df(self, xp, x, y, gy, attrs):
        return gy * (1 - y * y)

    def scalar(self, attrs, t, x):
        return f"_tanh({x})", [f"(F(1.0) - {t} * {t})"]


@register
class Sigmoid(_Unary):
    """1 / (1 + exp(-x)), elementwise: gates in (0, 1). Computed as 0.5 * (1 + tanh(x / 2)),
    it never overflows, within 6e-8 of the exact value; below about -16 that is most of it
    (0 from about -20 in float32), so take log(sigmoid(x)) as hb.log_sigmoid(x).

    >>> hb.sigmoid(hb.array([-100.0, 0.0, 2.0])).asnumpy().round(3)
    array([0.   , 0.5  , 0.881], dtype=float32)
    """
    name = "sigmoid"
    zero_exact = True

    def f(self, xp, x, attrs):
        # 0.5 * (1 + tanh(x / 2)) never overflows, unlike 1 / (1 + exp(-x)).
        y = xp.tanh(x * 0.5)
        y += 1
        y *= 0.5
        return y

    def df(self, xp, x, y, gy, attrs):
        return gy * y * (1 - y)

    def scalar(self, attrs, t, x):
        return f"F(0.5) * (F(1.0) + _tanh(F(0.5) * {x}))", [f"{t} * (F(1.0) - {t})"]


@register
class Relu(_Unary):
    """max(x, 0), elementwise; its gradient at 0 is 0. Integers and bools keep their dtype.

    >>> hb.relu(hb.array([-1.5, 0.0, 2.0])).asnumpy()
    array([0., 0., 2.], dtype=float32)
    """
    name = "relu"
    zero_exact = True
    float_only = False

    def f(self, xp, x, attrs):
        return xp.maximum(x, x.dtype.type(0))   # a zero of x's dtype: bools stay bools (0 made int64)

    def df(self, xp, x, y, gy, attrs):
        return gy * (y > 0)

    def scalar(self, attrs, t, x):
        return f"max({x}, F(0.0))", [f"(F(1.0) if {t} > F(0.0) else F(0.0))"]


@register
class Softplus(_Unary):
    """log(1 + exp(x)), elementwise, as max(x, 0) + log1p(exp(-|x|)): it never overflows, and
    its gradient is sigmoid(x).

    >>> hb.softplus(hb.array([-100.0, 0.0, 100.0])).asnumpy().round(3)
    array([  0.   ,   0.693, 100.   ], dtype=float32)
    """
    name = "softplus"
    zero_exact = True

    def f(self, xp, x, attrs):
        return xp.maximum(x, x.dtype.type(0)) + xp.log1p(xp.exp(-xp.abs(x)))

    def df(self, xp, x, y, gy, attrs):
        return gy * _logistic(xp, x)

    def scalar(self, attrs, t, x):
        return f"max({x}, F(0.0)) + np.log1p(np.exp(-abs({x})))", [f"(F(1.0) / (F(1.0) + np.exp(-{x})))"]


@register
class LogSigmoid(_Unary):
    """log(sigmoid(x)) = -softplus(-x), elementwise, as min(x, 0) - log1p(exp(-|x|)): exact
    where log(sigmoid(x)) underflows to -inf (a logistic loss of a large margin).

    >>> hb.log_sigmoid(hb.array([-100.0, 0.0, 100.0])).asnumpy().round(3)
    array([-100.   ,   -0.693,   -0.   ], dtype=float32)
    """
    name = "log_sigmoid"
    zero_exact = True

    def f(self, xp, x, attrs):
        return xp.minimum(x, x.dtype.type(0)) - xp.log1p(xp.exp(-xp.abs(x)))

    def df(self, xp, x, y, gy, attrs):
        return gy * _logistic(xp, -x)

    def scalar(self, attrs, t, x):
        return f"min({x}, F(0.0)) - np.log1p(np.exp(-abs({x})))", [f"(F(1.0) / (F(1.0) + np.exp({x})))"]


@register
class Square(_Unary):
    """x * x, elementwise (numpy's square: integers keep their dtype).

    >>> hb.square(hb.array([-3.0, 0.5])).asnumpy()
    array([9.  , 0.25], dtype=float32)
    """
    name = "square"
    zero_exact = True
    float_only = False

    def f(self, xp, x, attrs):
        return xp.square(x)

    def df(self, xp, x, y, gy, attrs):
        return gy * (2 * x)

    def scalar(self, attrs, t, x):
        return f"{x} * {x}", [f"(F(2.0) * {x})"]


@register
class Sin(_Unary):
    """sin(x), elementwise (positional encodings, periodic features).

    >>> hb.sin(hb.array([0.0, np.pi / 2])).asnumpy().round(3)
    array([0., 1.], dtype=float32)
    """
    name = "sin"
    zero_exact = True

    def f(self, xp, x, attrs):
        return xp.sin(x)

    def df(self, xp, x, y, gy, attrs):
        return gy * xp.cos(x)

    def scalar(self, attrs, t, x):
        return f"np.sin({x})", [f"np.cos({x})"]


@register
class Cos(_Unary):
    """cos(x), elementwise.

    >>> hb.cos(hb.array([0.0, np.pi])).asnumpy().round(3)
    array([ 1., -1.], dtype=float32)
    """
    name = "cos"
    zero_exact = True

    def f(self, xp, x, attrs):
        return xp.cos(x)

    def df(self, xp, x, y, gy, attrs):
        return -gy * xp.sin(x)

    def scalar(self, attrs, t, x):
        return f"np.cos({x})", [f"(-np.sin({x}))"]


@register
class Log1p(_Unary):
    """log(1 + x), elementwise, exact for tiny x where log(1 + x) rounds 1 + x first; NaN
    below -1 and -inf at -1, as numpy gives.

    >>> hb.log1p(hb.array([1e-10, 1.0])).asnumpy()
    array([1.000000e-10, 6.931472e-01], dtype=float32)
    """
    name = "log1p"

    def f(self, xp, x, attrs):
        return xp.log1p(x)

    def df(self, xp, x, y, gy, attrs):
        return gy / (1 + x)

    def scalar(self, attrs, t, x):
        return f"np.log1p({x})", [f"/ (F(1.0) + {x})"]


@register
class Expm1(_Unary):
    """exp(x) - 1, elementwise, exact for tiny x where exp(x) - 1 cancels.

    >>> hb.expm1(hb.array([1e-10, 1.0])).asnumpy()
    array([1.0000000e-10, 1.7182819e+00], dtype=float32)
    """
    name = "expm1"
    zero_exact = True

    def f(self, xp, x, attrs):
        return xp.expm1(x)

    def df(self, xp, x, y, gy, attrs):
        return gy * (y + 1)

    def scalar(self, attrs, t, x):
        return f"np.expm1({x})", [f"({t} + F(1.0))"]


@register
class LeakyRelu(_Unary):
    """x where x > 0, else slope * x (attrs (slope,)): hb.leaky_relu(x, slope=0.01).

    >>> hb.leaky_relu(hb.array([-2.0, 3.0]), slope=0.1).asnumpy()
    array([-0.2,  3. ], dtype=float32)
    """
    name = "leaky_relu"
    zero_exact = True
    public = False          # hb.leaky_relu takes the slope

    def f(self, xp, x, attrs):
        return xp.where(x > 0, x, x * x.dtype.type(attrs[0]))

    def df(self, xp, x, y, gy, attrs):
        return gy * xp.where(x > 0, gy.dtype.type(1), gy.dtype.type(attrs[0]))

    def scalar(self, attrs, t, x):
        slope = _literal(attrs[0])
        return f"({x} if {x} > F(0.0) else {x} * {slope})", [f"(F(1.0) if {x} > F(0.0) else {slope})"]


_GELU_C = math.sqrt(2 / math.pi)
_GELU_A = 0.044715


@register
class Gelu(_Unary):
    """GELU in its tanh form, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))): the one
    GPT-2 and BERT use (PyTorch's GELU(approximate="tanh"); within 1e-3 of the erf form).

    >>> hb.gelu(hb.array([-1.0, 0.0, 1.0])).asnumpy().round(4)
    array([-0.1588,  0.    ,  0.8412], dtype=float32)
    """
    name = "gelu"
    zero_exact = True

    @staticmethod
    def _inner(xp, x):
        c, a = x.dtype.type(_GELU_C), x.dtype.type(_GELU_A)
        return xp.tanh(c * (x + a * (x * x * x)))

    def f(self, xp, x, attrs):
        return x.dtype.type(0.5) * x * (1 + self._inner(xp, x))

    def df(self, xp, x, y, gy, attrs):
        c, a = x.dtype.type(_GELU_C), x.dtype.type(_GELU_A)
        t = self._inner(xp, x)
        half = x.dtype.type(0.5)
        return gy * (half * (1 + t) + half * x * (1 - t * t) * c * (1 + 3 * a * (x * x)))

    def scalar(self, attrs, t, x):
        c, a = _literal(_GELU_C), _literal(_GELU_A)
        inner = f"_tanh({c} * ({x} + {a} * ({x} * {x} * {x})))"
        value = f"F(0.5) * {x} * (F(1.0) + {inner})"
        slope = (f"(F(0.5) * (F(1.0) + {inner}) + F(0.5) * {x} * (F(1.0) - {inner} * {inner}) * {c} * "
                 f"(F(1.0) + F(3.0) * {a} * ({x} * {x})))")
        return value, [slope]


def _logistic(xp, x):
    """1 / (1 + exp(-x)) to float precision at every x (exp of -|x| only, which never
    overflows): softplus's and log_sigmoid's derivatives."""
    e = xp.exp(-xp.abs(x))
    r = 1 / (1 + e)
    return xp.where(x >= 0, r, e * r)


@register
class Exp(_Unary):
    """exp(x), elementwise (floats only).

    >>> hb.exp(hb.array([0.0, 1.0])).asnumpy().round(3)
    array([1.   , 2.718], dtype=float32)
    """
    name = "exp"
    zero_exact = True

    def f(self, xp, x, attrs):
        return xp.exp(x)

    def df(self, xp, x, y, gy, attrs):
        return gy * y

    def scalar(self, attrs, t, x):
        return f"np.exp({x})", [t]


@register
class Log(_Unary):
    """The natural logarithm: NaN below 0 and -inf at 0, as numpy gives (check_numerics
    reports them).

    >>> hb.log(hb.array([1.0, np.e])).asnumpy().round(3)
    array([0., 1.], dtype=float32)
    """
    name = "log"

    def f(self, xp, x, attrs):
        return xp.log(x)

    def df(self, xp, x, y, gy, attrs):
        return gy / x

    def scalar(self, attrs, t, x):
        return f"np.log({x})", [f"/ {x}"]


@register
class Abs(_Unary):
    """|x|. At 0, where |x| has no derivative, its gradient is 0: numpy's sign of 0, the
    middle of the subgradients [-1, 1]. Integers keep their dtype.

    >>> hb.abs(hb.array([-2.0, 0.0, 3.0])).asnumpy()
    array([2., 0., 3.], dtype=float32)
    >>> hb.abs(hb.array(np.array([-4, 4]))).asnumpy()
    array([4, 4])
    """
    name = "abs"
    zero_exact = True
    float_only = False    # numpy's abs keeps integers (and bools) as they are

    def f(self, xp, x, attrs):
        return xp.abs(x)

    def df(self, xp, x, y, gy, attrs):
        return gy * xp.sign(x)

    def scalar(self, attrs, t, x):
        return f"np.abs({x})", [f"np.sign({x})"]


@register
class Sqrt(_Unary):
    """The square root: NaN below 0 as numpy gives (check_numerics reports it), and an
    infinite derivative at 0.

    >>> hb.sqrt(hb.array([4.0, 2.0])).asnumpy().round(3)
    array([2.   , 1.414], dtype=float32)
    """
    name = "sqrt"

    def f(self, xp, x, attrs):
        return xp.sqrt(x)

    def df(self, xp, x, y, gy, attrs):
        return gy * (0.5 / y)

    def scalar(self, attrs, t, x):
        return f"np.sqrt({x})", [f"(F(0.5) / {t})"]


@register
class ScalarAffine(_Unary):
    """y = a * x + c for Python scalars a, c (x * 2, 1 - x, -x, x + 0.5): ints where the
    operand was an integer (exact for int64 beyond 2**53), else floats.

    attrs = (a, c, spelling): signatures are interned by attrs equality, where 2 == 2.0 and
    0.0 == -0.0. The spelling (each float as its hex) keeps apart an integer value's x * 2
    (exact) from x * 2.0 (refused), and x + 0.0 from x + -0.0. Build them with `attrs_of`."""
    name = "scalar_affine"
    public = False       # recorded by the operators: x * 2, 1 - x, x / 4
    zero_exact = True

    @staticmethod
    def attrs_of(a, c):
        return a, c, tuple(v.hex() if v.__class__ is float else v for v in (a, c))

    def infer(self, attrs, shapes, dtypes):
        a, c = attrs[:2]
        check_not_bool(self.name, shapes, dtypes)
        if not (a.__class__ is int and c.__class__ is int):   # x * 0.5, x / 2, x + 0.5, and x * 2.0:
            check_float(self.name, shapes, dtypes)             # numpy's int array + float is float64
        elif dtypes[0].kind in "iu":    # as numpy refuses int8 + 200; the kernel would fail at the flush
            info = np.iinfo(dtypes[0])
            check(info.min <= a <= info.max and info.min <= c <= info.max, self.name, shapes,
                  f"y = {a:g} * x + {c:g} needs scalars that fit in {dtypes[0]}")
        return shapes[0], dtypes[0]

    def f(self, xp, x, attrs):
        a, c = attrs[:2]
        y = x * x.dtype.type(a) if a != 1 else x.copy()
        if c or c.__class__ is float:       # x + 0.0 still adds, as numpy does: -0.0 + 0.0 is 0.0
            y += x.dtype.type(c)
        return y

    def df(self, xp, x, y, gy, attrs):
        return gy * gy.dtype.type(attrs[0])

    def scalar(self, attrs, t, x):
        a, c = (_literal(v) for v in attrs[:2])
        return f"{x} * {a} + {c}", [a]


@register
class ScalarAffineOperand(Op):
    """y = a * x + c with (a, c) a node's own operand, a 2-vector of x's dtype: what
    `x * s`, `x - s`, ... record at scope level for a float x and a Python number s. As an
    attribute (ScalarAffine) each distinct number would be a signature of its own, so
    per-instance numbers read from values (`scores - top`) would never batch and would
    intern a signature per value. c is -0.0 where no shift is asked for (x * 2), which
    leaves every x as it is (-0.0 included), so the result is ScalarAffine's bit for bit."""
    name = "scalar_affine_operand"
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        check_float(self.name, shapes[:1], dtypes[:1])
        check(shapes[1] == (2,) and dtypes[1] == dtypes[0], self.name, shapes,
              "the scalars are a 2-vector of the operand's dtype")
        return shapes[0], dtypes[0]

    @staticmethod
    def _scalars(sig, s):
        """a and c, shaped to broadcast against the (B,)+shape batch."""
        if sig.shared[1]:
            return s[0], s[1]
        shape = (s.shape[0],) + (1,) * len(sig.out_shape)
        return s[:, 0].reshape(shape), s[:, 1].reshape(shape)

    def forward(self, xp, sig, xs, aux):
        a, c = self._scalars(sig, xs[1])
        return xs[0] * a + c

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        x, s = xs
        gx = gs = None
        if needs[0]:
            gx = gy * self._scalars(sig, s)[0]
            if sig.shared[0]:
                gx = gx.sum(axis=0)
        if needs[1]:
            axes = tuple(range(1, gy.ndim))
            gs = xp.stack([(gy * x).sum(axis=axes), gy.sum(axis=axes)], axis=1)
            if sig.shared[1]:
                gs = gs.sum(axis=0)
        return gx, gs


@register
class ScalarAffinePacked(Op):
    """y = a * x + c with (a, c) two float32 numbers packed side by side into the node's
    integer (`pack`). What `x - s`, `x * s`, ... record at scope level for a float32 or
    float16 x (float32 holds either dtype's numbers exactly): no constant node per call (a
    number recorded as an operand, ScalarAffineOperand, cost a call about 0.5 us more and
    its flush one input node more). No gradient flows to the numbers: they are Python's."""
    name = "scalar_affine_packed"
    zero_exact = True
    uses_aux = True
    any_aux = True
    _PAIR = struct.Struct("=ff")       # native order both ways: the int64's bytes are a then c
    _WORD = struct.Struct("=q")

    @classmethod
    def pack(cls, a, c, dtype):
        """a and c rounded to dtype as one int64, or None where this op does not take them:
        another dtype, or a number beyond float32's range (numpy's rounding to inf is the
        constant operand's)."""
        if dtype == np.float32:
            try:
                return cls._WORD.unpack(cls._PAIR.pack(a, c))[0]
            except OverflowError:
                return None
        if dtype == np.float16:     # rounded to float16 first: exact in float32
            return cls._WORD.unpack(cls._PAIR.pack(*np.array([a, c], np.float16).tolist()))[0]
        return None

    def infer(self, attrs, shapes, dtypes):
        check_float(self.name, shapes, dtypes)
        return shapes[0], dtypes[0]

    def index(self, aux):
        return as_int(f"{self.name}: the packed numbers", aux)     # any int64

    def _numbers(self, xp, sig, aux, dtype):
        """a and c per row, shaped to broadcast against the (B,)+shape batch."""
        pairs = np.ascontiguousarray(aux, np.int64).view(np.float32).reshape(-1, 2).astype(dtype)
        shape = (len(pairs),) + (1,) * len(sig.out_shape)
        return xp.asarray(pairs[:, 0].reshape(shape)), xp.asarray(pairs[:, 1].reshape(shape))

    def forward(self, xp, sig, xs, aux):
        a, c = self._numbers(xp, sig, aux, xs[0].dtype)
        return xs[0] * a + c

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        gx = gy * self._numbers(xp, sig, aux, gy.dtype)[0]
        return (gx.sum(axis=0) if sig.shared[0] else gx,)


@register
class ScalarPow(_Unary):
    """x ** p for a Python number p (x ** 2, x ** 0.5), attrs (p,) as a float: NaN where numpy
    gives it (a negative base, a fractional power), and numpy's infinite derivative at 0 for
    0 < p < 1. x ** 0 is 1 everywhere, its derivative 0 (not 0 * 0 ** -1 at 0)."""
    name = "scalar_pow"
    public = False       # recorded by the operator: x ** 2

    def f(self, xp, x, attrs):
        return x ** x.dtype.type(attrs[0])

    def df(self, xp, x, y, gy, attrs):
        p = gy.dtype.type(attrs[0])
        if p == 0:
            return xp.zeros_like(gy)
        return gy * (p * x ** (p - 1))

    def scalar(self, attrs, t, x):
        p = attrs[0]
        return _power(x, p), ["F(0.0)" if p == 0 else f"{_literal(p)} * {_power(x, p - 1)}"]


@register
class ScalarPowPacked(Op):
    """x ** p with the Python number p in the node's integer (its float64 bits, `pack`): what
    `x ** p` records at scope level for a float x, so that instances raising to different
    numbers (a per-instance focusing exponent) batch under one signature, where ScalarPow
    makes a signature per number. A batch runs ScalarPow's rules once per distinct number,
    on that number's rows, so every value and derivative is eager's exactly (numpy's
    x ** 2 is a square, x ** 0.5 a square root: not pow's numbers at -0 or -inf)."""
    name = "scalar_pow_packed"
    uses_aux = True
    any_aux = True
    _FLOAT = struct.Struct("=d")
    _WORD = struct.Struct("=q")

    @classmethod
    def pack(cls, p):
        return cls._WORD.unpack(cls._FLOAT.pack(p))[0]

    def infer(self, attrs, shapes, dtypes):
        check_float(self.name, shapes, dtypes)
        return shapes[0], dtypes[0]

    def index(self, aux):
        return as_int(f"{self.name}: the packed number", aux)     # any int64

    @staticmethod
    def _groups(xp, aux):
        """(ScalarPow's attrs, the rows or None for every row) per distinct number."""
        words = np.ascontiguousarray(aux, np.int64)
        if (words == words[0]).all():
            return [((float(words[:1].view(np.float64)[0]),), None)]
        numbers, inverse = np.unique(words, return_inverse=True)
        return [((float(p),), xp.asarray(np.flatnonzero(inverse == k)))
                for k, p in enumerate(numbers.view(np.float64))]

    def forward(self, xp, sig, xs, aux):
        groups = self._groups(xp, aux)
        if groups[0][1] is None:
            return ScalarPow.f(xp, xs[0], groups[0][0])
        y = xp.empty_like(xs[0])
        for attrs, rows in groups:
            y[rows] = ScalarPow.f(xp, xs[0][rows], attrs)
        return y

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        groups = self._groups(xp, aux)
        if groups[0][1] is None:
            return (ScalarPow.df(xp, xs[0], y, gy, groups[0][0]),)
        gx = xp.empty_like(gy)
        for attrs, rows in groups:
            gx[rows] = ScalarPow.df(xp, xs[0][rows], y[rows], gy[rows], attrs)
        return (gx,)


def _power(x, p):
    """x ** p for a literal p as rule source: numpy's own forms where it has them (x * x,
    sqrt, 1 / x), a chain of products for the other small integer powers (so the loop
    vectorizes; within an ulp of pow), else pow itself, IEEE's at 0, inf and NaN."""
    if p == 1:
        return x
    if p == 2:
        return f"({x} * {x})"
    if p == 0.5:
        return f"np.sqrt({x})"
    if p == -1:
        return f"(F(1.0) / {x})"
    if p == int(p) and 2 <= abs(p) <= 4:
        base = x if p > 0 else f"(F(1.0) / {x})"      # (1 / x) ** 3, not 1 / x ** 3: x ** 3 overflows first
        return "(" + " * ".join([base] * abs(int(p))) + ")"
    return f"{x} ** {_literal(p)}"


def _literal(v):
    """A Python scalar as a literal of a fused run's dtype: repr spells inf and nan as names
    the kernel's module does not define."""
    if math.isfinite(v):
        return f"F({v!r})"
    return "F(np.nan)" if math.isnan(v) else f"F({'-' if v < 0 else ''}np.inf)"


class _Binary(Op):
    fusable = True

    def infer(self, attrs, shapes, dtypes):
        check_one_dtype(self.name, shapes, dtypes)
        return broadcast_shape(self.name, shapes), dtypes[0]

    def operands(self, sig, xs):
        nd = len(sig.out_shape)
        return [expand(x, s, shp, nd) for x, s, shp in zip(xs, sig.shared, sig.in_shapes)]

    def forward(self, xp, sig, xs, aux):
        a, b = self.operands(sig, xs)
        return self.f(a, b)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        a, b = self.operands(sig, xs)
        ga, gb = self.df(a, b, gy, needs)
        return tuple(None if g is None else unbroadcast(g, s, shp)
                     for g, s, shp in zip((ga, gb), sig.shared, sig.in_shapes))


@register
class Add(_Binary):
    name = "add"
    zero_exact = True
    f = staticmethod(lambda a, b: a + b)

    def df(self, a, b, gy, needs):
        return gy, gy

    def scalar(self, attrs, t, a, b):
        return f"{a} + {b}", ["F(1.0)", "F(1.0)"]


@register
class Sub(_Binary):
    name = "sub"
    zero_exact = True
    f = staticmethod(lambda a, b: a - b)

    def infer(self, attrs, shapes, dtypes):
        check_not_bool(self.name, shapes, dtypes)
        return super().infer(attrs, shapes, dtypes)

    def df(self, a, b, gy, needs):
        return gy, (-gy if needs[1] else None)

    def scalar(self, attrs, t, a, b):
        return f"{a} - {b}", ["F(1.0)", "F(-1.0)"]


@register
class Mul(_Binary):
    name = "mul"
    zero_exact = True
    f = staticmethod(lambda a, b: a * b)

    def df(self, a, b, gy, needs):
        return (gy * b if needs[0] else None), (gy * a if needs[1] else None)

    def scalar(self, attrs, t, a, b):
        return f"{a} * {b}", [b, a]


@register
class Div(_Binary):
    name = "div"
    f = staticmethod(lambda a, b: a / b)

    def infer(self, attrs, shapes, dtypes):
        check_float(self.name, shapes, dtypes)
        return super().infer(attrs, shapes, dtypes)

    def df(self, a, b, gy, needs):
        ga = gy / b
        return ga, (-ga * a / b if needs[1] else None)

    def scalar(self, attrs, t, a, b):
        # -(a / b) / b, not -a / (b * b): the square under- or overflows float32 (b = 1e-25)
        return f"{a} / {b}", [f"/ {b}", f"(-{t} / {b})"]


@register
class Pow(_Binary):
    """a ** b elementwise, floats only. Its derivative by b, y log(a), is 0 where y is (a = 0
    with b > 0, as PyTorch), not 0 * -inf; by a, b a ** (b - 1), is 0 where b is (not
    0 * 0 ** -1 at a = 0)."""
    name = "pow"

    def infer(self, attrs, shapes, dtypes):
        check_float(self.name, shapes, dtypes)
        return super().infer(attrs, shapes, dtypes)

    f = staticmethod(lambda a, b: a ** b)

    def df(self, a, b, gy, needs):
        ga = gy * np.where(b == 0, b.dtype.type(0), b * a ** (b - 1)) if needs[0] else None
        if not needs[1]:
            return ga, None
        y = a ** b
        return ga, gy * np.where(y == 0, y.dtype.type(0), y * np.log(a))

    def scalar(self, attrs, t, a, b):
        return f"{a} ** {b}", [f"(F(0.0) if {b} == F(0.0) else {b} * {a} ** ({b} - F(1.0)))",
                               f"(F(0.0) if {t} == F(0.0) else {t} * np.log({a}))"]


@register
class ExpSub(_Binary):
    """exp(a - b): the terms of a softmax over a list (hb.softmax(xs): b is the list's
    logsumexp), one op where exp(a - b) would be two batches."""
    name = "exp_sub"
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        check_float(self.name, shapes, dtypes)
        return super().infer(attrs, shapes, dtypes)

    f = staticmethod(lambda a, b: np.exp(a - b))

    def df(self, a, b, gy, needs):
        ga = gy * np.exp(a - b)
        return ga, (-ga if needs[1] else None)

    def scalar(self, attrs, t, a, b):
        return f"np.exp({a} - {b})", [t, f"-{t}"]


class _Choose(_Binary):
    """maximum or minimum: the gradient goes to the operand chosen, half to each on a tie
    (as PyTorch), so swapping the operands changes nothing."""
    zero_exact = True

    def df(self, a, b, gy, needs):
        ga = gy * (self.wins(a, b) + (a == b) * gy.dtype.type(0.5))
        return ga, (gy - ga if needs[1] else None)

    def scalar(self, attrs, t, a, b):
        """As numpy and df: a NaN in either operand is the value (Python's max would return
        a for a NaN b), and b takes what a does not (all of it past a NaN)."""
        share = f"(F(1.0) if {a} {self.beats} {b} else (F(0.5) if {a} == {b} else F(0.0)))"
        return f"({a} if ({a} {self.beats} {b} or {a} != {a}) else {b})", [share, f"(F(1.0) - {share})"]


@register
class Maximum(_Choose):
    """The larger of a and b elementwise (numpy's maximum: NaN if either is)."""
    name = "maximum"
    f = staticmethod(np.maximum)
    wins = staticmethod(lambda a, b: a > b)
    beats = ">"


@register
class Minimum(_Choose):
    """The smaller of a and b elementwise (numpy's minimum: NaN if either is)."""
    name = "minimum"
    f = staticmethod(np.minimum)
    wins = staticmethod(lambda a, b: a < b)
    beats = "<"


@register
class Where(Op):
    """a where cond is true (nonzero), b elsewhere; all three broadcast per instance. The
    gradient goes to the operand each element came from; cond gets none (zeros of its dtype)."""
    name = "where"
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        check_one_dtype(self.name, shapes[1:], dtypes[1:])
        return broadcast_shape(self.name, shapes), dtypes[1]

    def operands(self, sig, xs):
        nd = len(sig.out_shape)
        return [expand(x, s, shp, nd) for x, s, shp in zip(xs, sig.shared, sig.in_shapes)]

    def forward(self, xp, sig, xs, aux):
        c, a, b = self.operands(sig, xs)
        return xp.where(c, a, b)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        c, _, _ = self.operands(sig, xs)
        zero = gy.dtype.type(0)
        grads = (xp.zeros(xs[0].shape, xs[0].dtype) if needs[0] else None,
                 xp.where(c, gy, zero) if needs[1] else None,
                 xp.where(c, zero, gy) if needs[2] else None)
        return (grads[0],) + tuple(None if g is None else unbroadcast(g, s, shp)
                                   for g, s, shp in zip(grads[1:], sig.shared[1:], sig.in_shapes[1:]))


@register
class Cast(Op):
    """x as another dtype (attrs (dtype name,)), as numpy's astype. The gradient goes back
    between float dtypes; through an integer or bool on either side it is 0."""
    name = "cast"
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        return shapes[0], np.dtype(attrs[0])

    def forward(self, xp, sig, xs, aux):
        return xs[0].astype(sig.out_dtype)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        x = xs[0]
        if x.dtype.kind == "f" and gy.dtype.kind == "f":
            return (gy.astype(x.dtype),)
        return (xp.zeros(x.shape, x.dtype),)


@register
class AddN(Op):
    """Sum of a list of same-shaped values (one kernel, not a chain of adds)."""
    name = "add_n"
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        check(all(s == shapes[0] for s in shapes), self.name, shapes, "add_n needs equal shapes")
        check(all(d == dtypes[0] for d in dtypes), self.name, shapes, "add_n needs one dtype")
        return shapes[0], dtypes[0]

    def forward(self, xp, sig, xs, aux):
        first = sig.node_positions[0]
        y = xs[first].copy()
        for i, x in enumerate(xs):
            if i != first:
                y += x
        return y

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return tuple((gy.sum(axis=0) if s else gy) if n else None for s, n in zip(sig.shared, needs))


@register
class RaggedAddN(Op):
    """add_n as a batching scope records it: a node adds any number of operands of one type.

    Its signature names the type, not the count, so every add_n of that type at a depth is
    one batch (a tagger's sentence losses, over as many tokens as each sentence has, were
    30 batches a step with AddN). The batch's operands come stacked node after node (one
    operand position, `ragged`), and aux holds each node's count.
    """
    name = "add_n"       # what the user called; its signatures have one operand type, AddN's two or more
    zero_exact = True
    ragged = True

    def infer(self, attrs, shapes, dtypes):
        return shapes[0], dtypes[0]

    def forward(self, xp, sig, xs, aux):
        return segment_sums(xp, xs[0], aux)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return (gy[xp.asarray(segment_of_rows(aux))] if needs[0] else None,)
