"""W1 training steps on the numpy backend, then on cupy, in one process: does the GPU path
train to the same losses, and what does a step cost there.

CI has no GPU, so tests/test_gpu.py skips there; run this and that test where a CUDA device
and cupy are present:

    python -m pytest -q tests/test_gpu.py
    python benchmarks/gpu_check.py [--steps 8] [--profile 3]

Synthetic SST-shaped trees (W1's model and sizes, hidden 256, minibatch 64, SGD 0.05), the
same seed for both backends. Per backend it prints the first step's seconds (compiles
included), the median of the steps after the third, and the last step's loss; with
--profile N, a cProfile of N cupy steps (by own time), where the GPU path spends its time.
"""
import argparse
import cProfile
import os
import pstats
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402
from hybridbatch.runtime import backend  # noqa: E402
from hybridbatch.train.optim import Trainer  # noqa: E402
from hybridbatch_workloads.bench.workload_treelstm import W1TreeLSTM  # noqa: E402
from hybridbatch_workloads.cli_args import summary  # noqa: E402


def trainer_steps(steps):
    """(a function training one minibatch and returning its loss, the minibatches)."""
    wl = W1TreeLSTM(hidden=256)
    wl.hybridize()
    trainer = Trainer(wl.parameters(), "sgd", {"learning_rate": 0.05})
    train = list(wl.train_instances())

    def step(minibatch):
        with hb.batching():
            loss = wl.minibatch_loss(minibatch)
            loss.backward()
        trainer.step(len(minibatch))
        return float(loss.asnumpy())

    return step, [train[i * 64:(i + 1) * 64] for i in range(steps)]


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="profile N cupy steps after the timed ones")
    args = ap.parse_args()
    if args.steps < 4:
        ap.error("--steps must be at least 4 (the median is over the steps after the third)")
    for name in ("numpy", "cupy"):
        try:
            backend.use(name)
            step, minibatches = trainer_steps(args.steps + args.profile)
            seconds, loss = [], None
            for mb in minibatches[:args.steps]:
                t0 = time.perf_counter()
                loss = step(mb)
                seconds.append(time.perf_counter() - t0)
            print(f"{name}: first step {seconds[0]:.2f} s, later steps median "
                  f"{np.median(seconds[3:]) * 1e3:.1f} ms, last loss {loss:.4f}", flush=True)
            if name == "cupy" and args.profile:
                prof = cProfile.Profile()
                prof.enable()
                for mb in minibatches[args.steps:]:
                    step(mb)
                prof.disable()
                pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        except Exception as e:       # one backend's failure is reported; the other still runs
            traceback.print_exc()
            print(f"{name}: failed: {type(e).__name__}: {e}", flush=True)
        finally:
            backend.use("numpy")


if __name__ == "__main__":
    main()
