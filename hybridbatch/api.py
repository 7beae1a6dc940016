"""The op functions users call. Each records a node inside a scope, or runs eagerly outside."""

import math

import numpy as np

from .record.eager import Tensor, constant as _eager_constant, apply as _eager_apply
from .record.future import Future
from .ops import OPS, elementwise as E, linalg as L, shape as S, index as I, custom as C
from .ops import random as R
from .ops.random import seed  # noqa: F401  (public: hb.seed)
from .hybrid.arguments import draw_placeholder
from .ops.registry import as_int
from .ops.shape import normalize_index
from .train.parameter import Parameter
from .schedule.fsm import FSMPolicy  # noqa: F401  (public: hb.FSMPolicy.load)
from .schedule.learn import learn_policy  # noqa: F401  (public: hb.learn_policy)
from .record.scope import _local
from .record import operators

_Number = (int, float, np.integer, np.floating)


def apply(op, args, attrs=(), aux=-1):
    """Record (inside a scope) or run (eagerly) one primitive op."""
    scope = _local.scope     # a class default makes it a plain attribute read
    if scope is not None:
        return scope.record(op, args, attrs, aux)
    return _eager_apply(op, args, attrs, aux)


def array(value):
    """A constant input (no gradient): a Future inside a scope, a Tensor outside."""
    scope = _local.scope     # a class default makes it a plain attribute read
    return scope.constant(value) if scope is not None else _eager_constant(value)


def shape_of(x):
    return tuple(np.shape(x)) if not hasattr(x, "shape") else tuple(x.shape)


def _axis(op_name, axis, x):
    """`axis` of x's per-instance value made non-negative, or a ValueError: wrapping an
    out-of-range axis around (axis % ndim) would silently work on another axis."""
    axis = as_int(f"{op_name} axis", axis)
    ndim = len(shape_of(x))
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op_name} axis {axis} out of range for {ndim}-D operands")
    return axis % ndim


def _exact(v):
    """A scalar operand as an exact Python number: an integer stays an int, so that int64
    x + (2**60 + 1) does not round the scalar through float64 as float() did."""
    return int(v) if isinstance(v, (int, np.integer)) else float(v)


def _scalar_affine(x, a, c):
    return apply(E.ScalarAffine, (x,), E.ScalarAffine.attrs_of(_exact(a), _exact(c)))


def add(a, b):
    if isinstance(b, _Number):
        return _scalar_affine(a, 1, b)
    if isinstance(a, _Number):
        return _scalar_affine(b, 1, a)
    return apply(E.Add, (a, b))


def sub(a, b):
    if isinstance(b, _Number):       # negated as a Python number: -np.uint8(3) wraps to 253
        return _scalar_affine(a, 1, -_exact(b))
    if isinstance(a, _Number):
        return _scalar_affine(b, -1, a)
    return apply(E.Sub, (a, b))


def mul(a, b):
    if isinstance(b, _Number):
        return _scalar_affine(a, b, 0)
    if isinstance(a, _Number):
        return _scalar_affine(b, a, 0)
    return apply(E.Mul, (a, b))


def div(a, b):
    if isinstance(b, _Number):       # a Python float: 1.0 / np.float16(3) rounds to float16
        b = float(b)                 # / 0 gives numpy's inf and nan: x * (+-inf)
        return _scalar_affine(a, 1.0 / b if b else math.copysign(math.inf, b), 0)
    if isinstance(a, _Number):       # a number over a value: a scalar constant of its dtype
        a = np.asarray(a, dtype=b.dtype if hasattr(b, "dtype") else np.float32)
    return apply(E.Div, (a, b))


def matmul(a, b):
    """a @ b with numpy's rules for 1-D and 2-D operands (per instance)."""
    return apply(L.MatMul, (a, b))


def affine(w, x, b):
    """w @ x + b as one op (one batch instead of two)."""
    return apply(L.Affine, (w, x, b))


def _unary(op):
    """hb.<op.name>(x): the public function of a unary elementwise op, documented by its class,
    so that adding such an op is its class alone (ops/elementwise.py)."""
    def function(x):
        return apply(op, (x,))
    function.__name__ = function.__qualname__ = op.name
    function.__doc__ = type(op).__doc__
    return function


UNARY = {op.name: _unary(op) for op in OPS if isinstance(op, E._Unary) and op.public}
globals().update(UNARY)      # hb.tanh, hb.sigmoid, hb.relu, hb.exp, hb.log, hb.abs, hb.sqrt, ...


def add_n(xs):
    """Sum of a list of same-shaped values in one op. A batching scope batches the add_n's
    of one type together whatever their operand counts (ops.elementwise.RaggedAddN)."""
    xs = list(xs)
    if not xs:
        raise ValueError("add_n needs at least one operand")
    if len(xs) == 1:
        return xs[0]
    scope = _local.scope
    if scope is not None and not scope.tracing:     # a trace keeps one operand per position
        return scope.record_ragged(E.RaggedAddN, E.AddN, tuple(xs))
    return apply(E.AddN, tuple(xs))


def concat(xs, axis=0):
    """Concatenate per-instance values along `axis`."""
    xs = list(xs)
    if not xs:
        raise ValueError("concat needs at least one operand")
    return apply(S.Concat, tuple(xs), (_axis("concat", axis, xs[0]),))


def slice(x, key):
    """x[key] for int and slice indices (what `future[i:j]` calls)."""
    return apply(S.Slice, (x,), normalize_index(key, shape_of(x)))


def split(x, sections, axis=0):
    """`sections` equal slices of x along `axis`."""
    axis = _axis("split", axis, x)
    n = shape_of(x)[axis]
    if not isinstance(sections, (int, np.integer)) or sections < 1:
        raise ValueError(f"split into {sections} parts: sections must be a positive integer")
    if n % sections:
        raise ValueError(f"cannot split an axis of length {n} into {sections} equal parts")
    step = n // sections
    lead = (np.s_[:],) * axis
    return [slice(x, lead + (np.s_[i * step:(i + 1) * step],)) for i in range(sections)]


def reshape(x, shape):
    return apply(S.Reshape, (x,), tuple(as_int("reshape's shape", s) for s in shape))


def sum(x, axis=None):  # noqa: A001 - the public spelling is hb.sum
    """Sum of all elements, or along one axis."""
    if axis is not None:
        axis = _axis("sum", axis, x)
    return apply(S.Sum, (x,), (axis,))


def lookup(param, index):
    """Row `index` of a Parameter table (an embedding)."""
    if not isinstance(param, Parameter):
        raise TypeError(f"lookup reads rows of a Parameter, not {type(param).__name__}")
    return apply(I.Lookup, (param,), (), index)


def pick(x, index):
    """Element `index` of a vector."""
    return apply(I.Pick, (x,), (), index)


def log_softmax(x):
    return apply(I.LogSoftmax, (x,))


def pick_neg_log_softmax(logits, label):
    """-log softmax(logits)[label]: the per-instance classification loss."""
    return apply(I.PickNegLogSoftmax, (logits,), (), label)


def dropout_rate(p):
    """p as a float, or the TypeError / ValueError of a rate outside [0, 1) (at 1 nothing
    is kept and the scale 1 / (1 - p) is infinite)."""
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, _Number):
        raise TypeError(f"dropout's p must be a number, not {type(p).__name__}")
    p = float(p)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout's p must be in [0, 1), got {p}")
    return p


def dropout(x, p):
    """x with each element zeroed with probability p, the others scaled by 1 / (1 - p).

    Every call draws a fresh mask, also inside a hybridized block (one per block call), from
    the stream `hb.seed` restarts: one seed gives the same masks in eager and batched runs.
    p = 0 returns x itself. For a layer that eval() turns off, use nn.Dropout."""
    p = dropout_rate(p)
    if p == 0.0:
        return x
    scope = _local.scope
    key = draw_placeholder(scope) if scope is not None and scope.tracing else R.next_key()
    return apply(R.Dropout, (x,), (p,), key)


def py_func(fn, *xs, out_shape, out_dtype=np.float32, grad_fn=None):
    """Run numpy code per instance as an (unbatchable) op: fn(*arrays) -> array.

    Checked here, at the call: fn and grad_fn callable (grad_fn may be None), out_shape
    integers >= 0, out_dtype numeric. A scope would otherwise fail only at its flush."""
    if not callable(fn) or not (grad_fn is None or callable(grad_fn)):
        raise TypeError(f"py_func needs a callable fn and a callable grad_fn (or None), got "
                        f"{type(fn).__name__} and {type(grad_fn).__name__}")
    shape = tuple(as_int("py_func's out_shape", s) for s in out_shape)    # np.int64(3) names its type as 3 does
    if any(d < 0 for d in shape):
        raise ValueError(f"py_func's out_shape {shape} must hold integers >= 0")
    dtype = np.dtype(out_dtype)
    if dtype.kind not in "biufc":
        raise TypeError(f"py_func's out_dtype must be numeric (bool, integer, float or complex), not {dtype}")
    return apply(C.PyFunc, xs, (fn, grad_fn, shape, dtype))


for _cls in (Future, Tensor, Parameter):
    operators.install(_cls, __import__(__name__, fromlist=["_"]), named=_cls is Parameter)
