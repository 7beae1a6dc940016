"""The models users write, measured beside the tuned ones, in alternating runs of one invocation.

    python benchmarks/natural.py --rounds 3 --instances 640 --data ../shared/data --json natural.json
    python benchmarks/natural.py --cold --peer ...

Every figure is one `python -m hybridbatch.bench NAME --repeats 1 --json ...` run in its own
process, pinned to one core (`taskset -c`, where it exists) with one thread. Each round runs,
in groups whose order flips from round to round:

- W1 (the tuned model, its block granularity) and W1-NATURAL (the plain formulation,
  `hybridbatch_workloads/models/natural.py`, at --granularity: hb.batching's default);
- W2 and W2-NATURAL, and with --peer the PyTorch tagger (`benchmarks/peers/pytorch_tagger.py`,
  from benchmarks/peers/.venv: `make peers`) on the same sentences;
- CHILDSUM at block granularity (with its eager run), op and auto.

The shared machine drifts, so ratios are taken between runs of one round and the report gives
the median of the per-round ratios, beside each run's median throughput. After the rounds,
one run per natural model under every other policy of {--policy, hb.batching's default,
tail-last} counts batches against ED-Batch's lower bound (the rounds count them under
--policy). With --cold, CHILDSUM's compile latency at --granularity: `python -m hybridbatch.bench CHILDSUM
--cold` with HYBRIDBATCH_CACHE_DIR and NUMBA_CACHE_DIR in fresh folders (every numba function
and fused kernel compiles), in fresh folders after the install step's warm-up with CHILDSUM at
hidden 128 (every hybridbatch function compiled, the cell's kernels at its own size never: a
new cell), and in fresh folders after the install step's warm-up (what `make` leaves); each
process's first --cold-instances against its own steady pass over the same instances
(harness.run_cold_start).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from tqdm import tqdm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from hybridbatch_workloads.bench.machine import ONE_THREAD, pinned  # noqa: E402

PEER = os.path.join(ROOT, "benchmarks", "peers", "pytorch_tagger.py")
PEER_PYTHON = os.path.join(ROOT, "benchmarks", "peers", ".venv", "bin", "python")
CHILDSUM_GRANULARITIES = ("block", "op", "auto")
COUNTED = ("W1-NATURAL", "W2-NATURAL", "CHILDSUM")


def _bench(args, workload, out, policy, granularity=None, eager=False, cold=False, env=None):
    """One harness run in its own process (`cold`: its --cold passes); its JSON result."""
    cmd = [sys.executable, "-m", "hybridbatch.bench", workload, "--instances", str(args.instances), "--no-check",
           "--no-progress", "--gemm-repeats", "1", "--policy", policy, "--json", out]
    if cold:
        cmd += ["--cold"]
    else:
        cmd += ["--repeats", "1", "--warmup", str(args.warmup)]
        cmd += ["--eager-instances", str(min(args.eager_instances, args.instances))] if eager else ["--no-eager"]
    if granularity:
        cmd += ["--granularity", granularity]
    if args.data:
        cmd += ["--data", os.path.abspath(args.data)]
    env = dict(os.environ, PYTHONPATH=ROOT, **ONE_THREAD, **(env or {}))
    subprocess.run(pinned(cmd, args.core), cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def _figures(res):
    """Throughput and batch counts of a harness result."""
    out = {}
    for phase in ("train", "infer"):
        b = res["batched"][phase]
        out[phase] = b["throughput"]
        out[phase + "_counts"] = {k: b.get(k) for k in ("batches", "lower_bound", "batches_over_lower_bound")}
    if res.get("eager"):
        out["eager"] = {phase: res["eager"][phase]["throughput"] for phase in ("train", "infer")}
    return out


def _write_sentences(args, path):
    """W2's training sentences, encoded as the hybridbatch workload encodes them, for the peer."""
    from hybridbatch_workloads.bench.registry import make_workload
    wl = make_workload("W2", data_dir=args.data)
    with open(path, "w") as f:
        json.dump({"vocab_size": len(wl.word_vocab), "source": args.data or "synthetic_tagging",
                   "train": [[x.tokens, x.tag_ids] for x in wl.train_instances()]}, f)


def _peer(args, sentences, out):
    cmd = [args.peer_python, PEER, "--sentences", sentences, "--repeats", "1", "--instances",
           str(args.instances), "--warmup", str(args.warmup), "--json", out]
    subprocess.run(pinned(cmd, args.core), cwd=ROOT, env=dict(os.environ, **ONE_THREAD), check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        res = json.load(f)
    return {"train": res["train"], "infer": res["infer"], "torch": res["torch"]}


def _groups(args):
    """Per group, its runs: (label, how to run it)."""
    g = args.granularity
    groups = [[("W1", dict(workload="W1")), ("W1-NATURAL", dict(workload="W1-NATURAL", granularity=g))],
              [("W2", dict(workload="W2")), ("W2-NATURAL", dict(workload="W2-NATURAL", granularity=g))],
              [(f"CHILDSUM {k}", dict(workload="CHILDSUM", granularity=k, eager=k == "block"))
               for k in CHILDSUM_GRANULARITIES]]
    if args.peer:
        groups[1].append(("PYTORCH W2", None))
    return groups


def _ratios(runs, pairs):
    """{name: {phase: median over rounds of num / den}} for pairs (name, num label, den label)."""
    out = {}
    for name, num, den in pairs:
        out[name] = {phase: statistics.median(a[phase] / b[phase] for a, b in zip(runs[num], runs[den]))
                     for phase in ("train", "infer")}
    return out


COLD_CASES = (("empty_cache", "empty caches"), ("new_cell", "a new cell"), ("installed", "after install"))
NEW_CELL_OTHER_HIDDEN = 128     # the "new cell" caches hold the child-sum cell's kernels at this size only


def _warm_up(args, env, hidden=None):
    """The install step's warm-up into the caches `env` names (at `hidden` instead of the
    workloads' default size)."""
    cmd = [sys.executable, "-m", "hybridbatch_workloads.bench.warm_up"]
    if hidden is not None:
        cmd += ["--hidden", str(hidden)]
    subprocess.run(pinned(cmd, args.core), cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, **ONE_THREAD, **env),
                   check=True, stdout=subprocess.DEVNULL)


def _cold(args, tmp):
    """CHILDSUM --cold in three states of the caches (COLD_CASES): both empty (every numba
    function and kernel compiles); after the install step's warm-up with CHILDSUM at hidden
    128 (every hybridbatch function compiled, the cell's kernels at its hidden size never:
    they compile); and after the install step's warm-up as `make` runs it."""
    out = {}
    for key, _ in COLD_CASES:
        folder = os.path.join(tmp, key)
        caches = {"HYBRIDBATCH_CACHE_DIR": os.path.join(folder, "kernels"),
                  "NUMBA_CACHE_DIR": os.path.join(folder, "numba")}
        if key != "empty_cache":
            _warm_up(args, caches, hidden=NEW_CELL_OTHER_HIDDEN if key == "new_cell" else None)
        cold_args = argparse.Namespace(**{**vars(args), "instances": args.cold_instances})
        out[key] = _bench(cold_args, "CHILDSUM", os.path.join(tmp, "cold.json"), args.policy,
                          granularity=args.granularity, cold=True, env=caches)
    return out


def run(args):
    tmp = tempfile.mkdtemp(prefix="natural_")
    try:
        groups = _groups(args)
        sentences = None
        if args.peer:
            sentences = os.path.join(tmp, "sentences.json")
            _write_sentences(args, sentences)
        others = [p for p in dict.fromkeys([args.policy, args.default_policy, "tail-last"]) if p != args.policy]
        total = args.rounds * sum(map(len, groups)) + len(others) * len(COUNTED) + len(COLD_CASES) * args.cold
        bar = tqdm(total=total, desc="natural", unit="run", file=sys.stderr, dynamic_ncols=True, leave=False)
        runs = {label: [] for group in groups for label, _ in group}
        out = os.path.join(tmp, "run.json")
        for r in range(args.rounds):
            for group in groups:
                for label, spec in (group if r % 2 == 0 else reversed(group)):
                    bar.set_description_str(f"round {r + 1}/{args.rounds} {label}")
                    if spec is None:
                        runs[label].append(_peer(args, sentences, out))
                    else:
                        runs[label].append(_figures(_bench(args, out=out, policy=args.policy, **spec)))
                    bar.update()
        # CHILDSUM eager, from the block run's process
        runs["CHILDSUM eager"] = [x["eager"] for x in runs["CHILDSUM block"]]
        counts = {name: {args.policy: runs[f"{name} block" if name == "CHILDSUM" else name][0]}
                  for name in ("W1", "W2") + COUNTED}
        for policy in others:
            for name in COUNTED:
                bar.set_description_str(f"{name} under {policy}")
                granularity = "block" if name == "CHILDSUM" else args.granularity
                counts[name][policy] = _figures(_bench(args, name, out, policy, granularity=granularity))
                bar.update()
        cold = None
        if args.cold:
            bar.set_description_str("CHILDSUM cold start")
            cold = _cold(args, tmp)
            bar.update(len(COLD_CASES))
        bar.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    pairs = [("W1 natural / tuned", "W1-NATURAL", "W1"), ("W2 natural / tuned", "W2-NATURAL", "W2"),
             *[(f"CHILDSUM {k} / eager", f"CHILDSUM {k}", "CHILDSUM eager") for k in CHILDSUM_GRANULARITIES],
             ("CHILDSUM op / block", "CHILDSUM op", "CHILDSUM block"),
             ("CHILDSUM auto / block", "CHILDSUM auto", "CHILDSUM block")]
    if args.peer:
        pairs += [("W2 hybridbatch / pytorch", "W2", "PYTORCH W2"),
                  ("W2 natural / pytorch", "W2-NATURAL", "PYTORCH W2")]
    return {
        "config": {k: v for k, v in vars(args).items() if k != "json"},
        "throughput_medians": {label: {phase: statistics.median(x[phase] for x in xs)
                                       for phase in ("train", "infer")} for label, xs in runs.items()},
        "ratios": _ratios(runs, pairs),
        "batches": {name: {policy: {**{phase: f[phase + "_counts"] for phase in ("train", "infer")},
                                    "throughput": {phase: f[phase] for phase in ("train", "infer")}}
                           for policy, f in by_policy.items()} for name, by_policy in counts.items()},
        "cold_start": cold,
        "runs": runs,
    }


def _fmt_counts(c):
    return f"{c['batches']} / {c['lower_bound']} = {c['batches_over_lower_bound']:.2f}x"


def format_report(rep):
    cfg = rep["config"]
    lines = [f"{cfg['rounds']} rounds, {cfg['instances']} instances per run after {cfg['warmup']} warm-up, "
             f"policy {cfg['policy']} (hb.batching's default: {cfg['default_policy']}), natural W1/W2 at "
             f"granularity {cfg['granularity']}, data {cfg['data'] or 'synthetic'}; medians over rounds",
             "", f"{'run':<22}{'train inst/s':>14}{'infer inst/s':>14}"]
    for label, t in rep["throughput_medians"].items():
        lines.append(f"{label:<22}{t['train']:>14.1f}{t['infer']:>14.1f}")
    lines += ["", f"{'ratio (median of rounds)':<28}{'train':>8}{'infer':>8}"]
    for name, r in rep["ratios"].items():
        lines.append(f"{name:<28}{r['train']:>8.3f}{r['infer']:>8.3f}")
    lines += ["", "batches / lower bound over a run's minibatches (granularity as above; CHILDSUM at block),",
              "and that run's throughput (under --policy: round 1's run; otherwise one run)"]
    for name, by_policy in rep["batches"].items():
        for policy, c in by_policy.items():
            lines.append(f"  {name:<12} {policy:<16} train {_fmt_counts(c['train'])}, infer "
                         f"{_fmt_counts(c['infer'])}; {c['throughput']['train']:.1f} / "
                         f"{c['throughput']['infer']:.1f} inst/s")
    cold = rep.get("cold_start")
    if cold:
        lines += ["", f"CHILDSUM compile latency (training, {cfg['granularity']}, first {cfg['cold_instances']} instances of a process)"]
        for key, name in COLD_CASES:
            c = cold[key]
            lines.append(f"  {name:<14} first {c['cold']['throughput']:8.1f} inst/s (first minibatch "
                         f"{c['cold']['first_minibatch_seconds']:6.2f} s), next {c['next']['throughput']:8.1f}, "
                         f"steady {c['steady']['throughput']:8.1f}: first / steady {c['cold_over_steady']:.3f}, "
                         f"next / steady {c['next_over_steady']:.3f}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--instances", type=int, default=1280, help="measured instances per run (1280)")
    ap.add_argument("--warmup", type=int, default=128)
    ap.add_argument("--eager-instances", type=int, default=128, help="CHILDSUM's eager run (128)")
    ap.add_argument("--data", metavar="DIR", help="folder holding sst/ and ud_english_ewt/ (synthetic data otherwise)")
    ap.add_argument("--policy", default=None, help="scheduling policy of the timed runs (hb.batching's default)")
    ap.add_argument("--granularity", choices=("block", "op", "auto"), default=None,
                    help="granularity of W1-NATURAL, W2-NATURAL and the cold start (hb.batching's default)")
    ap.add_argument("--cold", action="store_true", help="also CHILDSUM's compile latency with empty caches")
    ap.add_argument("--cold-instances", type=int, default=512)
    ap.add_argument("--peer", action="store_true", help="also the PyTorch tagger (make peers)")
    ap.add_argument("--peer-python", default=PEER_PYTHON, help="the peers' venv's python")
    ap.add_argument("--core", default="0", help="the core taskset pins the runs to")
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args(argv)
    if min(args.rounds, args.instances, args.cold_instances) < 1 or min(args.warmup, args.eager_instances) < 0:
        ap.error("--rounds, --instances and --cold-instances must be >= 1, --warmup and --eager-instances >= 0")
    if args.peer and not os.path.isfile(args.peer_python):
        ap.error(f"--peer needs the peers' venv ({args.peer_python}): run `make peers`")
    from hybridbatch.record.scope import DEFAULT_GRANULARITY
    from hybridbatch.schedule import DEFAULT_POLICY
    args.default_policy = DEFAULT_POLICY
    args.policy = args.policy or args.default_policy
    args.granularity = args.granularity or DEFAULT_GRANULARITY
    rep = run(args)
    print(format_report(rep))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=1)
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
