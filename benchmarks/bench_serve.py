"""Serving W1 over HTTP on loopback: batched against one request at a time.

    python benchmarks/bench_serve.py [--data ../shared/data] [--clients 32] [--seconds 10]
        [--rates 100 200 400 800 1600] [--rss-requests 100000] [--plot docs/serve_load.png]
        [--json serve.json]

The model is `examples/treelstm_sst.py:Model`, a plain W1 (embedding = hidden = 256) trained
one epoch on 640 trees (`--model natural --save`), served by `python -m hybridbatch.serve`
pinned to one core (`--server-core`); this client runs on another (`--client-core`). The
requests are the dev trees of SST (`--data`) or synthetic ones, in a fixed shuffled order.
Three servers are measured in alternating order: batched (`--max-batch-size`,
`--max-delay-ms`), and two that serve one request at a time: `--eager` (outside any scope,
the unbatched baseline) and a batching scope per request (max_batch_size 1, which batches
within one tree).

- Single request: one client, each request sent once the previous reply came: its median
  latency is "a single request's latency".
- Closed loop: `--clients` keep one request each in flight for `--seconds`: throughput,
  p50 and p99 latency. The summary: batched throughput / each one-at-a-time server's, and
  batched p99 against 2 x that server's single latency + max_delay.
- Open loop (`--rates`): requests sent at Poisson arrival times at each rate for
  `--seconds`, at most `--in-flight` outstanding (beyond, an arrival is counted as dropped):
  achieved throughput and latency against offered load, plotted with --plot.
- RSS (`--rss-requests`): the batched server's resident memory after the warm-up
  (`--warm-up`, 2,000 requests) and after that many more, by closed-loop clients.

Every reply is checked against eager inference of its tree alone (`Model.infer` outside a
scope, in this process): the same class, scores within float32 summation order.
"""
import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))
from hybridbatch_workloads.bench.machine import machine_info, one_thread, pinned  # noqa: E402  (numpy not yet)
from hybridbatch_workloads.cli_args import summary  # noqa: E402

one_thread()

import numpy as np  # noqa: E402

MODEL = "examples/treelstm_sst.py:Model"


def train_model(path, data, hidden, trees):
    cmd = [sys.executable, os.path.join(ROOT, "examples", "treelstm_sst.py"), "--model", "natural",
           "--epochs", "1", "--limit", str(trees), "--dev-limit", "50", "--hidden", str(hidden), "--save", path]
    if data:
        cmd += ["--data", os.path.join(data, "sst")]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def request_trees(data, count, seed=0):
    """The trees requests carry: SST's dev trees or synthetic ones (another seed than the
    example's training trees), shuffled."""
    from hybridbatch_workloads.data.trees import read_ptb_trees, synthetic_sst
    trees = read_ptb_trees(os.path.join(data, "sst", "dev.txt")) if data else synthetic_sst(count, seed=seed + 104729)
    random.Random(seed).shuffle(trees)
    return trees[:count]


class Server:
    """`python -m hybridbatch.serve` in a child process on a free loopback port, with `flags`."""

    def __init__(self, params, core, flags):
        cmd = [sys.executable, "-m", "hybridbatch.serve", "--model", MODEL, "--params", params, "--port", "0",
               "--max-queue", "4096", *flags]
        self.proc = subprocess.Popen(pinned(cmd, core), cwd=ROOT, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if " on http://" not in line:
            self.proc.kill()
            raise RuntimeError(f"the server did not start: {line!r}")
        self.host, port = line.split(" on http://")[1].split()[0].rsplit(":", 1)
        self.port = int(port)

    def rss_bytes(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=60)


class Connection:
    """One keep-alive HTTP/1.1 connection sending POST /infer."""

    @classmethod
    async def open(cls, host, port):
        self = cls()
        self.host, self.port = host, port
        self.reader, self.writer = await asyncio.open_connection(host, port)
        self.head = f"POST /infer HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n".encode()
        return self

    async def post(self, body):
        """(status, reply body). A connection the server closed while it sat idle (uvicorn's
        keep-alive timeout) is opened again and the request sent once more."""
        request = self.head + b"Content-Length: %d\r\n\r\n" % len(body) + body
        for attempt in range(2):
            try:
                self.writer.write(request)
                line = await self.reader.readline()
            except ConnectionError:
                line = b""
            if line or attempt:
                break
            self.writer.close()
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        if not line:
            raise ConnectionError("the server closed the connection without a reply")
        status = int(line.split()[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self):
        self.writer.close()


class Recorder:
    """Latencies and replies of one measurement, each reply checked against eager."""

    def __init__(self, expected):
        self.expected, self.latencies, self.errors = expected, [], 0

    def add(self, i, start, status, reply):
        self.latencies.append(time.perf_counter() - start)
        if status != 200:
            self.errors += 1
            return
        got, (label, scores) = json.loads(reply), self.expected[i]
        if got["label"] != label or not np.allclose(got["scores"], scores, rtol=1e-4, atol=1e-5):
            raise AssertionError(f"request {i}: reply {got} differs from eager inference {label}, {scores}")

    def summary(self, seconds, offered=None, dropped=0):
        lat = np.array(self.latencies) * 1000
        out = {"requests": len(lat), "seconds": round(seconds, 3), "throughput": round(len(lat) / seconds, 1),
               "p50_ms": round(float(np.percentile(lat, 50)), 2), "p99_ms": round(float(np.percentile(lat, 99)), 2),
               "errors": self.errors}
        if offered is not None:
            out.update(offered=offered, dropped=dropped)
        return out


async def closed_loop(server, bodies, recorder, clients, seconds=None, requests=None):
    """`clients` connections, each sending its next request when its reply comes, for
    `seconds` or until `requests` replies in all."""
    conns = [await Connection.open(server.host, server.port) for _ in range(clients)]
    counter = iter(range(1 << 62))
    start = time.perf_counter()
    stop = start + seconds if seconds else None

    async def client(conn):
        while True:
            n = next(counter)
            if (requests is not None and n >= requests) or (stop is not None and time.perf_counter() >= stop):
                return
            i = n % len(bodies)
            t = time.perf_counter()
            status, reply = await conn.post(bodies[i])
            recorder.add(i, t, status, reply)

    await asyncio.gather(*(client(c) for c in conns))
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    return elapsed


async def open_loop(server, bodies, recorder, rate, seconds, in_flight, seed=0):
    """Requests at Poisson arrival times of `rate` per second; an arrival finding
    `in_flight` outstanding is dropped. Returns (seconds, dropped)."""
    free = [await Connection.open(server.host, server.port) for _ in range(in_flight)]
    rng = random.Random(seed)
    tasks, dropped, n = set(), 0, 0
    start = time.perf_counter()
    due = start

    async def one(conn, i, t):
        try:
            status, reply = await conn.post(bodies[i])
        except ConnectionError:
            status, reply = None, None
        finally:
            free.append(conn)
        recorder.add(i, t, status, reply)

    while due < start + seconds:
        due += rng.expovariate(rate)
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if not free:
            dropped += 1
            continue
        i = n % len(bodies)
        n += 1
        task = asyncio.create_task(one(free.pop(), i, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    for c in free:
        c.close()
    return elapsed, dropped


def servers(args):
    """(label, flags) of the servers compared: batched, and the two ways of one request at a
    time: eager (the unbatched baseline) and a batching scope per request."""
    return [("batched", ["--max-batch-size", str(args.max_batch_size), "--max-delay-ms", str(args.max_delay_ms)]),
            ("eager", ["--eager"]),
            ("scope per request", ["--max-batch-size", "1", "--max-delay-ms", "0"])]


def measure(args, params, bodies, expected):
    results = {"single": {}, "closed": {}, "open": {}}
    configs = servers(args)
    for round_ in range(args.rounds):
        for label, flags in configs if round_ % 2 == 0 else configs[::-1]:
            server = Server(params, args.server_core, flags)
            try:
                asyncio.run(closed_loop(server, bodies, Recorder(expected), args.clients, requests=args.warm_up))
                rec = Recorder(expected)
                elapsed = asyncio.run(closed_loop(server, bodies, rec, 1, seconds=args.seconds / 2))
                results["single"].setdefault(label, []).append(rec.summary(elapsed))
                rec = Recorder(expected)
                elapsed = asyncio.run(closed_loop(server, bodies, rec, args.clients, seconds=args.seconds))
                results["closed"].setdefault(label, []).append(rec.summary(elapsed))
                if round_ == 0 and label != "scope per request":
                    for rate in args.rates:
                        rec = Recorder(expected)
                        elapsed, dropped = asyncio.run(open_loop(server, bodies, rec, rate, args.seconds,
                                                                 args.in_flight, seed=int(rate)))
                        results["open"].setdefault(label, []).append(rec.summary(elapsed, rate, dropped))
            finally:
                server.stop()
            print(f"round {round_ + 1} {label}: single {results['single'][label][-1]}, "
                  f"{args.clients} clients {results['closed'][label][-1]}", flush=True)
    return results


def memory(args, params, bodies, expected):
    server = Server(params, args.server_core, servers(args)[0][1])
    try:
        asyncio.run(closed_loop(server, bodies, Recorder(expected), args.clients, requests=args.warm_up))
        before = server.rss_bytes()
        start = time.perf_counter()
        asyncio.run(closed_loop(server, bodies, Recorder(expected), args.clients, requests=args.rss_requests))
        after = server.rss_bytes()
    finally:
        server.stop()
    return {"requests": args.rss_requests, "seconds": round(time.perf_counter() - start, 1),
            "rss_before_mib": round(before / 2**20, 1), "rss_after_mib": round(after / 2**20, 1),
            "growth": round(after / before - 1, 4)}


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for (label, runs), color in zip(results["open"].items(), ("tab:blue", "tab:orange")):
        label = "one at a time (eager)" if label == "eager" else label
        offered = [r["offered"] for r in runs]
        left.plot(offered, [r["throughput"] for r in runs], "o-", color=color, label=label)
        right.plot(offered, [r["p50_ms"] for r in runs], "o-", color=color, label=f"{label} p50")
        right.plot(offered, [r["p99_ms"] for r in runs], "s--", color=color, label=f"{label} p99")
    left.plot(offered, offered, ":", color="grey", label="offered")
    left.set(xlabel="offered load (requests/s)", ylabel="replies/s", title="W1 over HTTP: throughput")
    right.set(xlabel="offered load (requests/s)", ylabel="latency (ms)", yscale="log", title="latency")
    for ax in (left, right):
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--data", help="the shared data folder (its sst/); default synthetic trees")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of the three servers")
    ap.add_argument("--rates", type=float, nargs="*", default=[100, 200, 400, 800, 1600])
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument("--max-batch-size", type=int, default=32)
    ap.add_argument("--max-delay-ms", type=float, default=5.0)
    ap.add_argument("--requests", type=int, default=1000, help="distinct request trees")
    ap.add_argument("--warm-up", type=int, default=2000, help="requests each server answers before it is measured")
    ap.add_argument("--hidden", type=int, default=256, help="the model's embedding and hidden size (256)")
    ap.add_argument("--train-trees", type=int, default=640, help="trees the model trains on first (640)")
    ap.add_argument("--rss-requests", type=int, default=0, help="requests for the RSS check (0: none)")
    ap.add_argument("--server-core", default="0")
    ap.add_argument("--client-core", default="1")
    ap.add_argument("--plot", help="PNG of the open-loop sweep")
    ap.add_argument("--json")
    args = ap.parse_args()

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(args.client_core)})
    with tempfile.TemporaryDirectory() as tmp:
        params = os.path.join(tmp, "model.npz")
        train_model(params, args.data, args.hidden, args.train_trees)
        from treelstm_sst import Model
        model = Model(params)
        trees = request_trees(args.data, args.requests)
        bodies = [json.dumps({"tree": t.to_ptb()}).encode() for t in trees]
        expected = []
        for t in trees:
            scores = model.infer(t).asnumpy()
            expected.append((int(np.argmax(scores)), scores))
        results = {"machine": machine_info(), "command": " ".join(sys.argv), "clients": args.clients,
                   "max_batch_size": args.max_batch_size, "max_delay_ms": args.max_delay_ms, "hidden": args.hidden,
                   **measure(args, params, bodies, expected)}
        if args.rss_requests:
            results["rss"] = memory(args, params, bodies, expected)
    acceptance = _acceptance(results, args)
    results["acceptance"] = acceptance
    print(json.dumps(acceptance, indent=1))
    if args.plot:
        plot(results, args.plot)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def _acceptance(results, args):
    """Batched against each one-at-a-time server: the median over rounds of the throughput
    ratio, and batched p99 against 2 x that server's single-request latency + max_delay."""
    med = lambda runs, key: statistics.median(r[key] for r in runs)   # noqa: E731
    closed, single = results["closed"], results["single"]
    batched = closed["batched"]
    out = {"throughput_batched": med(batched, "throughput"), "p50_batched_ms": med(batched, "p50_ms"),
           "p99_batched_ms": med(batched, "p99_ms"),
           "single_request_batched_server_ms": med(single["batched"], "p50_ms")}
    for label in ("eager", "scope per request"):
        ratios = [b["throughput"] / o["throughput"] for b, o in zip(batched, closed[label])]
        single_ms = med(single[label], "p50_ms")
        out[label] = {"throughput": med(closed[label], "throughput"),
                      "throughput_ratio": round(statistics.median(ratios), 2),
                      "single_request_ms": single_ms, "p99_bound_ms": round(2 * single_ms + args.max_delay_ms, 2)}
    if "rss" in results:
        out["rss_growth"] = results["rss"]["growth"]
    return out


if __name__ == "__main__":
    main()
