"""hb.serve.Batcher: requests from many threads batched into shared scopes, each answered
with its own result, one request's failure confined to it."""
import asyncio
import threading

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.serve import Batcher, BatcherClosedError, QueueFullError
from serve_models import BAD_AT_FLUSH, UNLUCKY, Scorer

pytest.importorskip("greenlet", reason="a Batcher runs requests as greenlets (the serve extra)")


def _inputs(n, seed=0):
    return [x.astype(np.float32) for x in np.random.default_rng(seed).normal(size=(n, 4))]


def _eager(model, x):
    return model.infer(x).asnumpy()


class _Gate:
    """A model_fn that blocks the worker until released, so that requests pile up."""

    def __init__(self):
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, x):
        self.entered.set()
        self.release.wait(10)
        return hb.tanh(hb.array(x))


@pytest.mark.parametrize("granularity", ["auto", "block", "op"])
def test_each_reply_equals_eager_inference_of_its_request(granularity):
    model, xs = Scorer(), _inputs(24)
    with Batcher(model.infer, max_batch_size=8, max_delay_ms=200, granularity=granularity) as server:
        replies = [server.submit(x) for x in xs]
        outs = [r.result(10) for r in replies]
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out, _eager(model, x), rtol=1e-5, atol=1e-6)
    s = server.stats
    assert (s.requests, s.failed, s.queued) == (24, 0, 0)
    assert s.batches == 3 and s.largest_batch == 8      # max_delay far exceeds the submitting loop


def test_requests_from_many_threads():
    model, xs = Scorer(), _inputs(64, seed=1)
    outs = [None] * len(xs)
    with Batcher(model.infer, max_batch_size=16, max_delay_ms=20) as server:
        def client(k):
            for i in range(k, len(xs), 8):
                outs[i] = server.submit(xs[i]).result(10)
        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out, _eager(model, x), rtol=1e-5, atol=1e-6)
    assert server.stats.requests == 64 and server.stats.batches < 64


@pytest.mark.parametrize("first, error, match", [
    (UNLUCKY, RuntimeError, "unlucky request"),      # raised at the request's own line
    (BAD_AT_FLUSH, ArithmeticError, "seven"),        # raised by its py_func in the shared flush
])
def test_a_failing_request_fails_alone(first, error, match):
    """Only the failing request fails; when the shared flush fails, the batch's requests
    run again one scope each to find it."""
    model, xs = Scorer(), _inputs(6, seed=2)
    xs[2][0] = first
    with Batcher(model.infer, max_delay_ms=200) as server:
        replies = [server.submit(x) for x in xs]
        with pytest.raises(error, match=match):
            replies[2].result(10)
        for i in (0, 1, 3, 4, 5):
            np.testing.assert_allclose(replies[i].result(10), _eager(model, xs[i]), rtol=1e-5, atol=1e-6)
    assert (server.stats.failed, server.stats.requests) == (1, 6)


def test_outputs_are_read_into_arrays_at_any_depth():
    def fn(x):
        y = hb.tanh(hb.array(x))
        return {"y": y, "pair": (y, hb.sum(y)), "list": [y * 2.0], "label": "ok"}
    x = np.array([0.5, -1.0], np.float32)
    with Batcher(fn) as server:
        out = server.submit(x).result(10)
    y = np.tanh(x)
    np.testing.assert_allclose(out["y"], y, rtol=1e-6)
    np.testing.assert_allclose(out["pair"][1], y.sum(), rtol=1e-6)
    np.testing.assert_allclose(out["list"][0], 2 * y, rtol=1e-6)
    assert isinstance(out["pair"], tuple) and out["label"] == "ok"
    assert all(isinstance(v, np.ndarray) for v in (out["y"], out["pair"][0], out["list"][0]))


def test_a_full_queue_rejects_and_close_without_drain_fails_the_queued():
    gate = _Gate()
    server = Batcher(gate, max_batch_size=1, max_queue=2)
    first = server.submit([1.0])
    assert gate.entered.wait(10)                   # the worker holds the first request
    queued = [server.submit([2.0]), server.submit([3.0])]
    with pytest.raises(QueueFullError, match="max_queue=2"):
        server.submit([4.0])
    assert server.stats.queued == 2
    gate.release.set()
    server.close(drain=False)
    np.testing.assert_allclose(first.result(10), np.tanh([1.0]), rtol=1e-6)
    for r in queued:
        assert isinstance(r.exception(10), BatcherClosedError)
    assert (server.stats.requests, server.stats.failed, server.stats.queued) == (3, 2, 0)
    with pytest.raises(BatcherClosedError):
        server.submit([5.0])


def test_close_drains_the_queue_and_a_cancelled_request_never_runs():
    gate = _Gate()
    server = Batcher(gate, max_batch_size=1)
    server.submit([1.0])
    assert gate.entered.wait(10)
    cancelled, kept = server.submit([2.0]), server.submit([3.0])
    assert cancelled.cancel()
    gate.release.set()
    server.close()
    np.testing.assert_allclose(kept.result(10), np.tanh([3.0]), rtol=1e-6)
    assert cancelled.cancelled() and server.stats.requests == 2 and server.closed


def test_infer_awaits_in_asyncio():
    model, xs = Scorer(), _inputs(4, seed=4)

    async def main(server):
        return await asyncio.gather(*(server.infer(x) for x in xs))

    with Batcher(model.infer, max_delay_ms=50) as server:
        outs = asyncio.run(main(server))
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out, _eager(model, x), rtol=1e-5, atol=1e-6)


def test_stats_count_a_request_by_the_time_its_result_arrives():
    """The counts were updated after the results were set: a caller woken by its result
    often did not find its request in stats yet."""
    model = Scorer()

    async def main(server):
        seen = []
        for round_ in range(20):
            await asyncio.gather(*(server.infer(x) for x in _inputs(3, seed=round_)))
            seen.append(server.stats.requests)
        return seen

    with Batcher(model.infer, max_delay_ms=1) as server:
        assert asyncio.run(main(server)) == [3 * (k + 1) for k in range(20)]


def test_an_awaited_request_cancelled_while_queued_never_runs():
    gate = _Gate()

    async def main(server):
        first = asyncio.create_task(server.infer([1.0]))
        await asyncio.to_thread(gate.entered.wait, 10)     # the worker holds the first request
        dropped, kept = asyncio.create_task(server.infer([2.0])), asyncio.create_task(server.infer([3.0]))
        await asyncio.sleep(0)                              # both queued
        dropped.cancel()
        gate.release.set()
        return await first, await kept, await asyncio.gather(dropped, return_exceptions=True)

    with Batcher(gate, max_batch_size=1) as server:
        first, kept, (dropped,) = asyncio.run(main(server))
    np.testing.assert_allclose(first, np.tanh([1.0]), rtol=1e-6)
    np.testing.assert_allclose(kept, np.tanh([3.0]), rtol=1e-6)
    assert isinstance(dropped, asyncio.CancelledError) and server.stats.requests == 2


def test_eager_runs_each_request_outside_any_scope():
    seen = []

    def fn(x):
        seen.append(hb.record.scope.current())
        return hb.tanh(hb.array(x))
    with Batcher(fn, eager=True) as server:
        out = server.submit([0.25]).result(10)
    np.testing.assert_allclose(out, np.tanh([0.25]), rtol=1e-6)
    assert seen == [None]


@pytest.mark.parametrize("kwargs, message", [
    (dict(max_batch_size=0), "max_batch_size"), (dict(max_queue=-1), "max_queue"),
    (dict(max_delay_ms=-1), "max_delay_ms"), (dict(max_delay_ms=float("inf")), "max_delay_ms"),
    (dict(max_delay_ms=float("nan")), "max_delay_ms"), (dict(granularity="layer"), "granularity"),
    (dict(eager=True, max_batch_size=4), "eager=True"),
])
def test_settings_are_checked_at_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Batcher(lambda x: x, **kwargs)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")   # the worker's own end
@pytest.mark.parametrize("stop", [SystemExit, KeyboardInterrupt])
def test_a_request_that_stops_the_worker_answers_its_whole_batch_and_the_queue(stop):
    """Its batch's requests had waited forever, the good ones too."""
    def model(x):
        if x[0] < 0:
            raise stop
        return hb.array(x) * 2.0

    server = Batcher(model, max_delay_ms=200)
    replies = [server.submit(np.array([v], np.float32)) for v in (1.0, -1.0, 2.0)]
    for reply in replies:
        with pytest.raises(stop):
            reply.result(10)
    assert server.closed and server.stats.failed == 3
    with pytest.raises(BatcherClosedError):
        server.submit(np.ones(1, np.float32))
    server.close()          # joins the worker, so its end is reported inside this test


def test_a_model_fn_that_is_not_callable_is_refused():
    with pytest.raises(TypeError, match="callable"):
        Batcher("not a function")
