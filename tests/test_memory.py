"""malloc tuning at import: on by default with glibc, off with HYBRIDBATCH_KEEP_MEMORY=0; the
pool that arenas come from hands a buffer out again only once nothing refers to it."""
import os
import platform
import subprocess
import sys
import threading

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.runtime import memory


def _applied(env_value):
    env = dict(os.environ)
    env.pop("HYBRIDBATCH_KEEP_MEMORY", None)
    if env_value is not None:
        env["HYBRIDBATCH_KEEP_MEMORY"] = env_value
    out = subprocess.run([sys.executable, "-c", "import hybridbatch.runtime.memory as m; print(m.APPLIED)"],
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc tuning applies to glibc only")
def test_freed_memory_is_kept_by_default_with_glibc():
    assert _applied(None) == "True"


def test_opt_out_leaves_malloc_alone():
    assert _applied("0") == "False"


SHAPE = (600, 256)      # 600 KB of float32: pooled


def test_a_buffer_comes_back_only_when_no_view_of_it_is_alive():
    a = memory.empty(np, SHAPE, np.float32)
    view = a[10:20]
    address = a.ctypes.data
    del a
    b = memory.empty(np, SHAPE, np.float32)          # `view` still reads a's buffer
    assert b.ctypes.data != address and not np.shares_memory(b, view)
    del view
    c = memory.empty(np, (590, 256), np.float32)     # the same size class, now idle
    assert c.ctypes.data == address
    z = memory.zeros(np, (590, 256), np.float32)
    assert not z.any() and z.flags.c_contiguous and z.dtype == np.float32


def test_small_arrays_and_other_array_modules_are_not_pooled():
    class FakeXp:
        @staticmethod
        def empty(shape, dtype):
            return ("device", shape, dtype)
    assert memory.empty(FakeXp, SHAPE, np.float32) == ("device", SHAPE, np.dtype(np.float32))
    small = memory.empty(np, (4, 4), np.float32)
    assert small.base is None


def test_a_thread_pools_at_most_pool_limit_bytes():
    def pool_in_new_thread():
        kept = []
        arrays = [memory.empty(np, (300 + 40 * k, 256), np.float32) for k in range(6)]   # six size classes
        kept.append(sum(b.nbytes for bufs in memory._pools.by_size.values() for b in bufs))
        kept.append(memory._pools.held)
        return arrays, kept
    out = []
    thread = threading.Thread(target=lambda: out.append(pool_in_new_thread()))
    with hb.settings(pool_limit=1 << 20):          # process-wide: the new thread sees it
        thread.start()
        thread.join()
    arrays, (pooled, held) = out[0]
    assert pooled == held <= 1 << 20 < sum(a.nbytes for a in arrays)


def test_pools_are_per_thread():
    mine = memory.empty(np, SHAPE, np.float32)
    address = mine.ctypes.data
    del mine
    seen = []
    thread = threading.Thread(target=lambda: seen.append(memory.empty(np, SHAPE, np.float32).ctypes.data))
    thread.start()
    thread.join()
    assert seen[0] != address


def test_a_live_scope_keeps_its_arenas_while_later_scopes_run():
    """Scope A's values and its backward are read after scope B, of the same shapes, ran:
    B never got A's arenas."""
    W = hb.Parameter("W", (256, 256), rng=np.random.default_rng(0))
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((700, 256)).astype(np.float32) for _ in range(2)]

    def run(x):
        with hb.batching() as scope:
            h = [hb.tanh(W @ hb.array(row)) for row in x]
            loss = hb.sum(hb.add_n(h))
            scope.forward()
        return h, loss

    h_a, loss_a = run(xs[0])
    first = [f.asnumpy() for f in h_a[:5]]
    h_b, loss_b = run(xs[1])
    loss_b.backward()
    grad_b = W.grad.copy()
    W.zero_grad()
    for f, want in zip(h_a[:5], first):
        np.testing.assert_array_equal(f.asnumpy(), want)
    loss_a.backward()
    eager = np.tanh(xs[0] @ W.data.T)
    np.testing.assert_allclose(W.grad, ((1 - eager ** 2).T @ xs[0]), rtol=1e-4, atol=1e-3)
    assert not np.allclose(W.grad, grad_b)


def _lstm_loss(cell, xs):
    h = c = np.zeros(4, np.float32)
    for x in xs:
        h, c = cell(x, h, c)
    return hb.sum(h)


@pytest.mark.parametrize("mode", ["eager", "block", "op", "auto"])
def test_a_hybridized_model_let_go_is_collected_with_its_parameters(mode):
    """Its traced program, interned with its signature for the life of the process, held its
    Parameters and the block: a sweep that made a new model per trial kept every one of
    them (weights and gradients, 24 MB a trial for an LSTM of 512)."""
    import gc
    import weakref
    xs = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    kept = []
    for trial in range(3):
        cell = hb.nn.LSTMCell(4, 2, seed=trial)
        cell.hybridize()
        if mode == "eager":
            loss = _lstm_loss(cell, xs)
        else:
            with hb.batching(granularity=mode):
                loss = _lstm_loss(cell, xs)
        loss.backward()
        kept.append((weakref.ref(cell), weakref.ref(cell.weight)))
        del cell, loss
    gc.collect()
    assert all(block() is None and weight() is None for block, weight in kept)


@pytest.mark.parametrize("mode", ["block", "op", "auto"])
def test_a_model_let_go_inside_its_scope_still_takes_its_gradient(mode):
    """The scope holds the blocks it called, so their Parameters outlive the user's names
    until the scope's backward."""
    import weakref
    xs = np.random.default_rng(1).standard_normal((3, 2)).astype(np.float32)
    reference = hb.nn.LSTMCell(4, 2, seed=7)
    expected = _lstm_loss(reference, xs)
    expected.backward()
    cell = hb.nn.LSTMCell(4, 2, seed=7)
    cell.hybridize()
    weight = weakref.ref(cell.weight)
    with hb.batching(granularity=mode):
        loss = _lstm_loss(cell, xs)
        del cell
    loss.backward()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    np.testing.assert_allclose(weight().grad, reference.weight.grad, rtol=1e-4, atol=1e-6)


class _MakesItsLayer(hb.HybridBlock):
    def forward(self, x):
        inner = hb.nn.Dense(3, 3, seed=4)     # only the trace holds its Parameters
        return hb.tanh(inner(x))


class _Wraps(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.inner = hb.nn.Dense(3, 3, seed=5)

    def forward(self, x):
        return hb.tanh(self.inner(x))


@pytest.mark.parametrize("mode", ["block", "op", "auto"])
def test_parameters_only_a_trace_reads_live_as_long_as_the_scope(mode):
    """A layer made inside forward, or a child swapped before the flush, is held by no
    block: the scope holds the programs it recorded, and they hold what their steps read."""
    import gc
    x = np.ones(3, np.float32)
    made = _MakesItsLayer()
    made.hybridize()
    wraps = _Wraps()
    wraps.hybridize()
    expected = float(np.tanh(wraps.inner.weight.data @ x + wraps.inner.bias.data).sum())
    with hb.batching(granularity=mode):
        a = hb.sum(made(x))
        b = hb.sum(wraps(x))
        wraps.inner = hb.nn.Dense(3, 3, seed=6)       # the trace that read the old one goes
        gc.collect()
    b.backward()
    assert np.isfinite(a.item()) and b.item() == pytest.approx(expected, rel=1e-5)
