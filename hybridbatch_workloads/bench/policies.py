"""`python -m hybridbatch.bench policies`: every scheduling policy on each workload asked for (W1-W6 by default).

Per workload, the learned policies are trained (`hb.learn_policy`) on the graphs of
LEARN_BATCHES minibatches of training instances and judged on the next `eval_batches`
minibatches, which they never saw. Batch counts and scheduling times come from running each policy on the same
captured GraphViews (so every policy schedules the very same graphs); training throughput
comes from `train_batched` with the policy in the scope, after a warm-up minibatch.
"""
from __future__ import annotations

import dataclasses
import statistics
import sys
import time

from hybridbatch.train.optim import Trainer
from hybridbatch.config import settings
from hybridbatch.schedule import get_policy, lower_bound
from hybridbatch.schedule.learn import capture_views, learn_policy
from hybridbatch.schedule.offline.bounds import tight_lower_bound
from .harness import Config, _NoBar, _minibatches, _progress_bar, train_batched
from .machine import machine_info
from .registry import DEFAULT_GRANULARITY, SYNTHETIC_ONLY, make_workload
from .workload import data_of

WORKLOADS = ("W1", "W2", "W3", "W4-TREEGRU", "W4-2TYPE", "W4-MVRNN", "W5", "W6")
# row name -> a policy name for hb.batching, or ("learn", encoding)
POLICIES = {
    "depth": "depth",
    "agenda": "agenda",
    "tail-last": "tail-last",
    "greedy-frontier": "greedy-frontier",
    "critical-path": "critical-path",
    "fsm-base": ("learn", "base"),
    "fsm-max": ("learn", "max"),
    "fsm-sort": ("learn", "sort"),
    "fsm-phase": ("learn", "phase"),
    "search": "search",
}
SEARCH_ONLY_ONCE = {"search"}   # hundreds of times agenda's time: one timed round, no training runs


class TooFewInstances(ValueError):
    """A workload's training set holds fewer instances than the comparison's minibatches need."""


def _vs_agenda(rounds):
    """Per policy, the median over rounds of its time / agenda's time in the same round:
    the policies take turns within a round, so the host's drift (20% within minutes here)
    cancels out of each ratio."""
    return {row: statistics.median(r[row] / r["agenda"] for r in rounds) for row in rounds[0]}


def _timed_round(policies, views):
    """Seconds per policy to schedule every view once, the policies one after another."""
    times = {}
    for row, policy in policies.items():
        t0 = time.perf_counter()
        for v in views:
            policy(v)
        times[row] = time.perf_counter() - t0
    return times


def _schedule_seconds(policies, views, repeats=15):
    """Per policy, the fastest of `repeats` rounds of scheduling every view once, and its
    ratio to agenda (_vs_agenda). SEARCH_ONLY_ONCE rows get one round, beside agenda."""
    often = {row: p for row, p in policies.items() if row not in SEARCH_ONLY_ONCE}
    rounds = [_timed_round(often, views) for _ in range(repeats)]
    seconds, ratio = {row: min(r[row] for r in rounds) for row in often}, _vs_agenda(rounds)
    once = _timed_round({"agenda": policies["agenda"]} | {row: p for row, p in policies.items()
                                                          if row in SEARCH_ONLY_ONCE}, views)
    for row in SEARCH_ONLY_ONCE & policies.keys():
        seconds[row], ratio[row] = once[row], once[row] / once["agenda"]
    return seconds, ratio


MEASURED_BATCHES = 2     # timed training minibatches per policy and round, after one warm-up
MEASURE_ROUNDS = 5       # rounds in which every policy trains on them in turn
LEARN_BATCHES = 4        # minibatches a learned policy is trained on


def _training_runs(wl, policies, cfg, measured, lr):
    """Per policy: the fastest round's training throughput and whole-flush scheduling time
    (Stats: GraphView, policy, plan) over the measured minibatches, policies taking turns,
    and that scheduling time's ratio to agenda's (_vs_agenda)."""
    batch = cfg.batch
    trainer = Trainer(wl.parameters(), "sgd", {"learning_rate": lr})
    cfgs = {row: dataclasses.replace(cfg, policy=p) for row, p in policies.items()}
    for row in policies:
        train_batched(wl, trainer, measured[:batch], cfgs[row], _NoBar())          # warm-up
    best, rounds = {row: None for row in policies}, []
    with settings(plan_cache_size=0):      # the rounds repeat minibatches: every flush must run its policy
        for _ in range(MEASURE_ROUNDS):
            schedule = {}
            for row in policies:
                run = train_batched(wl, trainer, measured[batch:], cfgs[row], _NoBar())
                schedule[row] = run["split"]["schedule"]
                if best[row] is None or run["seconds"] < best[row]["seconds"]:
                    best[row] = run
            rounds.append(schedule)
    n = len(measured[batch:])
    ratio = _vs_agenda(rounds)
    return {row: {"train_throughput": n / run["seconds"], "plan_schedule_seconds": run["split"]["schedule"],
                  "plan_schedule_vs_agenda": ratio[row]} for row, run in best.items()}


def judged_views(wl, pool, batch, eval_batches, granularity):
    """The GraphViews every policy is judged on: the eval_batches minibatches right after
    the LEARN_BATCHES a learned policy trains on (so it never saw them)."""
    judged = _minibatches(pool[batch * LEARN_BATCHES:batch * (LEARN_BATCHES + eval_batches)], batch)
    return [v for mb in judged for v in capture_views(wl.loss, mb, granularity)]


def compare_workload(name, hidden=256, batch=64, eval_batches=4, measure=True, data=None, seed=0,
                     lr=0.05, progress=True, workload=None):
    """One workload's row of the comparison: per policy, batches, bound, times, throughput.

    `workload`: an already built Workload to use instead of building `name` (the HTML report
    compares policies on the workload it ran, with its data options)."""
    wl = workload if workload is not None else workload_on(name, data, hidden=hidden, seed=seed)
    wl.hybridize()
    granularity = DEFAULT_GRANULARITY.get(name, "op")
    pool = list(wl.train_instances())
    minibatches = LEARN_BATCHES + eval_batches + (1 + MEASURED_BATCHES if measure else 0)
    need = batch * minibatches
    if len(pool) < need:
        raise TooFewInstances(f"{name}: {len(pool)} training instances, the comparison needs {need} "
                              f"({minibatches} minibatches of {batch}); use a smaller --batch or "
                              f"--eval-batches")
    learn_on = pool[:batch * LEARN_BATCHES]
    measured = pool[batch * (LEARN_BATCHES + eval_batches):need]
    views = judged_views(wl, pool, batch, eval_batches, granularity)
    bound = sum(lower_bound(v) for v in views)
    tight = sum(tight_lower_bound(v) for v in views)
    cfg = Config(workload=name, hidden=hidden, batch=batch, granularity=granularity, lr=lr).resolved()
    rows, policies = {}, {}
    for row, spec in POLICIES.items():
        learn_seconds = None
        if isinstance(spec, tuple):
            t0 = time.perf_counter()
            policy = learn_policy(wl.loss, learn_on, encoding=spec[1], seed=seed, progress=False,
                                  granularity=granularity, batch_size=batch)
            learn_seconds = time.perf_counter() - t0
        else:
            policy = get_policy(spec)
        policies[row] = policy
        batches = sum(len(policy(v)[1]) - 1 for v in views)
        rows[row] = {"batches": batches, "lower_bound": bound, "ratio": batches / bound if bound else None,
                     "ratio_tight": batches / tight if tight else None, "learn_seconds": learn_seconds}
        if progress:
            print(f"  {name} {row}: {batches} batches (bound {bound})", file=sys.stderr)
    seconds, ratio = _schedule_seconds(policies, views)
    for row in policies:
        rows[row].update(schedule_seconds=seconds[row], schedule_vs_agenda=ratio[row])
    if measure:
        trained = {row: p for row, p in policies.items() if row not in SEARCH_ONLY_ONCE}
        for row, figures in _training_runs(wl, trained, cfg, measured, lr).items():
            rows[row].update(figures)
    return {"workload": name, "data": data_of(wl),
            "granularity": granularity,
            "eval_minibatches": eval_batches, "lower_bound": bound, "tight_lower_bound": tight, "policies": rows}


def workload_on(name, data, hidden=256, seed=0):
    """The workload on the real data under `data` where that folder holds its files, else on
    its synthetic generator, said on stderr: one --data serves every workload compared."""
    if data is not None and name not in SYNTHETIC_ONLY:
        try:
            return make_workload(name, hidden=hidden, data_dir=data, seed=seed)
        except FileNotFoundError as e:
            print(f"{name}: {e}; it runs on synthetic data", file=sys.stderr)
    return make_workload(name, hidden=hidden, seed=seed)



def compare_policies(workloads=WORKLOADS, progress=True, **options):
    """compare_workload for each workload; returns a JSON-ready dict."""
    bar = _progress_bar(len(workloads), progress, "policies")
    results = []
    try:
        for name in workloads:
            bar.set_description_str(f"policies {name}")
            results.append(compare_workload(name, progress=False, **options))
            bar.update(1)
    finally:
        bar.close()
    return {"policies": list(POLICIES), "options": options, "results": results, "machine": machine_info()}


def format_policies(res):
    """Batches (ratio to the lower bound) per workload and policy, then learning times."""
    names = res["policies"]
    width = max(max(len(n) for n in names), 13) + 2
    head = f"{'workload':<12}{'bound':>7}{'tight':>7}" + "".join(f"{n:>{width}}" for n in names)
    lines = ["batches executed (x ED-Batch's lower bound), learned policies judged on unseen minibatches;",
             "tight = max(ED-Batch's bound, the path-pair bound, the grouped bound, the part bound)", head]
    for r in res["results"]:
        cells = [f"{p['batches']} ({p['ratio']:.2f})" if p["ratio"] else str(p["batches"])
                 for p in (r["policies"][n] for n in names)]
        lines.append(f"{r['workload']:<12}{r['lower_bound']:>7}{r['tight_lower_bound']:>7}"
                     + "".join(f"{c:>{width}}" for c in cells))
    lines += ["", "policy learning seconds / policy time vs agenda [flush scheduling time vs agenda] / "
                  "training instances per second"]
    for r in res["results"]:
        parts = []
        for n in names:
            p = r["policies"][n]
            learn = "-" if p["learn_seconds"] is None else f"{p['learn_seconds']:.1f}s"
            thr = ""
            if "train_throughput" in p:
                thr = f" [{p['plan_schedule_vs_agenda']:.2f}x] {p['train_throughput']:.0f}/s"
            parts.append(f"{n} {learn} {p['schedule_vs_agenda']:.2f}x{thr}")
        lines.append(f"{r['workload']:<12}" + "; ".join(parts))
    return "\n".join(lines)


def plot_policies(res, path):
    """Grouped bars: batches / lower bound per workload, one bar per policy."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, results = res["policies"], res["results"]
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(8, 1.4 * len(results)), 4.5))
    for k, n in enumerate(names):
        xs = [i + (k - (len(names) - 1) / 2) * width for i in range(len(results))]
        ax.bar(xs, [r["policies"][n]["ratio"] or 0 for r in results], width, label=n)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(results)), [r["workload"] for r in results])
    ax.set_ylabel("batches / lower bound")
    ax.set_title("Batches executed per scheduling policy (1.0 = lower bound)")
    ax.legend(ncol=4, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
