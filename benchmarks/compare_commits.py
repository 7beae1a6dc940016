"""Training and inference throughput of two commits, in alternating runs of one invocation.

    python benchmarks/compare_commits.py BASE [HEAD] --workloads W1,W2 --rounds 3 \
        --data W1=../shared/data/sst --data W2=../shared/data --json ab.json

Each commit is checked out into a temporary worktree; every round runs each workload once per
commit (`python -m hybridbatch.bench W --no-eager --repeats 1`), alternating which commit
goes first, pinned to one core (`taskset -c 0` where it exists) with one thread. The shared
machine drifts, so only ratios of runs taken side by side are compared: the report gives each
commit's median throughput and the median of the per-round ratios (HEAD / BASE).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from hybridbatch_workloads.bench.machine import ONE_THREAD, pinned  # noqa: E402



def _checkout(repo, rev, where):
    subprocess.run(["git", "-C", repo, "worktree", "add", "--detach", "-q", where, rev], check=True)
    return subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def _run(tree, workload, args, data, out):
    cmd = [sys.executable, "-m", "hybridbatch.bench", workload, "--no-eager", "--repeats", "1",
           "--instances", str(args.instances), "--warmup", str(args.warmup), "--no-check",
           "--no-progress", "--gemm-repeats", "1", "--json", out]
    if data:
        cmd += ["--data", os.path.abspath(data)]
    cmd = pinned(cmd, args.core)
    env = dict(os.environ, PYTHONPATH=tree, **ONE_THREAD)
    subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        res = json.load(f)
    return {k: res["batched"][k]["throughput"] for k in ("train", "infer")}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("head", nargs="?", default="HEAD")
    ap.add_argument("--workloads", default="W1,W2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--instances", type=int, default=1280)
    ap.add_argument("--warmup", type=int, default=128)
    ap.add_argument("--data", action="append", default=[], metavar="W=DIR",
                    help="a workload's real data folder (synthetic data otherwise)")
    ap.add_argument("--core", default="0", help="the core taskset pins the runs to")
    ap.add_argument("--json", help="write the runs and ratios here")
    args = ap.parse_args(argv)
    repo = subprocess.run(["git", "rev-parse", "--show-toplevel"], check=True, capture_output=True,
                          text=True).stdout.strip()
    data = dict(d.split("=", 1) for d in args.data)
    workloads = args.workloads.split(",")
    tmp = tempfile.mkdtemp(prefix="compare_commits_")
    trees = {}
    try:
        revs = {}
        for side, rev in (("base", args.base), ("head", args.head)):
            trees[side] = os.path.join(tmp, side)
            revs[side] = _checkout(repo, rev, trees[side])
        runs = {w: {"base": [], "head": []} for w in workloads}
        for w in workloads:      # a first run per tree compiles and caches its kernels
            for side in ("base", "head"):
                _run(trees[side], w, argparse.Namespace(**{**vars(args), "instances": 64, "warmup": 8}),
                     data.get(w), os.path.join(tmp, "warm.json"))
        for r in range(args.rounds):
            order = ("base", "head") if r % 2 == 0 else ("head", "base")
            for w in workloads:
                for side in order:
                    res = _run(trees[side], w, args, data.get(w), os.path.join(tmp, "run.json"))
                    runs[w][side].append(res)
                    print(f"round {r + 1} {w} {side} ({revs[side]}): train {res['train']:.1f}/s, "
                          f"infer {res['infer']:.1f}/s", flush=True)
        report = {"commits": revs, "rounds": args.rounds, "instances": args.instances, "workloads": {}}
        for w in workloads:
            rep = {}
            for k in ("train", "infer"):
                b = [x[k] for x in runs[w]["base"]]
                h = [x[k] for x in runs[w]["head"]]
                rep[k] = {"base": b, "head": h, "base_median": statistics.median(b),
                          "head_median": statistics.median(h),
                          "ratio_median": statistics.median(y / x for x, y in zip(b, h))}
            report["workloads"][w] = rep
            print(f"{w}: train {rep['train']['base_median']:.1f} -> {rep['train']['head_median']:.1f}/s "
                  f"(ratio {rep['train']['ratio_median']:.3f}), infer {rep['infer']['base_median']:.1f} -> "
                  f"{rep['infer']['head_median']:.1f}/s (ratio {rep['infer']['ratio_median']:.3f})")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
    finally:
        for t in trees.values():
            subprocess.run(["git", "-C", repo, "worktree", "remove", "--force", t], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
