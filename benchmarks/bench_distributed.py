"""Data-parallel training (hb.distributed) at 1 and 2 MPI ranks: throughput over all ranks,
and per step the seconds of forward + backward, of the gradient exchange and of the update,
and the gradient bytes exchanged; from those, how many ranks a network of 10 and 100 Gb/s
keeps scaling.

    python benchmarks/bench_distributed.py [--data ../shared/data] [--workloads W1 W2]
        [--runs 1x64 2x64 2x32] [--steps 20] [--warmup 5] [--rounds 1] [--json out.json]

Each run RxB starts `mpirun -n R` of this file, each rank training B instances per step (SGD,
block granularity, one thread per rank) on its shard of the training set (hb.distributed.shard),
after --warmup steps. Throughput is R x B x steps over rank 0's wall time of the steps. With
--rounds N every run repeats N times, the order flipping each round, and a ratio to 1x64 is the
median of the rounds' ratios.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hybridbatch_workloads.bench.machine import one_thread  # noqa: E402  (numpy not yet)
from hybridbatch_workloads.cli_args import summary  # noqa: E402

one_thread()

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402
from hybridbatch_workloads.bench.registry import make_workload  # noqa: E402

# the examples' optimizers: W1 plain SGD (its embedding updates by rows), W2 SGD with clipping
OPTIONS = {"W1": {"learning_rate": 0.05}, "W2": {"learning_rate": 0.5, "clip_global_norm": 5.0}}
NETWORKS = {"10 Gb/s": 10e9 / 8, "100 Gb/s": 100e9 / 8}     # bytes per second
RANKS = (2, 4, 8, 16, 32, 64, 128)


def train(args):
    """One rank's part of a run; rank 0 prints its measurements as one JSON line."""
    hb.distributed.init()
    workload = make_workload(args.workload, hidden=256, data_dir=args.data, seed=0)
    workload.hybridize()
    params = workload.parameters()
    hb.distributed.broadcast_parameters(params)
    trainer = hb.Trainer(params, "sgd", OPTIONS[args.workload])
    items = workload.train_instances()

    def minibatches():
        epoch = 0
        while True:
            mine = hb.distributed.shard(items, seed=0, epoch=epoch)
            for i in range(0, len(mine) - args.per_rank + 1, args.per_rank):
                yield mine[i:i + args.per_rank]
            epoch += 1

    batches = minibatches()
    phases = np.zeros(3)
    sent = np.zeros(2)
    for k in range(args.warmup + args.steps):
        if k == args.warmup:
            hb.distributed.sum_over_ranks(0.0)          # every rank starts the timed steps together
            phases[:], sent[:] = 0.0, 0.0
            start = time.perf_counter()
        t0 = time.perf_counter()
        with hb.batching(granularity="block"):
            loss = workload.minibatch_loss(next(batches))
        loss.backward()
        t1 = time.perf_counter()
        total = hb.distributed.allreduce_gradients(params, args.per_rank)
        t2 = time.perf_counter()
        trainer.step(total)
        phases += (t1 - t0, t2 - t1, time.perf_counter() - t2)
        sent += hb.distributed.last_step_bytes()
    hb.distributed.sum_over_ranks(0.0)
    wall = time.perf_counter() - start
    if hb.distributed.is_root():
        ranks = hb.distributed.size()
        print(json.dumps({"workload": args.workload, "ranks": ranks, "per_rank": args.per_rank,
                          "steps": args.steps, "wall_s": wall,
                          "instances_per_s": ranks * args.per_rank * args.steps / wall,
                          "forward_backward_s": phases[0] / args.steps, "exchange_s": phases[1] / args.steps,
                          "update_s": phases[2] / args.steps, "dense_bytes": sent[0] / args.steps,
                          "sparse_bytes": sent[1] / args.steps,
                          "param_bytes": sum(p.data.nbytes for p in params)}))


def launch(workload, ranks, per_rank, args):
    """The JSON rank 0 printed for one run."""
    command = [shutil.which("mpirun") or sys.exit("bench_distributed needs mpirun (OpenMPI)"), "-n", str(ranks),
               sys.executable, os.path.abspath(__file__), "--rank-of", workload, "--per-rank", str(per_rank),
               "--steps", str(args.steps), "--warmup", str(args.warmup)]
    if args.data:
        command += ["--data", args.data]
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    line = [line for line in done.stdout.splitlines() if '{"' in line][-1]    # MPI may print on the same line
    return json.loads(line[line.index('{"'):])


def scaling(one, two):
    """Per network and rank count, the projected efficiency of weak scaling (each rank keeps
    `one`'s per-rank batch): the compute per step of the 1-rank run, against it plus a ring
    allreduce of the dense bytes (2 (N-1)/N of them cross each link) and the gathered sparse
    rows ((N-1) ranks' worth, from the 2-rank run; once that is more than the table's ring
    allreduce, allreduce_gradients sends the table densely instead)."""
    compute = one["forward_backward_s"] + one["update_s"]
    dense, rows = two["dense_bytes"], two["sparse_bytes"] / 2
    table = two["param_bytes"] - dense          # the tables whose rows went sparse
    out = {}
    for network, rate in NETWORKS.items():
        out[network] = {}
        for n in RANKS:
            ring = 2 * (n - 1) / n
            sparse = min((n - 1) * rows, ring * table)
            seconds = (ring * dense + sparse) / rate
            out[network][n] = compute / (compute + seconds)
    return out


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--data", help="folder holding sst/ and ud_english_ewt/ (default: synthetic data)")
    ap.add_argument("--workloads", nargs="+", default=["W1", "W2"], choices=sorted(OPTIONS))
    ap.add_argument("--runs", nargs="+", default=["1x64", "2x64", "2x32"], help="RANKSxPER_RANK")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1, help="rounds of every run, the order flipping each round")
    ap.add_argument("--json")
    ap.add_argument("--rank-of", dest="workload", choices=sorted(OPTIONS),
                    help=argparse.SUPPRESS)     # this process is a rank of one run
    ap.add_argument("--per-rank", type=int, default=64, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.workload:
        return train(args)
    results = []
    for workload in args.workloads:
        rounds = []                 # per round, spec -> rank 0's figures
        for k in range(args.rounds):
            runs = {}
            for spec in (args.runs if k % 2 == 0 else args.runs[::-1]):
                ranks, per_rank = (int(v) for v in spec.split("x"))
                runs[spec] = r = launch(workload, ranks, per_rank, args)
                print(f"{workload} {ranks} x {per_rank}: {r['instances_per_s']:.1f} instances/s; per step "
                      f"forward+backward {1e3 * r['forward_backward_s']:.1f} ms, exchange "
                      f"{1e3 * r['exchange_s']:.1f} ms, update {1e3 * r['update_s']:.1f} ms; dense "
                      f"{r['dense_bytes'] / 1e6:.2f} MB, sparse rows {r['sparse_bytes'] / 1e6:.2f} MB", flush=True)
            rounds.append(runs)
        runs = rounds[-1]
        ratios = {}
        if "1x64" in runs:
            for spec in runs:
                if spec != "1x64":
                    ratios[spec] = statistics.median(r[spec]["instances_per_s"] / r["1x64"]["instances_per_s"]
                                                     for r in rounds)
                    print(f"{workload} {spec} / 1x64: {ratios[spec]:.2f}x (median of {len(rounds)} rounds)")
        result = {"workload": workload, "rounds": rounds, "ratios_over_1x64": ratios}
        if "1x64" in runs and "2x64" in runs:
            result["efficiency"] = scaling(runs["1x64"], runs["2x64"])
            for network, by_ranks in result["efficiency"].items():
                print(f"{workload} at {network}, projected efficiency by ranks: "
                      + ", ".join(f"{n}: {e:.0%}" for n, e in by_ranks.items()))
        results.append(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
