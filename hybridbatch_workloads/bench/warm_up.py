"""`python -m hybridbatch_workloads.bench.warm_up [WORKLOAD ...] [--hidden N]`: compile on this machine,
before any first run, what the benchmark's models need: hybridbatch's numba functions, the BLAS routing
calibration (kernels/blas.py) and the fused kernels of W1 and CHILDSUM at their default sizes,
each into its cache (or those of the workloads named). The Makefile's install step runs it.

W1 alone left functions uncompiled that only a child-sum tree's batches call (a lookup read
inside a block, `plan._read_lookups`): CHILDSUM's first run compiled them in its first
minibatch. The runs are short benchmark runs on one thread, as `python -m hybridbatch.bench`
runs (it re-executes itself the same way), so the calibration stored is the one the
benchmark looks up; their kernels compile in this process, so all are cached when it returns
(a background worker could still be compiling when `make demo` starts).
"""
import argparse
import contextlib
import io
import sys
import time

from ..cli_args import int_at_least
from .machine import rerun_on_one_thread
from .registry import WORKLOADS

WARMED = ("W1", "CHILDSUM")
RUN = ["--instances", "8", "--warmup", "0", "--eager-instances", "8", "--eager-warmup", "0", "--repeats", "1",
       "--gemm-repeats", "1", "--no-check", "--no-progress"]


def main(workloads=WARMED, hidden=None):
    """Run each workload briefly, its kernels compiled in this process; `hidden`: at that
    size instead of the workload's default (benchmarks/natural.py warms a cell's other size
    to leave its default one's kernels uncompiled)."""
    import hybridbatch as hb
    from .cli import main as bench
    size = [] if hidden is None else ["--hidden", str(hidden)]
    for workload in workloads:
        t0 = time.perf_counter()
        with hb.settings(compile_in_background=False), contextlib.redirect_stdout(io.StringIO()):
            status = bench([workload, *RUN, *size])
        if status:
            return status
        print(f"warm-up: {workload} compiled and cached in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


def _workload(name):
    """A workload's name, checked here (argparse's choices would check the empty default too)."""
    if name.upper() not in WORKLOADS:
        raise argparse.ArgumentTypeError(f"unknown workload {name!r}; expected one of {', '.join(sorted(WORKLOADS))}")
    return name.upper()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="python -m hybridbatch_workloads.bench.warm_up",
                                 description="compile what the benchmark's models need, into the caches")
    ap.add_argument("workloads", nargs="*", type=_workload, metavar="WORKLOAD",
                    help=f"workloads to warm ({' '.join(WARMED)})")
    ap.add_argument("--hidden", type=int_at_least(1), help="their hidden size (each workload's default)")
    return ap.parse_args(argv)


if __name__ == "__main__":
    rerun_on_one_thread("hybridbatch_workloads.bench.warm_up")
    args = parse_args()
    sys.exit(main(args.workloads or WARMED, args.hidden))
