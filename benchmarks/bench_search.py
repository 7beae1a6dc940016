"""How close the search policy gets to the lower bounds over many minibatches of a workload
(the policies bench judges four): batches of critical path and of search at several beam
widths, against ED-Batch's bound (Eq. 2) and our tight bound, and search's seconds per
minibatch graph.

    python benchmarks/bench_search.py [--workload W4-2TYPE] [--minibatches 40]
                                      [--widths 1,4,16] [--data ../shared/data]

Prints one JSON object. One thread, as in docs/workloads.md. Minibatches of 64 are taken in
order from the start of the training set.
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

from hybridbatch_workloads.bench.policies import workload_on  # noqa: E402
from hybridbatch_workloads.bench.workload import data_of  # noqa: E402
from hybridbatch_workloads.bench.registry import DEFAULT_GRANULARITY  # noqa: E402
from hybridbatch.schedule import critical_path, lower_bound  # noqa: E402
from hybridbatch.schedule.learn import capture_views  # noqa: E402
from hybridbatch.schedule.offline.bounds import tight_lower_bound  # noqa: E402
from hybridbatch.schedule.offline.search import rollout_search  # noqa: E402

BATCH = 64


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--workload", default="W4-2TYPE")
    ap.add_argument("--minibatches", type=int, default=40)
    ap.add_argument("--widths", default="1,4,16", help="comma-separated beam widths")
    ap.add_argument("--data", default=None, help="the shared data folder (SST trees for W1-W4)")
    args = ap.parse_args()
    name = args.workload.upper()
    wl = workload_on(name, args.data)
    wl.hybridize()
    pool = list(wl.train_instances())[:BATCH * args.minibatches]
    views = capture_views(wl.loss, pool, DEFAULT_GRANULARITY.get(name, "op"), batch_size=BATCH)
    bound = sum(lower_bound(v) for v in views)
    tight = sum(tight_lower_bound(v) for v in views)

    def row(batches, seconds=None):
        out = {"batches": batches, "vs_bound": batches / bound, "vs_tight": batches / tight}
        if seconds is not None:
            out["seconds_per_minibatch"] = seconds / len(views)
        return out

    result = {"workload": name, "minibatches": len(views), "data": data_of(wl),
              "lower_bound": bound, "tight_lower_bound": tight,
              "critical_path": row(sum(len(critical_path(v)[1]) - 1 for v in views))}
    for width in (int(w) for w in args.widths.split(",")):
        t0 = time.perf_counter()
        batches = sum(len(rollout_search(v, width)[1]) - 1 for v in views)
        result[f"search_width_{width}"] = row(batches, time.perf_counter() - t0)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
