"""The measurement protocol of docs/workloads.md, for any `Workload`.

One configuration (`Config`) is measured in one process:

- warm-up: `warmup` instances trained and inferred batched (traces, numba caches, arenas),
  and `eager_warmup` eagerly;
- `repeats` runs; run r draws `instances` training instances (a seeded permutation of the
  instances after the warm-up ones, so minibatches differ from run to run and from the
  warm-up: the schedule cache is not handed identical graphs) and measures, in this order,
  batched training, batched inference, eager training and eager inference on them (eager on
  the first `eager_instances` only: it is slow; by default whole minibatches of at least 128
  instances, so that eager steps the optimizer as often per instance as batched). Interleaving the four keeps a change of
  machine load from favouring one of them;
- a figure is the median over runs; the split of the time, batch counts and the like come
  from the median run (by throughput).

Training = forward + backward + `Trainer` SGD step per minibatch of `batch` instances, the
minibatch loss being the workload's `minibatch_loss` (by default the sum of the instances'
losses). Inference = forward only, reading every logits handle of `predict` with
`asnumpy()`. FLOPs are the workload's matrix products (`forward_flops`; training counts 3x,
forward and the two products of each backward). They are the model's count: where a
block's integer-keyed part runs once per distinct key (`distinct.py`; W1's leaves, W2/W3's
input projections) fewer products run, and the figures, throughput and efficiency alike,
measure that. `distinct_rows=False` (`--no-distinct-rows`) runs every row.
Efficiency = achieved FLOP/s / single-thread float32 GEMM FLOP/s (1024x512 @ 512x1280)
measured in the same run: each repeat takes GEMM samples right before its batched training
run and right after its batched inference run, and its efficiency uses their median. This
machine's speed drifts by 20% within minutes (shared host), so a rate measured only at the
start and end of a long run can belong to another phase than the runs it judges. The
reported GEMM rate is the median of every sample (before, per repeat, after).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hybridbatch.config import settings
from hybridbatch.kernels import compiling
from hybridbatch.train.optim import Trainer
from hybridbatch.record.mapping import map as hb_map
from hybridbatch.record.scope import batching
from hybridbatch.schedule import DEFAULT_POLICY
from . import machine
from .registry import DEFAULT_GRANULARITY, make_workload
from .workload import data_of

TRAIN_SPLIT = ("record", "schedule", "forward", "backward", "update", "other")
INFER_SPLIT = ("record", "schedule", "forward", "read", "other")


@dataclass
class Config:
    workload: str = "W1"
    hidden: int = 256
    batch: int = 64
    policy: str | Callable = DEFAULT_POLICY   # a name, or a scheduling callable such as an FSMPolicy
    granularity: str | None = None          # None: the workload's default (registry)
    data: str | None = None                 # None: the workload's synthetic data
    instances: int = 1280
    warmup: int = 128
    repeats: int = 3
    eager: bool = True
    eager_instances: int | None = None      # None: whole minibatches, at least 128 instances
    eager_warmup: int = 16
    lr: float = 0.05
    seed: int = 0
    gemm_repeats: int = 7
    check: bool = True                      # compare batched and eager losses once
    distinct_rows: bool = True              # hb.settings.distinct_rows for the batched runs
    workload_options: dict = field(default_factory=dict)   # extra constructor keywords

    def resolved(self):
        c = dataclasses.replace(self, workload=self.workload.upper())
        if c.granularity is None:
            c.granularity = DEFAULT_GRANULARITY.get(c.workload, "op")
        if c.batch < 1 or c.instances < 1 or c.repeats < 1:
            raise ValueError("batch, instances and repeats must be >= 1")
        if c.eager_instances is None:   # whole minibatches: eager then steps as often as batched
            c.eager_instances = -(-128 // c.batch) * c.batch
        if c.warmup < 0 or c.eager_warmup < 0 or c.eager_instances < 0:
            raise ValueError("warmup, eager_warmup and eager_instances must be >= 0")
        return c


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------

class _NoBar:
    def update(self, n=1):
        pass

    def set_description_str(self, s):
        pass

    def close(self):
        pass


def _progress_bar(total, enabled, desc):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="inst", file=sys.stderr, dynamic_ncols=True, leave=False)


def _take(pool, n, rng=None):
    """n instances from pool: a permutation (when rng is given) repeated as needed."""
    if not pool:
        raise ValueError("the workload has no training instances")
    out = []
    while len(out) < n:
        if rng is None:
            out.extend(pool[: n - len(out)])
        else:
            order = rng.permutation(len(pool))
            out.extend(pool[i] for i in order[: n - len(out)])
    return out


def _minibatches(seq, size):
    return [seq[i:i + size] for i in range(0, len(seq), size)]


# ---------------------------------------------------------------------------------------------
# one pass over a list of instances, in each mode
# ---------------------------------------------------------------------------------------------

def _score(wl, mb, values, tally):
    """Add one minibatch's read predictions to tally = [correct, total] (the workload's score)."""
    for x, vs in zip(mb, values):
        correct, total = wl.score(x, vs)
        tally[0] += correct
        tally[1] += total


def _accuracy(tally):
    return tally[0] / tally[1] if tally[1] else None


def _finish(t, wall, **figures):
    """A pass's result: wall seconds, the split with "other" = wall minus the timed parts."""
    t["other"] = max(wall - sum(v for k, v in t.items() if k != "other"), 0.0)
    return dict(seconds=wall, split=t, **figures)


def _add_scope_stats(t, c, s):
    """Add one scope's recording / scheduling / execution times and counts to the tallies."""
    t["record"] += s.record_seconds
    t["schedule"] += s.schedule_seconds
    t["forward"] += s.execute_seconds
    for k in c:
        c[k] += getattr(s, k)


def train_batched(wl, trainer, instances, cfg, bar):
    t = dict.fromkeys(TRAIN_SPLIT, 0.0)
    c = dict(nodes=0, batches=0, lower_bound=0, flushes=0, plan_cache_hits=0)
    loss_total = 0.0
    wall = 0.0
    for mb in _minibatches(instances, cfg.batch):
        t0 = time.perf_counter()
        with batching(policy=cfg.policy, granularity=cfg.granularity) as scope:
            loss = wl.minibatch_loss(mb)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        trainer.step(len(mb))
        t3 = time.perf_counter()
        wall += t3 - t0
        _add_scope_stats(t, c, scope.stats)
        t["backward"] += t2 - t1
        t["update"] += t3 - t2
        loss_total += float(loss.item())
        bar.update(len(mb))
    return _finish(t, wall, counts=c, loss=loss_total)


def infer_batched(wl, instances, cfg, bar):
    t = dict.fromkeys(INFER_SPLIT, 0.0)
    c = dict(nodes=0, batches=0, lower_bound=0, flushes=0, plan_cache_hits=0)
    wall = 0.0
    tally = [0, 0]
    for mb in _minibatches(instances, cfg.batch):
        t0 = time.perf_counter()
        with batching(policy=cfg.policy, granularity=cfg.granularity) as scope:
            predictions = wl.predict_minibatch(mb)
        t1 = time.perf_counter()
        values = [wl.read_prediction(p) for p in predictions]
        t2 = time.perf_counter()
        wall += t2 - t0
        _add_scope_stats(t, c, scope.stats)
        t["read"] += t2 - t1
        _score(wl, mb, values, tally)
        bar.update(len(mb))
    return _finish(t, wall, counts=c, accuracy=_accuracy(tally))


def train_eager(wl, trainer, instances, cfg, bar):
    t = dict.fromkeys(TRAIN_SPLIT, 0.0)
    loss_total = 0.0
    wall = 0.0
    for mb in _minibatches(instances, cfg.batch):
        t0 = time.perf_counter()
        fwd = bwd = untimed = 0.0
        for x in mb:                      # one instance at a time, as a user would without hb
            a = time.perf_counter()
            loss = wl.loss(x)
            b = time.perf_counter()
            loss.backward()
            c = time.perf_counter()
            loss_total += float(loss.item())      # bookkeeping, not timed
            fwd += b - a
            bwd += c - b
            untimed += time.perf_counter() - c
        t2 = time.perf_counter()
        trainer.step(len(mb))
        t3 = time.perf_counter()
        wall += t3 - t0 - untimed
        t["forward"] += fwd
        t["backward"] += bwd
        t["update"] += t3 - t2
        bar.update(len(mb))
    return _finish(t, wall, counts=None, loss=loss_total)


def infer_eager(wl, instances, cfg, bar):
    t = dict.fromkeys(INFER_SPLIT, 0.0)
    wall = 0.0
    tally = [0, 0]
    for mb in _minibatches(instances, cfg.batch):
        t0 = time.perf_counter()
        fwd = read = 0.0
        values = []
        for x in mb:
            a = time.perf_counter()
            p = wl.predict(x)
            b = time.perf_counter()
            values.append(wl.read_prediction(p))
            fwd += b - a
            read += time.perf_counter() - b
        wall += time.perf_counter() - t0
        t["forward"] += fwd
        t["read"] += read
        _score(wl, mb, values, tally)
        bar.update(len(mb))
    return _finish(t, wall, counts=None, accuracy=_accuracy(tally))


# ---------------------------------------------------------------------------------------------
# summaries
# ---------------------------------------------------------------------------------------------

def _summarize(runs, n_instances, batch, flops_per_run, gemm_fps_runs):
    """Median figures over runs; details from the median run (by throughput). Efficiency
    is per run, against the GEMM rate measured next to that run."""
    thr = [n_instances / r["seconds"] if r["seconds"] > 0 else float("inf") for r in runs]
    fps = [f / r["seconds"] if r["seconds"] > 0 else float("inf") for f, r in zip(flops_per_run, runs)]
    eff = [f / g for f, g in zip(fps, gemm_fps_runs)]
    med_thr = statistics.median(thr)
    mid = min(range(len(runs)), key=lambda i: abs(thr[i] - med_thr))
    run = runs[mid]
    wall = run["seconds"]
    steps = len(range(0, n_instances, batch))
    out = {
        "instances": n_instances,
        "minibatches": steps,
        "throughput": med_thr,
        "throughput_runs": thr,
        "seconds": statistics.median(r["seconds"] for r in runs),
        "seconds_runs": [r["seconds"] for r in runs],
        "median_run": mid,
        "flops": flops_per_run[mid],
        "flops_runs": flops_per_run,
        "flops_per_second": statistics.median(fps),
        "efficiency": statistics.median(eff),
        "efficiency_runs": eff,
        "split_seconds": dict(run["split"]),
        "split_seconds_per_minibatch": {k: v / steps for k, v in run["split"].items()},
        "split_shares": {k: (v / wall if wall > 0 else 0.0) for k, v in run["split"].items()},
    }
    if run.get("counts") is not None:
        c = run["counts"]
        out.update(c)
        out["batches_over_lower_bound"] = c["batches"] / c["lower_bound"] if c["lower_bound"] else None
        out["nodes_per_batch"] = c["nodes"] / c["batches"] if c["batches"] else None
        out["counts_runs"] = [r["counts"] for r in runs]
    if "loss" in run:
        out["loss_per_instance"] = run["loss"] / n_instances
    if "accuracy" in run:
        out["accuracy"] = run["accuracy"]
    return out


def _check(wl, instances, cfg):
    """Batched vs eager loss of the same instances with the same parameters (no update)."""
    with batching(policy=cfg.policy, granularity=cfg.granularity):
        batched = hb_map(wl.loss, instances)
    b = np.array([f.item() for f in batched], np.float64)
    e = np.array([wl.loss(x).item() for x in instances], np.float64)
    diff = np.abs(b - e)
    return {"instances": len(instances), "max_abs_loss_diff": float(diff.max()),
            "max_rel_loss_diff": float((diff / np.maximum(np.abs(e), 1e-12)).max())}


# ---------------------------------------------------------------------------------------------
# the benchmark
# ---------------------------------------------------------------------------------------------

def run_benchmark(cfg: Config, progress=True, workload=None, info=True):
    """Measure one configuration; returns a JSON-ready dict (see the module docstring).

    `workload`: an already built Workload to use instead of building `cfg.workload`."""
    cfg = cfg.resolved()
    t_start = time.perf_counter()
    load0 = machine.load_average()
    gemm_before = machine.gemm_rate(cfg.gemm_repeats)

    t0 = time.perf_counter()
    wl = workload if workload is not None else make_workload(
        cfg.workload, hidden=cfg.hidden, data_dir=cfg.data, seed=cfg.seed, **cfg.workload_options)
    wl.hybridize()
    setup_seconds = time.perf_counter() - t0
    trainer = Trainer(wl.parameters(), "sgd", {"learning_rate": cfg.lr})
    infer_flops = getattr(wl, "predict_flops", wl.forward_flops)

    pool = list(wl.train_instances())
    warm = _take(pool, cfg.warmup)
    rest = pool[cfg.warmup:] if len(pool) > cfg.warmup else pool
    eager_n = min(cfg.eager_instances, cfg.instances) if cfg.eager else 0
    eager_warm = _take(pool, cfg.eager_warmup) if eager_n else []

    total = (2 * len(warm) + 2 * len(eager_warm)
             + cfg.repeats * 2 * (cfg.instances + eager_n))
    bar = _progress_bar(total, progress, f"{cfg.workload} h{cfg.hidden} b{cfg.batch}")

    runs = {"batched_train": [], "batched_infer": [], "eager_train": [], "eager_infer": []}
    gemm_near = []      # per repeat: GEMM samples taken around its batched runs
    flops = {"train": [], "infer": [], "eager_train": [], "eager_infer": []}
    check = None
    with settings(distinct_rows=cfg.distinct_rows), contextlib.closing(bar):
        bar.set_description_str(f"{cfg.workload} h{cfg.hidden} b{cfg.batch} warm-up")
        if warm:
            train_batched(wl, trainer, warm, cfg, bar)
            infer_batched(wl, warm, cfg, bar)
        if eager_warm:
            train_eager(wl, trainer, eager_warm, cfg, bar)
            infer_eager(wl, eager_warm, cfg, bar)
        if cfg.check and eager_n:
            check = _check(wl, pool[:min(4, cfg.batch, len(pool))], cfg)
        for r in range(cfg.repeats):
            sample = _take(rest, cfg.instances, np.random.default_rng(cfg.seed * 1000 + r + 1))
            fwd = sum(wl.forward_flops(x) for x in sample)
            flops["train"].append(3 * fwd)
            flops["infer"].append(sum(infer_flops(x) for x in sample))
            tag = f"{cfg.workload} h{cfg.hidden} b{cfg.batch} run {r + 1}/{cfg.repeats}"
            near = machine.gemm_rate(cfg.gemm_repeats)["seconds_runs"]
            bar.set_description_str(tag + " batched train")
            runs["batched_train"].append(train_batched(wl, trainer, sample, cfg, bar))
            bar.set_description_str(tag + " batched infer")
            runs["batched_infer"].append(infer_batched(wl, sample, cfg, bar))
            near += machine.gemm_rate(cfg.gemm_repeats)["seconds_runs"]
            gemm_near.append(near)
            if eager_n:
                es = sample[:eager_n]
                flops["eager_train"].append(3 * sum(wl.forward_flops(x) for x in es))
                flops["eager_infer"].append(sum(infer_flops(x) for x in es))
                bar.set_description_str(tag + " eager train")
                runs["eager_train"].append(train_eager(wl, trainer, es, cfg, bar))
                bar.set_description_str(tag + " eager infer")
                runs["eager_infer"].append(infer_eager(wl, es, cfg, bar))

    gemm_after = machine.gemm_rate(cfg.gemm_repeats)
    unit = gemm_before["flops"]
    samples = gemm_before["seconds_runs"] + [t for near in gemm_near for t in near] + gemm_after["seconds_runs"]
    g = [unit / statistics.median(near) for near in gemm_near]
    gemm = {"shape": gemm_before["shape"], "dtype": "float32", "flops": unit,
            "seconds_runs": samples, "seconds": statistics.median(samples),
            "flops_per_second": unit / statistics.median(samples),
            "flops_per_second_before": gemm_before["flops_per_second"],
            "flops_per_second_runs": g,
            "flops_per_second_after": gemm_after["flops_per_second"],
            "flops_per_second_by_library_before": gemm_before["flops_per_second_by_library"]}

    batched = {"train": _summarize(runs["batched_train"], cfg.instances, cfg.batch, flops["train"], g),
               "infer": _summarize(runs["batched_infer"], cfg.instances, cfg.batch, flops["infer"], g)}
    eager = None
    speedup = {"train": None, "infer": None}
    if eager_n:
        eager = {"train": _summarize(runs["eager_train"], eager_n, cfg.batch, flops["eager_train"], g),
                 "infer": _summarize(runs["eager_infer"], eager_n, cfg.batch, flops["eager_infer"], g)}
        speedup = {k: batched[k]["throughput"] / eager[k]["throughput"] for k in ("train", "infer")}

    result = {
        "workload": cfg.workload,
        "description": getattr(wl, "description", ""),
        "data": data_of(wl),
        "train_pool": len(pool),
        # a loaded FSMPolicy is recorded by its repr: the result stays JSON-ready
        "config": dataclasses.asdict(dataclasses.replace(cfg, policy=str(cfg.policy))),
        "gemm": gemm,
        "batched": batched,
        "eager": eager,
        "eager_instances": eager_n,
        "speedup": speedup,
        "check": check,
        "setup_seconds": setup_seconds,
        "total_seconds": time.perf_counter() - t_start,
        "load_average": {"start": load0, "end": machine.load_average()},
    }
    if info:
        result["machine"] = machine.machine_info()
    return result


def run_cold_start(cfg: Config, progress=True):
    """Compile latency: batched training throughput of the first `cfg.instances` training
    instances of a process, with no warm-up and no GEMM sample before them, against later
    ones. What the caches lack (numba's cache of the core's functions, under NUMBA_CACHE_DIR
    or next to their files, and the fused kernels under HYBRIDBATCH_CACHE_DIR) compiles inside
    the first part: point both at fresh folders for an empty cache. The first minibatch's
    seconds are reported apart, since most compiling happens there.

    Then two more passes of `cfg.instances`: `next`, a permutation of the instances after
    the first ones (as a run draws its sample), which still traces and compiles for the
    signatures the first instances did not show (a child-sum tree's rare arities), and
    `steady`, the reference: once the kernels compiling in the background are done (it waits
    for them), the first instances again, so that it does the same work (a
    data file's first sentences need not be as long as a sample of the rest: the UD file's
    first 512 hold 1.5x the words of another 512)."""
    cfg = cfg.resolved()
    t0 = time.perf_counter()
    wl = make_workload(cfg.workload, hidden=cfg.hidden, data_dir=cfg.data, seed=cfg.seed,
                       **cfg.workload_options)
    wl.hybridize()
    setup_seconds = time.perf_counter() - t0
    trainer = Trainer(wl.parameters(), "sgd", {"learning_rate": cfg.lr})
    pool = list(wl.train_instances())
    n = cfg.instances
    first = _take(pool, n)
    rest = pool[n:] if len(pool) > n else pool
    later = _take(rest, n, np.random.default_rng(cfg.seed * 1000 + 1))
    bar = _progress_bar(3 * n, progress, f"{cfg.workload} cold start")
    with settings(distinct_rows=cfg.distinct_rows), contextlib.closing(bar):
        head = train_batched(wl, trainer, first[:cfg.batch], cfg, bar)
        tail = train_batched(wl, trainer, first[cfg.batch:], cfg, bar) if n > cfg.batch else None
        bar.set_description_str(f"{cfg.workload} next {n}")
        nxt = train_batched(wl, trainer, later, cfg, bar)
        bar.set_description_str(f"{cfg.workload} steady state")
        compiling.wait()
        steady = train_batched(wl, trainer, first, cfg, bar)
    cold_seconds = head["seconds"] + (tail["seconds"] if tail else 0.0)
    res = {"workload": cfg.workload, "data": data_of(wl),
           "config": dataclasses.asdict(dataclasses.replace(cfg, policy=str(cfg.policy))),
           "setup_seconds": setup_seconds,
           "cold": {"instances": n, "seconds": cold_seconds, "throughput": n / cold_seconds,
                    "first_minibatch_seconds": head["seconds"],
                    "first_minibatch_split": head["split"]},
           "next": {"instances": n, "seconds": nxt["seconds"], "throughput": n / nxt["seconds"]},
           "steady": {"instances": n, "seconds": steady["seconds"], "throughput": n / steady["seconds"]}}
    res["cold_over_steady"] = res["cold"]["throughput"] / res["steady"]["throughput"]
    res["next_over_steady"] = res["next"]["throughput"] / res["steady"]["throughput"]
    # what "cold" meant: the caches it started from
    res["caches"] = {v: os.environ.get(v) for v in ("HYBRIDBATCH_CACHE_DIR", "NUMBA_CACHE_DIR")}
    res["machine"] = machine.machine_info()
    return res
