"""What hb.map's suspend and resume cost, per instance per read.

Two measurements, each the least CPU time (process_time: a shared machine's other load
does not count) of --repeats, the two runs of the second alternating:
- switch: instances that only read (batching.await_flush) with nothing pending, so the
  driver's flush has nothing to run: the whole cost is starting and ending each instance
  on a greenlet, the two switches of each read and the driver's loop, divided by
  instances x reads; once with --reads reads per instance and once with one, where the
  start and end of an instance weigh most (a gate read once per example);
- model: a greedy decoder step per read (a tiny matmul, tanh and a read that picks the next
  weight) under hb.map, against the same graph recorded round by round with one explicit
  flush per round and no suspension; the difference per instance per read is what the
  suspension adds to a real map (its timing noise is the flushes').

    python benchmarks/bench_map.py [--instances 256] [--reads 32] [--repeats 7]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hybridbatch_workloads.bench.machine import one_thread  # noqa: E402  (numpy not yet)
from hybridbatch_workloads.cli_args import summary  # noqa: E402

one_thread()

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402


def cpu_seconds(fn):
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def switch_only(n, reads):
    def instance(_):
        for _ in range(reads):
            scope.await_flush()

    with hb.batching() as scope:
        hb.map(instance, range(n))
    assert scope.stats.flushes == 0


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--instances", type=int, default=256)
    ap.add_argument("--reads", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    n, reads = args.instances, args.reads
    rng = np.random.default_rng(0)
    W = hb.Parameter("W", (8, 8), rng=rng)
    U = hb.Parameter("U", (8, 8), rng=rng)
    xs = list(rng.normal(size=(n, 8)).astype(np.float32))

    def decode(x):
        h = hb.array(x)
        for _ in range(reads):
            h = hb.tanh((W if h[0] > 0 else U) @ h)
        return h

    def mapped():
        with hb.batching() as scope:
            hb.map(decode, xs)
        assert scope.stats.forced_flushes == reads

    def rounds():
        """The same nodes and flushes with no instance suspended: each round records every
        instance's step, flushes once, then reads the (now computed) values."""
        with hb.batching() as scope:
            hs = [hb.array(x) for x in xs]
            firsts = [h[0] for h in hs]
            for _ in range(reads):
                scope.forward()
                hs = [hb.tanh((W if f > 0 else U) @ h) for f, h in zip(firsts, hs)]
                firsts = [h[0] for h in hs]
        assert scope.stats.flushes == reads + 1

    switch_only(n, 2)
    mapped()
    rounds()
    switch = min(cpu_seconds(lambda: switch_only(n, reads)) for _ in range(args.repeats))
    one_read = min(cpu_seconds(lambda: switch_only(n, 1)) for _ in range(args.repeats))
    pairs = [(cpu_seconds(mapped), cpu_seconds(rounds)) for _ in range(args.repeats)]
    with_map, without = min(a for a, _ in pairs), min(b for _, b in pairs)
    per = 1e6 / (n * reads)
    print(f"{n} instances x {reads} reads")
    print(f"switch only (empty flushes): {switch * per:.2f} us per instance per read")
    print(f"switch only, one read each: {one_read * 1e6 / n:.2f} us per instance")
    print(f"decoder under hb.map:   {with_map * 1e3:.1f} ms")
    print(f"same rounds, no suspension: {without * 1e3:.1f} ms")
    print(f"difference: {(with_map - without) * per:.2f} us per instance per read")


if __name__ == "__main__":
    main()
