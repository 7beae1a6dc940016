"""The per-op test spec table: one or more entries per public op, saying how to draw random
operand shapes and values, how to call the op and a plain-numpy reference.

Adding an op adds its entry here; `test_ops_gradcheck.py` (values, finite-difference
gradients, batched == eager), `test_op_operands.py` (strided, transposed, read-only operands)
and `test_op_rules.py` (fused scalar rules) read the table, and fail for a registered op
without an entry.
"""
import itertools
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

import hybridbatch as hb

# Registered ops that users never call: constants, parameter reads (inserted by recording),
# the extra outputs of multi-output nodes, and the classifier loss that block programs fold
# (checked in test_affine_loss.py).
INTERNAL = {"input", "param", "output", "affine_pick_neg_log_softmax"}


# ---------------------------------------------------------------------------------------
# random shapes and values
# ---------------------------------------------------------------------------------------
def rint(rng, lo=1, hi=4):
    return int(rng.integers(lo, hi + 1))


def rshape(rng, min_rank=0, max_rank=2, lo=1, hi=4):
    return tuple(rint(rng, lo, hi) for _ in range(rint(rng, min_rank, max_rank)))


def draw(rng, shape, dom, dtype=np.float64):
    """Random values in an op's safe domain."""
    if dom == "pos":          # log
        v = rng.uniform(0.5, 2.0, shape)
    elif dom == "away0":      # divisors, relu inputs: keep finite differences off the kink/pole
        v = rng.choice([-1.0, 1.0], shape) * rng.uniform(0.3, 1.5, shape)
    else:                     # "any", "table"
        v = rng.normal(0.0, 1.0, shape)
    return np.asarray(v, dtype=dtype)


def float_loss_term(out, dtype):
    """An op's result as floats for a loss: an integer one (argmax) cast, its gradient 0."""
    return out if out.dtype.kind == "f" else hb.cast(out, dtype)


def sigmoid_np(x):
    return 1.0 / (1.0 + np.exp(-x))


def gelu_np(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def log_softmax_np(x):
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


# ---------------------------------------------------------------------------------------
# the spec table
# ---------------------------------------------------------------------------------------
@dataclass
class Spec:
    id: str
    op: str                                  # the registered op name this entry exercises
    dims: Callable                           # rng -> dict of sizes / indices
    operands: list                           # [(d -> shape, domain)]; domain "table": Parameter only
    call: Callable                           # (handles, d, aux) -> handle
    ref: Callable                            # (numpy arrays, d, aux) -> numpy array
    aux: Optional[Callable] = None           # (rng, d) -> int, drawn per instance
    batchable: bool = True
    out_dtype: Optional[type] = None         # an integer result's dtype (argmax); None: the operands'
    scope_op: Optional[str] = None           # the op the call records in a scope, where not `op`

    @property
    def recorded_op(self):
        return self.scope_op or self.op

    def shapes(self, d):
        return [f(d) for f, _ in self.operands]

    def doms(self):
        return [dom for _, dom in self.operands]


SPECS = []


def spec(*args, **kw):
    SPECS.append(Spec(*args, **kw))


def _same(key):
    return lambda d: d[key]


def _rank_any(rng):
    return {"s": rshape(rng, 0, 2)}


# unary elementwise ops (hb.<name>), on values of rank 0..2: name, numpy reference, domain
UNARY = [("tanh", np.tanh, "any"), ("sigmoid", sigmoid_np, "any"), ("relu", lambda x: np.maximum(x, 0.0), "away0"),
         ("exp", np.exp, "any"), ("log", np.log, "pos"), ("abs", np.abs, "away0"), ("sqrt", np.sqrt, "pos"),
         ("softplus", lambda x: np.logaddexp(0.0, x), "any"), ("log_sigmoid", lambda x: -np.logaddexp(0.0, -x), "any"),
         ("square", np.square, "any"), ("sin", np.sin, "any"), ("cos", np.cos, "any"), ("log1p", np.log1p, "pos"),
         ("expm1", np.expm1, "any"), ("gelu", gelu_np, "any")]
spec("leaky_relu", "leaky_relu", _rank_any, [(_same("s"), "away0")],
     lambda xs, d, a: hb.leaky_relu(xs[0], slope=0.2), lambda xs, d, a: np.where(xs[0] > 0, xs[0], 0.2 * xs[0]))
for _name, _ref, _dom in UNARY:
    spec(_name, _name, _rank_any, [(_same("s"), _dom)],
         (lambda name: lambda xs, d, a: getattr(hb, name)(xs[0]))(_name),
         (lambda f: lambda xs, d, a: f(xs[0]))(_ref))

# Python scalars: the scalar_affine op (a * x + c); in a scope, on these float values, the
# numbers are the node's operand instead (scalar_affine_operand, below)
for _id, _call, _ref in [
        ("scalar_mul", lambda x: x * 2.5, lambda x: x * 2.5),
        ("scalar_rmul", lambda x: -1.5 * x, lambda x: -1.5 * x),
        ("scalar_neg", lambda x: -x, lambda x: -x),
        ("scalar_radd", lambda x: 0.5 + x, lambda x: 0.5 + x),
        ("scalar_sub", lambda x: x - 0.75, lambda x: x - 0.75),
        ("scalar_rsub", lambda x: 1.5 - x, lambda x: 1.5 - x),
        ("scalar_div", lambda x: x / 4.0, lambda x: x / 4.0),
        ("scalar_np", lambda x: hb.mul(x, np.float32(3.0)), lambda x: x * 3.0),
        ("scalar_add_int", lambda x: hb.add(2, x), lambda x: x + 2.0)]:
    spec(_id, "scalar_affine", _rank_any, [(_same("s"), "any")],
         (lambda c: lambda xs, d, a: c(xs[0]))(_call), (lambda r: lambda xs, d, a: r(xs[0]))(_ref),
         scope_op="scalar_affine_packed")
# Python numbers that differ per instance (x - top) are the node's data in a scope, so that
# the instances still batch: packed into its integer for float32 and float16 values
# (ScalarAffinePacked), an operand, a 2-vector [a, c], for float64 (ScalarAffineOperand)
spec("scalar_affine_operand", "scalar_affine_operand", _rank_any, [(_same("s"), "any"), (lambda d: (2,), "any")],
     lambda xs, d, a: hb.api.apply(hb.ops.elementwise.ScalarAffineOperand, (xs[0], xs[1])),
     lambda xs, d, a: xs[0] * xs[1][0] + xs[1][1])
_PACKED = hb.ops.elementwise.ScalarAffinePacked


def _unpacked(word):
    return np.array([word], np.int64).view(np.float32)


spec("scalar_affine_packed", "scalar_affine_packed", _rank_any, [(_same("s"), "any")],
     lambda xs, d, a: hb.api.apply(_PACKED, (xs[0],), (), a),
     lambda xs, d, a: xs[0] * _unpacked(a)[0] + _unpacked(a)[1],
     aux=lambda rng, d: _PACKED.pack(*rng.normal(0.0, 2.0, 2).astype(np.float32).tolist(), np.float32))


# binary elementwise ops with per-instance numpy broadcasting
def _bin_dims_same(rng):
    return {"a": (s := rshape(rng, 0, 2)), "b": s}


def _bin_dims_mat_vec(rng):
    m, n = rint(rng), rint(rng)
    return {"a": (m, n), "b": (n,)}


def _bin_dims_vec_mat(rng):
    m, n = rint(rng), rint(rng)
    return {"a": (n,), "b": (m, n)}


def _bin_dims_outer(rng):
    m, n = rint(rng, 2), rint(rng, 2)
    return {"a": (m, 1), "b": (n,)}


def _bin_dims_scalar(rng):
    return {"a": (), "b": rshape(rng, 1, 2)}


_BIN_OPS = [("add", np.add, lambda a, b: a + b, hb.add),
            ("sub", np.subtract, lambda a, b: a - b, hb.sub),
            ("mul", np.multiply, lambda a, b: a * b, hb.mul),
            ("div", np.divide, lambda a, b: a / b, hb.div)]
for _name, _ref, _operator, _fn in _BIN_OPS:
    for _variant, _dims, _use_operator in [("same", _bin_dims_same, True), ("mat_vec", _bin_dims_mat_vec, False),
                                           ("vec_mat", _bin_dims_vec_mat, True), ("outer", _bin_dims_outer, False),
                                           ("scalar", _bin_dims_scalar, True)]:
        spec(f"{_name}_{_variant}", _name, _dims,
             [(_same("a"), "any"), (_same("b"), "away0" if _name == "div" else "any")],
             (lambda f: lambda xs, d, a: f(xs[0], xs[1]))(_operator if _use_operator else _fn),
             (lambda f: lambda xs, d, a: f(xs[0], xs[1]))(_ref))


# one value as several operands of one op (its gradient arrives twice)
def _square_dims(rng):
    return {"s": rshape(rng, 0, 2), "n": rint(rng)}


spec("add_self", "add", _square_dims, [(_same("s"), "any")],
     lambda xs, d, a: xs[0] + xs[0], lambda xs, d, a: 2 * xs[0])
spec("mul_self", "mul", _square_dims, [(_same("s"), "any")],
     lambda xs, d, a: xs[0] * xs[0], lambda xs, d, a: xs[0] ** 2)
spec("div_self_shifted", "div", _square_dims, [(_same("s"), "pos")],
     lambda xs, d, a: xs[0] / (xs[0] + 1.0), lambda xs, d, a: xs[0] / (xs[0] + 1.0))
spec("matmul_self", "matmul", _square_dims, [(lambda d: (d["n"], d["n"]), "any")],
     lambda xs, d, a: xs[0] @ xs[0], lambda xs, d, a: xs[0] @ xs[0])
spec("concat_self", "concat", _square_dims, [(lambda d: (d["n"],), "any"), (lambda d: (2,), "any")],
     lambda xs, d, a: hb.concat([xs[0], xs[1], xs[0]]), lambda xs, d, a: np.concatenate([xs[0], xs[1], xs[0]]))
spec("add_n_self", "add_n", _square_dims, [(_same("s"), "any"), (_same("s"), "any")],
     lambda xs, d, a: hb.add_n([xs[0], xs[1], xs[0]]), lambda xs, d, a: 2 * xs[0] + xs[1])


# matmul: all four 1-D / 2-D combinations
def _mm_dims(rng):
    return {"m": rint(rng), "n": rint(rng), "k": rint(rng)}


spec("matmul_vv", "matmul", _mm_dims, [(lambda d: (d["n"],), "any"), (lambda d: (d["n"],), "any")],
     lambda xs, d, a: hb.matmul(xs[0], xs[1]), lambda xs, d, a: xs[0] @ xs[1])
spec("matmul_mv", "matmul", _mm_dims, [(lambda d: (d["m"], d["n"]), "any"), (lambda d: (d["n"],), "any")],
     lambda xs, d, a: hb.matmul(xs[0], xs[1]), lambda xs, d, a: xs[0] @ xs[1])
spec("matmul_vm", "matmul", _mm_dims, [(lambda d: (d["n"],), "any"), (lambda d: (d["n"], d["k"]), "any")],
     lambda xs, d, a: xs[0] @ xs[1], lambda xs, d, a: xs[0] @ xs[1])
spec("matmul_mm", "matmul", _mm_dims, [(lambda d: (d["m"], d["n"]), "any"), (lambda d: (d["n"], d["k"]), "any")],
     lambda xs, d, a: xs[0] @ xs[1], lambda xs, d, a: xs[0] @ xs[1])

# affine: W @ x + b with a broadcasting bias
_affine = (lambda xs, d, a: hb.affine(xs[0], xs[1], xs[2]))
_affine_ref = (lambda xs, d, a: xs[0] @ xs[1] + xs[2])
spec("affine_mv", "affine", _mm_dims,
     [(lambda d: (d["m"], d["n"]), "any"), (lambda d: (d["n"],), "any"), (lambda d: (d["m"],), "any")],
     _affine, _affine_ref)
spec("affine_mm", "affine", _mm_dims,
     [(lambda d: (d["m"], d["n"]), "any"), (lambda d: (d["n"], d["k"]), "any"), (lambda d: (d["m"], d["k"]), "any")],
     _affine, _affine_ref)
spec("affine_mm_bias_row", "affine", _mm_dims,
     [(lambda d: (d["m"], d["n"]), "any"), (lambda d: (d["n"], d["k"]), "any"), (lambda d: (d["k"],), "any")],
     _affine, _affine_ref)
spec("affine_vm", "affine", _mm_dims,
     [(lambda d: (d["n"],), "any"), (lambda d: (d["n"], d["k"]), "any"), (lambda d: (d["k"],), "any")],
     _affine, _affine_ref)
spec("affine_vv_scalar_bias", "affine", _mm_dims,
     [(lambda d: (d["n"],), "any"), (lambda d: (d["n"],), "any"), (lambda d: (), "any")],
     _affine, _affine_ref)

# add_n
spec("add_n2", "add_n", _rank_any, [(_same("s"), "any")] * 2,
     lambda xs, d, a: hb.add_n(xs), lambda xs, d, a: xs[0] + xs[1])
spec("add_n3", "add_n", _rank_any, [(_same("s"), "any")] * 3,
     lambda xs, d, a: hb.add_n(xs), lambda xs, d, a: xs[0] + xs[1] + xs[2])


# concat
def _cat_dims(rng):
    return {"m": rint(rng), "a": rint(rng), "b": rint(rng), "c": rint(rng)}


spec("concat_vec", "concat", _cat_dims, [(lambda d: (d["a"],), "any"), (lambda d: (d["b"],), "any")],
     lambda xs, d, a: hb.concat(xs), lambda xs, d, a: np.concatenate(xs))
spec("concat_axis1", "concat", _cat_dims, [(lambda d: (d["m"], d["a"]), "any"), (lambda d: (d["m"], d["b"]), "any")],
     lambda xs, d, a: hb.concat(xs, axis=1), lambda xs, d, a: np.concatenate(xs, axis=1))
spec("concat_axis0_three", "concat", _cat_dims,
     [(lambda d: (d["a"], d["m"]), "any"), (lambda d: (d["b"], d["m"]), "any"), (lambda d: (d["c"], d["m"]), "any")],
     lambda xs, d, a: hb.concat(xs, axis=0), lambda xs, d, a: np.concatenate(xs, axis=0))
spec("concat_axis_neg", "concat", _cat_dims, [(lambda d: (d["m"], d["a"]), "any"), (lambda d: (d["m"], d["b"]), "any")],
     lambda xs, d, a: hb.concat(xs, axis=-1), lambda xs, d, a: np.concatenate(xs, axis=-1))


# slicing, indexing, split
def _slice_dims(rng):
    m, n = rint(rng, 1, 4), rint(rng, 2, 5)
    i = rint(rng, 0, n - 1)
    return {"m": m, "n": n, "i": i, "j": rint(rng, i + 1, n), "r": rint(rng, 0, m - 1),
            "q": rint(rng, 1, 3), "sections": rint(rng, 1, 3)}


def _split_dims(rng):
    d = _slice_dims(rng)
    d["piece"] = rint(rng, 0, d["sections"] - 1)
    return d


spec("slice_range", "slice", _slice_dims, [(lambda d: (d["n"],), "any")],
     lambda xs, d, a: xs[0][d["i"]:d["j"]], lambda xs, d, a: xs[0][d["i"]:d["j"]])
# one int index is pick (lookup on a Parameter, the specs of both below); as a tuple it is a slice
spec("slice_elem", "slice", _slice_dims, [(lambda d: (d["n"],), "any")],
     lambda xs, d, a: hb.slice(xs[0], (d["i"],)), lambda xs, d, a: xs[0][d["i"]])
spec("slice_negative", "slice", _slice_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: xs[0][-1, -d["i"] - 1:], lambda xs, d, a: xs[0][-1, -d["i"] - 1:])
spec("slice_step", "slice", _slice_dims, [(lambda d: (d["n"],), "any")],
     lambda xs, d, a: xs[0][::2], lambda xs, d, a: xs[0][::2])
spec("slice_reverse", "slice", _slice_dims, [(lambda d: (d["n"],), "any")],
     lambda xs, d, a: xs[0][::-1], lambda xs, d, a: xs[0][::-1])
spec("slice_reverse_to_start", "slice", _slice_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: xs[0][:, d["j"] - 1::-2], lambda xs, d, a: xs[0][:, d["j"] - 1::-2])
spec("slice_row", "slice", _slice_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: hb.slice(xs[0], (d["r"],)), lambda xs, d, a: xs[0][d["r"]])
spec("slice_2d", "slice", _slice_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: hb.slice(xs[0], (slice(None), slice(d["i"], d["j"]))),
     lambda xs, d, a: xs[0][:, d["i"]:d["j"]])
spec("slice_ij", "slice", _slice_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: xs[0][d["r"], d["i"]], lambda xs, d, a: xs[0][d["r"], d["i"]])
spec("split_axis1", "slice", _split_dims, [(lambda d: (d["m"], d["sections"] * d["q"]), "any")],
     lambda xs, d, a: hb.split(xs[0], d["sections"], axis=1)[d["piece"]],
     lambda xs, d, a: np.split(xs[0], d["sections"], axis=1)[d["piece"]])
spec("split_axis0", "slice", _split_dims, [(lambda d: (d["sections"] * d["q"],), "any")],
     lambda xs, d, a: hb.split(xs[0], d["sections"])[d["piece"]],
     lambda xs, d, a: np.split(xs[0], d["sections"])[d["piece"]])


# reshape
def _rs_dims(rng):
    return {"m": rint(rng), "n": rint(rng)}


spec("reshape_transpose", "reshape", _rs_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: hb.reshape(xs[0], (d["n"], d["m"])), lambda xs, d, a: xs[0].reshape(d["n"], d["m"]))
spec("reshape_flat", "reshape", _rs_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: hb.reshape(xs[0], (d["m"] * d["n"],)), lambda xs, d, a: xs[0].reshape(-1))
spec("reshape_up", "reshape", _rs_dims, [(lambda d: (d["m"] * d["n"],), "any")],
     lambda xs, d, a: hb.reshape(xs[0], (d["m"], d["n"])), lambda xs, d, a: xs[0].reshape(d["m"], d["n"]))
spec("reshape_to_scalar", "reshape", _rs_dims, [(lambda d: (1, 1), "any")],
     lambda xs, d, a: hb.reshape(xs[0], ()), lambda xs, d, a: xs[0].reshape(()))

# sum
spec("sum_all", "sum", _rank_any, [(_same("s"), "any")],
     lambda xs, d, a: hb.sum(xs[0]), lambda xs, d, a: np.sum(xs[0]))
spec("sum_axis0", "sum", _rs_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: hb.sum(xs[0], axis=0), lambda xs, d, a: xs[0].sum(axis=0))
spec("sum_axis1", "sum", _rs_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: hb.sum(xs[0], axis=1), lambda xs, d, a: xs[0].sum(axis=1))
spec("sum_axis_neg", "sum", _rs_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: hb.sum(xs[0], axis=-1), lambda xs, d, a: xs[0].sum(axis=-1))
spec("sum_vec_axis0", "sum", _rs_dims, [(lambda d: (d["n"],), "any")],
     lambda xs, d, a: hb.sum(xs[0], axis=0), lambda xs, d, a: xs[0].sum(axis=0))


# ops that carry one integer per node
def _idx_dims(rng):
    return {"rows": rint(rng, 1, 6), "n": rint(rng, 1, 5), "m": rint(rng, 1, 3)}


spec("lookup_2d", "lookup", _idx_dims, [(lambda d: (d["rows"], d["n"]), "table")],
     lambda xs, d, a: hb.lookup(xs[0], a), lambda xs, d, a: xs[0][a],
     aux=lambda rng, d: rint(rng, 0, d["rows"] - 1))
spec("lookup_1d", "lookup", _idx_dims, [(lambda d: (d["rows"],), "table")],
     lambda xs, d, a: hb.lookup(xs[0], a), lambda xs, d, a: xs[0][a],
     aux=lambda rng, d: rint(rng, 0, d["rows"] - 1))
spec("lookup_3d", "lookup", _idx_dims, [(lambda d: (d["rows"], d["m"], d["n"]), "table")],
     lambda xs, d, a: hb.lookup(xs[0], np.int64(a)), lambda xs, d, a: xs[0][a],
     aux=lambda rng, d: rint(rng, 0, d["rows"] - 1))
spec("pick", "pick", _idx_dims, [(lambda d: (d["n"],), "any")],
     lambda xs, d, a: hb.pick(xs[0], a), lambda xs, d, a: xs[0][a],
     aux=lambda rng, d: rint(rng, 0, d["n"] - 1))
spec("pick_negative", "pick", _idx_dims, [(lambda d: (d["n"],), "any")],
     lambda xs, d, a: hb.pick(xs[0], a - d["n"]), lambda xs, d, a: xs[0][a - d["n"]],
     aux=lambda rng, d: rint(rng, 0, d["n"] - 1))
spec("pick_row", "pick", _idx_dims, [(lambda d: (d["rows"], d["n"]), "any")],
     lambda xs, d, a: hb.pick(xs[0], a), lambda xs, d, a: xs[0][a],
     aux=lambda rng, d: rint(rng, 0, d["rows"] - 1))
spec("index_of_a_parameter", "lookup", _idx_dims, [(lambda d: (d["rows"], d["n"]), "table")],
     lambda xs, d, a: xs[0][a - d["rows"]], lambda xs, d, a: xs[0][a],
     aux=lambda rng, d: rint(rng, 0, d["rows"] - 1))
spec("log_softmax_vec", "log_softmax", _idx_dims, [(lambda d: (d["n"],), "any")],
     lambda xs, d, a: hb.log_softmax(xs[0]), lambda xs, d, a: log_softmax_np(xs[0]))
spec("log_softmax_mat", "log_softmax", _idx_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: hb.log_softmax(xs[0]), lambda xs, d, a: log_softmax_np(xs[0]))
spec("pick_neg_log_softmax", "pick_neg_log_softmax", _idx_dims, [(lambda d: (d["n"],), "any")],
     lambda xs, d, a: hb.pick_neg_log_softmax(xs[0], a), lambda xs, d, a: -log_softmax_np(xs[0])[a],
     aux=lambda rng, d: rint(rng, 0, d["n"] - 1))


# reshapes that name their shape another way: -1, flatten, expand_dims, squeeze
spec("reshape_infer", "reshape", _rs_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: hb.reshape(xs[0], (-1, d["m"])), lambda xs, d, a: xs[0].reshape(-1, d["m"]))
spec("flatten", "reshape", _rs_dims, [(lambda d: (d["m"], 1, d["n"]), "any")],
     lambda xs, d, a: hb.flatten(xs[0]), lambda xs, d, a: xs[0].reshape(-1))
spec("expand_dims", "reshape", _rs_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: hb.expand_dims(xs[0], -2), lambda xs, d, a: np.expand_dims(xs[0], -2))
spec("squeeze", "reshape", _rs_dims, [(lambda d: (1, d["m"], 1), "any")],
     lambda xs, d, a: hb.squeeze(xs[0], axis=0), lambda xs, d, a: np.squeeze(xs[0], axis=0))


# transpose
def _t3_dims(rng):
    return {"m": rint(rng), "n": rint(rng), "k": rint(rng)}


spec("transpose_T", "transpose", _rs_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: xs[0].T, lambda xs, d, a: xs[0].T)
spec("transpose_3d", "transpose", _t3_dims, [(lambda d: (d["m"], d["n"], d["k"]), "any")],
     lambda xs, d, a: hb.transpose(xs[0], (2, 0, -2)), lambda xs, d, a: np.transpose(xs[0], (2, 0, 1)))
spec("transpose_vec", "transpose", _rs_dims, [(lambda d: (d["n"],), "any")],
     lambda xs, d, a: hb.transpose(xs[0]), lambda xs, d, a: xs[0].T)

# stack
spec("stack_axis0", "stack", _rank_any, [(_same("s"), "any")] * 3,
     lambda xs, d, a: hb.stack(xs), lambda xs, d, a: np.stack(xs))
spec("stack_last", "stack", _rs_dims, [(lambda d: (d["m"], d["n"]), "any")] * 2,
     lambda xs, d, a: hb.stack(xs, axis=-1), lambda xs, d, a: np.stack(xs, axis=-1))
spec("stack_self", "stack", _rs_dims, [(lambda d: (d["n"],), "any")] * 2,
     lambda xs, d, a: hb.stack([xs[0], xs[1], xs[0]], axis=1), lambda xs, d, a: np.stack([xs[0], xs[1], xs[0]], 1))


# reductions: every element, an axis, a tuple of axes, keepdims
def _red_dims(rng):
    d = {"s": (rint(rng), rint(rng), rint(rng)), "axis": rint(rng, -3, 2)}
    d["k"] = rint(rng, 1, d["s"][d["axis"]])
    return d


_REDUCTIONS = [("sum", np.sum), ("mean", np.mean), ("max", np.max), ("min", np.min)]
for _name, _ref in _REDUCTIONS:
    for _variant, _axis, _keep in [("all", lambda d: None, False), ("axis", lambda d: d["axis"], False),
                                   ("tuple_keepdims", lambda d: (0, -1), True),
                                   ("axis_keepdims", lambda d: d["axis"], True)]:
        _call, _numpy = [(lambda f, ax, keep: lambda xs, d, a: f(xs[0], axis=ax(d), keepdims=keep))(f, _axis, _keep)
                         for f in (getattr(hb, _name), _ref)]
        spec(f"{_name}_3d_{_variant}", _name, _red_dims, [(_same("s"), "any")], _call, _numpy)
spec("max_vec", "max", _rs_dims, [(lambda d: (d["n"],), "any")],
     lambda xs, d, a: hb.max(xs[0]), lambda xs, d, a: np.max(xs[0]))
def _spread_dims(rng):
    """_red_dims with 2 to 4 elements along every axis: std's gradient is NaN where what it
    reduces is one element (0 / 0), as PyTorch's and JAX's."""
    return {"s": (rint(rng, 2), rint(rng, 2), rint(rng, 2)), "axis": rint(rng, -3, 2)}


for _name, _ref, _last in [("var", np.var, "mean"), ("std", np.std, "sqrt")]:   # compositions: their last op
    for _variant, _axis, _keep in [("all", lambda d: None, False), ("axis_keepdims", lambda d: d["axis"], True),
                                   ("tuple", lambda d: (0, -1), False)]:
        _call, _numpy = [(lambda f, ax, keep: lambda xs, d, a: f(xs[0], axis=ax(d), keepdims=keep))(f, _axis, _keep)
                         for f in (getattr(hb, _name), _ref)]
        spec(f"{_name}_3d_{_variant}", _last, _spread_dims, [(_same("s"), "any")], _call, _numpy)
spec("mean_scalar", "mean", _rs_dims, [(lambda d: (), "any")],
     lambda xs, d, a: hb.mean(xs[0]), lambda xs, d, a: np.mean(xs[0]))
for _name, _ref in [("argmax", np.argmax), ("argmin", np.argmin)]:
    spec(f"{_name}_all", _name, _red_dims, [(_same("s"), "any")],
         (lambda fn: lambda xs, d, a: fn(xs[0]))(getattr(hb, _name)),
         (lambda fn: lambda xs, d, a: fn(xs[0]))(_ref), out_dtype=np.int64)
    spec(f"{_name}_axis_keepdims", _name, _red_dims, [(_same("s"), "any")],
         (lambda fn: lambda xs, d, a: fn(xs[0], axis=d["axis"], keepdims=True))(getattr(hb, _name)),
         (lambda fn: lambda xs, d, a: fn(xs[0], axis=d["axis"], keepdims=True))(_ref), out_dtype=np.int64)


def topk_np(x, k, axis):
    """The k largest along axis, largest first; ties: the lower index first."""
    i = np.take(np.argsort(-x, axis=axis, kind="stable"), np.arange(k), axis=axis)
    return np.take_along_axis(x, i, axis=axis), i


spec("topk_values", "topk", _red_dims, [(_same("s"), "any")],
     lambda xs, d, a: hb.topk(xs[0], d["k"], axis=d["axis"])[0], lambda xs, d, a: topk_np(xs[0], d["k"], d["axis"])[0])
spec("topk_indices", "topk", _red_dims, [(_same("s"), "any")],
     lambda xs, d, a: hb.topk(xs[0], d["k"], axis=d["axis"])[1], lambda xs, d, a: topk_np(xs[0], d["k"], d["axis"])[1],
     out_dtype=np.int64)


# softmax and log_softmax along an axis
def softmax_np(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


spec("softmax_vec", "softmax", _idx_dims, [(lambda d: (d["n"],), "any")],
     lambda xs, d, a: hb.softmax(xs[0]), lambda xs, d, a: softmax_np(xs[0]))
spec("softmax_axis0", "softmax", _red_dims, [(_same("s"), "any")],
     lambda xs, d, a: hb.softmax(xs[0], axis=0), lambda xs, d, a: softmax_np(xs[0], 0))
spec("log_softmax_axis", "log_softmax", _red_dims, [(_same("s"), "any")],
     lambda xs, d, a: hb.log_softmax(xs[0], axis=d["axis"]),
     lambda xs, d, a: np.log(softmax_np(xs[0], d["axis"])))


def logsumexp_np(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    y = np.log(np.exp(x - m).sum(axis=axis, keepdims=True)) + m
    return y if keepdims else np.squeeze(y, axis=axis)


spec("logsumexp_all", "logsumexp", _red_dims, [(_same("s"), "any")],
     lambda xs, d, a: hb.logsumexp(xs[0]), lambda xs, d, a: logsumexp_np(xs[0]))
spec("logsumexp_tuple_keepdims", "logsumexp", _red_dims, [(_same("s"), "any")],
     lambda xs, d, a: hb.logsumexp(xs[0], axis=(d["axis"],), keepdims=True),
     lambda xs, d, a: logsumexp_np(xs[0], axis=(d["axis"],), keepdims=True))


# over a list of values, elementwise across it (ragged in a scope: ops/lists.py)
def _list_dims(rng):
    return {"s": rshape(rng, 0, 2), "j": rint(rng, 0, 2)}


for _name, _ref in [("max", np.max), ("min", np.min), ("logsumexp", logsumexp_np)]:
    spec(f"{_name}_list", f"{_name}_n", _list_dims, [(_same("s"), "any")] * 3,
         (lambda fn: lambda xs, d, a: fn(list(xs)))(getattr(hb, _name)),
         (lambda fn: lambda xs, d, a: fn(np.stack(xs), axis=0))(_ref))
spec("max_list_self", "max_n", _list_dims, [(_same("s"), "any")] * 2,
     lambda xs, d, a: hb.max([xs[0], xs[1], xs[0]]), lambda xs, d, a: np.maximum(xs[0], xs[1]))
spec("softmax_list", "exp_sub", _list_dims, [(_same("s"), "any")] * 3,
     lambda xs, d, a: hb.softmax(list(xs))[d["j"]], lambda xs, d, a: softmax_np(np.stack(xs), 0)[d["j"]])
spec("softmax_pair", "exp_sub", _list_dims, [(_same("s"), "any")] * 2,
     lambda xs, d, a: hb.softmax(list(xs))[d["j"] % 2], lambda xs, d, a: softmax_np(np.stack(xs), 0)[d["j"] % 2])
spec("log_softmax_list", "sub", _list_dims, [(_same("s"), "any")] * 3,
     lambda xs, d, a: hb.log_softmax(tuple(xs))[d["j"]], lambda xs, d, a: np.log(softmax_np(np.stack(xs), 0))[d["j"]])
spec("weighted_sum", "add_n", _list_dims, [(lambda d: (), "any")] * 2 + [(_same("s"), "any")] * 2,
     lambda xs, d, a: hb.weighted_sum(xs[:2], xs[2:]), lambda xs, d, a: xs[0] * xs[2] + xs[1] * xs[3])


# powers: a Python exponent (scalar_pow), a value exponent or base (pow)
for _id, _p, _dom in [("pow_square", 2, "any"), ("pow_half", 0.5, "pos"), ("pow_negative", -1.5, "pos"),
                      ("pow_cube", 3.0, "any"), ("pow_reciprocal", -1, "pos")]:
    spec(_id, "scalar_pow", _rank_any, [(_same("s"), _dom)],
         (lambda p: lambda xs, d, a: xs[0] ** p)(_p), (lambda p: lambda xs, d, a: xs[0] ** p)(_p),
         scope_op="scalar_pow_packed")
# a Python exponent that differs per instance is the node's data in a scope (its float64 bits)
_POW_PACKED = hb.ops.elementwise.ScalarPowPacked
spec("scalar_pow_packed", "scalar_pow_packed", _rank_any, [(_same("s"), "pos")],
     lambda xs, d, a: hb.api.apply(_POW_PACKED, (xs[0],), (), a),
     lambda xs, d, a: xs[0] ** np.array([a], np.int64).view(np.float64)[0].astype(xs[0].dtype),
     aux=lambda rng, d: _POW_PACKED.pack(float(rng.choice([2.0, 0.5, -1.0, 0.0, 1.0, 3.0, -1.5, 1.7]))))
spec("pow_values", "pow", _bin_dims_same, [(_same("a"), "pos"), (_same("b"), "any")],
     lambda xs, d, a: xs[0] ** xs[1], lambda xs, d, a: xs[0] ** xs[1])
spec("pow_mat_vec", "pow", _bin_dims_mat_vec, [(_same("a"), "pos"), (_same("b"), "any")],
     lambda xs, d, a: hb.pow(xs[0], xs[1]), lambda xs, d, a: xs[0] ** xs[1])
spec("pow_number_base", "pow", _rank_any, [(_same("s"), "any")],
     lambda xs, d, a: 2.0 ** xs[0], lambda xs, d, a: 2.0 ** xs[0])


# maximum and minimum (clip is one of each)
for _name, _ref in [("maximum", np.maximum), ("minimum", np.minimum)]:
    _fn = getattr(hb, _name)
    for _variant, _dims in [("same", _bin_dims_same), ("mat_vec", _bin_dims_mat_vec), ("scalar", _bin_dims_scalar)]:
        spec(f"{_name}_{_variant}", _name, _dims, [(_same("a"), "any"), (_same("b"), "any")],
             (lambda f: lambda xs, d, a: f(xs[0], xs[1]))(_fn), (lambda f: lambda xs, d, a: f(xs[0], xs[1]))(_ref))
    spec(f"{_name}_number", _name, _rank_any, [(_same("s"), "away0")],
         (lambda f: lambda xs, d, a: f(0.1, xs[0]))(_fn), (lambda f: lambda xs, d, a: f(0.1, xs[0]))(_ref))
spec("clip", "minimum", _rank_any, [(_same("s"), "any")],
     lambda xs, d, a: hb.clip(xs[0], -0.45, 0.55), lambda xs, d, a: np.clip(xs[0], -0.45, 0.55))


# where: a numpy mask, a computed bool value as the condition, numbers as the branches
def _where_dims(rng):
    d = _bin_dims_mat_vec(rng)
    d["mask"] = rng.random(d["a"]) < 0.5
    return d


spec("where_mask", "where", _where_dims, [(_same("a"), "any"), (_same("b"), "any")],
     lambda xs, d, a: hb.where(d["mask"], xs[0], xs[1]), lambda xs, d, a: np.where(d["mask"], xs[0], xs[1]))
spec("where_value_cond", "where", _where_dims, [(_same("a"), "away0"), (_same("a"), "any"), (_same("b"), "any")],
     lambda xs, d, a: hb.where(hb.cast(xs[0] * d["mask"].astype(xs[0].dtype), bool), xs[1], xs[2]),
     lambda xs, d, a: np.where(d["mask"], xs[1], xs[2]))
spec("where_number", "where", _where_dims, [(_same("a"), "any")],
     lambda xs, d, a: hb.where(d["mask"][0], -2.0, xs[0]), lambda xs, d, a: np.where(d["mask"][0], -2.0, xs[0]))


# cast: between float dtypes (the gradient flows) and to an integer (none)
spec("cast_float", "cast", _rank_any, [(_same("s"), "any")],
     lambda xs, d, a: hb.cast(hb.cast(xs[0], np.float64), xs[0].dtype), lambda xs, d, a: xs[0])
spec("cast_int", "cast", _rank_any, [(lambda d: d["s"], "any")],
     lambda xs, d, a: hb.cast(xs[0] * 3.0, np.int64), lambda xs, d, a: (xs[0] * 3.0).astype(np.int64),
     out_dtype=np.int64)

# dropout: the mask from hb.seed(aux)'s first key, by splitmix64 written out in Python ints
def _splitmix(z):
    m = (1 << 64) - 1
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def dropout_np(x, seed, p):
    """x * mask / (1 - p): element i kept when splitmix64(key + (i + 1) * golden) >> 11 reaches
    p * 2^53, key the 63-bit first draw after hb.seed(seed)."""
    m = (1 << 64) - 1
    key = _splitmix(_splitmix(seed & m)) >> 1
    bits = [_splitmix((key + (i + 1) * 0x9E3779B97F4A7C15) & m) >> 11 for i in range(int(np.size(x)))]
    keep = np.array([b >= np.ceil(p * 2.0 ** 53) for b in bits]).reshape(np.shape(x))
    return x * keep / (1 - p)


def _seeded_dropout(p):
    def call(xs, d, a):
        hb.seed(a)
        return hb.dropout(xs[0], p)
    return call


for _p in (0.25, 0.6):
    spec(f"dropout_{_p}", "dropout", lambda rng: {"s": rshape(rng, 1, 2, 2, 5)}, [(_same("s"), "any")],
         _seeded_dropout(_p), (lambda p: lambda xs, d, a: dropout_np(xs[0], a, p))(_p),
         aux=lambda rng, d: rint(rng, 0, 10 ** 6))

# convolution (stride 1, same padding) and pooling of (C, H, W) feature maps
def conv2d_np(x, w, b=None):
    """The cross-correlation of x (C, H, W) with w (O, C, k, k), zero padded to keep H x W."""
    p = w.shape[-1] // 2
    windows = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (p, p), (p, p))), w.shape[-2:], (1, 2))
    y = np.einsum("chwij,ocij->ohw", windows, w)
    return y if b is None else y + b[:, None, None]


def _conv_dims(k):
    side = max(4, k + 2)      # maps smaller and larger than the window
    return lambda rng: {"c": rint(rng, 1, 3), "o": rint(rng, 1, 3), "h": rint(rng, 1, side), "w": rint(rng, 1, side),
                        "k": k}


_map = (lambda d: (d["c"], d["h"], d["w"]), "any")
_kernel = (lambda d: (d["o"], d["c"], d["k"], d["k"]), "any")
for _k in (1, 3, 5):
    spec(f"conv2d_{_k}x{_k}", "conv2d", _conv_dims(_k), [_map, _kernel, (lambda d: (d["o"],), "any")],
         lambda xs, d, a: hb.conv2d(*xs), lambda xs, d, a: conv2d_np(*xs))
spec("conv2d_3x3_no_bias", "conv2d", _conv_dims(3), [_map, _kernel],
     lambda xs, d, a: hb.conv2d(*xs), lambda xs, d, a: conv2d_np(*xs))


def _pool_dims(rng):
    k = rint(rng, 1, 3)
    return {"k": k, "s": (rint(rng, 1, 3), k * rint(rng, 1, 2), k * rint(rng, 1, 2))}


def pool_np(x, k, reduce):
    c, h, w = x.shape
    return reduce(x.reshape(c, h // k, k, w // k, k), axis=(2, 4))


for _name, _reduce in [("max_pool2d", np.max), ("avg_pool2d", np.mean)]:
    spec(_name, _name, _pool_dims, [(_same("s"), "any")],
         (lambda name: lambda xs, d, a: getattr(hb, name)(xs[0], d["k"]))(_name),
         (lambda r: lambda xs, d, a: pool_np(xs[0], d["k"], r))(_reduce))


# py_func (unbatchable): module-level functions so every instance has one signature
def xsin(x):
    return np.sin(x) * x


def xsin_grad(x, y, gy):
    return (gy * (np.cos(x) * x + np.sin(x)),)


def scale_rows(x, v):
    return x * np.exp(v)


def scale_rows_grad(x, v, y, gy):
    return gy * np.exp(v), (gy * y).sum(axis=0)


def col_sq_sum(x):
    return (x * x).sum(axis=0)


def col_sq_sum_grad(x, y, gy):
    return (2 * x * gy[None, :],)


spec("py_func_unary", "py_func", _rank_any, [(_same("s"), "any")],
     lambda xs, d, a: hb.py_func(xsin, xs[0], out_shape=d["s"], out_dtype=xs[0].dtype, grad_fn=xsin_grad),
     lambda xs, d, a: xsin(xs[0]), batchable=False)
spec("py_func_binary", "py_func", _rs_dims, [(lambda d: (d["m"], d["n"]), "any"), (lambda d: (d["n"],), "any")],
     lambda xs, d, a: hb.py_func(scale_rows, xs[0], xs[1], out_shape=(d["m"], d["n"]), out_dtype=xs[0].dtype,
                                 grad_fn=scale_rows_grad),
     lambda xs, d, a: scale_rows(xs[0], xs[1]), batchable=False)
spec("py_func_reduce", "py_func", _rs_dims, [(lambda d: (d["m"], d["n"]), "any")],
     lambda xs, d, a: hb.py_func(col_sq_sum, xs[0], out_shape=(d["n"],), out_dtype=xs[0].dtype,
                                 grad_fn=col_sq_sum_grad),
     lambda xs, d, a: col_sq_sum(xs[0]), batchable=False)

SPEC_IDS = [s.id for s in SPECS]
assert len(set(SPEC_IDS)) == len(SPEC_IDS), "spec ids must be unique"


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
def make_param(value, dtype):
    p = hb.Parameter("gc", np.shape(value), init=0.0, dtype=dtype)
    p.data = np.asarray(value, dtype)
    return p


def modes_for(spec_):
    """Every combination of operand modes (a table operand is always a shared Parameter)."""
    choices = [("shared",) if dom == "table" else ("shared", "inst", "const") for dom in spec_.doms()]
    return list(itertools.product(*choices))


def root_op(handle):
    return handle.sig.op.name


def layouts(spec_):
    """Every assignment of "shared" (a Parameter operand) / "inst" (a per-instance value) to
    the operands; a table operand is always shared. All-shared operands make recording
    insert a `param` read before the op; a shared operand next to per-instance ones reaches
    the kernel unbatched (shared-left / shared-right matmuls and so on)."""
    choices = [("shared",) if dom == "table" else ("shared", "inst") for dom in spec_.doms()]
    return list(itertools.product(*choices))
