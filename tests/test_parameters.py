"""Parameters, ParameterDict and their files: integers where integers are meant, and loads and
assignments that cannot change a value silently."""
import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch import nn
from hybridbatch.train.optim import Trainer
from helpers import recorded


def test_a_bool_is_not_a_lookup_row():
    """Python's bool is an int: True would read row 1 in every mode."""
    emb = hb.nn.Embedding(5, 2, seed=0)
    with pytest.raises(TypeError, match="not bool"):
        emb(True)
    with hb.batching():
        with pytest.raises(TypeError, match="not bool"):
            emb(np.bool_(False))


def test_a_parameter_shape_must_hold_integers():
    with pytest.raises(TypeError, match="must hold integers"):
        hb.nn.Dense(2.5, 4)
    with pytest.raises(ValueError, match=">= 0"):
        hb.Parameter("W", (-1, 3))
    assert hb.Parameter("W", (np.int64(2), 3)).shape == (2, 3)


def test_loading_refuses_values_the_dtype_cannot_hold(tmp_path):
    params = hb.ParameterDict()
    W = params.get("W", shape=(2,))
    before = W.data.copy()
    for bad, why in ((np.array([1 + 2j, 2]), "cannot become float32"),
                     (np.array([1e300, 1.0]), "beyond float32's range")):
        path = tmp_path / "p.npz"
        np.savez(path, W=bad)
        with pytest.raises(ValueError, match=why):
            params.load(path)
        np.testing.assert_array_equal(W.data, before)
    np.savez(tmp_path / "ok.npz", W=np.array([1.5, -2.0]))    # float64 that fits: cast
    params.load(tmp_path / "ok.npz")
    np.testing.assert_array_equal(W.data, np.array([1.5, -2.0], np.float32))


@pytest.mark.parametrize("dtype, bad", [(np.int32, np.array([2 ** 40, 1], np.int64)),
                                        (np.uint8, np.array([300, 2], np.uint16)),
                                        (np.int8, np.array([2 ** 63, 1], np.uint64))],
                         ids=["int64_into_int32", "uint16_into_uint8", "uint64_into_int8"])
def test_loading_refuses_integers_the_dtype_cannot_hold(tmp_path, dtype, bad):
    """The range check covered float dtypes only: 2**40 loaded into an int32 parameter wrapped
    to 0, silently."""
    params = hb.ParameterDict()
    P = params.get("P", shape=(2,), init="zeros", dtype=dtype)
    np.savez(tmp_path / "p.npz", P=bad)
    with pytest.raises(ValueError, match="beyond"):
        params.load(tmp_path / "p.npz")
    np.testing.assert_array_equal(P.data, [0, 0])
    np.savez(tmp_path / "ok.npz", P=np.array([7, 1], bad.dtype))     # fits: cast
    params.load(tmp_path / "ok.npz")
    assert P.data.dtype == dtype and P.data.tolist() == [7, 1]


def test_scalar_parameter_survives_parameter_dict_save_and_load(tmp_path):
    pd = hb.ParameterDict()
    scale = pd.get("scale", (), init=2.5)
    pd.get("W", (2, 3), init="normal")
    path = tmp_path / "p.npz"
    pd.save(path)
    with np.load(path) as f:
        assert f["scale"].shape == ()
    scale.data = np.float32(0.0)
    pd.load(path)
    assert scale.data.shape == () and float(scale.data) == 2.5


def test_parameter_dict_get_returns_a_float64_parameter_when_no_dtype_is_asked():
    """get(name) compared the existing dtype with the default float32 nobody asked for."""
    pd = hb.ParameterDict()
    W = pd.get("W", (2, 3), dtype=np.float64)
    assert pd.get("W") is W and pd.get("W", (2, 3)) is W and pd.get("W", dtype=np.float64) is W
    assert pd.get("b", (3,)).dtype == np.float32          # the creation default is unchanged
    with pytest.raises(ValueError, match="dtype"):
        pd.get("W", dtype=np.float32)


class _Tied(hb.Block):
    def __init__(self, tie):
        super().__init__()
        self.enc = hb.nn.Dense(3, 3)
        self.dec = hb.nn.Dense(3, 3)
        if tie:
            self.dec.weight = self.enc.weight


def test_loading_a_trainer_states_file_as_parameters_says_which_file_it_is(tmp_path):
    pd = hb.ParameterDict()
    pd.get("W", (2, 3), init="normal")
    trainer = hb.Trainer(pd, "adam")
    with hb.batching():
        loss = hb.sum(pd["W"] @ np.ones(3, np.float32))
    loss.backward()
    trainer.step(1)
    trainer.save_states(tmp_path / "s.npz")
    with pytest.raises(ValueError, match="holds a Trainer's states .* load it with trainer.load_states"):
        pd.load(tmp_path / "s.npz")


def test_loading_refuses_two_values_for_one_tied_parameter(tmp_path):
    """A file with different enc.weight and dec.weight loaded into a model where they are one
    Parameter kept the last silently."""
    _Tied(False).save_parameters(tmp_path / "untied.npz")
    tied = _Tied(True)
    before = tied.enc.weight.data.copy()
    with pytest.raises(ValueError, match="one tied parameter"):
        tied.load_parameters(tmp_path / "untied.npz")
    np.testing.assert_array_equal(tied.enc.weight.data, before)
    tied.save_parameters(tmp_path / "tied.npz")         # a tied model's own file round-trips
    other = _Tied(True)
    other.load_parameters(tmp_path / "tied.npz")
    np.testing.assert_array_equal(other.enc.weight.data, before)
    assert other.dec.weight is other.enc.weight


def test_py_func_out_shape_holds_integers_and_names_its_type_alike():
    x = np.ones(3, np.float32)
    a = hb.py_func(np.tanh, x, out_shape=(np.int64(3),))
    b = hb.py_func(np.tanh, x, out_shape=(3,))
    assert a.sig is b.sig and type(a.sig.attrs[1][0]) is int     # one signature, one name
    with pytest.raises(TypeError, match="out_shape"):
        hb.py_func(np.tanh, x, out_shape=(3.0,))


@pytest.mark.parametrize("mode", ["eager", "batched"])
def test_py_func_takes_an_integer_out_shape_as_reshape_does(mode):
    x = np.array([1.0, 2.0, 3.0], np.float32)

    def run():
        return hb.py_func(np.cumsum, hb.array(x), out_shape=3), hb.py_func(np.cumsum, x, out_shape=np.int64(3))

    if mode == "batched":
        with hb.batching():
            a, b = run()
    else:
        a, b = run()
    assert a.shape == b.shape == (3,)
    np.testing.assert_array_equal(a.asnumpy(), [1.0, 3.0, 6.0])
    np.testing.assert_array_equal(b.asnumpy(), [1.0, 3.0, 6.0])
    with pytest.raises(TypeError, match="out_shape must be an integer or a tuple of integers, not float"):
        hb.py_func(np.cumsum, x, out_shape=3.0)
    with pytest.raises(TypeError, match="out_shape must be an integer or a tuple of integers, not bool"):
        hb.py_func(np.cumsum, x, out_shape=True)


def test_an_unknown_blas_choice_warns(monkeypatch):
    from hybridbatch.kernels import blas
    monkeypatch.setenv("HYBRIDBATCH_BLAS", "numpyy")
    with pytest.warns(UserWarning, match="is not 'auto', 'mkl' or 'numpy'") as caught:
        lib = blas._load()
    assert len(caught) == 1
    assert (lib is None) == (blas._library_path() is None)      # MKL is still used where it is found


@pytest.mark.parametrize("read", [lambda W: W[0], lambda W: hb.reshape(W, (12,)), lambda W: hb.tanh(W)],
                         ids=["slice", "reshape", "param-read"])
def test_an_eager_value_read_from_a_parameter_keeps_its_numbers_after_an_update(read):
    """Eager W[0] was a view of W.data: the optimizer's in-place update changed a value
    computed before it (and what its backward would use)."""
    W = hb.Parameter("W", (3, 4), init="uniform", rng=np.random.default_rng(0))
    value = read(W)
    before = value.asnumpy()
    hb.sum(value).backward()
    Trainer([W], "sgd", {"learning_rate": 1.0}).step(1)
    assert not np.array_equal(W.data.reshape(-1)[:4], before.reshape(-1)[:4])    # W did change
    np.testing.assert_array_equal(value.asnumpy(), before)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_])
def test_a_parameter_of_integers_or_bools_has_no_gradient(dtype):
    """It got grad_req "write": backward summed gradients into it, and a Trainer step then
    failed inside numpy casting float64 into it."""
    P = hb.Parameter("P", (4, 3), init=1, dtype=dtype)
    assert P.grad_req == "null"
    hb.sum(hb.lookup(P, 1)).backward()
    Trainer([P], "sgd", {"learning_rate": 0.1}).step(1)
    np.testing.assert_array_equal(P.data, np.ones((4, 3), dtype))
    with pytest.raises(ValueError, match="only floating-point"):
        P.grad_req = "write"
    with pytest.raises(ValueError, match="only floating-point"):
        hb.Parameter("Q", (2,), dtype=dtype, grad_req="write")
    params = hb.ParameterDict()
    assert params.get("R", shape=(2,), dtype=dtype).grad_req == "null"
    assert params.get("S", shape=(2,)).grad_req == "write"


def _product(a, b):
    return a * b


@pytest.mark.parametrize("mode", ["eager", "op"])
def test_py_func_grad_fn_may_give_none_for_an_operand(mode):
    """The user guide allows None per operand; it was read as a 0-d gradient and refused
    with a misleading shape error."""
    A = hb.Parameter("A", (3,), init=1.0)
    B = hb.Parameter("B", (3,), init=2.0)

    def grad_a_only(a, b, y, gy):
        return gy * b, None

    def loss():
        return hb.sum(hb.py_func(_product, A * 1.0, B * 1.0, out_shape=(3,), grad_fn=grad_a_only))

    recorded(mode, loss).backward()
    np.testing.assert_array_equal(A.grad, [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(B.grad, [0.0, 0.0, 0.0])


@pytest.mark.parametrize("bad", [lambda a, b, y, gy: (gy * b,), lambda a, b, y, gy: gy * b,
                                 lambda a, b, y, gy: (gy, gy, gy)], ids=["too_few", "bare_array", "too_many"])
def test_py_func_grad_fn_must_give_one_gradient_per_operand(bad):
    """Too few gave an IndexError deep in the op, a bare array a misleading shape error, and
    too many were silently cut."""
    A = hb.Parameter("A", (3,), init=1.0)
    with pytest.raises(ValueError, match="must return a tuple of 2 gradients"):
        hb.sum(hb.py_func(_product, A * 1.0, A * 2.0, out_shape=(3,), grad_fn=bad)).backward()


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(fn=3, out_shape=(3,)), TypeError, "callable fn"),
    (dict(fn=np.tanh, out_shape=(3,), grad_fn=5), TypeError, "callable grad_fn"),
    (dict(fn=np.tanh, out_shape=(-1,)), ValueError, ">= 0"),
    (dict(fn=np.tanh, out_shape=(3,), out_dtype=object), TypeError, "numeric"),
], ids=["fn", "grad_fn", "negative_shape", "object_dtype"])
def test_py_func_arguments_are_checked_at_the_call(kwargs, error, match):
    """In a scope they failed only at the flush (numpy's negative dimensions, 'int' object
    is not callable), and an object dtype was accepted."""
    kwargs = dict(kwargs)
    fn = kwargs.pop("fn")
    for in_scope in (False, True):
        if in_scope:
            with hb.batching(), pytest.raises(error, match=match):
                hb.py_func(fn, np.ones(3, np.float32), **kwargs)
        else:
            with pytest.raises(error, match=match):
                hb.py_func(fn, np.ones(3, np.float32), **kwargs)


@pytest.mark.parametrize("dtype, bad, match", [
    (np.int32, [1.7, 2.9], "float64 values cannot become int32"),
    (np.int32, [2 ** 40, 0], "beyond int32's range"),
    (np.float32, [1e40, 0.0], "beyond float32's range"),
    (np.float32, np.array([1 + 2j, 0]), "complex128 values cannot become float32"),
], ids=["float_into_int", "int_overflow", "float_overflow", "complex"])
def test_setting_data_refuses_values_the_dtype_cannot_hold(dtype, bad, match):
    """`p.data = ...` truncated floats into an integer parameter, wrapped integers, and made
    1e40 an inf in float32 (a RuntimeWarning at most), where load() refused all three."""
    P = hb.Parameter("P", (2,), init=0, dtype=dtype)
    with pytest.raises(ValueError, match=match):
        P.data = bad
    np.testing.assert_array_equal(P.data, [0, 0])
    P.data = [3, 4]                  # values that fit are cast, as before
    assert P.data.dtype == dtype and P.data.tolist() == [3, 4]


@pytest.mark.parametrize("rows", [3, 12])      # the few-rows loop, and a weight's GEMM
def test_a_cleared_gradient_is_written_over_by_the_next_one_and_reads_as_zeros(rows):
    """zero_grad() leaves the old numbers in place, marked void: the next gradient is
    written, not added to them, and a read in between sees zeros."""
    rng = np.random.default_rng(0)
    w = hb.Parameter("void_w", (5, 4), rng=rng)
    xs = rng.normal(size=(rows, 4)).astype(np.float32)

    def backward():
        with hb.batching():
            hb.add_n([hb.sum(hb.tanh(w @ x)) for x in xs]).backward()

    backward()
    first = w.grad.copy()
    assert np.abs(first).sum() > 0
    w.zero_grad()
    np.testing.assert_array_equal(w.peek_grad(), 0)
    backward()
    np.testing.assert_allclose(w.grad, first, rtol=1e-6)
    w.zero_grad()
    backward()                                      # no read of the void gradient in between
    np.testing.assert_allclose(w.grad, first, rtol=1e-6)


def test_a_void_gradient_takes_dense_and_row_gradients_as_zero_plus_them():
    p = hb.Parameter("void_table", (4, 3), init="zeros")
    p.add_grad(np.ones((4, 3), np.float32))
    p.zero_grad()
    p.add_grad(np.full((4, 3), 2.0, np.float32))
    np.testing.assert_array_equal(p.grad, 2.0)
    p.zero_grad()
    p.add_grad_rows(np.array([1, 1]), np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(p.peek_grad(), [[0, 0, 0], [2, 2, 2], [0, 0, 0], [0, 0, 0]])
    p.zero_grad()
    p.grad = np.full((4, 3), 5.0, np.float32)
    np.testing.assert_array_equal(p.grad, 5.0)


def test_sgd_leaves_every_gradient_zero_after_its_step():
    rng = np.random.default_rng(1)
    w = hb.Parameter("sgd_void_w", (6, 6), rng=rng)
    trainer = Trainer([w], "sgd", {"learning_rate": 0.1})
    for _ in range(2):
        with hb.batching():
            hb.add_n([hb.sum(w @ rng.normal(size=6).astype(np.float32)) for _ in range(8)]).backward()
        before = w.data.copy()
        expected = before - 0.1 * w.peek_grad() / 8
        trainer.step(8)
        np.testing.assert_allclose(w.data, expected, rtol=1e-6)
        np.testing.assert_array_equal(w.grad, 0)


def test_a_gradient_array_kept_by_the_caller_is_cleared_in_place():
    """zero_grad marks a gradient void only while nothing else holds its array: a kept
    array (or a view of it) reads zeros after it, and what is added into it then counts."""
    p = hb.Parameter("kept_grad", (3, 2), init="zeros")
    p.add_grad(np.ones((3, 2), np.float32))
    kept = p.grad
    row = kept[1]
    p.zero_grad()
    np.testing.assert_array_equal(kept, 0)
    kept += 3.0
    p.add_grad(np.ones((3, 2), np.float32))
    np.testing.assert_array_equal(p.grad, 4.0)
    del kept
    p.zero_grad()
    np.testing.assert_array_equal(row, 0)


def test_peek_grad_is_read_only_and_a_step_still_updates_and_clears_the_looked_up_rows():
    """A write through peek_grad would reach rows the sparse update neither applies nor
    clears, and carry into a later step."""
    table = hb.Parameter("peeked_table", (5, 3), init=1.0)
    trainer = Trainer([table], "sgd", {"learning_rate": 1.0})
    with hb.batching():
        loss = hb.sum(hb.lookup(table, 1))
    loss.backward()
    peeked = table.peek_grad()
    assert not peeked.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        peeked[3] += 1.0
    np.testing.assert_array_equal(peeked[1], 1.0)
    trainer.step(1)
    np.testing.assert_array_equal(table.data[1], 0.0)
    np.testing.assert_array_equal(table.data[[0, 2, 3, 4]], 1.0)
    np.testing.assert_array_equal(table.peek_grad(), 0.0)
    np.testing.assert_array_equal(peeked, 0.0)


def test_a_gradient_assigned_back_after_zero_grad_is_kept():
    p = hb.Parameter("assigned_grad", (2, 2), init="zeros")
    g = p.grad
    p.zero_grad()
    g[...] = 7.0
    p.grad = g
    np.testing.assert_array_equal(p.grad, 7.0)


@pytest.mark.parametrize("rule", ["sgd", "adam"])
def test_a_step_leaves_an_unheld_gradient_void_and_the_next_backward_writes_it(rule):
    rng = np.random.default_rng(2)
    w = hb.Parameter(f"void_step_{rule}", (6, 6), rng=rng)
    trainer = Trainer([w], rule, {"learning_rate": 0.01})
    xs = rng.normal(size=(8, 6)).astype(np.float32)

    def backward():
        with hb.batching():
            hb.add_n([hb.sum(w @ x) for x in xs]).backward()

    backward()
    trainer.step(8)
    assert w._grad_void
    backward()
    np.testing.assert_allclose(w.peek_grad(), np.tile(xs.sum(axis=0), (6, 1)), rtol=1e-5)


def _few_rows_backward(w, xs):
    """sum_k sum(w @ x_k) in a scope: w's gradient is ones (x) sum_k x_k, over len(xs) rows."""
    with hb.batching():
        hb.add_n([hb.sum(w @ x) for x in xs]).backward()
    return np.tile(xs.sum(axis=0), (w.shape[0], 1))


def test_a_few_rows_gradient_is_kept_as_factors_and_reads_as_their_product():
    """Into a void gradient, G^T X of few rows (a 64 x 64 weight, 4 rows) is kept as its
    factors; a read, a dense or row addition, another backward or an assignment multiplies
    them out first or replaces them, and zero_grad drops them."""
    rng = np.random.default_rng(3)
    w = hb.Parameter("factored_w", (64, 64), rng=rng)
    w.keep_grad_factors = True
    xs = rng.normal(size=(4, 64)).astype(np.float32)
    want = _few_rows_backward(w, xs)
    assert w._grad_factors is not None
    np.testing.assert_allclose(w.peek_grad(), want, rtol=1e-5)
    assert w._grad_factors is None
    ones = np.ones((64, 64), np.float32)
    for add in (lambda: w.add_grad(ones), lambda: w.add_grad_rows(np.arange(64), ones),
                lambda: w.add_grad_outer(np.ones((1, 64), np.float32), np.ones((1, 64), np.float32))):
        w.zero_grad()
        _few_rows_backward(w, xs)
        add()
        np.testing.assert_allclose(w.grad, want + 1.0, rtol=1e-5)
    w.zero_grad()
    _few_rows_backward(w, xs)
    _few_rows_backward(w, xs)                       # a second backward before the step
    np.testing.assert_allclose(w.grad, 2 * want, rtol=1e-5)
    w.zero_grad()
    _few_rows_backward(w, xs)
    w.grad = ones
    np.testing.assert_array_equal(w.grad, 1.0)
    w.zero_grad()
    _few_rows_backward(w, xs)
    w.zero_grad()
    assert w._grad_factors is None
    np.testing.assert_array_equal(w.grad, 0)


@pytest.mark.parametrize("rule, options, keeps", [("sgd", {}, True), ("sgd", {"momentum": 0.9}, False),
                                                  ("sgd", {"wd": 0.01}, False), ("adam", {}, False),
                                                  ("sgd", {"clip_global_norm": 0.5}, False)])
def test_only_a_plain_sgd_trainer_has_its_parameters_keep_gradient_factors(rule, options, keeps):
    """Other rules and clipping read the gradient: its factors would be copied for nothing."""
    rng = np.random.default_rng(7)
    w = hb.Parameter("factors_by_rule", (64, 64), rng=rng)
    assert not w.keep_grad_factors
    Trainer([w], rule, {"learning_rate": 0.1, **options})
    assert w.keep_grad_factors == keeps
    want = _few_rows_backward(w, rng.normal(size=(4, 64)).astype(np.float32))
    assert (w._grad_factors is not None) == keeps
    np.testing.assert_allclose(w.peek_grad(), want, rtol=1e-5)


@pytest.mark.parametrize("rule, options", [("sgd", {}), ("sgd", {"momentum": 0.9}), ("sgd", {"wd": 0.01}),
                                           ("adam", {}), ("sgd", {"clip": 0.5})])
def test_a_step_on_a_gradient_kept_as_factors_equals_the_dense_step(rule, options):
    """Plain SGD adds -lr * G^T X into the weight in one pass. Factors held when the step
    runs another rule (a Trainer made for plain SGD whose momentum, decay or clipping is set
    later; here set by hand) are multiplied out first. Each equals the step on the same
    gradient written out."""
    rng = np.random.default_rng(4)
    options = dict(options)
    clip = options.pop("clip", None)
    w = hb.Parameter(f"factored_step_{rule}_{sorted(options)}_{clip}", (64, 64), rng=rng)
    twin = hb.Parameter("twin", (64, 64), init="zeros")
    twin.data = w.data
    options = {"learning_rate": 0.1, "clip_global_norm": clip, **options}
    trainer, written = Trainer([w], rule, options), Trainer([twin], rule, options)
    w.keep_grad_factors = True      # as a plain-SGD Trainer of it would set it
    for _ in range(3):
        xs = rng.normal(size=(4, 64)).astype(np.float32)
        twin.add_grad(_few_rows_backward(w, xs))
        assert w._grad_factors is not None
        trainer.step(4)
        written.step(4)
        np.testing.assert_allclose(w.data, twin.data, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(w.grad, 0)      # a read: the next gradient would be added to it


def test_plain_sgd_adds_the_factors_into_the_weight_without_the_gradient_array():
    """The step reads the factors only: the void gradient's array (NaN here) is never read."""
    rng = np.random.default_rng(5)
    w = hb.Parameter("factored_sgd_only", (64, 64), rng=rng)
    trainer = Trainer([w], "sgd", {"learning_rate": 0.1})
    xs = rng.normal(size=(4, 64)).astype(np.float32)
    want = w.data - 0.1 * _few_rows_backward(w, xs) / 4
    w._grad[...] = np.nan
    trainer.step(4)
    np.testing.assert_allclose(w.data, want, rtol=1e-5, atol=1e-6)
    assert w._grad_void and w._grad_factors is None


def test_clearing_rows_freezing_and_float16_with_factors_kept():
    rng = np.random.default_rng(6)
    xs = rng.normal(size=(4, 64)).astype(np.float32)
    w = hb.Parameter("factored_rows", (64, 64), rng=rng)
    w.keep_grad_factors = True
    want = _few_rows_backward(w, xs)
    w.zero_grad(np.array([0, 5]))               # the product's other rows stay
    want[[0, 5]] = 0
    np.testing.assert_allclose(w.grad, want, rtol=1e-5)
    w.zero_grad()
    _few_rows_backward(w, xs)
    w.grad_req = "null"
    w.grad_req = "write"
    np.testing.assert_array_equal(w.grad, 0)
    half = hb.Parameter("factored_half", (64, 64), dtype=np.float16, rng=rng)
    half.keep_grad_factors = True
    with hb.batching():
        hb.add_n([hb.sum(half @ x.astype(np.float16)) for x in xs]).backward()
    assert half._grad_factors is not None
    np.testing.assert_allclose(half.grad, np.tile(xs.astype(np.float16).sum(axis=0), (64, 1)), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_a_truncated_parameters_file_names_itself(tmp_path, keep):
    """A bare zipfile.BadZipFile came through, naming no file."""
    dense = nn.Dense(3, 3, seed=0)
    path = tmp_path / "model.npz"
    dense.save_parameters(path)
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    with pytest.raises(ValueError, match=r"model.npz is not a readable .npz archive"):
        dense.load_parameters(path)


class _ScaledBy(hb.HybridBlock):
    """A py_func made per call: a closure over the block, as users write one in forward."""

    def __init__(self, k):
        super().__init__()
        self.k = k
        self.W = hb.Parameter("W", (3, 3), init="normal", rng=np.random.default_rng(0))

    def forward(self, x):
        k = self.k
        return hb.py_func(lambda a: a * k, self.W @ x, out_shape=(3,), grad_fn=lambda a, y, gy: (gy * k,))


@pytest.mark.parametrize("mode", ["eager", "op", "block"])
def test_a_function_made_per_call_shares_one_signature_and_is_freed_with_its_values(mode):
    """A py_func's functions are its node's data: a lambda made per call interned a
    signature holding it (and all it captured) for the rest of the process, and missed
    the plan cache at every flush. Each node still runs its own function."""
    import gc
    from hybridbatch.ops import custom
    from hybridbatch.record import signature
    x = np.array([1.0, -2.0, 0.5], np.float32)
    blocks = [_ScaledBy(k) for k in (2.0, 3.0)]
    for b in blocks:
        b.hybridize()

    def loss():
        return hb.add_n([hb.sum(hb.py_func(lambda a, k=k: a + k, b(x), out_shape=(3,),
                                           grad_fn=lambda a, y, gy: (gy,)))
                         for k in (1.0, 5.0) for b in blocks])

    gc.collect()
    held, signatures = len(custom._functions), len(signature.SIGS)
    for step in range(3):
        for b in blocks:
            b.W.zero_grad()
        out = recorded(mode, loss)
        value = float(out.asnumpy())
        out.backward()
        grads = [b.W.grad.copy() for b in blocks]
        del out
        if step == 0:
            signatures = len(signature.SIGS)
    assert len(signature.SIGS) == signatures            # the later steps interned nothing
    gc.collect()
    assert len(custom._functions) == held + len(blocks)     # each block's trace keeps its own
    Wx = [b.W.data @ x for b in blocks]
    assert value == pytest.approx(sum(float((k * w + c).sum()) for c in (1.0, 5.0)
                                      for k, w in zip((2.0, 3.0), Wx)), rel=1e-5)
    for k, g in zip((2.0, 3.0), grads):
        np.testing.assert_allclose(g, 2 * k * np.ones((3, 1)) * x, rtol=1e-6)


@pytest.mark.parametrize("mode", ["eager", "op", "block"])
def test_py_func_gets_operands_and_gradients_it_cannot_write(mode):
    """A grad_fn that scaled gy in place tripled other operands' gradients in eager mode
    only, and an fn that wrote its operand changed the value other ops read."""
    def scales_gy(a, y, gy):
        gy *= 3.0
        return (gy,)

    def writes_x(a):
        a += 100.0
        return a

    P = hb.Parameter("P", (3,), init=1.0)
    with pytest.raises(ValueError, match="read-only"):
        recorded(mode, lambda: hb.sum(hb.py_func(np.copy, P * 1.0, out_shape=(3,), grad_fn=scales_gy))).backward()
    with pytest.raises(ValueError, match="read-only"):
        recorded(mode, lambda: hb.sum(hb.py_func(writes_x, P * 1.0, out_shape=(3,)))).asnumpy()


def test_a_model_and_its_parameters_copy_and_pickle():
    """A best-model snapshot: deepcopy and pickle of a block and its Parameters (a lock kept
    on each Parameter had made both raise)."""
    import copy
    import pickle
    net = nn.Dense(3, 4, seed=0)
    snapshot = copy.deepcopy(net)
    restored = pickle.loads(pickle.dumps(net.weight))
    np.testing.assert_array_equal(snapshot.weight.data, net.weight.data)
    np.testing.assert_array_equal(restored.data, net.weight.data)
    x = np.ones(4, np.float32)
    np.testing.assert_allclose(snapshot(x).asnumpy(), net(x).asnumpy())
