"""Random DAGs of every op: batched execution must reproduce eager execution exactly.

`build(rng, params)` records a DAG of >= 200 nodes from a seed: pools of values of a few
vector/matrix shapes, each step applying a random op (every registered op appears) to
values drawn from the pools or to shared Parameters. Values stay bounded (each handle
carries a bound on its magnitude; anything that could grow past it is squashed by tanh),
elementwise ops see their spec domains and div safe divisors. The same seed gives the same DAG in eager mode and inside
`hb.batching`, so we compare EVERY node's value, not just the loss, and the parameter
gradients of the loss, for each policy. Variants: several DAG instances sharing the
parameters in one scope (real cross-instance batching), reads in the middle of
recording (incremental flushes, backward across flushes), and every shared-weight product
in the few-rows kernel (kernels/few_rows.py).
"""
import contextlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import hybridbatch as hb
from hybridbatch.kernels import blas, few_rows
from hybridbatch.ops import OPS
from hybridbatch.record import signature
from op_specs import UNARY as UNARY_SPECS

POLICIES = ("agenda", "depth", "tail-last")
UNARY = {name: (ref, dom) for name, ref, dom in UNARY_SPECS}
MIN_NODES = 200
VAL_RTOL, VAL_ATOL = 1e-5, 2e-5
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-4
SETTINGS = dict(max_examples=15, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])

V3, V4, V7, M34, M43, M33, M64, M37, F12, S = (3,), (4,), (7,), (3, 4), (4, 3), (3, 3), (6, 4), (3, 7), (12,), ()
FM = (2, 4, 4)      # a feature map: channels, height, width
CORE = (S, V3, V4, M34, M43, M33)


# ---------------------------------------------------------------------------------------
# py_func bodies (module level: one function object, one signature)
# ---------------------------------------------------------------------------------------
def wiggle(x):
    return np.sin(x) + 0.1 * x * x


def wiggle_grad(x, y, gy):
    return (gy * (np.cos(x) + 0.2 * x),)


def gate(x, y):
    return x * np.cos(y)


def gate_grad(x, y, out, gy):
    return gy * np.cos(y), -gy * x * np.sin(y)


# ---------------------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------------------
PARAM_SHAPES = {"W34": M34, "W43": M43, "W33": M33, "b3": V3, "b4": V4, "E3": (10, 3), "E4": (8, 4),
                "E1": (6,), "s": S, "K3": (2, 2, 3, 3), "K1": (2, 2, 1, 1), "c2": (2,), "X": FM}


def make_params(seed=0):
    rng = np.random.default_rng(seed)
    params = {}
    for name, shape in PARAM_SHAPES.items():
        p = hb.Parameter(f"dag_{name}", shape, init=0.0)
        p.data = rng.uniform(-1, 1, shape).astype(np.float32)
        params[name] = p
    return params


PARAMS = make_params()


class LookedUp(hb.HybridBlock):
    """A layer on a row x and a state h, as a cell reads an embedding looked up outside it:
    where every call of a batch reads a lookup at x, the plan runs the lookup inside
    (runtime/plan.py). With a label it also returns x itself and a loss."""

    def __init__(self, params):
        super().__init__()
        self.w, self.b = params["W34"], params["b3"]

    def forward(self, h, x, label=None):
        y = hb.dropout(hb.tanh(hb.affine(self.w, x, self.b)), 0.3) * h    # a fresh mask per call
        if label is None:
            return y
        return y, x, hb.pick_neg_log_softmax(y, label)


LAYER = LookedUp(PARAMS)
LAYER.hybridize()


# ---------------------------------------------------------------------------------------
# the DAG builder
# ---------------------------------------------------------------------------------------
class Builder:
    def __init__(self, rng, params):
        self.rng = rng
        self.params = params
        self.by_shape = {}
        for name, p in params.items():
            if not name.startswith("E"):
                self.by_shape.setdefault(p.shape, []).append(p)
        self.pools = {}          # shape -> [(handle, bound)]
        self.nodes = []          # every handle created, in order
        self.loss_terms = []
        self.used = set()        # ids of pooled handles some later op read

    # -- bookkeeping ----------------------------------------------------------------
    def node(self, h):
        self.nodes.append(h)
        return h

    def push(self, h, bound):
        """Record h; pool it, squashed by tanh if it could have grown large."""
        self.node(h)
        if bound > 4.0:
            h, bound = self.node(hb.tanh(h)), 1.0
        self.pools.setdefault(tuple(h.shape), []).append((h, bound))
        return h

    def take(self, shape, param_ok=True):
        """A pooled value of this shape, or (sometimes) a shared Parameter of it."""
        if param_ok and shape in self.by_shape and self.rng.random() < 0.25:
            ps = self.by_shape[shape]
            return ps[self.rng.integers(len(ps))], 1.0
        pool = self.pools.get(shape)
        if not pool:
            return self.const(shape), 1.0
        h, bound = pool[self.rng.integers(len(pool))]
        self.used.add(id(h))
        return h, bound

    def const(self, shape):
        h = hb.array(self.rng.uniform(-1, 1, shape).astype(np.float32))
        self.push(h, 1.0)
        return h

    def choice(self, seq):
        return seq[self.rng.integers(len(seq))]

    def pick_index(self, n):
        return int(self.rng.integers(n))

    # -- one step per op kind ----------------------------------------------------------
    def unary(self, name):
        """A unary elementwise op of the spec table on its domain ("pos": into (0.5, 1.5)),
        bounded by its reference's largest magnitude over the operand's range."""
        ref, dom = UNARY[name]
        x, b = self.take(self.choice(CORE))
        lo, hi = -b, b
        if dom == "pos":
            x, lo, hi = self.node(hb.sigmoid(x) + 0.5), 0.5, 1.5
        self.push(getattr(hb, name)(x), float(np.abs(ref(np.linspace(lo, hi, 65))).max()))

    SCALAR_KINDS = 7

    def scalar(self, kind=None):
        x, b = self.take(self.choice(CORE))
        kind = self.pick_index(self.SCALAR_KINDS) if kind is None else kind
        if kind == 6:                       # a float64 value keeps its numbers as an operand
            self.push(hb.cast(hb.cast(x, np.float64) * 1.5, np.float32), 1.5 * b)
        elif kind == 0:
            self.push(x * 1.5, 1.5 * b)
        elif kind == 1:
            self.push(-x, b)
        elif kind == 2:
            self.push(0.5 - x, b + 0.5)
        elif kind == 3:
            self.push(x / 2.0, b / 2)
        elif kind == 4:
            self.push(x + 0.25, b + 0.25)
        else:
            self.push(2.0 * x, 2 * b)

    def binary(self, op):
        form = self.pick_index(4)
        if form == 0:                       # same shape
            shape = self.choice(CORE)
            (a, ba), (c, bc) = self.take(shape), self.take(shape)
        elif form == 1:                     # matrix with a row vector
            (a, ba), (c, bc) = self.take(M34), self.take(V4)
        elif form == 2:                     # vector with a matrix (operand order swapped)
            (a, ba), (c, bc) = self.take(V3), self.take(M43)
        else:                               # per-instance scalar against anything
            (a, ba), (c, bc) = self.take(S), self.take(self.choice(CORE))
            if self.rng.random() < 0.5:
                (a, ba), (c, bc) = (c, bc), (a, ba)
        fn = {"add": lambda u, v: u + v, "sub": hb.sub, "mul": lambda u, v: u * v}[op]
        self.push(fn(a, c), ba * bc if op == "mul" else ba + bc)

    def div(self):
        shape = self.choice(CORE)
        (a, ba), (d, _) = self.take(shape), self.take(self.choice((shape, S)))
        s = self.node(hb.sigmoid(d))
        den = self.node(s + 0.5)
        self.push(hb.div(a, den), 2.0 * ba)

    def matmul(self):
        left, right = self.choice([(M34, V4), (V4, M43), (V3, M34), (M34, M43), (V3, V3), (M33, M34),
                                   (M43, M34), (M43, V3)])
        (a, ba), (c, bc) = self.take(left), self.take(right)
        fn = hb.matmul if self.rng.random() < 0.5 else (lambda u, v: u @ v)
        self.push(fn(a, c), left[-1] * ba * bc)

    def affine(self):
        form = self.pick_index(3)
        if form == 0:
            (w, bw), (x, bx), (c, bc) = self.take(M34), self.take(V4), self.take(V3)
        elif form == 1:
            (w, bw), (x, bx), (c, bc) = self.take(M43), self.take(V3), self.take(V4)
        else:                               # matrix product with a broadcast row bias
            (w, bw), (x, bx), (c, bc) = self.take(M34), self.take(M43), self.take(V3)
        self.push(hb.affine(w, x, c), w.shape[-1] * bw * bx + bc)

    def add_n(self):
        shape = self.choice(CORE)
        items = [self.take(shape) for _ in range(2 + self.pick_index(3))]
        self.push(hb.add_n([h for h, _ in items]), sum(b for _, b in items))

    def concat(self):
        form = self.pick_index(3)
        if form == 0:
            (a, ba), (c, bc) = self.take(V3), self.take(V4)
            self.push(hb.concat([a, c]), max(ba, bc))
        elif form == 1:
            (a, ba), (c, bc) = self.take(M34), self.take(M34)
            self.push(hb.concat([a, c], axis=0), max(ba, bc))
        else:
            (a, ba), (c, bc) = self.take(M33), self.take(M34)
            self.push(hb.concat([a, c], axis=-1), max(ba, bc))

    def slice(self):
        form = self.pick_index(7)
        if form == 0:
            x, b = self.take(V7)
            self.push(x[0:3], b)
            self.push(x[3:], b)
        elif form == 1:
            x, b = self.take(M64)
            for piece in hb.split(x, 2):
                self.push(piece, b)
        elif form == 2:
            x, b = self.take(M37)
            self.push(x[:, 3:], b)
        elif form == 3:
            x, b = self.take(M34)
            self.push(x[self.pick_index(3)], b)
        elif form == 4:
            x, b = self.take(self.choice((V3, V4)))
            self.push(x[self.pick_index(x.shape[0]) - x.shape[0] * int(self.rng.random() < 0.5)], b)
        elif form == 5:
            x, b = self.take(V7)
            self.push(x[::2], b)
        else:
            x, b = self.take(M43)
            self.push(x[self.pick_index(4), 1:], b)

    def reshape(self):
        form = self.pick_index(3)
        if form == 0:
            x, b = self.take(M34)
            self.push(hb.reshape(x, M43), b)
        elif form == 1:
            x, b = self.take(M43)
            self.push(hb.reshape(x, F12), b)
        else:
            x, b = self.take(F12)
            self.push(hb.reshape(x, M34), b)

    def transpose(self):
        x, b = self.take(self.choice((M34, M43, M33)))
        self.push(x.T if self.rng.random() < 0.5 else hb.transpose(x, (1, 0)), b)

    def stack(self):
        if self.rng.random() < 0.5:
            items = [self.take(V4) for _ in range(3)]
            self.push(hb.stack([h for h, _ in items]), max(b for _, b in items))
        else:
            items = [self.take(V3) for _ in range(4)]
            self.push(hb.stack([h for h, _ in items], axis=-1), max(b for _, b in items))

    def reduction(self, name):
        """sum, mean, logsumexp, max or min over every axis, one axis or a tuple, keepdims or not."""
        shape = self.choice((M34, M43, M33, V3, V4))
        x, b = self.take(shape)
        axis = self.choice((None, 0, -1, (0, 1)) if len(shape) == 2 else (None, 0))
        keepdims = bool(self.rng.random() < 0.3)
        n = int(np.prod(shape)) if axis is None or axis == (0, 1) else shape[axis]
        self.push(getattr(hb, name)(x, axis=axis, keepdims=keepdims),
                  b * n if name == "sum" else b + np.log(n) if name == "logsumexp" else b)

    def list_reduction(self, name):
        """sum, max, min or logsumexp across a list of 1..6 values of one shape."""
        shape = self.choice(CORE)
        n = 1 + self.pick_index(6)
        items = [self.take(shape, param_ok=n > 1) for _ in range(n)]     # sum([x]) is x itself
        bound = max(b for _, b in items)
        if name == "sum":
            bound = sum(b for _, b in items)
        elif name == "logsumexp":
            bound += np.log(len(items))
        self.push(getattr(hb, name)([h for h, _ in items]), bound)

    def list_softmax(self):
        """A softmax or log_softmax across a list of values, or attention pooling: a
        softmax over scalar scores weighing a list of vectors."""
        form = self.pick_index(3)
        n = 1 + self.pick_index(6)
        if form == 2:
            scores = [self.take(S)[0] for _ in range(n)]
            shape = self.choice((V3, V4))
            values = [self.take(shape) for _ in range(n)]
            self.push(hb.weighted_sum(hb.softmax(scores), [h for h, _ in values]), max(b for _, b in values))
            return
        shape = self.choice(CORE)
        items = [self.take(shape) for _ in range(n)]
        fn = hb.softmax if form == 0 else hb.log_softmax
        b = max(b for _, b in items)
        for y in fn([h for h, _ in items]):
            self.push(y, 1.0 if form == 0 else 2 * b + np.log(n))

    def arg_reduction(self, name):
        """argmax or argmin (int64: kept out of the pools, read as floats through a cast)."""
        x, _ = self.take(self.choice((V3, V4, M34)))
        i = self.node(getattr(hb, name)(x, axis=self.choice((None, 0))))
        self.push(hb.cast(i, np.float32), float(np.prod(x.shape)))

    def topk(self):
        x, b = self.take(self.choice((V4, V7)))
        values, indices = hb.topk(x, 3)
        self.push(values, b)
        self.node(indices)
        self.push(hb.cast(indices, np.float32) * 0.25, 0.25 * x.shape[0])

    def softmax(self):
        shape = self.choice((V3, V4, M34, M43))
        x, _ = self.take(shape)
        self.push(hb.softmax(x, axis=self.choice((0, -1))), 1.0)

    def scalar_power(self):
        x, b = self.take(self.choice(CORE))
        if self.rng.random() < 0.5:
            self.push(x ** 2, b * b)
        else:                               # a fractional power of a positive base
            pos = self.node(hb.sigmoid(x) + 0.5)
            self.push(pos ** self.choice((0.5, -1.5)), 0.5 ** -1.5)

    def power(self):
        """A positive base to a value's power."""
        x, _ = self.take(self.choice(CORE))
        e, be = self.take(x.shape)
        pos = self.node(hb.sigmoid(x) + 0.5)
        self.push(pos ** e, 2.0 ** be)

    def extreme(self, name):
        shape = self.choice(CORE)
        (a, ba), (c, bc) = self.take(shape), self.take(self.choice((shape, S)))
        if self.rng.random() < 0.5:
            a, ba, c, bc = c, bc, a, ba
        self.push(getattr(hb, name)(a, c), max(ba, bc))

    def where(self):
        shape = self.choice(CORE)
        (a, ba), (c, bc) = self.take(shape), self.take(shape)
        self.push(hb.where(self.rng.random(shape) < 0.5, a, c), max(ba, bc))

    def leaky_relu(self):
        x, b = self.take(self.choice(CORE))
        self.push(hb.leaky_relu(x, slope=0.2), b)

    def cast(self):
        x, b = self.take(self.choice(CORE))
        self.push(hb.cast(hb.cast(x, np.float64), np.float32), b)

    def lookup(self):
        name = self.choice(("E3", "E4", "E1"))
        table = self.params[name]
        self.push(hb.lookup(table, self.pick_index(table.shape[0])), 1.0)

    def pick(self):
        x, b = self.take(self.choice((V3, V4, V7)))
        self.push(hb.pick(x, self.pick_index(x.shape[0])), b)

    def log_softmax(self):
        shape = self.choice((V3, V4, M34, M43))
        x, b = self.take(shape)
        axis = self.choice((0, -1))
        self.push(hb.log_softmax(x, axis=axis), 2 * b + np.log(shape[axis]))

    def pick_neg_log_softmax(self):
        x, b = self.take(self.choice((V3, V4)))
        y = hb.pick_neg_log_softmax(x, self.pick_index(x.shape[0]))
        self.push(y, 2 * b + 2)
        self.loss_terms.append(y)

    def py_func(self):
        shape = self.choice(CORE)
        if self.rng.random() < 0.5:
            x, b = self.take(shape)
            self.push(hb.py_func(wiggle, x, out_shape=shape, grad_fn=wiggle_grad), 1 + 0.1 * b * b)
        else:                               # the second operand may be a shared Parameter
            (x, b), (y, _) = self.take(shape), self.take(shape)
            self.push(hb.py_func(gate, x, y, out_shape=shape, grad_fn=gate_grad), b)

    def conv2d(self):
        """A 3x3 or 1x1 convolution of a feature map, with a bias or without; the weight mostly
        a shared Parameter, else a per-instance value."""
        k = self.choice((1, 3))
        x, bx = self.take(FM)
        if self.rng.random() < 0.75:
            w, bw = self.params[f"K{k}"], 1.0
        else:
            w, bw = self.take((2, 2, k, k), param_ok=False)
        form = self.pick_index(3)
        bias, bb = (None, 0.0) if form == 0 else (self.params["c2"], 1.0) if form == 1 else self.take((2,), False)
        self.push(hb.conv2d(x, w, bias), 2 * k * k * bx * bw + bb)

    def pool(self, name):
        x, b = self.take(FM)
        self.push(getattr(hb, name)(x, self.choice((1, 2, 4))), b)

    def dropout(self):
        x, b = self.take(self.choice(CORE))
        p = self.choice((0.2, 0.5))
        self.push(hb.dropout(x, p), b / (1 - p))

    def param_read(self):
        """An op straight on a Parameter: recording inserts a `param` read."""
        p = self.choice(list(self.by_shape.values()))[0]
        self.push(self.choice((hb.tanh, hb.sigmoid, hb.log_softmax if p.ndim else hb.tanh))(p), 4.0)

    def block(self):
        """A hybridized block call (LookedUp) on a pooled state and, mostly, a fresh lookup."""
        h, bh = self.take(V3, param_ok=False)
        if self.rng.random() < 0.75:
            x, bx = self.node(hb.lookup(self.params["E4"], self.pick_index(8))), 1.0
        else:
            x, bx = self.take(V4, param_ok=False)
        if self.rng.random() < 0.5:
            self.push(LAYER(h, x), bh)
            return
        y, x_out, loss = LAYER(h, x, self.pick_index(3))
        self.push(y, bh)
        self.node(x_out)             # eager mode returns x itself: pooled, it would count as read
        self.push(x_out * 1.0, bx)
        self.push(loss, 2 * bh + 2)
        self.loss_terms.append(loss)

    BINARY = ("add", "sub", "mul")
    REDUCTIONS = ("sum", "mean", "logsumexp", "max", "min")
    ARG_REDUCTIONS = ("argmax", "argmin")
    LIST_REDUCTIONS = ("sum_list", "max_list", "min_list", "logsumexp_list")
    EXTREMES = ("maximum", "minimum")
    POOLS = ("max_pool2d", "avg_pool2d")
    STEPS = (*UNARY, *BINARY, *REDUCTIONS, *ARG_REDUCTIONS, *LIST_REDUCTIONS, *EXTREMES, *POOLS, "scalar", "div",
             "matmul", "affine", "add_n", "concat", "slice", "reshape", "transpose", "stack", "topk", "list_softmax",
             "softmax", "scalar_power", "power", "where", "leaky_relu", "cast", "lookup", "pick", "log_softmax",
             "pick_neg_log_softmax", "py_func", "conv2d", "dropout", "param_read", "block")

    def step(self, kind):
        if kind in UNARY:
            self.unary(kind)
        elif kind in self.BINARY:
            self.binary(kind)
        elif kind in self.REDUCTIONS:
            self.reduction(kind)
        elif kind in self.LIST_REDUCTIONS:
            self.list_reduction(kind[:-len("_list")])
        elif kind in self.ARG_REDUCTIONS:
            self.arg_reduction(kind)
        elif kind in self.EXTREMES:
            self.extreme(kind)
        elif kind in self.POOLS:
            self.pool(kind)
        else:
            getattr(self, kind)()


def build(rng, params, hook=None, min_nodes=MIN_NODES):
    """A random DAG from `rng` over the shared `params`: (every node handle, scalar loss).

    hook(nodes), when given, is called after every step (to read values mid-recording).
    """
    b = Builder(rng, params)
    hb.seed(int(rng.integers(2 ** 32)))     # dropout masks: the same for the same DAG
    for shape in CORE + (V7, M64, M37, F12, FM):
        b.const(shape)
    kinds = list(Builder.STEPS)
    rng.shuffle(kinds)
    for kind in kinds:                       # every op kind at least once, then at random
        if kind == "scalar":                 # each of its forms: one is the only float64 operand
            for form in range(Builder.SCALAR_KINDS):
                b.scalar(form)
        else:
            b.step(kind)
        if hook:
            hook(b.nodes)
    while len(b.nodes) < min_nodes:
        b.step(b.choice(Builder.STEPS))
        if hook:
            hook(b.nodes)
    # the loss: every picked loss, plus the sum of every pooled value no op read (so every
    # node reaches the loss and every backward kernel runs), plus a few read ones again
    terms = list(b.loss_terms)
    pooled = [h for pool in b.pools.values() for h, _ in pool]
    again = set(rng.choice(len(pooled), size=min(8, len(pooled)), replace=False).tolist())
    for k, h in enumerate(pooled):
        if id(h) not in b.used or k in again:
            terms.append(b.node(hb.sum(h) if h.shape != () else h * 1.0))
    loss = b.node(hb.add_n(terms))
    return b.nodes, loss


# ---------------------------------------------------------------------------------------
# running and comparing
# ---------------------------------------------------------------------------------------
def zero_grads(params):
    for p in params.values():
        p.zero_grad()


def grads_of(params):
    return {k: p.grad.copy() for k, p in params.items()}


def run_eager(seeds, params=PARAMS, hook_factory=None):
    zero_grads(params)
    all_nodes, losses = [], []
    for s in seeds:
        nodes, loss = build(np.random.default_rng(s), params, hook_factory(s) if hook_factory else None)
        all_nodes.append([n.asnumpy() for n in nodes])
        losses.append(loss)
    for loss in losses:
        loss.backward()
    return all_nodes, grads_of(params), [n for ns in all_nodes for n in ns], losses


def run_batched(seeds, policy, params=PARAMS, hook_factory=None, granularity="op"):
    zero_grads(params)
    with hb.batching(policy=policy, granularity=granularity) as scope:
        built = [build(np.random.default_rng(s), params, hook_factory(s) if hook_factory else None)
                 for s in seeds]
        total = hb.add_n([loss for _, loss in built]) if len(built) > 1 else built[0][1]
        total.backward()
    return [nodes for nodes, _ in built], grads_of(params), scope


def assert_nodes_match(batched_nodes, eager_values, where):
    assert len(batched_nodes) == len(eager_values), where
    assert len(batched_nodes) >= MIN_NODES, where
    for i, (fut, want) in enumerate(zip(batched_nodes, eager_values)):
        assert isinstance(fut, hb.Future), where
        got = fut.asnumpy()
        assert got.shape == want.shape and got.dtype == want.dtype, (where, i, got.shape, want.shape)
        assert np.all(np.isfinite(want)), (where, i)
        np.testing.assert_allclose(got, want, rtol=VAL_RTOL, atol=VAL_ATOL, err_msg=f"{where}: node {i}")


def assert_grads_match(got, want, where):
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=GRAD_RTOL, atol=GRAD_ATOL, err_msg=f"{where}: grad {k}")
    assert any(np.abs(g).sum() > 0 for g in want.values()), "the loss must depend on the parameters"


def ops_in_tape(roots):
    """Names of every op reachable from eager Tensors (parameter reads included)."""
    seen, names, stack = set(), set(), list(roots)
    while stack:
        t = stack.pop()
        if id(t) in seen or not isinstance(t, hb.Tensor):
            continue
        seen.add(id(t))
        names.add(t.sig.op.name)
        stack.extend(t.inputs)
    return names


# ---------------------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------------------
def test_build_covers_every_registered_op():
    nodes, loss = build(np.random.default_rng(0), PARAMS)
    assert len(nodes) >= MIN_NODES
    used = ops_in_tape(nodes + [loss])
    # never user-called: multi-output plumbing, and the classifier loss that block programs
    # fold (its property test is in test_affine_loss.py)
    registered = {op.name for op in OPS} - {"output", "affine_pick_neg_log_softmax"}
    # eager mode records a Python number's scalar_affine; a scope, scalar_affine_packed
    # (float32) and scalar_affine_operand (float64)
    with hb.batching() as scope:
        build(np.random.default_rng(0), PARAMS)
    used |= {signature.SIGS[s].op.name for s in scope.graph.sig}
    assert registered - used == set(), f"ops never exercised by the random DAGs: {registered - used}"


def test_build_is_deterministic():
    a, la = build(np.random.default_rng(5), PARAMS)
    b, lb = build(np.random.default_rng(5), PARAMS)
    assert [x.sig.op.name for x in a] == [x.sig.op.name for x in b]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.asnumpy(), y.asnumpy())


@settings(**SETTINGS)
@given(seed=st.integers(0, 2 ** 31 - 1))
def test_random_dag_batched_equals_eager(seed):
    eager_values, eager_grads, _, _ = run_eager([seed])
    for policy in POLICIES:
        nodes, grads, scope = run_batched([seed], policy)
        where = f"seed={seed} policy={policy}"
        assert_nodes_match(nodes[0], eager_values[0], where)
        assert_grads_match(grads, eager_grads, where)
        st_ = scope.stats
        assert st_.lower_bound <= st_.batches <= st_.nodes, (where, st_)


@settings(**dict(SETTINGS, max_examples=8))
@given(seeds=st.lists(st.integers(0, 2 ** 31 - 1), min_size=1, max_size=4, unique=True))
def test_random_dag_at_block_granularity_equals_eager(seeds):
    """The block calls as one node each: a batch of them that all read lookups at x looks
    them up inside, and (distinct_min_rows 2) runs its per-word part once per word."""
    eager_values, eager_grads, _, _ = run_eager(seeds)
    for policy in POLICIES:
        with hb.settings(distinct_min_rows=2):
            nodes, grads, _ = run_batched(seeds, policy, granularity="block")
        where = f"seeds={seeds} policy={policy} block"
        for inst, (ns, want) in enumerate(zip(nodes, eager_values)):
            assert_nodes_match(ns, want, f"{where} instance {inst}")
        assert_grads_match(grads, eager_grads, where)


def test_block_calls_reading_lookups_run_them_inside():
    """Some of a few DAGs' block batches read only lookups at x: those run the lookup inside,
    with the same values and gradients."""
    seeds = [1, 2, 3, 4]
    eager_values, eager_grads, _, _ = run_eager(seeds)
    with hb.settings(distinct_min_rows=2):
        nodes, grads, scope = run_batched(seeds, "agenda", granularity="block")
    assert sum(len(plan.folded) for plan in scope.plans) >= 1
    for inst, (ns, want) in enumerate(zip(nodes, eager_values)):
        assert_nodes_match(ns, want, f"instance {inst}")
    assert_grads_match(grads, eager_grads, "looked up inside")


@contextlib.contextmanager
def every_shared_product_in_the_few_rows_kernel():
    """"auto" with the kernel taking every shared weight's product, however small the
    weight and whatever the rows (one row included); yields the row counts it ran."""
    saved = blas.SMALL_WEIGHT, blas._kernel_below, blas._one_row, few_rows.product
    rows = []
    blas.SMALL_WEIGHT, blas._kernel_below, blas._one_row = 0, (10 ** 9, 10 ** 9), ("kernel", "kernel")
    few_rows.product = lambda x, w: rows.append(x.shape[0]) or saved[-1](x, w)
    try:
        with hb.settings(blas="auto"):
            yield rows
    finally:
        blas.SMALL_WEIGHT, blas._kernel_below, blas._one_row, few_rows.product = saved


@settings(**dict(SETTINGS, max_examples=8))
@given(seed=st.integers(0, 2 ** 31 - 1))
def test_random_dag_batched_equals_eager_with_the_few_rows_kernel(seed):
    """The same property with every shared-weight product in `kernels/few_rows.py`."""
    with every_shared_product_in_the_few_rows_kernel() as rows:
        eager_values, eager_grads, _, _ = run_eager([seed])
        assert rows, "eager mode's shared products did not reach the kernel"
        for policy in POLICIES:
            rows.clear()
            nodes, grads, _ = run_batched([seed], policy)
            assert rows, "batched shared products did not reach the kernel"
            where = f"seed={seed} policy={policy}"
            assert_nodes_match(nodes[0], eager_values[0], where)
            assert_grads_match(grads, eager_grads, where)


@settings(**dict(SETTINGS, max_examples=6))
@given(seeds=st.lists(st.integers(0, 2 ** 31 - 1), min_size=2, max_size=4, unique=True))
def test_several_instances_share_parameters_in_one_scope(seeds):
    eager_values, eager_grads, _, _ = run_eager(seeds)
    single = {}
    for policy in POLICIES:
        nodes, grads, scope = run_batched(seeds, policy)
        where = f"seeds={seeds} policy={policy}"
        for inst, (ns, want) in enumerate(zip(nodes, eager_values)):
            assert_nodes_match(ns, want, f"{where} instance {inst}")
        assert_grads_match(grads, eager_grads, where)
        st_ = scope.stats
        assert st_.batches < st_.nodes, (where, st_)
        assert st_.lower_bound <= st_.batches, (where, st_)
        # instances batch with each other: fewer batches than running them one scope each
        single[policy] = sum(run_batched([s], policy)[2].stats.batches for s in seeds)
        assert st_.batches < single[policy], (where, st_.batches, single[policy])


class MidReads:
    """A hook that, at a few random steps, reads random nodes (a flush inside the scope),
    sometimes backpropagates a partial scalar there, and logs what it saw."""

    def __init__(self, seed, log):
        self.rng = np.random.default_rng(seed ^ 0x5EED)
        self.log = log
        self.steps = 0

    def __call__(self, nodes):
        self.steps += 1
        if self.rng.random() > 0.15:
            return
        for k in self.rng.choice(len(nodes), size=2):
            self.log.append(("read", int(k), nodes[int(k)].asnumpy()))
        if self.rng.random() < 0.3:
            k = int(self.rng.integers(len(nodes)))
            node = nodes[k] if nodes[k].dtype.kind == "f" else hb.cast(nodes[k], np.float32)   # argmax's int64
            part = hb.sum(node) if node.shape != () else node * 1.0
            part.backward()                  # mid-scope backward: grads accumulate
            self.log.append(("backward", k, part.asnumpy()))


@settings(**dict(SETTINGS, max_examples=6))
@given(seed=st.integers(0, 2 ** 31 - 1))
def test_reading_mid_scope_then_recording_more(seed):
    eager_log = []
    eager_values, eager_grads, _, _ = run_eager([seed], hook_factory=lambda s: MidReads(s, eager_log))
    for policy in POLICIES:
        log = []
        nodes, grads, scope = run_batched([seed], policy, hook_factory=lambda s: MidReads(s, log))
        where = f"seed={seed} policy={policy}"
        assert [e[:2] for e in log] == [e[:2] for e in eager_log], where
        for (kind, k, got), (_, _, want) in zip(log, eager_log):
            np.testing.assert_allclose(got, want, rtol=VAL_RTOL, atol=VAL_ATOL, err_msg=f"{where}: mid {kind} {k}")
        assert_nodes_match(nodes[0], eager_values[0], where)
        assert_grads_match(grads, eager_grads, where)
        reads = sum(1 for e in log if e[0] == "read")
        assert scope.stats.flushes >= 2 if reads else scope.stats.flushes >= 1, (where, scope.stats)


def test_mid_scope_reads_split_the_graph_into_flushes():
    """A deterministic instance of the above with many reads: many flushes, same values."""
    seed = 11
    eager_log = []
    eager_values, eager_grads, _, _ = run_eager([seed], hook_factory=lambda s: MidReads(s, eager_log))
    log = []
    nodes, grads, scope = run_batched([seed], "agenda", hook_factory=lambda s: MidReads(s, log))
    assert len([e for e in log if e[0] == "backward"]) >= 1
    assert scope.stats.flushes >= 5, scope.stats
    for (kind, k, got), (_, _, want) in zip(log, eager_log):
        np.testing.assert_allclose(got, want, rtol=VAL_RTOL, atol=VAL_ATOL, err_msg=f"mid {kind} {k}")
    assert_nodes_match(nodes[0], eager_values[0], "incremental")
    assert_grads_match(grads, eager_grads, "incremental")


@pytest.mark.parametrize("policy", POLICIES)
def test_backward_after_scope_exit_matches(policy):
    """backward() on the scalar after the scope closed (the flush happened at exit)."""
    eager_values, eager_grads, _, _ = run_eager([3])
    zero_grads(PARAMS)
    with hb.batching(policy=policy):
        nodes, loss = build(np.random.default_rng(3), PARAMS)
    loss.backward()
    assert_nodes_match(nodes, eager_values[0], policy)
    assert_grads_match(grads_of(PARAMS), eager_grads, policy)
