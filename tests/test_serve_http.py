"""`python -m hybridbatch.serve`: a model behind HTTP on a free loopback port, started and
stopped by each test."""
import concurrent.futures
import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from serve_models import UNLUCKY, Scorer

pytest.importorskip("starlette", reason="the HTTP server needs the serve extra (starlette)")
pytest.importorskip("uvicorn", reason="the HTTP server needs the serve extra (uvicorn)")
pytest.importorskip("greenlet", reason="a Batcher runs requests as greenlets (the serve extra)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCORER = os.path.join(ROOT, "tests", "serve_models.py") + ":Scorer"


class Served:
    def __init__(self, proc, banner):
        self.proc = proc
        self.host, port = banner.split(" on http://")[1].split()[0].rsplit(":", 1)
        self.port = int(port)

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            reply = conn.getresponse()
            return reply.status, reply.getheader("Content-Type"), reply.read()
        finally:
            conn.close()

    def infer(self, payload):
        status, kind, body = self.request("POST", "/infer", json.dumps(payload).encode())
        return status, json.loads(body)


@contextlib.contextmanager
def served(*flags, model=SCORER):
    proc = subprocess.Popen([sys.executable, "-m", "hybridbatch.serve", "--model", model, "--port", "0", *flags],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        banner = proc.stdout.readline()
        if " on http://" not in banner:
            proc.wait(30)
            pytest.fail(f"the server did not start: {banner!r} {proc.stderr.read()}")
        yield Served(proc, banner)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def _payloads(n, seed=0):
    return [{"x": [round(float(v), 4) for v in row]} for row in np.random.default_rng(seed).normal(size=(n, 4))]


def _eager(model, payload):
    return model.infer(model.parse(payload)).asnumpy()


def test_concurrent_requests_are_answered_as_eager_inference_and_bad_ones_get_400():
    model = Scorer()
    good = _payloads(24)
    bad = [b"{not json", json.dumps({"x": [1, 2]}).encode(), json.dumps([1, 2, 3, 4]).encode(), b"\xff\xfe"]
    with served("--max-batch-size", "8", "--max-delay-ms", "30") as server:
        def post(body):
            status, _, reply = server.request("POST", "/infer", body, {"Content-Type": "application/json"})
            return status, json.loads(reply)
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(post, [json.dumps(p).encode() for p in good] + bad))
        health_status, kind, body = server.request("GET", "/healthz")
        health = json.loads(body)
    for payload, (status, reply) in zip(good, answers):
        assert status == 200, reply
        np.testing.assert_allclose(reply["y"], _eager(model, payload), rtol=1e-5, atol=1e-6)
    reasons = [reply["error"] for status, reply in answers[len(good):] if status == 400]
    assert len(reasons) == len(bad)
    assert reasons[0].startswith("the body is not JSON")
    assert "four numbers" in reasons[1] and "four numbers" in reasons[2]
    assert health_status == 200 and kind == "application/json"
    assert health["status"] == "ok" and health["requests"] == len(good) and health["batches"] < len(good)


def test_a_request_failing_in_the_model_gets_500_and_the_others_their_replies():
    model = Scorer()
    payloads = _payloads(6, seed=1)
    payloads[4]["x"][0] = UNLUCKY
    with served("--max-delay-ms", "50") as server:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(server.infer, payloads))
    for i, (status, reply) in enumerate(answers):
        if i == 4:
            assert status == 500 and reply["error"] == "inference failed: RuntimeError: unlucky request"
        else:
            assert status == 200
            np.testing.assert_allclose(reply["y"], _eager(model, payloads[i]), rtol=1e-5, atol=1e-6)


def test_limits_routes_and_methods():
    with served("--max-request-bytes", "64") as server:
        status, _, body = server.request("POST", "/infer", b"[" + b"1," * 40 + b"1]")
        assert status == 413 and b"exceeds 64 bytes" in body
        assert server.request("GET", "/infer")[0] == 405
        assert server.request("GET", "/nowhere")[0] == 404
        assert server.infer({"x": [0.1, 0.2, 0.3, 0.4]})[0] == 200


def _listening_addresses(port):
    """The local addresses of the sockets listening on `port` (from /proc/net/tcp*)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:
                    found.append(address)
    return found


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads the listening sockets from /proc/net/tcp")
def test_it_listens_on_loopback_only():
    with served() as server:
        assert server.host == "127.0.0.1"
        assert _listening_addresses(server.port) == ["0100007F"]     # 127.0.0.1, nothing on other addresses


def test_sigterm_answers_the_queued_requests_then_exits_cleanly():
    model = Scorer()
    payloads = _payloads(3, seed=2)
    with served("--max-delay-ms", "60000") as server:
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            answers = [pool.submit(server.infer, p) for p in payloads]
            deadline = time.monotonic() + 30
            while json.loads(server.request("GET", "/healthz")[2])["queued"] < 3:
                assert time.monotonic() < deadline, "the requests never queued"
                time.sleep(0.02)
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(30) == 0
            for payload, answer in zip(payloads, answers):
                status, reply = answer.result(30)
                assert status == 200
                np.testing.assert_allclose(reply["y"], _eager(model, payload), rtol=1e-5, atol=1e-6)
        assert "stopped after 3 requests (0 failed) in 1 batches" in server.proc.stdout.read()


def test_the_treelstm_example_served_from_its_saved_parameters(tmp_path):
    """examples/treelstm_sst.py trains a plain W1, saves it, and its Model serves it."""
    params = str(tmp_path / "model.npz")
    subprocess.run([sys.executable, "examples/treelstm_sst.py", "--model", "natural", "--epochs", "1", "--limit", "40",
                    "--dev-limit", "10", "--hidden", "16", "--save", params], cwd=ROOT, check=True,
                   capture_output=True, timeout=600)
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        from treelstm_sst import Model
    finally:
        sys.path.remove(os.path.join(ROOT, "examples"))
    model = Model(params)
    trees = ["(3 (2 a) (3 (3 good) (2 film)))", "(1 (1 dull) (2 (2 and) (1 slow)))", "(2 word)"]
    with served("--params", params, "--max-delay-ms", "50", model="examples/treelstm_sst.py:Model") as server:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(server.infer, [{"tree": t} for t in trees] + [{"tree": "(3 (2 a)"}]))
    for tree, (status, reply) in zip(trees, answers):
        scores = model.infer(model.parse({"tree": tree})).asnumpy()
        assert status == 200 and reply["label"] == int(np.argmax(scores))
        np.testing.assert_allclose(reply["scores"], scores, rtol=1e-5, atol=1e-6)
    status, reply = answers[-1]
    assert status == 400 and "tree:1:9: expected ' ' and the second child" in reply["error"]


def test_a_reply_that_is_not_json_gets_500():
    with served(model=SCORER.replace(":Scorer", ":BadReply")) as server:
        status, reply = server.infer({"x": [0.1, 0.2, 0.3, 0.4]})
    assert status == 500 and reply["error"] == "the reply failed: TypeError: a set is not JSON serializable"


def test_the_load_benchmark_runs_end_to_end(tmp_path):
    """benchmarks/bench_serve.py at toy sizes: every reply checked against eager, no errors,
    and its summary and plot written (its figures are for benchmarks/RESULTS.md, not here)."""
    pytest.importorskip("matplotlib", reason="the benchmark plots with matplotlib (the bench extra)")
    out, png = tmp_path / "serve.json", tmp_path / "serve.png"
    subprocess.run([sys.executable, "benchmarks/bench_serve.py", "--hidden", "16", "--train-trees", "40",
                    "--requests", "30", "--warm-up", "20", "--seconds", "0.4", "--rounds", "1", "--clients", "4",
                    "--rates", "40", "--rss-requests", "40", "--server-core", "0", "--client-core", "0",
                    "--json", str(out), "--plot", str(png)], cwd=ROOT, check=True, capture_output=True, timeout=600)
    results = json.loads(out.read_text())
    for kind in ("single", "closed", "open"):
        for runs in results[kind].values():
            assert all(r["errors"] == 0 and r["requests"] > 0 for r in runs)
    assert set(results["closed"]) == {"batched", "eager", "scope per request"}
    assert results["acceptance"]["eager"]["throughput"] > 0 and "rss_growth" in results["acceptance"]
    assert png.stat().st_size > 0


@pytest.mark.parametrize("flag, value", [("--port", "99999"), ("--port", "-1"), ("--max-delay-ms", "inf")])
def test_out_of_range_options_are_refused_by_the_parser(flag, value, capsys):
    """--port 99999 had listened on 99999 - 65536, and an infinite delay killed the worker
    at its first request."""
    from hybridbatch.serve.__main__ import parse_args
    with pytest.raises(SystemExit):
        parse_args(["--model", "m.py:M", flag, value])
    assert "must be between" in capsys.readouterr().err
