"""Memory stability of a long batched training loop.

Runs a small RNN classifier over variable-length random sequences for many steps, each step
in a fresh `hb.batching()` scope (record, backward, `trainer.step`), and prints the resident
set size at a few checkpoints as one JSON object. Exits nonzero when RSS grows by more than
`--max-growth-mb` between the first checkpoint at or after step 1000 and the last step:
per-step state (graphs, arenas, plans, interned signatures) must not accumulate.

    python benchmarks/bench_memory.py                 # 10,000 steps
    python benchmarks/bench_memory.py --steps 2000 --checkpoints 100,1000,2000
"""
import argparse
import gc
import json
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import hybridbatch as hb                                  # noqa: E402
from hybridbatch_workloads.cli_args import summary        # noqa: E402
from hybridbatch.train import parameter as _parameter
from hybridbatch.record import signature as _signature   # noqa: E402
from hybridbatch.schedule import DEFAULT_POLICY             # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb():
    """Current resident set size (MB), from /proc/self/statm; peak RSS where /proc is absent."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE / 2**20
    except OSError:
        return peak_rss_mb()


def peak_rss_mb():
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10   # bytes on macOS, KB on Linux


def main(argv=None):
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--checkpoints", default="100,1000,5000,10000")
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--max-growth-mb", type=float, default=20.0)
    ap.add_argument("--policy", default=DEFAULT_POLICY)
    args = ap.parse_args(argv)
    checkpoints = sorted({int(c) for c in args.checkpoints.split(",") if int(c) <= args.steps} | {args.steps})

    H, X, C = 16, 8, 4
    params = hb.ParameterDict(prefix="rnn_", seed=0)
    W = params.get("W", (H, H + X))
    b = params.get("b", (H,), init="zeros")
    V = params.get("V", (C, H))
    c = params.get("c", (C,), init="zeros")
    trainer = hb.Trainer(params, "adam", {"learning_rate": 1e-3, "clip_global_norm": 5.0})
    rng = np.random.default_rng(0)
    h0 = np.zeros(H, np.float32)

    def seq_loss(xs, label):
        h = hb.array(h0)
        for x in xs:
            h = hb.tanh(W @ hb.concat([h, hb.array(x)]) + b)
        return hb.pick_neg_log_softmax(V @ h + c, label)

    report = {"steps": args.steps, "batch": args.batch, "policy": args.policy, "rss_mb": {},
              "signatures": {}, "types": {}, "live_parameters": {}}
    t0 = time.perf_counter()
    loss = None
    for step in range(1, args.steps + 1):
        batch = [(rng.standard_normal((int(rng.integers(1, 13)), X)).astype(np.float32), int(rng.integers(C)))
                 for _ in range(args.batch)]
        with hb.batching(policy=args.policy):
            loss = hb.add_n([seq_loss(xs, y) for xs, y in batch])
            loss.backward()
        trainer.step(args.batch)
        if step in checkpoints:
            gc.collect()
            key = str(step)
            report["rss_mb"][key] = round(rss_mb(), 2)
            report["signatures"][key] = len(_signature.SIGS)
            report["types"][key] = len(_signature.TYPES)
            report["live_parameters"][key] = len(_parameter._live)
    report["seconds"] = round(time.perf_counter() - t0, 2)
    report["peak_rss_mb"] = round(peak_rss_mb(), 2)
    report["final_loss_per_seq"] = float(loss.asnumpy()) / args.batch

    base = next((s for s in checkpoints if s >= 1000), checkpoints[0])
    growth = report["rss_mb"][str(args.steps)] - report["rss_mb"][str(base)]
    report["growth_mb"] = {"from": base, "to": args.steps, "mb": round(growth, 2), "limit": args.max_growth_mb}
    print(json.dumps(report, indent=1))
    if growth > args.max_growth_mb:
        print(f"FAIL: RSS grew {growth:.1f} MB between step {base} and step {args.steps} "
              f"(limit {args.max_growth_mb} MB)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
