"""Command line of `python -m hybridbatch.bench` (see `main`)."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from ..cli_args import int_at_least, output_file, policy_arg, positive_float
from ..data import DataFormatError
from hybridbatch.schedule import DEFAULT_POLICY, POLICIES
from .harness import Config, run_benchmark, run_cold_start
from .html_report import write_report
from .policies import (WORKLOADS as POLICY_WORKLOADS, TooFewInstances, compare_policies, format_policies,
                       plot_policies)
from .registry import WORKLOADS, UnknownWorkload
from .workload import SyntheticOnly
from .report import format_result, format_sweep
from .sweep import SWEEPS, plot_sweep, run_sweep

EPILOG = """\
Measures training (forward + backward + SGD step per minibatch) and inference (forward,
reading the logits) throughput of the batched run and of the eager run in one process, with
the speedups, batches against the lower bound, the split of a training step and efficiency
against the single-thread float32 GEMM rate. One thread per docs/workloads.md: when
OMP/OPENBLAS/MKL/NUMBA_NUM_THREADS are not all set, the command re-executes itself with the
missing ones set to 1. A progress bar goes to stderr, the table to stdout.

examples:
  python -m hybridbatch.bench W1
  python -m hybridbatch.bench W1 --data ../shared/data/sst --json w1.json
  python -m hybridbatch.bench W1 --sweep hidden --json w1_hidden.json   # + w1_hidden.png
  python -m hybridbatch.bench W1 --report w1.html   # + policies, explain table and trace in one page
  python -m hybridbatch.bench policies --data ../shared/data --json policies.json  # + policies.png

`policies` compares every scheduling policy (depth, agenda, greedy-frontier, critical-path,
the learned fsm-base/max/sort/phase, and search) on every workload (or --workloads):
batches executed against the lower bound, policy learning time, scheduling time against
agenda and training throughput (not for search, whose planning is far slower than the
rest); it writes a bar chart PNG.
"""


def build_parser():
    ap = argparse.ArgumentParser(prog="python -m hybridbatch.bench", epilog=EPILOG,
                                 description="Benchmark a reference workload, batched vs eager.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", metavar="WORKLOAD", type=str.upper, choices=sorted(WORKLOADS) + ["POLICIES"],
                    help="one of " + ", ".join(WORKLOADS) + ", or policies")
    ap.add_argument("--workloads", default=",".join(POLICY_WORKLOADS),
                    help=f"policies: comma-separated workloads ({','.join(POLICY_WORKLOADS)})")
    ap.add_argument("--eval-batches", type=int_at_least(1), default=4,
                    help="policies: unseen minibatches each policy is judged on (4)")
    ap.add_argument("--no-throughput", action="store_true",
                    help="policies: count batches only, skip the training runs")
    ap.add_argument("--hidden", type=int_at_least(1), default=256, help="hidden size = embedding size (256)")
    ap.add_argument("--batch", type=int_at_least(1), default=64, help="minibatch size (64)")
    ap.add_argument("--policy", type=policy_arg, default=DEFAULT_POLICY,
                    help=f"scheduling policy: {', '.join(sorted(POLICIES))}, or a saved FSM policy file "
                         f"({DEFAULT_POLICY})")
    ap.add_argument("--granularity", choices=("block", "op", "auto"), default=None,
                    help="recording granularity (default: the workload's, block for W1-W3)")
    ap.add_argument("--data", metavar="DIR", default=None,
                    help="folder of the real data (W1: the SST folder); default: synthetic data")
    ap.add_argument("--json", metavar="FILE", type=output_file, help="write every figure (and machine info) here")
    ap.add_argument("--instances", type=int_at_least(1), default=1280, help="measured instances per run (1280)")
    ap.add_argument("--warmup", type=int_at_least(0), default=128, help="warm-up instances (128)")
    ap.add_argument("--repeats", type=int_at_least(1), default=3, help="runs; figures are medians (3)")
    ap.add_argument("--eager-instances", type=int_at_least(0), default=None,
                    help="instances of each eager run (whole minibatches of at least 128 instances: eager "
                         "is slow, and a part minibatch would pay its update more often)")
    ap.add_argument("--eager-warmup", type=int_at_least(0), default=16, help="eager warm-up instances (16)")
    ap.add_argument("--no-eager", action="store_true", help="skip the eager runs (no speedups)")
    ap.add_argument("--sweep", choices=sorted(SWEEPS),
                    help="hidden: 32..512; batch: 1..256 (docs/workloads.md variants); writes a PNG")
    ap.add_argument("--plot", metavar="PNG", type=output_file, help="plot path for --sweep and policies (default: next to "
                                                  "--json, or sweep_<WORKLOAD>.png / policies.png)")
    ap.add_argument("--report", metavar="HTML", type=output_file,
                    help="also write one self-contained HTML page: the run's (or sweep's) plot and "
                         "summary, a policy table, the explanation of a training minibatch and the "
                         "trace of a few training steps")
    ap.add_argument("--lr", type=positive_float, default=0.05, help="SGD learning rate (0.05)")
    ap.add_argument("--seed", type=int_at_least(0), default=0)
    ap.add_argument("--gemm-repeats", type=int_at_least(1), default=7,
                    help="timed GEMMs before and after the runs (7 each)")
    ap.add_argument("--synthetic-train", type=int_at_least(1), default=None,
                    help="synthetic training set size (workload default when not given)")
    ap.add_argument("--synthetic-dev", type=int_at_least(0), default=None, help="synthetic dev set size")
    ap.add_argument("--no-check", action="store_true", help="skip the batched-vs-eager loss check")
    ap.add_argument("--no-distinct-rows", action="store_true",
                    help="run every row of a block's integer-keyed part (default: once per distinct key)")
    ap.add_argument("--cold", action="store_true",
                    help="compile latency: training throughput of the first --instances instances of "
                         "the process (no warm-up) against two later passes of --instances; run with "
                         "fresh HYBRIDBATCH_CACHE_DIR and NUMBA_CACHE_DIR folders for an empty cache")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    return ap


# flags of one workload's benchmark, and of the policies comparison: given to the other
# command, they would be silently ignored
SINGLE_ONLY = ("policy", "granularity", "instances", "warmup", "repeats", "eager_instances", "eager_warmup",
               "no_eager", "sweep", "gemm_repeats", "synthetic_train", "synthetic_dev", "no_check",
               "no_distinct_rows", "cold", "report")
POLICIES_ONLY = ("workloads", "eval_batches", "no_throughput")
COLD_IGNORES = ("warmup", "repeats", "no_eager", "eager_instances", "eager_warmup")


def check_flags_apply(ap, args):
    """A usage error for a flag (not at its default) that the command given does not read."""
    policies = args.workload == "POLICIES"
    for dest in SINGLE_ONLY if policies else POLICIES_ONLY:
        if getattr(args, dest) != ap.get_default(dest):
            flag = "--" + dest.replace("_", "-")
            ap.error(f"{flag} applies to one workload's benchmark, not to policies" if policies
                     else f"{flag} applies to policies only")
    if args.cold and args.sweep:
        ap.error("--cold measures one configuration, not a --sweep")
    if args.cold and args.report:
        ap.error("--report applies to a run or a --sweep, not to --cold")
    if args.plot and not (policies or args.sweep):
        ap.error("--plot applies to --sweep and policies only")
    if args.sweep and not args.report and getattr(args, args.sweep) != ap.get_default(args.sweep):
        ap.error(f"--{args.sweep} is what --sweep {args.sweep} varies (it sizes only --report's policy "
                 f"and explain sections): leave it out")
    if args.cold:
        for dest in COLD_IGNORES:
            if getattr(args, dest) != ap.get_default(dest):
                ap.error(f"--{dest.replace('_', '-')} does not apply to --cold (it times the first "
                         f"instances, the next and the steady state, batched)")
    if args.data is not None:
        for dest in ("synthetic_train", "synthetic_dev"):
            if getattr(args, dest) is not None:
                ap.error(f"--{dest.replace('_', '-')} sizes the synthetic data, read without --data")


def config_from_args(args):
    options = {}
    if args.synthetic_train is not None:
        options["synthetic_train"] = args.synthetic_train
    if args.synthetic_dev is not None:
        options["synthetic_dev"] = args.synthetic_dev
    return Config(workload=args.workload, hidden=args.hidden, batch=args.batch, policy=args.policy,
                  granularity=args.granularity, data=args.data, instances=args.instances,
                  warmup=args.warmup, repeats=args.repeats, eager=not args.no_eager,
                  eager_instances=args.eager_instances, eager_warmup=args.eager_warmup, lr=args.lr,
                  seed=args.seed, gemm_repeats=args.gemm_repeats, check=not args.no_check,
                  distinct_rows=not args.no_distinct_rows,
                  workload_options=options)


def _finite(obj):
    """obj with every NaN / inf float (a diverged loss, a rate over zero seconds) as None:
    JSON has no such numbers, and a bare NaN is refused by strict parsers."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def check_outputs_differ(ap, args):
    """A usage error where two outputs (--json, --plot or its default next to --json,
    --report) would be one file: the later one overwrote the other."""
    plots = args.sweep or args.workload == "POLICIES"
    outputs = [("--json", args.json), ("--plot", args.plot), ("--report", args.report)]
    if plots and args.json and not args.plot:
        outputs.append(("the plot beside --json", os.path.splitext(args.json)[0] + ".png"))
    seen = {}
    for flag, path in outputs:
        if path is None:
            continue
        other = seen.setdefault(os.path.realpath(path), flag)
        if other != flag:
            ap.error(f"{other} and {flag} name one file, {path}: give them different paths")


def _write_json(path, obj):
    with open(path, "w") as f:
        json.dump(_finite(obj), f, indent=2, allow_nan=False)
        f.write("\n")


def _report_with_plot(res, args, plot_fn, format_fn, default_png):
    """Plot res (next to --json, or default_png), print its table, write --json."""
    plot = args.plot or (os.path.splitext(args.json)[0] + ".png" if args.json else default_png)
    plot_fn(res, plot)
    res["plot"] = plot
    print(format_fn(res))
    print(f"plot: {plot}")
    if args.json:
        _write_json(args.json, res)
        print(f"json: {args.json}")
    return 0


def _policies(args, progress):
    names = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    if not names:
        raise UnknownWorkload(f"--workloads names no workload; expected some of {', '.join(WORKLOADS)}")
    unknown = sorted(set(names) - set(WORKLOADS))
    if unknown:
        raise UnknownWorkload(f"unknown workload(s) {unknown}; expected some of {', '.join(WORKLOADS)}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UnknownWorkload(f"--workloads names {', '.join(twice)} more than once")
    res = compare_policies(names, progress=progress, hidden=args.hidden, batch=args.batch,
                           eval_batches=args.eval_batches, measure=not args.no_throughput,
                           data=args.data, seed=args.seed, lr=args.lr)
    return _report_with_plot(res, args, plot_policies, format_policies, "policies.png")


def _cold(cfg, args, progress):
    res = run_cold_start(cfg, progress=progress)
    c, x, w = res["cold"], res["next"], res["steady"]
    print(f"{res['workload']} ({res['data']}), granularity {res['config']['granularity']}, training: "
          f"first {c['instances']} instances {c['throughput']:.1f} inst/s (first minibatch "
          f"{c['first_minibatch_seconds']:.2f} s), next {x['throughput']:.1f} inst/s, steady "
          f"{w['throughput']:.1f} inst/s; first / steady {res['cold_over_steady']:.3f}, next / steady "
          f"{res['next_over_steady']:.3f}")
    if args.json:
        _write_json(args.json, res)
        print(f"json: {args.json}")
    return 0


def main(argv=None):
    ap = build_parser()
    args = ap.parse_args(argv)
    check_flags_apply(ap, args)
    check_outputs_differ(ap, args)
    cfg = config_from_args(args)
    progress = not args.no_progress
    try:
        if args.workload == "POLICIES":
            return _policies(args, progress)
        if args.cold:
            return _cold(cfg, args, progress)
        if args.sweep:
            res = run_sweep(cfg, args.sweep, progress=progress)
            _report_with_plot(res, args, plot_sweep, format_sweep, f"sweep_{cfg.workload.upper()}.png")
        else:
            res = run_benchmark(cfg, progress=progress)
            print(format_result(res))
            if args.json:
                _write_json(args.json, res)
                print(f"json: {args.json}")
        if args.report:
            write_report(args.report, cfg, res)
            print(f"report: {args.report}")
    except (UnknownWorkload, TooFewInstances, FileNotFoundError, DataFormatError, SyntheticOnly) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:       # Ctrl-C: what ran is lost, no traceback needed
        print("interrupted", file=sys.stderr)
        return 130
    return 0
