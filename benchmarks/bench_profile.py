"""What hb.profile() costs: W1 training steps with the profile on and off, alternating.

    python benchmarks/bench_profile.py [--steps 10] [--rounds 5] [--data ../shared/data/sst] [--trace w1.json]

Each round times `--steps` training minibatches of 64 trees with no profile active, then the
same minibatches inside `hb.profile()` (the order flips from round to round); the figure is
the median over rounds of on / off. With --trace, the Chrome trace of the last profiled
round is written there. Prints one JSON object.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hybridbatch_workloads.bench.machine import one_thread  # noqa: E402  (numpy not yet)
from hybridbatch_workloads.cli_args import summary  # noqa: E402

one_thread()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402


import hybridbatch as hb  # noqa: E402
from hybridbatch_workloads.bench.registry import make_workload  # noqa: E402


def steps(wl, trainer, minibatches):
    t0 = time.perf_counter()
    for mb in minibatches:
        with hb.batching(granularity="block"):
            loss = wl.minibatch_loss(mb)
        loss.backward()
        trainer.step(len(mb))
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--data", help="folder holding SST's train.txt (synthetic trees otherwise)")
    ap.add_argument("--trace", help="write the last profiled round's Chrome trace here")
    args = ap.parse_args()
    wl = make_workload("W1", data_dir=args.data)
    wl.hybridize()
    trainer = hb.Trainer(wl.parameters(), "sgd", {"learning_rate": 0.05})
    pool = list(wl.train_instances())
    minibatches = [pool[64 * i:64 * (i + 1)] for i in range(args.steps)]
    steps(wl, trainer, minibatches)                 # traces, compiles, warms the arenas
    off, on, prof = [], [], None
    for r in range(args.rounds):
        for profiled in ((False, True) if r % 2 == 0 else (True, False)):
            if profiled:
                prof = hb.profile()
            with prof if profiled else contextlib.nullcontext():
                seconds = steps(wl, trainer, minibatches)
            (on if profiled else off).append(seconds)
    if args.trace:
        prof.chrome_trace(args.trace)
    report = {"steps": args.steps, "rounds": args.rounds, "data": args.data or "synthetic",
              "seconds_off": statistics.median(off), "seconds_on": statistics.median(on),
              "on_over_off": statistics.median(a / b for a, b in zip(on, off)),
              "events_per_step": len(prof.events) / args.steps}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
