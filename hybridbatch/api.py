"""The op functions users call. Each records a node inside a scope, or runs eagerly outside."""

import math

import numpy as np

from .record.eager import Tensor, constant as _eager_constant, apply as _eager_apply
from .record.future import Future
from .ops import (OPS, elementwise as E, linalg as L, shape as S, reduce as R, softmax as SM, lists as LS, index as I,
                  custom as C)
from .ops import random as RND, conv as CV
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


def _axes(op_name, axis, x):
    """numpy's `axis` argument of a reduction (None, an int or a tuple of ints) as a sorted
    tuple of non-negative per-instance axes, or None for all of them."""
    if axis is None:
        return None
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    out = tuple(sorted(_axis(op_name, a, x) for a in axes))
    if len(set(out)) != len(out):
        raise ValueError(f"{op_name}: axis {axis} repeats an axis")
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
    return int(v) if isinstance(v, (int, np.integer)) else float(v)


def _scalar_affine(x, a, c):
    """a * x + c for Python numbers a, c. Recorded in a scope (outside a traced forward) on
    a float operand, the numbers are the node's operand, so calls with different numbers
    batch (ops/elementwise.py, ScalarAffineOperand); elsewhere they are the op's attributes,
    baked into a trace's kernels."""
    a, c = _exact(a), _exact(c)
    scope = _local.scope
    if scope is not None and not scope.tracing and getattr(getattr(x, "dtype", None), "kind", "") == "f":
        scalars = np.array([a, c if c or c.__class__ is float else -0.0], dtype=x.dtype)
        return scope.record(E.ScalarAffineOperand, (x, scope.constant(scalars)))
    return apply(E.ScalarAffine, (x,), E.ScalarAffine.attrs_of(a, c))


def add(a, b):
    """a + b elementwise, broadcasting as numpy; with a Python number on either side, one
    affine op (x + 1) that batches whatever the number."""
    if isinstance(b, _Number):
        return _scalar_affine(a, 1, b)
    if isinstance(a, _Number):
        return _scalar_affine(b, 1, a)
    return apply(E.Add, (a, b))


def sub(a, b):
    """a - b elementwise, broadcasting; with a Python number on either side, one affine op
    (x - 1, 1 - x)."""
    if isinstance(b, _Number):       # negated as a Python number: -np.uint8(3) wraps to 253
        return _scalar_affine(a, 1, -_exact(b))
    if isinstance(a, _Number):
        return _scalar_affine(b, -1, a)
    return apply(E.Sub, (a, b))


def mul(a, b):
    """a * b elementwise, broadcasting; with a Python number on either side, one affine op
    (2 * x)."""
    if isinstance(b, _Number):
        return _scalar_affine(a, b, 0)
    if isinstance(a, _Number):
        return _scalar_affine(b, a, 0)
    return apply(E.Mul, (a, b))


def div(a, b):
    """a / b elementwise, broadcasting; a Python number as the divisor is one affine op (x
    times 1 / b), as the dividend a constant of b's dtype."""
    if isinstance(b, _Number):       # a Python float: 1.0 / np.float16(3) rounds to float16
        b = float(b)                 # / 0 gives numpy's inf and nan: x * (+-inf)
        return _scalar_affine(a, 1.0 / b if b else math.copysign(math.inf, b), 0)
    if isinstance(a, _Number):       # a number over a value: a scalar constant of its dtype
        a = np.asarray(a, dtype=b.dtype if hasattr(b, "dtype") else np.float32)
    return apply(E.Div, (a, b))


def pow(a, b):  # noqa: A001 - the public spelling is hb.pow (and a ** b)
    """a ** b elementwise (floats). A Python number as the exponent is one op with it as an
    attribute (x ** 2); as the base, a constant of the exponent's dtype."""
    if isinstance(b, _Number):
        return apply(E.ScalarPow, (a,), (float(b),))
    return apply(E.Pow, (_like(a, b), b))


def maximum(a, b):
    """The larger of a and b elementwise, broadcasting; a tie sends half the gradient to each."""
    return apply(E.Maximum, (_like(a, b), _like(b, a)))


def minimum(a, b):
    """The smaller of a and b elementwise, broadcasting; a tie sends half the gradient to each."""
    return apply(E.Minimum, (_like(a, b), _like(b, a)))


def clip(x, lo, hi):
    """x limited to [lo, hi] elementwise (maximum, then minimum)."""
    return minimum(maximum(x, lo), hi)


def where(cond, a, b):
    """a where cond is true (nonzero), b elsewhere, broadcasting all three: masking with a
    per-instance mask (a numpy bool array, or a value). No gradient flows into cond."""
    return apply(E.Where, (cond, _like(a, b), _like(b, a)))


def cast(x, dtype):
    """x as `dtype` (numpy's astype); the gradient flows between float dtypes only."""
    return apply(E.Cast, (x,), (np.dtype(dtype).str,))


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
    A shared weight makes a batch one GEMM; a per-instance weight works too."""
    if padding != "same":
        raise ValueError(f"conv2d pads 'same' only (stride 1, odd k), not {padding!r}")
    return apply(CV.Conv2D, (x, weight) if bias is None else (x, weight, bias))


def _pool(op, x, k):
    """One pooling node, its window k checked at the call (an int >= 1)."""
    k = as_int(f"{op.name}'s k", k)
    if k < 1:
        raise ValueError(f"{op.name}'s window k must be at least 1, got {k}")
    return apply(op, (x,), (k,))


def max_pool2d(x, k=2):
    """The largest element of each non-overlapping k x k window (stride k) of a (C, H, W)
    map whose height and width k divides. The gradient goes to the window's largest
    elements, shared equally where several tie."""
    return _pool(CV.MaxPool2D, x, k)


def avg_pool2d(x, k=2):
    """The mean of each non-overlapping k x k window (stride k) of a (C, H, W) map whose
    height and width k divides."""
    return _pool(CV.AvgPool2D, x, k)


def add_n(xs):
    """Sum of a list of same-shaped values in one op. A batching scope batches the add_n's
    of one type together whatever their operand counts (ops.elementwise.RaggedAddN)."""
    xs = _over_list("add_n", xs)
    if len(xs) == 1:
        return xs[0]
    return _list_op(E.RaggedAddN, E.AddN, xs)


def weighted_sum(weights, values):
    """sum_i weights[i] * values[i] over two lists of one length (attention pooling: the
    weights a softmax over the list, each broadcasting against its value). Two batches
    whatever the lengths: the products, then a ragged add_n."""
    weights, values = _over_list("weighted_sum", weights), _over_list("weighted_sum", values)
    if len(weights) != len(values):
        raise ValueError(f"weighted_sum: {len(weights)} weights for {len(values)} values")
    return add_n([mul(w, v) for w, v in zip(weights, values)])


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
    """x's elements in a new per-instance shape; one dimension may be -1, inferred from the
    others, as in numpy."""
    shape = tuple(as_int("reshape's shape", s) for s in shape)
    if shape.count(-1) == 1:
        size, rest = math.prod(shape_of(x)), -math.prod(shape)
        if rest and size % rest == 0:
            shape = tuple(size // rest if s == -1 else s for s in shape)
    return apply(S.Reshape, (x,), shape)


def flatten(x):
    """x as a vector (per instance: the batch is never an axis here)."""
    return reshape(x, (math.prod(shape_of(x)),))


def expand_dims(x, axis):
    """x with a new axis of length 1 at `axis` (a reshape)."""
    shape = shape_of(x)
    axis = as_int("expand_dims axis", axis)
    if not -len(shape) - 1 <= axis <= len(shape):
        raise ValueError(f"expand_dims axis {axis} out of range for {len(shape)}-D operands")
    axis %= len(shape) + 1
    return reshape(x, shape[:axis] + (1,) + shape[axis:])


def squeeze(x, axis=None):
    """x without its axes of length 1 (or only those in `axis`, which must be 1), a reshape."""
    shape = shape_of(x)
    axes = range(len(shape)) if axis is None else _axes("squeeze", axis, x)
    for a in axes:
        if axis is not None and shape[a] != 1:
            raise ValueError(f"squeeze axis {a} has length {shape[a]}, not 1 (shape {shape})")
    return reshape(x, tuple(n for i, n in enumerate(shape) if not (i in axes and n == 1)))


def transpose(x, axes=None):
    """x's per-instance axes permuted as numpy's transpose: reversed by default (`x.T`)."""
    ndim = len(shape_of(x))
    axes = tuple(range(ndim))[::-1] if axes is None else tuple(_axis("transpose", a, x) for a in axes)
    return apply(S.Transpose, (x,), axes)


def stack(xs, axis=0):
    """Values of one shape stacked along a new axis (numpy's stack)."""
    xs = list(xs)
    if not xs:
        raise ValueError("stack needs at least one operand")
    ndim = len(shape_of(xs[0]))
    axis = as_int("stack axis", axis)
    if not -ndim - 1 <= axis <= ndim:
        raise ValueError(f"stack axis {axis} out of range for {ndim}-D operands")
    return apply(S.Stack, tuple(xs), (axis % (ndim + 1),))


def _reduction(op, of_list=None):
    """hb.<op.name>(x, axis=None, keepdims=False); with `of_list`, x may also be a list of
    values of one type, reduced across the list only (elementwise), whatever its length in
    one batch per type."""
    def function(x, axis=None, keepdims=False):
        if isinstance(x, (list, tuple)):
            if of_list is None:
                raise TypeError(f"{op.name} takes one value, not a list (over a list: hb.sum, hb.max, hb.min, "
                                f"hb.logsumexp, hb.softmax)")
            if axis not in (None, 0) or keepdims:
                raise ValueError(f"{op.name} over a list reduces the list (axis 0) only, without keepdims")
            xs = _over_list(op.name, x)
            return xs[0] if len(xs) == 1 else of_list(xs)   # a list of one: that value, as add_n
        return apply(op, (x,), (_axes(op.name, axis, x), bool(keepdims)))
    function.__name__ = function.__qualname__ = op.name
    function.__doc__ = (f"{' '.join(type(op).__doc__.split())} axis: None (every axis), an int or a tuple; "
                        f"keepdims keeps them as length 1, as numpy."
                        + (" A list of values of one type is reduced across the list, elementwise." if of_list else ""))
    return function


sum = _reduction(R.Sum, add_n)      # noqa: A001 - the public spellings are hb.sum, hb.max, hb.min
mean = _reduction(R.Mean)
max = _reduction(R.Max, lambda xs: _list_op(LS.RaggedMaxN, LS.MaxN, xs))      # noqa: A001
min = _reduction(R.Min, lambda xs: _list_op(LS.RaggedMinN, LS.MinN, xs))      # noqa: A001
logsumexp = _reduction(R.LogSumExp, lambda xs: _list_op(LS.RaggedLogSumExpN, LS.LogSumExpN, xs))


def _list_normalizer(name, axis, x):
    """(the list, its logsumexp) for a softmax across a list: a node even for a list of one,
    so that every list's terms come one step after their scores, as one batch."""
    if axis not in (-1, 0):
        raise ValueError(f"{name} over a list runs across the list (axis 0), not axis {axis}")
    xs = _over_list(name, x)
    return xs, _list_op(LS.RaggedLogSumExpN, LS.LogSumExpN, xs)


def _arg_reduction(op):
    def function(x, axis=None, keepdims=False):
        return apply(op, (x,), (None if axis is None else _axis(op.name, axis, x), bool(keepdims)))
    function.__name__ = function.__qualname__ = op.name
    function.__doc__ = (f"The index (int64, no gradient) of the first {'largest' if op is R.ArgMax else 'smallest'} "
                        f"element along `axis`, or in the flattened value (axis None), as numpy.")
    return function


argmax = _arg_reduction(R.ArgMax)
argmin = _arg_reduction(R.ArgMin)


def topk(x, k, axis=-1):
    """(values, indices) of the k largest elements along `axis`, largest first (ties: lower
    index first). The values have a gradient; the indices are int64, with none."""
    attrs = (as_int("topk's k", k), _axis("topk", axis, x))
    return apply(R.TopK, (x,), attrs + ("values",)), apply(R.TopK, (x,), attrs + ("indices",))


def lookup(param, index):
    """Row `index` of a Parameter table (an embedding)."""
    if not isinstance(param, Parameter):
        raise TypeError(f"lookup reads rows of a Parameter, not {type(param).__name__}")
    return apply(I.Lookup, (param,), (), index)


def pick(x, index):
    """Element `index` of a vector."""
    return apply(I.Pick, (x,), (), index)


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along `axis`. Over a list of values of one type (scores of a
    per-instance length), across the list, elementwise: a list back, in two batches however
    the lengths differ (the list's logsumexp, then exp(x_i - it))."""
    if isinstance(x, (list, tuple)):
        xs, norm = _list_normalizer("softmax", axis, x)
        return [apply(E.ExpSub, (v, norm)) for v in xs]
    return apply(SM.Softmax, (x,), (_axis("softmax", axis, x),))


def log_softmax(x, axis=-1):
    """log softmax(x) along `axis`; over a list of values of one type, across the list (a
    list back, two batches: see softmax)."""
    if isinstance(x, (list, tuple)):
        xs, norm = _list_normalizer("log_softmax", axis, x)
        return [sub(v, norm) for v in xs]
    return apply(SM.LogSoftmax, (x,), (_axis("log_softmax", axis, x),))


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
    key = draw_placeholder(scope) if scope is not None and scope.tracing else RND.next_key()
    return apply(RND.Dropout, (x,), (p,), key)


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
    out = apply(C.PyFunc, xs, (fn, grad_fn, shape, dtype))
    scope = _local.scope
    if scope is not None and not scope.tracing:
        scope.note_line(out.id)         # a node that runs alone: explain() names its line
    return out


for _cls in (Future, Tensor, Parameter):
    operators.install(_cls, __import__(__name__, fromlist=["_"]), named=_cls is Parameter)
