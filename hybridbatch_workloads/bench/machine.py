"""What the benchmark ran on: thread settings, versions, CPU, load; and the GEMM reference rate.

`THREAD_VARS` must be set before numpy is first imported (docs/workloads.md); `python -m
hybridbatch_workloads.bench` re-executes itself with them when they are missing.
"""
from __future__ import annotations

import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")
ONE_THREAD = {v: "1" for v in THREAD_VARS}      # a child process's environment for one thread

GEMM_SHAPE = (1024, 512, 1280)      # (m, k, n): a (m x k) @ (k x n), float32


def one_thread():
    """One thread in this process where the environment says nothing: a script's first
    lines, before numpy is first imported."""
    for v in THREAD_VARS:
        os.environ.setdefault(v, "1")


_RERUN_GUARD = "HYBRIDBATCH_BENCH_REEXEC"


def rerun_on_one_thread(module):
    """Re-execute `python -m module` with the thread variables the environment lacks set to
    1, unless all are set (or it already did, or the OS cannot): BLAS and numba read them
    when they load, which `import hybridbatch` has done by the time a module's main runs."""
    missing = [v for v in THREAD_VARS if v not in os.environ]
    if not missing or os.environ.get(_RERUN_GUARD) or not hasattr(os, "execve"):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", module, *sys.argv[1:]],
              dict(os.environ, **{v: "1" for v in missing}, **{_RERUN_GUARD: "1"}))


def thread_settings():
    return {v: os.environ.get(v) for v in THREAD_VARS}


def pinned(cmd, core):
    """The command line `cmd` run on CPU `core` alone (taskset, where the machine has it;
    core None: cmd as it is)."""
    return ["taskset", "-c", str(core), *cmd] if core is not None and shutil.which("taskset") else cmd


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average():
    try:
        return list(os.getloadavg())
    except (OSError, AttributeError):
        return None


def _git_revision():
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                             timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if rev.returncode != 0:
        return None
    return {"commit": rev.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def _blas_threads():
    """Threads and kernels ("architecture": OpenBLAS's core) of the loaded BLAS libraries,
    when threadpoolctl is installed (else None)."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    return [{"api": i.get("internal_api"), "threads": i.get("num_threads"), "architecture": i.get("architecture")}
            for i in threadpool_info()]


BLAS_KERNEL_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")    # pin OpenBLAS's kernels when set


def machine_info():
    import numba
    import numpy as np
    from hybridbatch.config import settings
    from hybridbatch.kernels import blas
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "numba": numba.__version__,
        "numba_threads": numba.config.NUMBA_NUM_THREADS,
        "platform": platform.platform(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpus_usable": affinity,
        "thread_settings": thread_settings(),
        "blas_threads": _blas_threads(),
        "host_products": settings.blas,
        "numpy_from": [r if r != float("inf") else None for r in blas.numpy_from()],
        "kernel_below": list(blas.kernel_below()),
        "one_row": list(blas.one_row()),
        "flip_below": blas.flip_below(),
        "blas_kernel_settings": {v: os.environ[v] for v in BLAS_KERNEL_VARS if v in os.environ},
        "mkl": blas.version(),
        "load_average_start": load_average(),
        "git": _git_revision(),
    }


def gemm_rate(repeats=7, shape=GEMM_SHAPE, seed=0):
    """The machine's single-process float32 GEMM rate (FLOP/s) on (m x k) @ (k x n).

    Each repeat times the product with numpy's BLAS, with MKL when it is loaded, and with
    the few-rows kernel in "auto" mode (kernels/blas.py; on b as the transposed view of a
    C-ordered copy, its faster layout), and keeps the fastest: the limit is the best GEMM
    this process can run, whichever library the batched kernels use. Median of `repeats`
    after one untimed product each. Returns a dict with the rate, every sample and each
    library's median rate."""
    import numpy as np
    from hybridbatch.config import settings
    from hybridbatch.kernels import blas, few_rows
    m, k, n = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    out = np.empty((m, n), np.float32)
    products = {"numpy": lambda: np.matmul(a, b, out=out)}
    if blas.available():
        products["mkl"] = lambda: blas.gemm(a, b, library="mkl")
    if settings.blas == "auto":
        b_rows = np.ascontiguousarray(b.T)
        products["kernel"] = lambda: few_rows.product(a, b_rows.T)
    flops = 2.0 * m * k * n
    times = {lib: [] for lib in products}
    for lib, product in products.items():
        product()
    for _ in range(max(1, repeats)):
        for lib, product in products.items():
            t0 = time.perf_counter()
            product()
            times[lib].append(time.perf_counter() - t0)
    samples = [min(ts) for ts in zip(*times.values())]
    med = statistics.median(samples)
    return {"shape": list(shape), "dtype": "float32", "flops": flops, "seconds_runs": samples,
            "seconds": med, "flops_per_second": flops / med,
            "flops_per_second_by_library": {lib: flops / statistics.median(ts) for lib, ts in times.items()}}
