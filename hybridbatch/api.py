"""The op functions users call. Each records a node inside a scope, or runs eagerly outside."""

import math

import numpy as np

from .errors import ShapeError
from .record.eager import Tensor, constant as _eager_constant, apply as _eager_apply
from .record.future import Future
from .ops import (OPS, elementwise as E, linalg as L, shape as S, reduce as R, softmax as SM, lists as LS, index as I,
                  custom as C)
from .ops import random as RND, conv as CV
from .ops.random import seed  # noqa: F401  (public: hb.seed)
from .hybrid.arguments import BlockInt, draw_placeholder
from .ops.registry import as_int
from .ops.shape import normalize_index
from .train.parameter import Parameter
from .schedule.fsm import FSMPolicy  # noqa: F401  (public: hb.FSMPolicy.load)
from .schedule.learn import learn_policy  # noqa: F401  (public: hb.learn_policy)
from .record.scope import _local
from .record.signature import TYPES
from .record import operators

_Number = (int, float, np.integer, np.floating)


def apply(op, args, attrs=(), aux=-1):
    """Record (inside a scope) or run (eagerly) one primitive op."""
    scope = _local.scope     # a class default makes it a plain attribute read
    if scope is not None:
        return scope.record(op, args, attrs, aux)
    return _eager_apply(op, args, attrs, aux)


def array(value):
    """A constant input (no gradient): a Future inside a scope, a Tensor outside. The value
    is copied when recorded; Python floats become float32, numpy arrays keep their dtype.

    >>> hb.array([1.0, 2.0, 3.0])
    Tensor(shape=(3,), dtype=float32)
    >>> with hb.batching():
    ...     x = hb.array(np.zeros((2, 3), np.int64))
    >>> x.shape, x.dtype
    ((2, 3), dtype('int64'))
    """
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
        raise ShapeError(f"{op_name} axis {axis} out of range for {ndim}-D operands")
    return axis % ndim


def _axes(op_name, axis, x):
    """numpy's `axis` argument of a reduction (None, an int or a tuple of ints) as a sorted
    tuple of non-negative per-instance axes, or None for all of them."""
    if axis is None:
        return None
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    out = tuple(sorted(_axis(op_name, a, x) for a in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"{op_name}: axis {axis} repeats an axis")
    return out


def _like(v, other):
    """A Python or numpy scalar as a 0-d constant of `other`'s dtype (float32 when `other` is
    a number too), or a TypeError where that dtype cannot hold it (0.5 for an integer value:
    numpy's result would be float64)."""
    if not isinstance(v, _Number):
        return v
    dtype = np.dtype(other.dtype) if hasattr(other, "dtype") else np.dtype(np.float32)
    c = np.asarray(v).astype(dtype)
    if c != v and not (c != c and v != v):      # NaN stays NaN
        raise TypeError(f"{v!r} is not a value of the other operand's dtype {dtype}: cast that operand first")
    return c


def _exact(v):
    """A scalar operand as an exact Python number: an integer stays an int, so that int64
    x + (2**60 + 1) does not round the scalar through float64 as float() did."""
    if v.__class__ is float or v.__class__ is int:
        return v
    return int(v) if isinstance(v, (int, np.integer)) else float(v)


_PLAIN = (float, int)
_FLOAT32 = np.dtype(np.float32)
_PACK_PAIR, _PACK_WORD = E.ScalarAffinePacked._PAIR.pack, E.ScalarAffinePacked._WORD.unpack
_PACK_POWER = E.ScalarPowPacked.pack


def _scalar_affine(x, a, c, wraps=False):
    """a * x + c for Python numbers a, c. Recorded in a scope (outside a traced forward) on
    a float operand, the numbers are the node's data, so calls with different numbers batch
    (ops/elementwise.py: packed into its integer for float32 and float16, ScalarAffinePacked;
    an operand otherwise, ScalarAffineOperand); elsewhere they are the op's attributes,
    baked into a trace's kernels. `wraps`: -x, x - n or n - x on integers, which numpy
    computes modulo 2 ** bits when n fits the dtype (and refuses otherwise): a and c are
    taken into the dtype's range modulo 2 ** bits, so -x of uint8 is 255 * x and x - (-128)
    of int8 is x + -128. Elsewhere a number the dtype cannot hold is refused by the op, as
    numpy refuses x * -1 on unsigned values."""
    scope = _local.scope
    if (x.__class__ is Future and scope is not None and x.scope is scope and a.__class__ in _PLAIN
            and c.__class__ in _PLAIN and not scope.tracing and TYPES[scope.graph.type[x.id]][1] is _FLOAT32):
        # the common case, written out: a float32 value of this scope and Python numbers
        try:
            packed = _PACK_WORD(_PACK_PAIR(a, c if c or c.__class__ is float else -0.0))[0]
        except OverflowError:       # beyond float32: the general path below makes it an operand
            pass
        else:
            return scope.record(E.ScalarAffinePacked, (x,), (), packed)
    a, c = _exact(a), _exact(c)
    dtype = getattr(x, "dtype", None)
    kind = getattr(dtype, "kind", "")
    if kind == "f" and scope is not None and not scope.tracing:
        c = c if c or c.__class__ is float else -0.0
        packed = E.ScalarAffinePacked.pack(a, c, dtype)
        if packed is not None:
            return scope.record(E.ScalarAffinePacked, (x,), (), packed)
        return scope.record(E.ScalarAffineOperand, (x, scope.owned_constant(np.array([a, c], dtype=dtype))))
    if wraps and kind in "iu" and a.__class__ is int and c.__class__ is int:
        low, high = int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)
        number = -c if a == 1 else c            # the user's n of x - n, n - x (0 for -x)
        if not low <= number <= high:
            raise ShapeError(f"scalar_affine: {number} does not fit in {dtype} (numpy refuses a Python integer "
                             f"its dtype cannot hold)")
        a, c = ((v - low) % (high - low + 1) + low for v in (a, c))
    return apply(E.ScalarAffine, (x,), E.ScalarAffine.attrs_of(a, c))


def _negative(x):
    """-x (what unary minus calls): unsigned values wrap around, as numpy's."""
    return _scalar_affine(x, -1, 0, wraps=True)


def add(a, b):
    """a + b elementwise, broadcasting as numpy (what `a + b` calls). A Python number as either
    operand makes one affine op, so calls that add different numbers still batch together.

    >>> hb.add(hb.array([1.0, 2.0]), hb.array([10.0, 20.0])).asnumpy()
    array([11., 22.], dtype=float32)
    >>> (hb.array([1.0, 2.0]) + 0.5).asnumpy()
    array([1.5, 2.5], dtype=float32)
    """
    if a.__class__ is not Future or b.__class__ is not Future:    # two values skip the number tests
        if isinstance(b, _Number):
            return _scalar_affine(a, 1, b)
        if isinstance(a, _Number):
            return _scalar_affine(b, 1, a)
    return apply(E.Add, (a, b))


def sub(a, b):
    """a - b elementwise, broadcasting as numpy (what `a - b` calls); a Python number as either
    operand makes one affine op, as in `add`.

    >>> hb.sub(hb.array([5.0, 7.0]), hb.array([1.0, 2.0])).asnumpy()
    array([4., 5.], dtype=float32)
    >>> (1 - hb.array([0.25, 1.0])).asnumpy()
    array([0.75, 0.  ], dtype=float32)
    """
    if a.__class__ is not Future or b.__class__ is not Future:    # two values skip the number tests
        if isinstance(b, _Number):       # negated as a Python number: -np.uint8(3) wraps to 253
            return _scalar_affine(a, 1, -_exact(b), wraps=True)
        if isinstance(a, _Number):
            return _scalar_affine(b, -1, a, wraps=True)
    return apply(E.Sub, (a, b))


def mul(a, b):
    """a * b elementwise, broadcasting as numpy (what `a * b` calls): a gate times a state, a
    row of weights times a matrix. A Python number as either operand makes one affine op.

    >>> hb.mul(hb.array([[1.0, 2.0], [3.0, 4.0]]), hb.array([10.0, 100.0])).asnumpy()
    array([[ 10., 200.],
           [ 30., 400.]], dtype=float32)
    >>> (2 * hb.array([1.5])).asnumpy()
    array([3.], dtype=float32)
    """
    if a.__class__ is not Future or b.__class__ is not Future:    # two values skip the number tests
        if isinstance(b, _Number):
            return _scalar_affine(a, b, 0)
        if isinstance(a, _Number):
            return _scalar_affine(b, a, 0)
    return apply(E.Mul, (a, b))


def div(a, b):
    """a / b elementwise, broadcasting as numpy (what `a / b` calls). Dividing by a Python
    number multiplies by its inverse (one affine op); / 0 gives numpy's inf and nan.

    >>> hb.div(hb.array([1.0, 3.0]), hb.array([2.0, 4.0])).asnumpy()
    array([0.5 , 0.75], dtype=float32)
    >>> (hb.array([3.0]) / 4).asnumpy()
    array([0.75], dtype=float32)
    """
    if isinstance(b, _Number):       # a Python float: 1.0 / np.float16(3) rounds to float16
        b = float(b)                 # / 0 gives numpy's inf and nan: x * (+-inf)
        return _scalar_affine(a, 1.0 / b if b else math.copysign(math.inf, b), 0)
    if isinstance(a, _Number):       # a number over a value: a scalar constant of its dtype
        a = np.asarray(a, dtype=b.dtype if hasattr(b, "dtype") else np.float32)
    return apply(E.Div, (a, b))


def pow(a, b):  # noqa: A001 - the public spelling is hb.pow (and a ** b)
    """a ** b elementwise (floats). A Python number as the exponent is one op with it as an
    attribute (x ** 2), in a scope the node's data, so that calls with different numbers still
    batch; as the base, a constant of the exponent's dtype.

    >>> hb.pow(hb.array([2.0, 3.0]), hb.array([3.0, 2.0])).asnumpy()
    array([8., 9.], dtype=float32)
    >>> (hb.array([4.0]) ** 0.5).asnumpy()
    array([2.], dtype=float32)
    """
    scope = _local.scope
    if (b.__class__ in _PLAIN and a.__class__ is Future and scope is not None and a.scope is scope
            and not scope.tracing and TYPES[scope.graph.type[a.id]][1].kind == "f"):
        # the common case, written out: a float value of this scope and a Python number
        return scope.record(E.ScalarPowPacked, (a,), (), _PACK_POWER(float(b)))
    if isinstance(b, _Number):
        if scope is not None and not scope.tracing and getattr(getattr(a, "dtype", None), "kind", "") == "f":
            return scope.record(E.ScalarPowPacked, (a,), (), _PACK_POWER(float(b)))
        return apply(E.ScalarPow, (a,), (float(b),))
    return apply(E.Pow, (_like(a, b), b))


def maximum(a, b):
    """The larger of a and b elementwise, broadcasting; a tie sends half the gradient to each.
    Either may be a Python number: `hb.maximum(x, 0.0)` keeps the non-negative part.

    >>> hb.maximum(hb.array([1.0, -2.0, 3.0]), 0.0).asnumpy()
    array([1., 0., 3.], dtype=float32)
    """
    return apply(E.Maximum, (_like(a, b), _like(b, a)))


def minimum(a, b):
    """The smaller of a and b elementwise, broadcasting; a tie sends half the gradient to each.
    Either may be a Python number.

    >>> hb.minimum(hb.array([1.0, 5.0]), hb.array([4.0, 2.0])).asnumpy()
    array([1., 2.], dtype=float32)
    """
    return apply(E.Minimum, (_like(a, b), _like(b, a)))


def clip(x, lo, hi):
    """x limited to [lo, hi] elementwise (maximum, then minimum): bounded scores or
    probabilities before a log.

    >>> hb.clip(hb.array([-2.0, 0.5, 3.0]), 0.0, 1.0).asnumpy()
    array([0. , 0.5, 1. ], dtype=float32)
    """
    return minimum(maximum(x, lo), hi)


def leaky_relu(x, slope=0.01):
    """x where x > 0, else slope * x, elementwise (floats only); its gradient at 0 is slope.

    >>> hb.leaky_relu(hb.array([-2.0, 0.0, 3.0]), slope=0.1).asnumpy()
    array([-0.2,  0. ,  3. ], dtype=float32)
    """
    slope = float(slope)
    if not math.isfinite(slope):
        raise ValueError(f"leaky_relu: slope must be a finite number, not {slope}")
    return apply(E.LeakyRelu, (x,), (slope,))


def where(cond, a, b):
    """a where cond is true (nonzero), b elsewhere, broadcasting all three: masking with a
    per-instance mask (a numpy bool array, or a value). No gradient flows into cond.

    >>> mask = np.array([True, False, True])
    >>> hb.where(mask, hb.array([1.0, 2.0, 3.0]), -1.0).asnumpy()
    array([ 1., -1.,  3.], dtype=float32)
    """
    return apply(E.Where, (cond, _like(a, b), _like(b, a)))


def cast(x, dtype):
    """x as `dtype` (numpy's astype); the gradient flows between float dtypes only. Integer
    values need a cast to float before ops whose result is not an integer (tanh, /, mean).

    >>> y = hb.cast(hb.array(np.array([1, 2, 3])), np.float32)
    >>> y.dtype, (y / 2).asnumpy()
    (dtype('float32'), array([0.5, 1. , 1.5], dtype=float32))
    """
    dtype = np.dtype(dtype)
    if dtype.kind not in "biufc":
        raise TypeError(f"hb.cast to {dtype}: values are numbers (bool, integer, float or complex dtypes); "
                        f"no op takes strings, objects, dates or raw bytes")
    return apply(E.Cast, (x,), (dtype.str,))


def matmul(a, b):
    """a @ b with numpy's rules for 1-D and 2-D operands (per instance). With a shared
    Parameter as `a`, the instances' products in a batch are one matrix product.

    >>> w = hb.array([[1.0, 2.0], [3.0, 4.0]])
    >>> hb.matmul(w, hb.array([1.0, 1.0])).asnumpy()
    array([3., 7.], dtype=float32)
    """
    return apply(L.MatMul, (a, b))


def affine(w, x, b):
    """w @ x + b as one op (one batch instead of two): a dense layer's pre-activation.

    >>> w = hb.Parameter("affine_w", (2, 3), init=1.0)
    >>> b = hb.Parameter("affine_b", (2,), init="zeros")
    >>> hb.affine(w, hb.array([1.0, 2.0, 3.0]), b).asnumpy()
    array([6., 6.], dtype=float32)
    """
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


def _over_list(name, xs):
    """A list operand as a tuple, or a ValueError for an empty one."""
    xs = tuple(xs)
    if not xs:
        raise ValueError(f"{name} needs at least one operand")
    return xs


def _list_op(ragged, fixed, xs):
    """One node of an op over a list of values (ops/lists.py). A batching scope records the
    ragged op, so that the calls over lists of every length batch together; eagerly, in a
    hybridized block's trace (which keeps one operand per position) or over operands that
    are not all values of the scope of one type, the op of that count."""
    scope = _local.scope
    if scope is not None and not scope.tracing:
        return scope.record_ragged(ragged, fixed, xs)
    return apply(fixed, xs)


def conv2d(x, weight, bias=None, padding="same"):
    """The 2-D convolution of a (C, H, W) feature map with an (O, C, k, k) weight, k odd,
    stride 1, zero padded to keep H x W ("same", the one padding), plus an (O,) bias: (O, H, W).
    A shared weight makes a batch one GEMM; a per-instance weight works too.

    >>> x = hb.array(np.ones((3, 8, 8), np.float32))
    >>> w = hb.Parameter("conv2d_w", (4, 3, 3, 3), init=1.0)
    >>> y = hb.conv2d(x, w)
    >>> y.shape, float(y.asnumpy()[0, 4, 4]), float(y.asnumpy()[0, 0, 0])
    ((4, 8, 8), 27.0, 12.0)
    """
    if padding != "same":
        raise ValueError(f"conv2d pads 'same' only (stride 1, odd k), not {padding!r}")
    return apply(CV.Conv2D, (x, weight) if bias is None else (x, weight, bias))


def pool_window(name, k):
    """k as an int, or the TypeError / ValueError of a pooling window that is not >= 1."""
    k = as_int(f"{name}'s k", k)
    if k < 1:
        raise ValueError(f"{name}'s window k must be at least 1, got {k}")
    return k


def _pool(op, x, k):
    """One pooling node, its window k checked at the call."""
    return apply(op, (x,), (pool_window(op.name, k),))


def max_pool2d(x, k=2):
    """The largest element of each non-overlapping k x k window (stride k) of a (C, H, W)
    map whose height and width k divides. The gradient goes to the window's largest
    elements, shared equally where several tie.

    >>> x = hb.array(np.arange(16, dtype=np.float32).reshape(1, 4, 4))
    >>> hb.max_pool2d(x, 2).asnumpy()
    array([[[ 5.,  7.],
            [13., 15.]]], dtype=float32)
    """
    return _pool(CV.MaxPool2D, x, k)


def avg_pool2d(x, k=2):
    """The mean of each non-overlapping k x k window (stride k) of a (C, H, W) map whose
    height and width k divides.

    >>> x = hb.array(np.arange(16, dtype=np.float32).reshape(1, 4, 4))
    >>> hb.avg_pool2d(x, 2).asnumpy()
    array([[[ 2.5,  4.5],
            [10.5, 12.5]]], dtype=float32)
    """
    return _pool(CV.AvgPool2D, x, k)


def add_n(xs):
    """Sum of a list of same-shaped values in one op. A batching scope batches the add_n's
    of one type together whatever their operand counts (ops.elementwise.RaggedAddN): a
    sentence's loss over its tokens, a minibatch's total loss.

    >>> hb.add_n([hb.array([1.0, 2.0]), hb.array([3.0, 4.0]), hb.array([5.0, 6.0])]).asnumpy()
    array([ 9., 12.], dtype=float32)
    >>> with hb.batching():          # lists of 2 and 3 values: one batch
    ...     totals = [hb.add_n([hb.array([1.0])] * n) for n in (2, 3)]
    >>> [t.item() for t in totals]
    [2.0, 3.0]
    """
    xs = _over_list("add_n", xs)
    if len(xs) == 1:
        return xs[0]
    return _list_op(E.RaggedAddN, E.AddN, xs)


def weighted_sum(weights, values):
    """sum_i weights[i] * values[i] over two lists of one length (attention pooling: the
    weights a softmax over the list, each broadcasting against its value). Two batches
    whatever the lengths: the products, then a ragged add_n.

    >>> states = [hb.array([1.0, 0.0]), hb.array([0.0, 1.0])]
    >>> hb.weighted_sum([hb.array(0.25), hb.array(0.75)], states).asnumpy()
    array([0.25, 0.75], dtype=float32)
    """
    weights, values = _over_list("weighted_sum", weights), _over_list("weighted_sum", values)
    if len(weights) != len(values):
        raise ShapeError(f"weighted_sum: {len(weights)} weights for {len(values)} values")
    return add_n([mul(w, v) for w, v in zip(weights, values)])


def concat(xs, axis=0):
    """Concatenate per-instance values along `axis` (an RNN's state with its input). The
    number of operands is part of the signature: calls with different counts do not batch.

    >>> hb.concat([hb.array([1.0, 2.0]), hb.array([3.0])]).asnumpy()
    array([1., 2., 3.], dtype=float32)
    """
    xs = list(xs)
    if not xs:
        raise ValueError("concat needs at least one operand")
    return apply(S.Concat, tuple(xs), (_axis("concat", axis, xs[0]),))


def slice(x, key):
    """x[key] for int and slice indices, `...` and None (a new axis of length 1), as numpy
    (what `future[i:j]` calls): gates out of one product, a row of a matrix. One int index is
    `pick` (of a Parameter: `lookup`): the index is per-node data, so `log_softmax(z)[label]`
    of different labels batch (and a block's int argument may be that index), where each
    other index is part of the signature.

    >>> x = hb.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    >>> hb.slice(x, (1, np.s_[1:])).asnumpy()
    array([5., 6.], dtype=float32)
    >>> x[:, 0].asnumpy()
    array([1., 4.], dtype=float32)
    >>> x[..., -1].shape, x[None].shape, x[:, None, 1:].shape
    ((2,), (1, 2, 3), (2, 1, 2))
    """
    shape = shape_of(x)
    if key is None or key is Ellipsis or (key.__class__ is tuple and any(k is None or k is Ellipsis for k in key)):
        return _with_new_axes(x, key, shape)
    if shape and (key.__class__ is BlockInt or (
            isinstance(key, (int, np.integer)) and not isinstance(key, (bool, np.bool_))
            and not ((scope := _local.scope) is not None and scope.tracing))):    # a trace keeps a fixed slice
        index = key if key.__class__ is BlockInt else normalize_index(key, shape)[0][1]
        return lookup(x, index) if isinstance(x, Parameter) else pick(x, index)
    return apply(S.Slice, (x,), normalize_index(key, shape))


def _with_new_axes(x, key, shape):
    """x[key] where key holds `...` (the full slices it stands for) or None: the slice of
    the other entries, then the new axes by a reshape. (Entries are compared by identity:
    `in` would compare a Future with ==, which refuses.)"""
    key = key if key.__class__ is tuple else (key,)
    ellipses = [i for i, k in enumerate(key) if k is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if ellipses:
        at = ellipses[0]
        named = len([k for k in key if k is not None]) - 1
        key = key[:at] + (np.s_[:],) * (len(shape) - named) + key[at + 1:]     # none when negative
    picked = tuple(k for k in key if k is not None)
    if len(picked) > len(shape):
        raise IndexError(f"too many indices ({len(picked)}) for a value of shape {shape}")
    out = slice(x, picked) if picked else x
    new_shape = np.empty(shape, np.bool_)[key].shape
    return out if shape_of(out) == new_shape else reshape(out, new_shape)


def split(x, sections, axis=0):
    """`sections` equal slices of x along `axis`, as a list (an LSTM's four gates from one
    product).

    >>> i, f = hb.split(hb.array([1.0, 2.0, 3.0, 4.0]), 2)
    >>> i.asnumpy(), f.asnumpy()
    (array([1., 2.], dtype=float32), array([3., 4.], dtype=float32))
    """
    shape = shape_of(x)
    plain = sections.__class__ is int and axis.__class__ is int      # True == 1 and 2.0 == 2 as keys
    key = (shape, sections, axis)
    parts = _split_attrs.get(key) if plain else None
    if parts is None:
        axis = _axis("split", axis, x)
        n = shape[axis]
        if not isinstance(sections, (int, np.integer)) or isinstance(sections, (bool, np.bool_)) or sections < 1:
            raise ValueError(f"split into {sections} parts: sections must be a positive integer")
        if n % sections:
            raise ShapeError(f"cannot split an axis of length {n} into {sections} equal parts")
        step = n // sections
        lead = (np.s_[:],) * axis
        parts = [normalize_index(lead + (np.s_[i * step:(i + 1) * step],), shape) for i in range(sections)]
        if plain:
            if len(_split_attrs) >= SPLIT_SHAPES_KEPT:     # a shape per length: keep the recent ones
                _split_attrs.clear()
            _split_attrs[key] = parts
    return [apply(S.Slice, (x,), attrs) for attrs in parts]


_split_attrs = {}      # (shape, sections, axis) -> each part's Slice attrs: split is an LSTM's every step
SPLIT_SHAPES_KEPT = 1024


def reshape(x, shape):
    """x's elements in a new per-instance shape; one dimension may be -1, inferred from the
    others, as in numpy.

    >>> hb.reshape(hb.array(np.arange(6.0)), (2, -1)).shape
    (2, 3)
    >>> hb.array(np.arange(6.0)).reshape(3, 2).shape
    (3, 2)
    """
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, (bool, np.bool_)):
        shape = (shape,)            # numpy's reshape(x, 4)
    elif not isinstance(shape, (tuple, list)):
        raise TypeError(f"reshape's shape must be an integer or a tuple of integers, not {type(shape).__name__}")
    shape = tuple(as_int("reshape's shape", s) for s in shape)
    if shape.count(-1) == 1:
        size, rest = math.prod(shape_of(x)), -math.prod(shape)
        if rest and size % rest == 0:
            shape = tuple(size // rest if s == -1 else s for s in shape)
    return apply(S.Reshape, (x,), shape)


def flatten(x):
    """x as a vector (per instance: the batch is never an axis here), say a feature map
    before a dense layer.

    >>> hb.flatten(hb.array(np.zeros((2, 3, 4)))).shape
    (24,)
    """
    return reshape(x, (math.prod(shape_of(x)),))


def expand_dims(x, axis):
    """x with a new axis of length 1 at `axis` (a reshape): a vector as a row or column.

    >>> x = hb.array([1.0, 2.0, 3.0])
    >>> hb.expand_dims(x, 0).shape, hb.expand_dims(x, -1).shape
    ((1, 3), (3, 1))
    """
    shape = shape_of(x)
    axis = as_int("expand_dims axis", axis)
    if not -len(shape) - 1 <= axis <= len(shape):
        raise ShapeError(f"expand_dims axis {axis} out of range for {len(shape)}-D operands")
    axis %= len(shape) + 1
    return reshape(x, shape[:axis] + (1,) + shape[axis:])


def squeeze(x, axis=None):
    """x without its axes of length 1 (or only those in `axis`, which must be 1), a reshape.

    >>> x = hb.array(np.zeros((1, 3, 1)))
    >>> hb.squeeze(x).shape, hb.squeeze(x, axis=0).shape
    ((3,), (3, 1))
    """
    shape = shape_of(x)
    if axis is None:
        axes = range(len(shape))
    else:
        axes = _axes("squeeze", axis, x)
        for a in axes:
            if shape[a] != 1:
                raise ShapeError(f"squeeze axis {a} has length {shape[a]}, not 1 (shape {shape})")
    return reshape(x, tuple(n for i, n in enumerate(shape) if not (i in axes and n == 1)))


def transpose(x, axes=None):
    """x's per-instance axes permuted as numpy's transpose: reversed by default (`x.T`).

    >>> x = hb.array(np.zeros((2, 3, 4)))
    >>> hb.transpose(x).shape, hb.transpose(x, (1, 0, 2)).shape
    ((4, 3, 2), (3, 2, 4))
    """
    ndim = len(shape_of(x))
    axes = tuple(range(ndim))[::-1] if axes is None else tuple(_axis("transpose", a, x) for a in axes)
    return apply(S.Transpose, (x,), axes)


def stack(xs, axis=0):
    """Values of one shape stacked along a new axis (numpy's stack): rows into a matrix.

    >>> rows = [hb.array([1.0, 2.0]), hb.array([3.0, 4.0])]
    >>> hb.stack(rows).asnumpy()
    array([[1., 2.],
           [3., 4.]], dtype=float32)
    >>> hb.stack(rows, axis=1).shape
    (2, 2)
    """
    xs = _over_list("stack", xs)
    ndim = len(shape_of(xs[0]))
    axis = as_int("stack axis", axis)
    if not -ndim - 1 <= axis <= ndim:
        raise ShapeError(f"stack axis {axis} out of range for {ndim}-D operands")
    return apply(S.Stack, xs, (axis % (ndim + 1),))


def _first_sentence(doc):
    """The first sentence of a docstring, on one line."""
    return " ".join(doc.split()).split(". ")[0].rstrip(".") + "."


def _reduction(op, of_list=None, example=""):
    """hb.<op.name>(x, axis=None, keepdims=False); with `of_list` (its list ops: ragged,
    fixed count), x may also be a list of values of one type, reduced across the list only
    (elementwise), whatever its length in one batch per type. `example` ends its docstring."""
    def function(x, axis=None, keepdims=False):
        if isinstance(x, (list, tuple)):
            if of_list is None:
                raise TypeError(f"{op.name} takes one value, not a list (over a list: hb.sum, hb.max, hb.min, "
                                f"hb.logsumexp, hb.softmax)")
            if axis not in (None, 0) or keepdims:
                raise ValueError(f"{op.name} over a list reduces the list (axis 0) only, without keepdims")
            xs = _over_list(op.name, x)
            return xs[0] if len(xs) == 1 else _list_op(*of_list, xs)   # a list of one: that value, as add_n
        return apply(op, (x,), (_axes(op.name, axis, x), bool(keepdims)))
    function.__name__ = function.__qualname__ = op.name
    function.__doc__ = (f"{_first_sentence(type(op).__doc__)} axis: None (every axis), an int or a tuple; "
                        f"keepdims keeps them as length 1, as numpy."
                        + (" A list of values of one type is reduced across the list, elementwise." if of_list else "")
                        + example)
    return function


sum = _reduction(R.Sum, (E.RaggedAddN, E.AddN), """

    >>> x = hb.array([[1.0, 2.0], [3.0, 4.0]])
    >>> hb.sum(x).item(), hb.sum(x, axis=0).asnumpy(), hb.sum(x, axis=1, keepdims=True).shape
    (10.0, array([4., 6.], dtype=float32), (2, 1))
    >>> hb.sum([hb.array([1.0, 2.0]), hb.array([3.0, 4.0])]).asnumpy()
    array([4., 6.], dtype=float32)
    """)      # noqa: A001 - the public spellings are hb.sum, hb.max, hb.min
mean = _reduction(R.Mean, example="""

    >>> x = hb.array([[1.0, 2.0], [3.0, 4.0]])
    >>> hb.mean(x).item(), hb.mean(x, axis=1).asnumpy()
    (2.5, array([1.5, 3.5], dtype=float32))
    """)
max = _reduction(R.Max, (LS.RaggedMaxN, LS.MaxN), """

    >>> x = hb.array([[1.0, 5.0], [3.0, 4.0]])
    >>> hb.max(x).item(), hb.max(x, axis=0).asnumpy()
    (5.0, array([3., 5.], dtype=float32))
    >>> hb.max([hb.array([1.0, 9.0]), hb.array([2.0, 0.0])]).asnumpy()
    array([2., 9.], dtype=float32)
    """)      # noqa: A001
min = _reduction(R.Min, (LS.RaggedMinN, LS.MinN), """

    >>> x = hb.array([[1.0, 5.0], [3.0, 4.0]])
    >>> hb.min(x).item(), hb.min(x, axis=1).asnumpy()
    (1.0, array([1., 3.], dtype=float32))
    """)      # noqa: A001
logsumexp = _reduction(R.LogSumExp, (LS.RaggedLogSumExpN, LS.LogSumExpN), """

    >>> round(hb.logsumexp(hb.array([0.0, 0.0])).item(), 3)
    0.693
    >>> round(hb.logsumexp(hb.array([1000.0, 1000.0])).item(), 3)     # no overflow
    1000.693
    """)


def var(x, axis=None, keepdims=False):
    """The variance over `axis` (every element when None; an int or a tuple), numpy's
    (mean of squared deviations, ddof 0), as hb ops: it batches and differentiates as they do.

    >>> x = hb.array([[1.0, 2.0], [3.0, 5.0]])
    >>> hb.var(x).item(), hb.var(x, axis=1).asnumpy()
    (2.1875, array([0.25, 1.  ], dtype=float32))
    """
    deviation = x - mean(x, axis=axis, keepdims=True)
    return mean(square(deviation), axis=axis, keepdims=keepdims)


def std(x, axis=None, keepdims=False):
    """sqrt(var(x, axis, keepdims)): numpy's standard deviation (ddof 0); its gradient is
    NaN where every element reduced is equal (0 / 0), as PyTorch's and JAX's.

    >>> hb.std(hb.array([1.0, 3.0])).item()
    1.0
    """
    return sqrt(var(x, axis=axis, keepdims=keepdims))


def _list_normalizer(name, axis, x):
    """(the list, its logsumexp) for a softmax across a list: a node even for a list of one,
    so that every list's terms come one step after their scores, as one batch."""
    if axis not in (-1, 0):
        raise ValueError(f"{name} over a list runs across the list (axis 0), not axis {axis}")
    xs = _over_list(name, x)
    return xs, _list_op(LS.RaggedLogSumExpN, LS.LogSumExpN, xs)


def _arg_reduction(op, example):
    """hb.<op.name>(x, axis=None, keepdims=False), `example` ending its docstring."""
    def function(x, axis=None, keepdims=False):
        return apply(op, (x,), (None if axis is None else _axis(op.name, axis, x), bool(keepdims)))
    function.__name__ = function.__qualname__ = op.name
    function.__doc__ = (f"The index (int64, no gradient) of the first {'largest' if op is R.ArgMax else 'smallest'} "
                        f"element along `axis`, or in the flattened value (axis None), as numpy." + example)
    return function


argmax = _arg_reduction(R.ArgMax, """

    >>> x = hb.array([[1.0, 7.0, 7.0], [0.0, 2.0, 3.0]])
    >>> int(hb.argmax(x)), hb.argmax(x, axis=1).asnumpy()     # ties: the first
    (1, array([1, 2]))
    """)
argmin = _arg_reduction(R.ArgMin, """

    >>> x = hb.array([[1.0, 7.0, 0.0], [9.0, 2.0, 3.0]])
    >>> int(hb.argmin(x)), hb.argmin(x, axis=0).asnumpy()
    (2, array([0, 1, 0]))
    """)


def topk(x, k, axis=-1):
    """(values, indices) of the k largest elements along `axis`, largest first (ties: lower
    index first; NaN counts as largest, as for hb.max). The values have a gradient; the
    indices are int64, with none.

    >>> values, indices = hb.topk(hb.array([0.1, 0.7, 0.2, 0.9]), 2)
    >>> values.asnumpy(), indices.asnumpy()
    (array([0.9, 0.7], dtype=float32), array([3, 1]))
    """
    attrs = (as_int("topk's k", k), _axis("topk", axis, x))
    return apply(R.TopK, (x,), attrs + ("values",)), apply(R.TopK, (x,), attrs + ("indices",))


def lookup(param, index):
    """Row `index` of a Parameter table (an embedding). The index is per-node data, not
    part of the signature, so lookups of different rows batch; the gradient is sparse.

    >>> table = hb.Parameter("lookup_table", (5, 3), init="zeros")
    >>> table.data[2] = [1.0, 2.0, 3.0]
    >>> hb.lookup(table, 2).asnumpy()
    array([1., 2., 3.], dtype=float32)
    """
    if not isinstance(param, Parameter):
        raise TypeError(f"lookup reads rows of a Parameter, not {type(param).__name__}")
    return apply(I.Lookup, (param,), (), index)


def pick(x, index):
    """Element `index` of a vector, a 0-d value, or row `index` of a value of higher rank (a
    negative index counts from the end). Like `lookup`'s, the index is per-node data, so
    picks of different elements batch.

    >>> hb.pick(hb.array([0.5, 1.5, 2.5]), 1).item()
    1.5
    """
    return apply(I.Pick, (x,), (), index)


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along `axis`. Over a list of values of one type (scores of a
    per-instance length), across the list, elementwise: a list back, in two batches however
    the lengths differ (the list's logsumexp, then exp(x_i - it)).

    >>> hb.softmax(hb.array([0.0, np.log(3.0)])).asnumpy().round(3)
    array([0.25, 0.75], dtype=float32)
    >>> with hb.batching():        # scores of one word each, lists of 2 and 3: two batches
    ...     ws = [hb.softmax([hb.array(0.0) for _ in range(n)]) for n in (2, 3)]
    >>> [round(w.item(), 3) for w in ws[1]]
    [0.333, 0.333, 0.333]
    """
    if isinstance(x, (list, tuple)):
        xs, norm = _list_normalizer("softmax", axis, x)
        return [apply(E.ExpSub, (v, norm)) for v in xs]
    return apply(SM.Softmax, (x,), (_axis("softmax", axis, x),))


def log_softmax(x, axis=-1):
    """log softmax(x) along `axis`; over a list of values of one type, across the list (a
    list back, two batches: see softmax). It never overflows where log(softmax(x)) would.

    >>> hb.log_softmax(hb.array([0.0, 0.0])).asnumpy().round(3)
    array([-0.693, -0.693], dtype=float32)
    """
    if isinstance(x, (list, tuple)):
        xs, norm = _list_normalizer("log_softmax", axis, x)
        return [sub(v, norm) for v in xs]
    return apply(SM.LogSoftmax, (x,), (_axis("log_softmax", axis, x),))


def pick_neg_log_softmax(logits, label):
    """-log softmax(logits)[label]: the per-instance classification loss, one op. The label
    is per-node data, so losses with different labels batch together.

    >>> round(hb.pick_neg_log_softmax(hb.array([0.0, 0.0, 0.0, 0.0]), 2).item(), 3)
    1.386
    """
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
    p = 0 returns x itself. For a layer that eval() turns off, use nn.Dropout.

    >>> hb.seed(0)
    >>> y = hb.dropout(hb.array(np.ones(1000, np.float32)), 0.5).asnumpy()
    >>> sorted(set(y.tolist())), bool(300 < (y == 0).sum() < 700)
    ([0.0, 2.0], True)
    """
    p = dropout_rate(p)
    if p == 0.0:
        return x
    scope = _local.scope
    key = draw_placeholder(scope) if scope is not None and scope.tracing else RND.next_key()
    return apply(RND.Dropout, (x,), (p,), key)


def py_func(fn, *xs, out_shape, out_dtype=np.float32, grad_fn=None):
    """Run numpy code per instance as an (unbatchable) op: fn(*arrays) -> array.

    Checked here, at the call: fn and grad_fn callable (grad_fn may be None), out_shape
    an integer or a tuple of integers >= 0, out_dtype numeric. A scope would otherwise fail
    only at its flush.

    >>> def cumsum(x):
    ...     return np.cumsum(x).astype(np.float32)
    >>> hb.py_func(cumsum, hb.array([1.0, 2.0, 3.0]), out_shape=(3,)).asnumpy()
    array([1., 3., 6.], dtype=float32)
    """
    if not callable(fn) or not (grad_fn is None or callable(grad_fn)):
        raise TypeError(f"py_func needs a callable fn and a callable grad_fn (or None), got "
                        f"{type(fn).__name__} and {type(grad_fn).__name__}")
    if isinstance(out_shape, (int, np.integer)) and not isinstance(out_shape, (bool, np.bool_)):
        out_shape = (out_shape,)        # as reshape(x, 4)
    elif not isinstance(out_shape, (tuple, list)):
        raise TypeError(f"py_func's out_shape must be an integer or a tuple of integers, "
                        f"not {type(out_shape).__name__}")
    shape = tuple(as_int("py_func's out_shape", s) for s in out_shape)    # np.int64(3) names its type as 3 does
    if any(d < 0 for d in shape):
        raise ValueError(f"py_func's out_shape {shape} must hold integers >= 0")
    dtype = np.dtype(out_dtype)
    if dtype.kind not in "biufc":
        raise TypeError(f"py_func's out_dtype must be numeric (bool, integer, float or complex), not {dtype}")
    handle = C.hold(fn, grad_fn)       # the node's functions: its data, not its signature's
    try:
        out = apply(C.PyFunc, xs, (C.function_name(fn), shape, dtype), handle)
        if isinstance(out, Tensor):
            C.keep(out, handle)
    finally:
        C.drop(handle)
    scope = _local.scope
    if scope is not None and not scope.tracing and out.__class__ is Future:
        scope.note_line(out.id)         # a node that runs alone: explain() names its line
    return out


for _cls in (Future, Tensor, Parameter):
    operators.install(_cls, __import__(__name__, fromlist=["_"]), named=_cls is Parameter)
