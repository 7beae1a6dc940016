"""A proven lower bound on any schedule's batches, from exact search over the K parts with the
longest schedules (A*): how far above ED-Batch's Eq. 2 the optimum itself must lie.

    python benchmarks/bound_parts.py [--workload W6] [--parts 6] [--limit 40000000]

On the policies bench's judged minibatches (minibatches 5-8 of the training set, 64 each,
the graphs `python -m hybridbatch.bench policies` schedules), per minibatch: Eq. 2, our
`tight_lower_bound` (what the bench reports), and this bound. Prints one JSON object.

The bound is `part_bound(view, K, limit)` (hybridbatch/schedule/automata.py, proof there):
the fewest core batches of the K parts with the longest schedules, by A* over their
automata's product, plus the tail types' chains and the unbatchable nodes. Where A* stops
after --limit expansions it still reports a lower bound (the smallest f left open).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hybridbatch_workloads.bench.machine import one_thread  # noqa: E402  (numpy not yet)
from hybridbatch_workloads.cli_args import summary  # noqa: E402

one_thread()

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

from hybridbatch_workloads.bench.policies import judged_views, workload_on  # noqa: E402
from hybridbatch_workloads.bench.registry import DEFAULT_GRANULARITY  # noqa: E402
from hybridbatch.schedule import lower_bound  # noqa: E402
from hybridbatch.schedule.offline.automata import part_bound  # noqa: E402
from hybridbatch.schedule.offline.bounds import tight_lower_bound  # noqa: E402

BATCH = 64


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--workload", default="W6")
    ap.add_argument("--parts", type=int, default=6, help="the K parts with the longest schedules")
    ap.add_argument("--limit", type=int, default=40_000_000, help="A* expansions per minibatch")
    ap.add_argument("--eval-batches", type=int, default=4, help="judged minibatches (the bench's 4)")
    ap.add_argument("--data", default=None, help="the shared data folder (for W1-W4)")
    args = ap.parse_args()
    if args.parts < 2:
        ap.error("--parts must be >= 2")
    name = args.workload.upper()
    wl = workload_on(name, args.data)
    wl.hybridize()
    views = judged_views(wl, list(wl.train_instances()), BATCH, args.eval_batches,
                         DEFAULT_GRANULARITY.get(name, "op"))
    rows = []
    for view in views:
        t0 = time.perf_counter()
        bound = part_bound(view, args.parts, args.limit)
        if bound == 0:
            raise SystemExit(f"{name}: no core, or parts too wide for automata: the parts bound does not apply")
        rows.append({"eq2": int(lower_bound(view)), "tight": int(tight_lower_bound(view)),
                     "parts_bound": bound, "seconds": round(time.perf_counter() - t0, 1)})
        print(json.dumps(rows[-1]), flush=True)
    total = {k: sum(r[k] for r in rows) for k in ("eq2", "tight", "parts_bound")}
    print(json.dumps({"workload": name, "parts": args.parts, "minibatches": rows, "total": total,
                      "parts_bound_over_eq2": total["parts_bound"] / total["eq2"]}, indent=1))


if __name__ == "__main__":
    main()
