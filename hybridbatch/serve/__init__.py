"""Serving: requests that arrive at any time, from any thread, batched together.

`Batcher` queues requests and runs those that arrive close together in one batching scope
(through hb.map, so models that read values batch too). `python -m hybridbatch.serve` puts
a model behind HTTP (Starlette and uvicorn, the `serve` extra; serve/app.py).

>>> W = hb.Parameter("W", (2, 3), init="normal", rng=np.random.default_rng(0))
>>> server = hb.serve.Batcher(lambda x: hb.tanh(W @ hb.array(x)), max_batch_size=8)
>>> replies = [server.submit(np.full(3, i, np.float32)) for i in range(8)]
>>> outs = [r.result() for r in replies]     # each request's own value, as a numpy array
>>> server.close()                           # runs what is still queued, ends the worker
>>> outs[0].shape, server.stats.requests
((2,), 8)
"""
from .batcher import Batcher, BatcherClosedError, BatcherStats, QueueFullError

__all__ = ["Batcher", "BatcherStats", "QueueFullError", "BatcherClosedError"]
