"""W8 sweep: the sparsely-gated mixture of experts batched as Suarez & Zhu batch it, against
the naive per-example loop, over experts {16, 64, 256, 1024} x batch {64, 256, 1024, 4096}.

The model is `hybridbatch_workloads/models/moe.py`, written for one example: it reads its
gate's scores with `.asnumpy()`, calls its k best experts (256 -> 256 relu -> 256) and mixes
them. Batched, the minibatch runs through `hb.map` inside `hb.batching()`: every example
suspends at its gate read, so the first flush computes all gates at once (the gate is read
once per minibatch without the model being written for a minibatch), and the second runs
each expert once over the examples that chose it ("one call per expert").

Two figures per point, each batched against the naive per-example eager loop:
- cell execution (Suarez & Zhu's metric: the time spent executing experts). With the
  routing fixed (each example's chosen experts), naive is the eager loop over examples and
  their k expert calls; batched is `execute_seconds` of a scope holding only those expert
  calls (the kernels; recording and scheduling, the data stacking that the paper leaves out,
  are reported beside it as `batched_expert_wall_s`);
- training: a minibatch's forward, backward and SGD step. Naive is the eager loop of one
  example's loss and backward at a time, then one step.

The naive loops at large sizes take seconds: they run on the first `--naive-sample`
examples only and are scaled to the batch (`naive_sampled` in the JSON says how many ran).
Batched figures are medians of `--repeats` runs after one warm-up run.

    taskset -c 1 python benchmarks/moe_sweep.py --json moe_sweep.json --plot docs/moe_sweep.png
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hybridbatch_workloads.bench.machine import one_thread  # noqa: E402  (numpy not yet)
from hybridbatch_workloads.cli_args import summary  # noqa: E402

one_thread()

import hybridbatch as hb  # noqa: E402
from hybridbatch_workloads.bench.machine import machine_info  # noqa: E402
from hybridbatch_workloads.cli_args import int_at_least  # noqa: E402
from hybridbatch_workloads.data.vectors import synthetic_vectors  # noqa: E402
from hybridbatch_workloads.models.moe import MixtureOfExperts  # noqa: E402


def int_list(text):
    return [int_at_least(1)(v) for v in text.split(",")]


def routing(model, batch):
    """Each example's chosen experts (the model's own choice, read through hb.map)."""
    with hb.batching():
        return hb.map(lambda v: model.mixture(v.x)[1], batch)


def naive_cells(model, batch, chosen):
    """Seconds of the eager loop over the examples and their chosen experts."""
    start = time.perf_counter()
    for v, experts in zip(batch, chosen):
        for e in experts:
            model.expert(e)(v.x)
    return time.perf_counter() - start


def batched_cells(model, batch, chosen):
    """(kernel seconds, wall seconds) of one scope holding every example's expert calls."""
    start = time.perf_counter()
    with hb.batching() as scope:
        for v, experts in zip(batch, chosen):
            for e in experts:
                model.expert(e)(v.x)
    return scope.stats.execute_seconds, time.perf_counter() - start


def naive_training(model, trainer, batch, steps_of):
    """Seconds of the eager per-example loss and backward over `batch`, and of one SGD step
    taken as if for `steps_of` examples."""
    start = time.perf_counter()
    for v in batch:
        model.loss(v.x, v.label).backward()
    loop = time.perf_counter() - start
    start = time.perf_counter()
    trainer.step(steps_of)
    return loop, time.perf_counter() - start


def batched_training(model, trainer, batch):
    """Seconds of one batched minibatch: hb.map of the per-example losses, backward, step."""
    start = time.perf_counter()
    with hb.batching():
        total = hb.add_n(hb.map(lambda v: model.loss(v.x, v.label), batch))
    total.backward()
    trainer.step(len(batch))
    return time.perf_counter() - start


def median_of(repeats, fn):
    fn()                                    # warm-up: block traces, plan cache, kernel routing
    return statistics.median(fn() for _ in range(repeats))


def measure(experts, batches, args):
    model = MixtureOfExperts(experts=experts, dim=args.dim, k=args.k, seed=args.seed)
    model.hybridize()
    trainer = hb.Trainer(model.parameters(), "sgd", {"learning_rate": args.lr})
    data = synthetic_vectors(max(batches), dim=args.dim, seed=args.seed)
    for e in range(experts):                # trace every expert before any timing
        model.expert(e)(data[0].x)
    naive_training(model, trainer, data[:1], 1)
    points = []
    for b in batches:
        batch = data[:b]
        chosen = routing(model, batch)
        sample = min(b, args.naive_sample)
        naive_cell = naive_cells(model, batch[:sample], chosen) * b / sample
        cell_runs = [batched_cells(model, batch, chosen) for _ in range(args.repeats + 1)][1:]
        cell = statistics.median(r[0] for r in cell_runs)
        cell_wall = statistics.median(r[1] for r in cell_runs)
        loop, step = naive_training(model, trainer, batch[:sample], b)
        naive_train = loop * b / sample + step
        train = median_of(args.repeats, lambda: batched_training(model, trainer, batch))
        point = {"experts": experts, "batch": b, "k": args.k, "naive_sampled": sample,
                 "naive_cell_s": naive_cell, "batched_cell_s": cell, "batched_expert_wall_s": cell_wall,
                 "cell_speedup": naive_cell / cell, "expert_wall_speedup": naive_cell / cell_wall,
                 "naive_train_s": naive_train, "naive_step_s": step, "batched_train_s": train,
                 "train_speedup": naive_train / train}
        print(f"{experts:5d} experts, batch {b:5d}: cells {naive_cell * 1e3:9.1f} / {cell * 1e3:7.2f} ms "
              f"= {point['cell_speedup']:6.1f}x (with recording {point['expert_wall_speedup']:5.1f}x); "
              f"training {naive_train:7.3f} / {train:6.3f} s = {point['train_speedup']:5.1f}x "
              f"(naive sampled on {sample})", flush=True)
        points.append(point)
    return points


def plot(points, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, title in ((axes[0], "cell_speedup", "cell execution (experts only)"),
                           (axes[1], "train_speedup", "training step (forward, backward, SGD)")):
        for experts in sorted({p["experts"] for p in points}):
            mine = [p for p in points if p["experts"] == experts]
            ax.plot([p["batch"] for p in mine], [p[key] for p in mine], marker="o", label=f"{experts} experts")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("minibatch")
        ax.set_ylabel("speedup over the per-example eager loop")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle(f"W8 mixture of experts, top {points[0]['k']}: batched (hb.map) vs naive")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--experts", type=int_list, default=[16, 64, 256, 1024])
    ap.add_argument("--batches", type=int_list, default=[64, 256, 1024, 4096])
    ap.add_argument("--k", type=int_at_least(1), default=2)
    ap.add_argument("--dim", type=int_at_least(1), default=256, help="input, hidden and output size of an expert")
    ap.add_argument("--naive-sample", type=int_at_least(1), default=256,
                    help="examples the naive loops run, scaled to the batch (256)")
    ap.add_argument("--repeats", type=int_at_least(1), default=3)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int_at_least(0), default=0)
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--plot", metavar="PNG")
    args = ap.parse_args()
    if args.k > min(args.experts):
        ap.error("--k must not exceed the smallest expert count")
    points = [p for experts in args.experts for p in measure(experts, args.batches, args)]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine_info(), "args": vars(args), "points": points}, f, indent=1)
    if args.plot:
        plot(points, args.plot)


if __name__ == "__main__":
    main()
