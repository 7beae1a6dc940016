"""The Op base class and the registry of primitive ops.

One class per op (Chainer's shape): `infer` gives the per-instance output shape, `forward`
runs a whole batch at once, `backward` is its batched vector-Jacobian product. Every array a
kernel sees has a leading batch axis of size B, except operands that are shared Parameters
(`sig.shared[i]`), which arrive once, unbatched. Eager mode calls the same kernels with B = 1.
"""
import operator

import numpy as np

from ..errors import ShapeError
from ..record.signature import check  # noqa: F401  (re-exported for op modules)

def as_int(what, v):
    """v as an int, or a TypeError as numpy raises: int() would read 3.5 as 3, and a bool is
    an int to Python (True as 1)."""
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{what} must be an integer, not bool")
    try:
        return operator.index(v)
    except TypeError:
        raise TypeError(f"{what} must be an integer, not {type(v).__name__}") from None


OPS: list = []


class Op:
    """A primitive op. Subclasses set `name` and implement infer/forward/backward."""

    name = "op"
    batchable = True     # False: nodes run one at a time (a batch of one each)
    cost = 0             # agenda tie-break: cheap (elementwise) ops run before heavy ones
    uses_aux = False     # True: each node carries one integer (a row index, a label)
    any_aux = False      # True: every int is a valid one (packed numbers), taken as it is
    aux_from_end = False  # True: the kernels read a negative aux from the end, as numpy's index (pick)
    holds_aux = False    # True: the int is a handle an owner must keep (py_func's functions):
                         # check_aux keeps it for the recording scope, keep_aux(program, aux)
                         # for a traced program
    aux_width = 1        # integers per node when uses_aux (block calls may take several)
    executed = True      # False for inputs, whose values exist at record time
    n_out = 1            # outputs per node; >1 returns a tuple (see ops/shape.Output)
    saves = False        # True: forward returns (y, saved); backward receives saved= and xs=None,
                         # and saved_rows(saved, mask) must select rows of saved
    needs_batched = True  # False: may run with shared operands only (its aux sizes the batch)
    add_grad = None      # optional (sig, g_input, gy): add gy into g_input in place (sparse grads)
    writes_out = False   # True: forward takes out= (the batch's destination rows, one array per
                         # output) and may return them, written in place of a copy
    ragged = False       # True: a node takes any number of operands of one type, in one operand
                         # position: a batch's come stacked node after node, aux = count per node
    zero_exact = False   # True: no ordinary finite operand makes its value or local derivative
                         # inf or NaN (only overflow can), so a zero output gradient gives exact
                         # zeros. Not log (-inf at 0), div (x / 0) or py_func: autograd._output_groups
    fusable = False      # True: elementwise with a `scalar` rule, so fused runs of block programs
                         # may take it (kernels/fused.py)
    product = False      # True: a matrix product, the work that rows with equal keys share
                         # (hybrid/distinct.py)
    without_bias = None  # for an op that is another op plus a bias (its last operand): that op,
                         # taking the other operands (affine: matmul). Fused runs that read the
                         # value may add the bias themselves (kernels/fused.py)
    # What a block call's op (hybrid/composite.py) tells the runtime; a primitive keeps these:
    extra_out_sigs = ()  # signatures of outputs 1..n_out-1: the flush adds a node of each after the call
    input_use = None     # (n_out, n_operands) bools, which operands each output depends on; None: all
    owner_block = None   # the HybridBlock whose forward the op runs (granularity="auto" groups by it)
    id = -1

    def infer(self, attrs, shapes, dtypes):
        """Per-instance output (shape, dtype); raise ShapeError on a mismatch."""
        raise NotImplementedError

    def index(self, aux):
        """A node's integer datum as an int, or a TypeError naming the op (int() would
        truncate 1.5 to 1 and read another row, and a bool would pass as 0 or 1)."""
        return as_int(f"{self.name}: the index", aux)

    def check_aux(self, sig, aux):
        """Validate a node's integer datum at record time (raise IndexError/ValueError)."""

    def aux_limit(self, sig):
        """n when 0 <= v < n are valid integers (recording and block calls check that bound
        inline and call check_aux for any other v, which may accept it: a negative index
        counting from the end, recorded as v + n), else None."""
        return None

    def forward(self, xp, sig, xs, aux):
        """Batched forward: xs[i] is (B,)+shape, or the raw parameter when sig.shared[i]."""
        raise NotImplementedError

    def params_used(self, sig):
        """Ids of the shared Parameters a node of `sig` reads (a block call: its steps')."""
        return [pid for pid in sig.params if pid is not None]

    def with_input_looked_up(self, sig, position, lookup_sig):
        """The signature of a node computing the same with operand `position` made inside by
        `lookup_sig`'s lookup (its row a new last integer), where that pays; else None. The
        plan asks it of a batch whose nodes all read lookups of one table there (a block call:
        its per-word part then runs once per distinct word)."""
        return None

    def locate_nonfinite(self, xp, sig, xs, aux, row):
        """Where inside a node the NaN/inf of batch row `row` first appeared, as (op name,
        source line), given the batch's operands and aux; None where the node is one op."""
        return None

    @staticmethod
    def columns(sig):
        """The first element when the value is one contiguous range of a vector operand (a
        slice), else None: a block hands the gradient back as a ColumnGrad (composite.py), and a
        fused run reads the range in place (kernels/fused.py)."""
        return None

    def scalar(self, attrs, t, *xs):
        """With fusable: the op per element, as Python source for the fused kernels:
        (value, [d value / d xs[k] per operand]) over the operands' expressions xs and the
        op's own value t (a name). A derivative spelled "/ e" divides the gradient by e, as
        eager's gy / x does (gy * (1 / x) is inf for a subnormal x). Spell literals F(1.0) (F:
        the run's float type), so float32 math stays float32; np is numpy (numba compiles its
        scalar functions) and _tanh the kernels' vectorizing tanh."""
        raise NotImplementedError(f"{self.name} is fusable but has no scalar rule")

    def backward(self, xp, sig, xs, aux, y, gy, needs, saved=None):
        """Gradients for each operand i with needs[i]; None elsewhere.

        A batched operand's gradient has shape (B,)+shape; a shared parameter's gradient has
        the parameter's shape (already summed over the batch) or is a RowGrad.
        """
        raise NotImplementedError

    def __repr__(self):
        return f"<op {self.name}>"


class RowGrad:
    """A sparse parameter gradient: `values[k]` adds into row `rows[k]` (embedding lookups)."""

    __slots__ = ("rows", "values")

    def __init__(self, rows, values):
        self.rows = rows
        self.values = values


class ColumnGrad:
    """The gradient of a batch of vectors (B, width) that is zero outside the columns
    first .. first + values.shape[1]: what a block gives back for an input it only slices
    (a BiLSTM step reads its half of the input projection), scattered into those columns alone
    instead of as a mostly-zero (B, width) array."""

    __slots__ = ("first", "values", "width")

    def __init__(self, first, values, width):
        self.first, self.values, self.width = first, values, width

    def dense(self):
        """The full (B, width) array."""
        out = np.zeros((len(self.values), self.width), self.values.dtype)
        out[:, self.first:self.first + self.values.shape[1]] = self.values
        return out


class OuterGrad:
    """A shared weight's gradient left^T @ right (dW = G^T X over the batch), left unevaluated
    so that reverse mode can do ONE GEMM per parameter over every batch that used it."""

    __slots__ = ("left", "right")

    def __init__(self, left, right):
        self.left = left
        self.right = right


def register(op_cls):
    """Class decorator: instantiate the op and give it its registry id."""
    op = op_cls()
    op.id = len(OPS)
    OPS.append(op)
    return op


def expand(x, shared, in_shape, out_ndim):
    """View a batched operand so it broadcasts per instance against a (B,)+out shape.

    Per-instance numpy broadcasting aligns trailing axes; the batch axis stays first, so a
    batched operand of lower rank gets singleton axes inserted after the batch axis. Shared
    operands carry no batch axis and already align from the right.
    """
    k = len(in_shape)
    if shared or k == out_ndim:
        return x
    return x.reshape((x.shape[0],) + (1,) * (out_ndim - k) + tuple(in_shape))


def unbroadcast(g, shared, in_shape):
    """Sum a (B,)+out gradient back to an operand's shape (per instance, or whole for shared)."""
    if g.shape[1:] == in_shape:     # nothing was broadcast (a layer's bias, most operands)
        return g.sum(axis=0) if shared else g
    out_ndim = g.ndim - 1
    k = len(in_shape)
    lead = out_ndim - k
    axes = tuple(range(1, 1 + lead)) + tuple(
        1 + lead + i for i, s in enumerate(in_shape) if s == 1 and g.shape[1 + lead + i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
        g = g.reshape((g.shape[0],) + tuple(in_shape))
    if shared:
        g = g.sum(axis=0)
    return g


def check_float(op_name, shapes, dtypes):
    """ShapeError unless every operand is floating point, for ops whose value is not an
    integer: numpy would return floats eagerly, while a batch writes into an arena of the
    inferred (integer) dtype and would truncate."""
    for d in dtypes:
        check(d.kind == "f", op_name, shapes, f"needs floating-point operands, not {d}")


def check_one_dtype(op_name, shapes, dtypes):
    """ShapeError unless the operands share one dtype, naming each operand's dtype and,
    for float64 meeting float32, the usual cause: a numpy input (numpy's default is
    float64) given to float32 Parameters."""
    if len(set(dtypes)) > 1:
        shown = " and ".join(f"{tuple(s)} {d}" for s, d in zip(shapes, dtypes))
        names = {d.name for d in dtypes}
        hint = ("; numpy makes float64 arrays by default, Parameters float32 unless made with another "
                "dtype: convert the input, e.g. x.astype(np.float32)" if names == {"float32", "float64"}
                else "; cast one of them")
        raise ShapeError(f"{op_name}: operands of shapes and dtypes {shown} must share one dtype{hint}")


def check_not_bool(op_name, shapes, dtypes):
    """ShapeError for bool operands of arithmetic numpy refuses (-x, x - y) or promotes to
    int64 (x + 1): in a bool dtype it would give True where numpy gives an error or 2."""
    for d in dtypes:
        check(d.kind != "b", op_name, shapes, "needs numbers, not bool values (cast them first)")


def broadcast_shape(op_name, shapes):
    """numpy's broadcast of per-instance shapes, or a ShapeError naming them all."""
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        dims = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0} - {1}
        check(len(dims) <= 1, op_name, shapes, "they do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def as_batched(xp, x, shared, batch):
    """A shared operand repeated along a new batch axis (a view), for kernels that need one."""
    return xp.broadcast_to(x, (batch,) + x.shape) if shared else x


def batch_size(xs, sig):
    """B for a kernel call: the leading axis of the first batched operand."""
    return xs[sig.node_positions[0]].shape[0]
