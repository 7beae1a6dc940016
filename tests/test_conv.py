"""Convolution and pooling as layers: a small residual module network of nn.Conv2D blocks gives
eager mode's values and gradients when batched at every granularity; a batch of convolutions
with a shared weight is one product; bad shapes fail at the call. (The ops' values,
gradients and operand layouts are checked from their op_specs.py entries.)"""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch import nn
from hybridbatch.kernels import blas
from hybridbatch.ops import conv as conv_ops

C, SIDE, CLASSES = 4, 6, 3


class Residual(hb.HybridBlock):
    """conv3x3 -> relu -> conv3x3 -> + input -> relu."""

    def __init__(self, seed):
        super().__init__()
        self.first = nn.Conv2D(C, C, 3, activation="relu", seed=seed)
        self.second = nn.Conv2D(C, C, 3, seed=seed + 1)

    def forward(self, x):
        return hb.relu(self.second(self.first(x)) + x)


class Combine(hb.HybridBlock):
    """Two maps concatenated along the channels, projected back to C channels by a 1x1 conv."""

    def __init__(self, seed):
        super().__init__()
        self.project = nn.Conv2D(C, 2 * C, 1, activation="relu", seed=seed)

    def forward(self, a, b):
        return self.project(hb.concat([a, b], axis=0))


class Classifier(hb.HybridBlock):
    """conv1x1 -> 2x2 max and average pooling -> flatten -> dense."""

    def __init__(self, seed):
        super().__init__()
        self.reduce = nn.Conv2D(2, C, 1, seed=seed)
        self.max_pool, self.avg_pool = nn.MaxPool2D(2), nn.AvgPool2D(2)
        self.out = nn.Dense(CLASSES, 2 * 2 * (SIDE // 2) ** 2, seed=seed + 1)

    def forward(self, x):
        y = self.reduce(x)
        return self.out(hb.concat([hb.flatten(self.max_pool(y)), hb.flatten(self.avg_pool(y))]))


class ModuleNetwork(hb.Block):
    """Per instance a different layout of residual and combining modules (its depth and
    where two branches join come from the instance's program)."""

    def __init__(self):
        super().__init__()
        self.residual = Residual(seed=1)
        self.combine = Combine(seed=3)
        self.classify = Classifier(seed=4)
        for block in (self.residual, self.combine, self.classify):
            block.hybridize()

    def forward(self, x, program, label):
        branches = [x]
        for step in program:
            if step == "combine":
                branches.append(self.combine(branches[-1], branches[0]))
            else:
                branches.append(self.residual(branches[-1]))
        return hb.pick_neg_log_softmax(self.classify(branches[-1]), label)


PROGRAMS = [["residual"], ["residual", "combine", "residual"], ["combine"], ["residual", "residual"],
            ["combine", "residual", "combine"]]


def _run(net, inputs, granularity):
    """Every instance's loss and every parameter's gradient, eagerly (granularity None) or batched."""
    params = list(net.collect_params().values())
    for p in params:
        p.zero_grad()
    if granularity is None:
        losses = [net(x, program, label) for x, program, label in inputs]
        for loss in losses:
            loss.backward()
    else:
        with hb.batching(granularity=granularity):
            losses = [net(x, program, label) for x, program, label in inputs]
            hb.add_n(losses).backward()
    return [loss.asnumpy() for loss in losses], [p.grad.copy() for p in params]


@pytest.mark.parametrize("granularity", ["op", "block", "auto"])
def test_a_residual_module_network_batched_equals_eager(granularity):
    rng = np.random.default_rng(0)
    net = ModuleNetwork()
    inputs = [(rng.standard_normal((C, SIDE, SIDE)).astype(np.float32), program, i % CLASSES)
              for i, program in enumerate(PROGRAMS * 2)]
    want_losses, want_grads = _run(net, inputs, None)
    got_losses, got_grads = _run(net, inputs, granularity)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5, atol=1e-6)
    assert all(np.abs(g).sum() > 0 for g in want_grads), "every parameter must get a gradient"
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_convolutions_with_a_shared_weight_run_as_one_product(monkeypatch):
    rows = []
    product = blas.shared_product
    monkeypatch.setattr(blas, "shared_product", lambda x, w: rows.append(x.shape) or product(x, w))
    rng = np.random.default_rng(1)
    conv = nn.Conv2D(5, 3, 3, seed=0)
    maps = [rng.standard_normal((3, 4, 7)).astype(np.float32) for _ in range(6)]
    with hb.batching(granularity="op"):
        ys = [conv(x) for x in maps]
        ys[0].asnumpy()
    assert rows == [(6 * 4 * 7, 3 * 3 * 3)]
    for x, y in zip(maps, ys):
        np.testing.assert_allclose(y.asnumpy(), conv(x).asnumpy(), rtol=1e-5, atol=1e-6)


def test_a_shared_weight_is_reordered_once_per_run_and_its_products_see_one_array(monkeypatch):
    """Within a forward or backward run (a packing scope) a shared weight's (i, j, c) layout
    is made once for correlating and once for the input gradient, and every batch's product
    gets that same array: MKL can pack it from its second product on."""
    made, weights = [], []
    reorder, product = conv_ops._weight_rows, blas.shared_product
    monkeypatch.setattr(conv_ops, "_weight_rows", lambda xp, w, flip=False: made.append(flip) or reorder(xp, w, flip))
    monkeypatch.setattr(blas, "shared_product", lambda x, w: weights.append(w) or product(x, w))
    rng = np.random.default_rng(2)
    conv = nn.Conv2D(3, 3, 3, seed=0)
    with hb.batching(granularity="op"):
        h = [hb.relu(conv(rng.standard_normal((3, 5, 5)).astype(np.float32))) for _ in range(3)]
        loss = hb.add_n([hb.sum(conv(x)) for x in h])           # a second batch of the same weight
    loss.backward()
    assert made == [False, True]      # forward; backward's input gradient (of the second batch)
    assert len(weights) == 3 and weights[0].base is weights[1].base


@pytest.mark.parametrize("in_scope", [False, True])
def test_max_pooling_shares_the_gradient_among_tied_elements(in_scope):
    x = hb.Parameter("x", (1, 2, 4), init=0.0)
    x.data = np.array([[[1.0, 1.0, 0.0, 3.0], [1.0, 0.5, 2.0, 3.0]]], np.float32)
    if in_scope:
        with hb.batching():
            hb.sum(hb.max_pool2d(x * 1.0, 2)).backward()
    else:
        hb.sum(hb.max_pool2d(x * 1.0, 2)).backward()
    windows = x.data.reshape(2, 2, 2).transpose(1, 0, 2).reshape(2, 4)
    at_max = windows == windows.max(axis=1, keepdims=True)
    want = (at_max / at_max.sum(axis=1, keepdims=True)).reshape(2, 2, 2).transpose(1, 0, 2).reshape(1, 2, 4)
    np.testing.assert_allclose(x.grad, want, rtol=1e-6)


def _f32(*shape):
    return np.ones(shape, np.float32)


SHAPE_ERRORS = [
    ("conv2d", lambda: hb.conv2d(_f32(3, 4, 4), hb.array(_f32(2, 5, 3, 3))), [(3, 4, 4), (2, 5, 3, 3)],
     "the weight reads 5 channels"),
    ("conv2d", lambda: hb.conv2d(_f32(3, 4, 4), hb.array(_f32(2, 3, 2, 2))), [(3, 4, 4), (2, 3, 2, 2)], "odd k"),
    ("conv2d", lambda: hb.conv2d(_f32(3, 4, 4), hb.array(_f32(2, 3, 3, 3)), _f32(3)), [(2, 3, 3, 3), (3,)],
     r"bias must be \(2,\)"),
    ("conv2d", lambda: hb.conv2d(_f32(4, 4), hb.array(_f32(2, 4, 1, 1))), [(4, 4)], "feature map"),
    ("max_pool2d", lambda: hb.max_pool2d(hb.array(_f32(2, 4, 6)), 4), [(2, 4, 6)], "window 4 must divide"),
    ("avg_pool2d", lambda: hb.avg_pool2d(hb.array(_f32(2, 3, 4))), [(2, 3, 4)], "window 2 must divide"),
]


@pytest.mark.parametrize("in_scope", [False, True])
@pytest.mark.parametrize("name, call, shapes, match", SHAPE_ERRORS,
                         ids=[f"{c[0]}{i}" for i, c in enumerate(SHAPE_ERRORS)])
def test_bad_shapes_raise_at_the_call_naming_them(name, call, shapes, match, in_scope):
    def go():
        with pytest.raises(hb.ShapeError, match=f"^{name}: .*{match}") as err:
            call()
        for shape in shapes:
            assert str(shape) in str(err.value)
    if in_scope:
        with hb.batching():
            go()
    else:
        go()


@pytest.mark.parametrize("make, match", [
    (lambda: hb.conv2d(hb.array(_f32(1, 2, 2)), hb.array(_f32(1, 1, 1, 1)), padding="valid"), "pads 'same' only"),
    (lambda: hb.max_pool2d(hb.array(_f32(1, 2, 2)), 0), "at least 1"),
    (lambda: nn.Conv2D(2, 2, 4), "odd kernel_size"),
    (lambda: nn.AvgPool2D(-1), "at least 1"),
])
def test_bad_settings_raise_value_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()
