"""Batcher: requests from any thread, run together in one batching scope per batch.

Requests queue in arrival order. A worker thread takes the oldest and waits for more until
`max_batch_size` have come or `max_delay_ms` has passed since the oldest arrived (Triton's
max queue delay, Ray Serve's batch_wait_timeout_s), then runs them as the instances of one
`hb.map` in one scope. Requests that come while a batch runs wait for the next one, so under
load the batches fill without waiting. Each request's future is resolved with its own result:
every value of the scope in it (a Future, at any depth of lists, tuples and dicts) read into
a numpy array.

One request's failure fails that request only. An exception its instance raises is its
future's exception, and the others' results stand. A failure of the
flush itself cannot be laid at one instance's door, so the batch's requests are then run
again one at a time, each in its own scope, and only those that fail alone fail.
"""
import asyncio
import collections
import concurrent.futures
import threading
import time
from dataclasses import dataclass

from ..errors import HybridBatchError
from ..record.eager import Tensor
from ..record.future import Future as _Pending
from ..record import mapping
from ..record.scope import DEFAULT_GRANULARITY, batching
from ..schedule import DEFAULT_POLICY


MAX_DELAY_MS = 86_400_000.0


class QueueFullError(HybridBatchError, RuntimeError):
    """`submit` found `max_queue` requests waiting: the caller should retry later or shed
    load (the HTTP server answers 503 with Retry-After)."""


class BatcherClosedError(HybridBatchError, RuntimeError):
    """`submit` after `close()`, or a queued request that `close(drain=False)` dropped."""


@dataclass(frozen=True)
class BatcherStats:
    """What a Batcher has done so far: requests it resolved (`failed` of them with an
    exception), batches it ran, the largest, and requests waiting now."""
    requests: int
    failed: int
    batches: int
    largest_batch: int
    queued: int

    @property
    def mean_batch(self):
        return self.requests / self.batches if self.batches else 0.0


class _Request:
    """One queued request: a concurrent.futures.Future (`submit`), or an asyncio future of
    event loop `loop` (`infer`)."""
    __slots__ = ("instance", "future", "arrived", "loop")

    def __init__(self, instance, future, loop=None):
        self.instance, self.future, self.arrived, self.loop = instance, future, time.perf_counter(), loop

    def claim(self):
        """Whether the request is still wanted (not cancelled); marks a concurrent future running."""
        return self.future.set_running_or_notify_cancel() if self.loop is None else not self.future.cancelled()


def _settle(outcomes):
    """Resolve each (request, result, exception): concurrent futures here, asyncio futures
    by one callback per event loop, so a batch wakes each loop once and not per request."""
    by_loop = {}
    for r, result, error in outcomes:
        if r.loop is not None:
            by_loop.setdefault(r.loop, []).append((r.future, result, error))
        elif error is None:
            r.future.set_result(result)
        else:
            r.future.set_exception(error)
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle_in_loop, items)
        except RuntimeError:        # the loop has closed: nobody awaits these any more
            pass


def _settle_in_loop(items):
    for future, result, error in items:
        if future.done():           # cancelled meanwhile
            continue
        if error is None:
            future.set_result(result)
        else:
            future.set_exception(error)


class Batcher:
    """Serve `model_fn` (one instance in, its output out: per-instance code, which may read
    values) to many threads, batching the requests that arrive close together.

    `submit(x)` returns a `concurrent.futures.Future`; `await batcher.infer(x)` is the
    asyncio form. A batch closes at `max_batch_size` requests (32) or `max_delay_ms` after its
    oldest request arrived; at most `max_queue` requests wait (QueueFullError beyond).
    Every batch runs in `hb.batching(policy, granularity)` on the worker thread; `close()`
    (or leaving a `with` block) stops taking requests, runs those queued (`drain=True`)
    and ends the worker. `eager=True` (max_batch_size 1) runs each request alone
    outside any scope: the unbatched baseline to measure serving against.

    >>> def model(x):                              # per-instance code; a read suspends
    ...     y = hb.tanh(hb.array(x))
    ...     return y if y[0] > 0 else -y
    >>> with hb.serve.Batcher(model, max_delay_ms=100) as server:
    ...     replies = [server.submit([0.5 - i, 1.0]) for i in range(3)]
    ...     outs = [r.result() for r in replies]
    >>> outs[1].round(3), server.stats.batches
    (array([ 0.462, -0.762], dtype=float32), 1)
    """

    def __init__(self, model_fn, *, max_batch_size=None, max_delay_ms=5.0, max_queue=1024,
                 policy=DEFAULT_POLICY, granularity=DEFAULT_GRANULARITY, eager=False):
        if not callable(model_fn):
            raise TypeError(f"model_fn must be callable, not {type(model_fn).__name__}")
        if max_batch_size is None:
            max_batch_size = 1 if eager else 32
        for what, value in (("max_batch_size", max_batch_size), ("max_queue", max_queue)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{what} must be an int >= 1, not {value!r}")
        if not 0 <= max_delay_ms <= MAX_DELAY_MS:     # a longer wait overflows the worker's timed waits
            raise ValueError(f"max_delay_ms must be between 0 and {MAX_DELAY_MS:.0f} (a day), not {max_delay_ms!r}")
        if eager and max_batch_size != 1:
            raise ValueError(f"eager=True runs each request alone: max_batch_size must be 1, not {max_batch_size}")
        batching(policy, granularity)   # checks both now, at the caller's line, not on the worker
        if mapping.greenlet is None and not eager:
            raise ImportError("a Batcher runs each request as a greenlet (hb.map), and greenlet is not installed: "
                              "pip install hybridbatch[serve]")
        self.model_fn = model_fn
        self.max_batch_size, self.max_queue = max_batch_size, max_queue
        self.max_delay = max_delay_ms / 1000.0
        self.policy, self.granularity, self.eager = policy, granularity, eager
        self._queue = collections.deque()
        self._wake = threading.Condition()
        self._closed = False
        self._counts = dict(requests=0, failed=0, batches=0, largest_batch=0)
        self._worker = threading.Thread(target=self._work, name="hybridbatch-serve", daemon=True)
        self._worker.start()

    # -- callers' side (any thread) ----------------------------------------------------
    def submit(self, instance):
        """Queue one request; its Future resolves to model_fn(instance), read to numpy."""
        future = concurrent.futures.Future()
        self._enqueue(_Request(instance, future))
        return future

    async def infer(self, instance):
        """`submit` for asyncio code: awaits the request's result without blocking the loop
        (QueueFullError and BatcherClosedError are raised at once)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._enqueue(_Request(instance, future, loop))
        return await future

    def _enqueue(self, request):
        with self._wake:
            if self._closed:
                raise BatcherClosedError("this Batcher is closed and takes no more requests")
            if len(self._queue) >= self.max_queue:
                raise QueueFullError(f"{len(self._queue)} requests are waiting (max_queue={self.max_queue}); "
                                     "retry later")
            self._queue.append(request)
            self._wake.notify()

    def close(self, drain=True, timeout=None):
        """Take no more requests; run the queued ones (drain) or fail them with
        BatcherClosedError; wait up to `timeout` seconds for the worker to end."""
        with self._wake:
            self._closed = True
            dropped = [] if drain else list(self._queue)
            if not drain:
                self._queue.clear()
            self._wake.notify()
        closed = BatcherClosedError("the Batcher closed before this request ran")
        self._fail([r for r in dropped if r.claim()], closed)
        if threading.current_thread() is not self._worker:     # model_fn may close its own Batcher
            self._worker.join(timeout)

    @property
    def closed(self):
        return self._closed

    @property
    def stats(self):
        with self._wake:
            return BatcherStats(queued=len(self._queue), **self._counts)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- the worker thread -------------------------------------------------------------
    def _work(self):
        running = []
        try:
            while (batch := self._next_batch()) is not None:
                running = [r for r in batch if r.claim()]
                if running:
                    self._run(running)
                running = []
        except BaseException as e:      # the worker's own failure (a SystemExit in model_fn, say): no request may wait forever
            with self._wake:
                self._closed = True
                left, self._queue = list(self._queue), collections.deque()
                unsettled = [r for r in running if r.loop is not None or not r.future.done()]
            self._fail(unsettled + [r for r in left if r.claim()], e)
            raise

    def _fail(self, requests, e):
        """Resolve claimed requests with exception e, counted as failed requests."""
        with self._wake:
            self._counts["requests"] += len(requests)
            self._counts["failed"] += len(requests)
        _settle([(r, None, e) for r in requests])

    def _next_batch(self):
        """The next batch's requests, once it is full or its oldest has waited max_delay
        (at once while closing); None once closed with nothing left."""
        with self._wake:
            while not self._queue:
                if self._closed:
                    return None
                self._wake.wait()
            deadline = self._queue[0].arrived + self.max_delay
            while len(self._queue) < self.max_batch_size and not self._closed:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                self._wake.wait(left)
            n = min(len(self._queue), self.max_batch_size)
            return [self._queue.popleft() for _ in range(n)]

    def _run(self, batch):
        try:
            outcomes = self._outcomes([r.instance for r in batch])
        except Exception as e:      # the flush failed: find the failing requests by running each alone
            outcomes = [(None, e)] if len(batch) == 1 else [self._alone(r.instance) for r in batch]
        failed = sum(error is not None for _, error in outcomes)
        with self._wake:        # counted first: a caller woken by its result sees it in stats
            c = self._counts
            c["requests"] += len(batch)
            c["failed"] += failed
            c["batches"] += 1
            c["largest_batch"] = max(c["largest_batch"], len(batch))
        _settle([(r, result, error) for r, (result, error) in zip(batch, outcomes)])

    def _outcomes(self, instances):
        """[(result, None) or (None, exception)] per instance, from one scope."""
        if self.eager:      # one instance: its exception fails the batch, which is it alone
            return [(_read(self.model_fn(x)), None) for x in instances]
        with batching(self.policy, self.granularity):
            results, errors = mapping.each(self.model_fn, instances)
            return [(None, errors[i]) if i in errors else (_read(out), None) for i, out in enumerate(results)]

    def _alone(self, instance):
        try:
            return self._outcomes([instance])[0]
        except Exception as e:
            return None, e


def _read(out):
    """out with every value of the scope in it (in lists, tuples, named tuples and dicts)
    read into a numpy array; the first read flushes the scope."""
    if isinstance(out, (_Pending, Tensor)):
        return out.asnumpy()
    if type(out) in (list, tuple):
        return type(out)(_read(x) for x in out)
    if isinstance(out, tuple) and hasattr(out, "_make"):
        return out._make(_read(x) for x in out)
    if isinstance(out, dict):
        return {k: _read(v) for k, v in out.items()}
    return out
