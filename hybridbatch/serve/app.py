"""A model behind HTTP: Starlette routes in front of a Batcher, run by uvicorn (the `serve`
extra). `python -m hybridbatch.serve` (serve/__main__.py) builds it from a model class.

A served model is a class called with the `--params` path (or with nothing):

- `infer(instance)`: the per-instance forward pass, run batched with the other requests
  (through hb.map, so it may read values); returns values, or lists, tuples or dicts of them;
- `parse(payload)` (optional): the instance from a request's decoded JSON; a ValueError is
  the client's mistake and becomes a 400 with its message;
- `respond(output)` (optional): the JSON reply from infer's output with every value read
  into a numpy array (without it, arrays become nested lists).

Routes: `POST /infer` (JSON body: one request), `GET /healthz`. A body over
`max_request_bytes` gets a 413, a full queue a 503 with Retry-After, a failure inside
`infer` (or any but a ValueError in `parse`, or in `respond`) a 500 for that request only.
Shutdown drains: the requests already taken are answered before the Batcher closes.
"""
import asyncio
import contextlib
import importlib
import importlib.util
import json
import os
import sys

import numpy as np
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from .batcher import BatcherClosedError, QueueFullError


def load_model(spec, params=None):
    """The model named by "path/to/file.py:Class" or "package.module:Class", instantiated with
    `params` (or with no argument). A file is imported with its folder on sys.path, as
    running it as a script would."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(f"--model must be FILE.py:CLASS or MODULE:CLASS, not {spec!r}")
    if where.endswith(".py"):
        path = os.path.abspath(where)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"--model: no file {where!r}")
        sys.path.insert(0, os.path.dirname(path))
        module_spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    try:
        cls = getattr(module, name)
    except AttributeError:
        raise ValueError(f"--model: {where} defines no {name!r}") from None
    model = cls() if params is None else cls(params)
    if not callable(getattr(model, "infer", None)):
        raise TypeError(f"--model: {spec} has no infer(instance) method")
    return model


def _json_default(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a {type(value).__name__} is not JSON serializable")


def _json(value, status=200, headers=None):
    body = json.dumps(value, default=_json_default, allow_nan=False)
    return Response(body, status_code=status, headers=headers, media_type="application/json")


def _error(status, message, headers=None):
    return _json({"error": message}, status, headers)


def make_app(model, batcher, max_request_bytes=1 << 20):
    """The Starlette app serving `model` through `batcher` (module docstring)."""
    parse = getattr(model, "parse", None) or (lambda payload: payload)
    respond = getattr(model, "respond", None) or (lambda output: output)

    async def read_body(request):
        """The body, or None once it exceeds max_request_bytes."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_request_bytes:
            return None
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_request_bytes:
                return None
        return bytes(body)

    async def infer(request):
        body = await read_body(request)
        if body is None:
            return _error(413, f"the request body exceeds {max_request_bytes} bytes")
        try:
            payload = json.loads(body)
        except ValueError as e:         # also a body that is not UTF-8
            return _error(400, f"the body is not JSON: {e}")
        try:
            instance = parse(payload)
        except ValueError as e:
            return _error(400, str(e))
        except Exception as e:          # a fault of the model's parse, not of the request
            return _error(500, f"parse failed: {type(e).__name__}: {e}")
        try:
            output = await batcher.infer(instance)
        except QueueFullError as e:
            return _error(503, str(e), headers={"Retry-After": "1"})
        except BatcherClosedError as e:
            return _error(503, str(e))
        except Exception as e:
            return _error(500, f"inference failed: {type(e).__name__}: {e}")
        try:
            return _json(respond(output))
        except Exception as e:
            return _error(500, f"the reply failed: {type(e).__name__}: {e}")

    async def healthz(request):
        s = batcher.stats
        return _json({"status": "closed" if batcher.closed else "ok", "queued": s.queued, "requests": s.requests,
                      "failed": s.failed, "batches": s.batches, "mean_batch": round(s.mean_batch, 3)},
                     503 if batcher.closed else 200)     # a worker that died takes no requests

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        await asyncio.to_thread(batcher.close)      # uvicorn has answered every request it took

    return Starlette(routes=[Route("/infer", infer, methods=["POST"]), Route("/healthz", healthz)],
                     lifespan=lifespan)
