"""Trainer.step with the 1/batch_size scale folded into the rule and plain SGD's fused
update-and-clear kernel: several steps over a dense weight and an embedding fed by row
gradients equal a plain numpy reference of each rule, gradients are zero afterwards with
row tracking restarted, and a second step with no backward between changes nothing."""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.kernels.update import descend

SHAPES = {"emb": (12, 3), "w": (4, 5), "b": (4,)}
STEPS = 3


def make_params(dtype=np.float32):
    rng = np.random.default_rng(7)
    return {name: hb.Parameter(name, shape, init="uniform", dtype=dtype, rng=rng) for name, shape in SHAPES.items()}


def make_grads(seed=1):
    """Per step: dense gradients for w and b, and (rows, values) lookups for emb (rows repeat)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(STEPS):
        lookups = [(rng.integers(0, 12, 5), rng.standard_normal((5, 3))) for _ in range(2)]
        out.append({"w": rng.standard_normal(SHAPES["w"]), "b": rng.standard_normal(SHAPES["b"]), "emb": lookups})
    return out


def feed(params, grads):
    """Add one step's gradients the way backward does: the embedding by rows, the rest densely."""
    for rows, values in grads["emb"]:
        params["emb"].add_grad_rows(rows, values.astype(params["emb"].dtype))
    for name in ("w", "b"):
        params[name].add_grad(grads[name].astype(params[name].dtype))


def dense(grads):
    """The embedding's row gradients summed into a dense array (rows repeat)."""
    g = np.zeros(SHAPES["emb"])
    for rows, values in grads["emb"]:
        np.add.at(g, rows, values)
    return {"emb": g, "w": grads["w"], "b": grads["b"]}


def reference(rule, options, weights, steps, batch_size, clip=None):
    """The rule in float64 numpy, written from its docstring formula, one step per entry."""
    lr, wd = options["learning_rate"], options.get("wd", 0.0)
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    s1 = {k: np.zeros_like(v) for k, v in w.items()}
    s2 = {k: np.zeros_like(v) for k, v in w.items()}
    for t, raw in enumerate(steps, start=1):
        scale = 1.0 / batch_size
        if clip is not None:
            norm = np.sqrt(sum(np.sum(g ** 2) for g in raw.values())) * scale
            scale *= min(1.0, clip / norm)
        for k, g in raw.items():
            g = scale * g + wd * w[k]
            if rule == "sgd":
                s1[k] = options.get("momentum", 0.0) * s1[k] - lr * g
                w[k] = w[k] + s1[k]
            elif rule == "adam":
                b1, b2, eps = options["beta1"], options["beta2"], options["epsilon"]
                s1[k] = b1 * s1[k] + (1 - b1) * g
                s2[k] = b2 * s2[k] + (1 - b2) * g * g
                w[k] = w[k] - lr * (s1[k] / (1 - b1 ** t)) / (np.sqrt(s2[k] / (1 - b2 ** t)) + eps)
            else:
                s1[k] = s1[k] + g * g
                w[k] = w[k] - lr * g / (np.sqrt(s1[k]) + options["epsilon"])
    return w


RULES = [
    ("sgd", {"learning_rate": 0.3}),
    ("sgd", {"learning_rate": 0.3, "momentum": 0.9}),
    ("sgd", {"learning_rate": 0.3, "wd": 0.05}),
    ("sgd", {"learning_rate": 0.3, "momentum": 0.5, "wd": 0.05}),
    ("adam", {"learning_rate": 0.05, "beta1": 0.8, "beta2": 0.95, "epsilon": 1e-6}),
    ("adam", {"learning_rate": 0.05, "beta1": 0.8, "beta2": 0.95, "epsilon": 1e-6, "wd": 0.1}),
    ("adagrad", {"learning_rate": 0.2, "epsilon": 1e-7, "wd": 0.05}),
]


def train(rule, options, batch_size, clip=None, dtype=np.float32):
    """STEPS trainer steps; returns (params, their initial data, the steps' gradients)."""
    params = make_params(dtype)
    start = {k: p.data.copy() for k, p in params.items()}
    grads = make_grads()
    opts = dict(options, **({} if clip is None else {"clip_global_norm": clip}))
    trainer = hb.Trainer(list(params.values()), rule, opts)
    for g in grads:
        feed(params, g)
        trainer.step(batch_size)
    return params, start, grads


def assert_matches(params, expected, rtol):
    for k, p in params.items():
        np.testing.assert_allclose(p.data, expected[k], rtol=rtol, atol=rtol, err_msg=k)


@pytest.mark.parametrize("rule,options", RULES)
@pytest.mark.parametrize("batch_size", [1, 5])
def test_rules_match_numpy_reference(rule, options, batch_size):
    params, start, grads = train(rule, options, batch_size)
    assert_matches(params, reference(rule, options, start, [dense(g) for g in grads], batch_size), 2e-5)


@pytest.mark.parametrize("rule,options", RULES)
def test_clipping_matches_numpy_reference(rule, options):
    params, start, grads = train(rule, options, 2, clip=0.5)
    expected = reference(rule, options, start, [dense(g) for g in grads], 2, clip=0.5)
    assert_matches(params, expected, 2e-5)


def test_clip_sees_the_scaled_norm():
    params, grads = make_params(), make_grads()
    trainer = hb.Trainer(list(params.values()), "sgd", {"learning_rate": 0.1, "clip_global_norm": 1e-3})
    feed(params, grads[0])
    trainer.step(4)
    g = dense(grads[0])
    assert trainer.last_grad_norm == pytest.approx(np.sqrt(sum(np.sum(v ** 2) for v in g.values())) / 4, rel=1e-5)


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-12), (np.float16, 3e-3)])
def test_plain_sgd_in_other_dtypes(dtype, rtol):
    """float64 goes through the compiled kernel, float16 through numpy: both match."""
    options = {"learning_rate": 0.3}
    params, start, grads = train("sgd", options, 3, dtype=dtype)
    assert_matches(params, reference("sgd", options, start, [dense(g) for g in grads], 3), rtol)


@pytest.mark.parametrize("rule,options", RULES)
def test_gradients_are_zero_and_rows_tracked_after_a_step(rule, options):
    params, _, _ = train(rule, options, 2)
    for p in params.values():
        assert not np.any(p.peek_grad())
        assert p.grad_rows() is not None and len(p.grad_rows()) == 0     # as zero_grad leaves it


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_second_plain_sgd_step_without_backward_changes_nothing(dtype):
    params = make_params(dtype)
    trainer = hb.Trainer(list(params.values()), "sgd", {"learning_rate": 0.3})
    feed(params, make_grads()[0])
    trainer.step(2)
    after = {k: p.data.copy() for k, p in params.items()}
    trainer.step(2)
    for k, p in params.items():
        np.testing.assert_array_equal(p.data, after[k], err_msg=k)


def test_embedding_step_touches_only_its_rows():
    params = make_params()
    before = params["emb"].data.copy()
    params["emb"].add_grad_rows(np.array([3, 3, 9]), np.ones((3, 3), np.float32))
    hb.Trainer([params["emb"]], "sgd", {"learning_rate": 0.5}).step(2)
    changed = np.flatnonzero(np.any(params["emb"].data != before, axis=1))
    np.testing.assert_array_equal(changed, [3, 9])
    np.testing.assert_allclose(params["emb"].data[3], before[3] - 0.5, rtol=1e-6)
    np.testing.assert_allclose(params["emb"].data[9], before[9] - 0.25, rtol=1e-6)


def test_kernel_rows_of_a_three_dimensional_table():
    w = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    g = np.ones_like(w)
    expected = w.copy()
    expected[[1, 3]] -= 0.5
    assert descend(w, g, 0.5, np.array([1, 3]))
    np.testing.assert_array_equal(w, expected)
    np.testing.assert_array_equal(g[[1, 3]], 0)
    np.testing.assert_array_equal(g[[0, 2]], 1)


@pytest.mark.parametrize("weight,grad", [
    (np.ones((4, 4), np.float16), np.ones((4, 4), np.float16)),       # no numba float16
    (np.ones((4, 8), np.float32)[:, ::2], np.ones((4, 4), np.float32)),   # a strided view
    (np.ones((4, 4), np.float32), np.ones((4, 4), np.float64)),       # dtypes differ
])
def test_kernel_declines_what_it_cannot_write_in_place(weight, grad):
    w0, g0 = weight.copy(), grad.copy()
    assert not descend(weight, grad, 0.5)
    np.testing.assert_array_equal(weight, w0)
    np.testing.assert_array_equal(grad, g0)
