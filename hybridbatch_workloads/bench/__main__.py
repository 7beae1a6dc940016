"""`python -m hybridbatch_workloads.bench WORKLOAD [options]` (or `python -m hybridbatch.bench`): see `cli.py`.

docs/workloads.md measures on one thread, and BLAS / numba read their thread counts when they
are loaded, which `import hybridbatch` has already done by the time this runs: so when the
four variables are not all set, re-execute the interpreter with the missing ones set to 1.
"""
import sys

from .machine import rerun_on_one_thread

if __name__ == "__main__":
    rerun_on_one_thread("hybridbatch_workloads.bench")
    from .cli import main
    sys.exit(main())
