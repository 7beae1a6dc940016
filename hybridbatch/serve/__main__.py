"""Serve a model over HTTP, batching concurrent requests (serve/app.py says what a model is).

    python -m hybridbatch.serve --model examples/treelstm_sst.py:Model --params model.npz --port 8080

It listens on --host (127.0.0.1: this machine only, unless told otherwise) and prints the
address once it accepts requests (`--port 0` takes a free port). SIGINT or SIGTERM stops it
taking connections, answers every request already taken, then exits.
"""
import argparse
import gc
import signal
import socket
import sys

from ..record.scope import DEFAULT_GRANULARITY, GRANULARITIES
from ..schedule import DEFAULT_POLICY, POLICIES
from .batcher import MAX_DELAY_MS


def _positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def _delay(text):
    value = float(text)
    if not 0 <= value <= MAX_DELAY_MS:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_DELAY_MS:.0f}, not {text}")
    return value


def _port(text):
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be between 0 and 65535, not {value}")
    return value


def listen(host, port):
    """A listening TCP socket on host:port. Its proto is IPPROTO_TCP, as asyncio needs to
    turn Nagle's algorithm off on the connections it accepts (socket.create_server leaves
    it 0, and every keep-alive reply then waits out the client's delayed ACK: ~40 ms)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         proto=socket.IPPROTO_TCP)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(address)
    sock.listen(2048)
    return sock


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m hybridbatch.serve", description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="FILE.py:CLASS or MODULE:CLASS, called with --params")
    ap.add_argument("--params", help="passed to the model class (its saved parameters)")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    ap.add_argument("--port", type=_port, default=8080, help="0 takes a free port (8080)")
    ap.add_argument("--max-batch-size", type=_positive_int, default=32, help="requests in one batch (32)")
    ap.add_argument("--max-delay-ms", type=_delay, default=5.0,
                    help="how long a batch waits for more requests after its first arrived (5)")
    ap.add_argument("--max-queue", type=_positive_int, default=1024,
                    help="requests waiting beyond which new ones get 503 (1024)")
    ap.add_argument("--max-request-bytes", type=_positive_int, default=1 << 20,
                    help="larger request bodies get 413 (1 MiB)")
    ap.add_argument("--policy", choices=sorted(POLICIES), default=DEFAULT_POLICY,
                    help=f"the batching policy ({DEFAULT_POLICY})")
    ap.add_argument("--granularity", choices=GRANULARITIES, default=DEFAULT_GRANULARITY)
    ap.add_argument("--eager", action="store_true",
                    help="run each request alone, outside any batching scope: the unbatched baseline "
                         "(batches of one request: --max-batch-size is ignored)")
    return ap.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    try:
        import uvicorn
        from .app import load_model, make_app
    except ImportError as e:
        sys.exit(f"python -m hybridbatch.serve needs the serve extra (pip install hybridbatch[serve]): {e}")
    from .batcher import Batcher
    try:
        model = load_model(args.model, args.params)
    except (OSError, ValueError, TypeError) as e:
        sys.exit(f"cannot load the model: {e}")
    # what is alive now (modules, the model) lives as long as the process: kept out of the cyclic
    # collector's full passes, which would otherwise rescan it all and stall a batch for 50-100 ms
    gc.freeze()
    batcher = Batcher(model.infer, max_batch_size=None if args.eager else args.max_batch_size,
                      max_delay_ms=args.max_delay_ms,
                      max_queue=args.max_queue, policy=args.policy, granularity=args.granularity, eager=args.eager)
    listener = listen(args.host, args.port)
    host, port = listener.getsockname()[:2]

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            """SIGINT/SIGTERM: close the Batcher at once, so that its queued requests run now
            instead of waiting out max_delay while uvicorn waits for their replies."""
            batcher.close(timeout=0)
            super().handle_exit(sig, frame)

    config = uvicorn.Config(make_app(model, batcher, args.max_request_bytes), log_level="warning", access_log=False)
    server = Server(config)
    # the socket listens already: a client that connects before uvicorn starts waits in its backlog
    how = "eager, one request at a time" if args.eager else (f"max_batch_size {args.max_batch_size}, max_delay_ms "
                                                             f"{args.max_delay_ms:g}")
    print(f"hybridbatch.serve: {args.model} on http://{host}:{port} ({how})", flush=True)
    # uvicorn answers the requests it took, then raises the signal again: make that an exit with status 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.run(sockets=[listener])
    except KeyboardInterrupt:
        pass
    finally:
        s = batcher.stats
        print(f"hybridbatch.serve: stopped after {s.requests} requests ({s.failed} failed) in {s.batches} batches",
              flush=True)


if __name__ == "__main__":
    main()
