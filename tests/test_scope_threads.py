"""A scope belongs to the thread recording it: another thread must not flush it while it is open.

A flush from a second thread runs the pending delta while the recording thread keeps appending
to it; it used to fail with a raw IndexError and leave the recording thread's scope dead.
"""
import concurrent.futures
import threading
import time

import numpy as np
import pytest

import hybridbatch as hb


@pytest.fixture
def W():
    return hb.Parameter("W", (3, 3), rng=np.random.default_rng(0))


def on_other_thread(fn):
    """fn() run on a thread named 'reader': {'value': result} or {'error': exception}."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:
            out["error"] = e

    thread = threading.Thread(target=run, name="reader")
    thread.start()
    thread.join()
    return out


def expected(W, x):
    return np.tanh(W.data @ x)


def xs(n):
    return [np.full(3, i + 1, np.float32) / n for i in range(n)]


@pytest.mark.parametrize("read", [lambda y: y.asnumpy(), lambda y: y.item(), float, np.asarray])
def test_reading_a_pending_value_from_another_thread_raises_and_the_scope_goes_on(W, read):
    inputs = xs(4)
    with hb.batching():
        y = hb.sum(hb.tanh(W @ inputs[0]))
        out = on_other_thread(lambda: read(y))
        assert "value" not in out
        error = out["error"]
        assert isinstance(error, hb.ScopeError)
        message = str(error)
        assert "'MainThread'" in message and "'reader'" in message and "exits" in message
        assert y.shape == ()                      # the node's type is readable from anywhere
        more = [hb.tanh(W @ x) for x in inputs[1:]]
    np.testing.assert_allclose(y.asnumpy(), expected(W, inputs[0]).sum(), rtol=1e-6)
    for m, x in zip(more, inputs[1:]):
        np.testing.assert_allclose(m.asnumpy(), expected(W, x), rtol=1e-6)


def test_flushing_from_another_thread_raises(W):
    with hb.batching() as scope:
        y = hb.tanh(W @ xs(1)[0])
        assert isinstance(on_other_thread(scope.forward)["error"], hb.ScopeError)
        assert scope.flushed == 0
    np.testing.assert_allclose(y.asnumpy(), expected(W, xs(1)[0]), rtol=1e-6)


def test_backward_from_another_thread_raises_while_the_scope_records(W):
    """Even from a computed value: its gradients would race with the recording thread's."""
    x = xs(1)[0]
    hb.sum(hb.tanh(W @ x)).backward()           # eager, for reference
    reference = W.grad.copy()
    W.zero_grad()
    with hb.batching() as scope:
        loss = hb.sum(hb.tanh(W @ x))
        scope.forward()
        error = on_other_thread(loss.backward)["error"]
        assert isinstance(error, hb.ScopeError) and "'MainThread'" in str(error)
        assert not W.grad.any()
    assert on_other_thread(loss.backward) == {"value": None}     # closed: any thread may
    np.testing.assert_allclose(W.grad, reference, rtol=1e-6)


def test_values_computed_by_the_recording_thread_are_readable_from_any_thread(W):
    """After scope.forward() on the recording thread, or after the scope exits."""
    inputs = xs(3)
    with hb.batching() as scope:
        y = hb.tanh(W @ inputs[0])
        scope.forward()
        np.testing.assert_allclose(on_other_thread(y.asnumpy)["value"], expected(W, inputs[0]), rtol=1e-6)
        z = hb.tanh(W @ inputs[1])
    np.testing.assert_allclose(on_other_thread(z.asnumpy)["value"], expected(W, inputs[1]), rtol=1e-6)


def test_a_read_racing_a_recording_thread_never_breaks_its_scope(W):
    """The recording thread appends while another one reads; the reader gets a ScopeError
    or (once the scope is flushed) the value, and the recording thread every value right."""
    inputs = xs(2000)
    started, reads = threading.Event(), []
    results = {}

    def record():
        with hb.batching():
            results["first"] = hb.tanh(W @ inputs[0])
            started.set()
            results["all"] = [hb.tanh(W @ x) for x in inputs]

    recorder = threading.Thread(target=record)
    recorder.start()
    started.wait()
    while recorder.is_alive():
        try:
            reads.append(results["first"].asnumpy())
        except hb.ScopeError:
            pass
    recorder.join()
    reads.append(results["first"].asnumpy())
    assert "all" in results
    for r in reads:
        np.testing.assert_allclose(r, expected(W, inputs[0]), rtol=1e-6)
    got = np.stack([y.asnumpy() for y in results["all"]])
    np.testing.assert_allclose(got, np.tanh(np.stack(inputs) @ W.data.T), rtol=1e-5, atol=1e-6)


def test_threads_meeting_a_new_type_at_once_all_read_its_entry():
    """A thread that finds a new type's id without the lock can read its TYPES entry."""
    import sys
    from hybridbatch.record import signature
    errors = []
    barrier = threading.Barrier(6)

    def work(first):
        try:
            for i in range(400):
                if i % 25 == 0:
                    barrier.wait(timeout=60)
                shape = (first + i, 3)      # the same new shape in every thread at about one moment
                if signature.TYPES[signature.type_id(shape, np.dtype(np.float32))][0] != shape:
                    errors.append(("another type", shape))
        except Exception as e:      # noqa: BLE001  (what a thread raised is the finding)
            errors.append(repr(e))

    first = 10_000 + len(signature.TYPES)      # shapes no other test made
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(first,)) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


@pytest.mark.parametrize("add", ["add_outer", "scatter_add_rows"])
def test_backwards_on_several_threads_at_once_sum_into_a_shared_parameter(monkeypatch, add):
    """Each thread's backward of its own closed scope adds into one Parameter. An add read
    the gradient's void flag, then wrote it with the GIL released: two adds into a void
    gradient both wrote it, and one thread's part was lost (the kernel is slowed here so
    that they always overlap)."""
    from hybridbatch.train import parameter
    kernel = getattr(parameter, add)

    def slow(*args, **kwargs):
        time.sleep(0.01)
        return kernel(*args, **kwargs)

    W = hb.Parameter("W", (6, 4), rng=np.random.default_rng(1))
    xs = np.random.default_rng(2).standard_normal((3, 4, 4)).astype(np.float32)

    def loss(t):
        with hb.batching():
            if add == "add_outer":
                return hb.add_n([hb.sum(hb.tanh(W @ x)) for x in xs[t]])
            return hb.add_n([hb.sum(hb.tanh(hb.lookup(W, i))) for i in (0, 2, 2, 5)]) * float(t + 1)

    for t in range(3):
        loss(t).backward()
    expected = W.peek_grad().copy()
    W.zero_grad()
    monkeypatch.setattr(parameter, add, slow)
    losses = [loss(t) for t in range(3)]
    barrier = threading.Barrier(3)

    def run(t):
        barrier.wait()
        losses[t].backward()
    threads = [threading.Thread(target=run, args=(t,)) for t in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    np.testing.assert_allclose(W.peek_grad(), expected, rtol=1e-5, atol=1e-6)



def test_a_scope_exited_on_another_thread_leaves_both_threads_their_own(W):
    """A generator holding `with hb.batching()`, advanced on a worker and closed on the main
    thread: the exit cleared the main thread's own open scope, and the worker kept the closed
    one as current for good (every later op there raised "this batching scope is closed",
    every new scope "batching scopes do not nest")."""
    x = np.ones(3, np.float32)

    def stream():
        with hb.batching():
            yield hb.tanh(W @ x)

    def later():
        eager = hb.tanh(W @ x)
        with hb.batching():
            batched = hb.tanh(W @ x)
        return type(eager).__name__, batched.asnumpy()

    with concurrent.futures.ThreadPoolExecutor(1) as worker:
        held = stream()
        worker.submit(next, held).result()
        with hb.batching() as mine:
            y = hb.tanh(W @ x)
            held.close()                # the worker's scope exits here, on this thread
            assert hb.record.scope.current() is mine
            z = hb.tanh(y)
        kind, value = worker.submit(later).result()
    assert kind == "Tensor"
    np.testing.assert_allclose(value, np.tanh(W.data @ x), rtol=1e-6)
    np.testing.assert_allclose(z.asnumpy(), np.tanh(np.tanh(W.data @ x)), rtol=1e-6)
