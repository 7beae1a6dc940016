"""The docs/workloads.md variants: a hidden-size sweep and a minibatch-size sweep, and their plot."""
from __future__ import annotations

import dataclasses

from .harness import run_benchmark

SWEEPS = {
    "hidden": (32, 64, 128, 256, 512),        # hidden = embedding
    "batch": (1, 8, 32, 64, 128, 256),
}


def run_sweep(cfg, key, values=None, progress=True):
    """run_benchmark for each value of `key` ("hidden" or "batch"), other settings from cfg."""
    if key not in SWEEPS:
        raise ValueError(f"unknown sweep {key!r}; expected one of {sorted(SWEEPS)}")
    values = list(SWEEPS[key] if values is None else values)
    results = []
    for i, v in enumerate(values):
        res = run_benchmark(dataclasses.replace(cfg, **{key: v}), progress=progress, info=(i == 0))
        results.append(res)
    machine = results[0].pop("machine", None) if results else None
    return {"workload": results[0]["workload"] if results else cfg.workload, "sweep": key,
            "values": values, "machine": machine, "results": results}


def plot_sweep(sweep, path):
    """Throughput (instances/s, log scale) and speedup against the swept value, as a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key, xs, rs = sweep["sweep"], sweep["values"], sweep["results"]
    cfg = rs[0]["config"] if rs else {}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {("batched", "train"): ("C0", "-", "o"), ("batched", "infer"): ("C0", "--", "s"),
              ("eager", "train"): ("C3", "-", "o"), ("eager", "infer"): ("C3", "--", "s")}
    for (mode, phase), (color, ls, mk) in styles.items():
        pts = [(x, r[mode][phase]["throughput"]) for x, r in zip(xs, rs) if r.get(mode)]
        if pts:
            ax1.plot(*zip(*pts), color=color, linestyle=ls, marker=mk,
                     label=f"{mode} {'training' if phase == 'train' else 'inference'}")
    ax1.set_yscale("log")
    ax1.set_ylabel("instances / s")
    ax1.set_title(f"{sweep['workload']} throughput")
    for phase, ls, mk in (("train", "-", "o"), ("infer", "--", "s")):
        pts = [(x, r["speedup"][phase]) for x, r in zip(xs, rs) if r["speedup"][phase] is not None]
        if pts:
            ax2.plot(*zip(*pts), color="C2", linestyle=ls, marker=mk,
                     label="training" if phase == "train" else "inference")
    ax2.axhline(1.0, color="grey", linewidth=0.8)
    ax2.set_ylabel("batched / eager throughput")
    ax2.set_title(f"{sweep['workload']} speedup over eager")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs)
        ax.set_xticklabels([str(x) for x in xs])
        ax.set_xlabel("hidden (= embedding)" if key == "hidden" else "minibatch size")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fixed = (f"minibatch {cfg.get('batch')}" if key == "hidden" else f"hidden {cfg.get('hidden')}")
    fig.suptitle(f"{sweep['workload']}: {fixed}, policy {cfg.get('policy')}, granularity "
                 f"{cfg.get('granularity')}, one thread")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
