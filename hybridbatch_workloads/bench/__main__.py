"""`python -m hybridbatch_workloads.bench WORKLOAD [options]` (or `python -m hybridbatch.bench`): see `cli.py`.

docs/workloads.md measures on one thread, and BLAS / numba read their thread counts when they
are loaded, which `import hybridbatch` has already done by the time this runs: so when the
four variables are not all set, re-execute the interpreter with the missing ones set to 1.
"""
import os
import sys

from .machine import THREAD_VARS

_GUARD = "HYBRIDBATCH_BENCH_REEXEC"

if __name__ == "__main__":
    missing = [v for v in THREAD_VARS if v not in os.environ]
    if missing and not os.environ.get(_GUARD) and hasattr(os, "execv"):
        env = dict(os.environ, **{v: "1" for v in missing}, **{_GUARD: "1"})
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, [sys.executable, "-m", "hybridbatch_workloads.bench", *sys.argv[1:]], env)
    from .cli import main
    sys.exit(main())
