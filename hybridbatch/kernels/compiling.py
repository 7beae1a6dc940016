"""Fused kernels compiled in a worker process while training goes on, and notices of compiling.

A fused kernel takes numba 0.2-1 s to compile, about 85% of it in numba's Python passes,
which hold the GIL: compiled in a thread, kernels slowed a child-sum Tree-LSTM's training
thread 1.6-2x for as long (48 -> 72-97 ms a step on 2 cores); compiled in another process,
the step kept its time while a core was free (46-49 ms). So a block's runs whose kernels are
not in numba's disk cache run unfused (numpy) while one worker process per training process
(`serve`, started on the first such kernel) compiles them into that cache; the next batch
after a kernel is done loads it (kernels/fused.py, `Kernels`).

The worker imports hybridbatch from where this process did, and compiles with numba's
configuration from the environment, which is where numba reads it: a compiled kernel lands
in the cache this process loads from. When this process ends, the worker finishes the
kernels it was given, then exits: a short run still leaves them cached for the next.

Notices go to the logger "hybridbatch" at INFO: a block whose kernels start compiling, the
compiles being done, and hybridbatch's own numba functions compiling on a machine's first
run (numba's event API tells a compile from a cache load). They print to stderr unless the
application configured logging itself; setting that logger's level to WARNING silences them.
"""
import atexit
import itertools
import json
import logging
import os
import subprocess
import sys
import threading
import time

from numba.core import event
from tqdm import tqdm

log = logging.getLogger("hybridbatch")


class _UnlessConfigured(logging.StreamHandler):
    """stderr for the package's notices while the application has no logging handler of its
    own (one on the root logger gets them instead, by propagation); written past any tqdm
    progress bar on the terminal rather than into its line."""

    def emit(self, record):
        if logging.getLogger().handlers:
            return
        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:                 # noqa: BLE001 -- logging's own rule: report, never raise
            self.handleError(record)


if not log.handlers:
    _handler = _UnlessConfigured(sys.stderr)
    _handler.setFormatter(logging.Formatter("hybridbatch: %(message)s"))
    log.addHandler(_handler)
    if log.level == logging.NOTSET:
        log.setLevel(logging.INFO)


class Job:
    """One generated kernel module to compile: its file, the vector lanes to compile for
    (None: LLVM's choice), and per kernel its function name, dtype and argument dimensions
    (0: the row count). `done` is set when the worker has finished it; `error` then says why
    it failed, or is None."""

    def __init__(self, path, lanes, kernels):
        self.path, self.lanes, self.kernels = str(path), lanes, kernels
        self.done = threading.Event()
        self.error = None

    def finish(self, error=None):
        self.error = error
        self.done.set()


IDLE_SECONDS = 60      # a worker with nothing to compile for this long exits (it holds about 180 MB)
WORKER_NICENESS = 10   # added to the worker's nice value: about a tenth of a core against a busy training process
# The worker lowers its priority before it imports anything: importing hybridbatch and numba
# takes about 0.5 s of CPU, which at full priority slowed a pinned training process's first
# minibatches 2x. It stays in the training process's session: under Linux's autogroups
# another session gets its own share of a core whatever its nice value (a new cell's first
# 512 instances ran at 0.37x steady instead of 0.64x). It ignores SIGINT instead, which a
# terminal's Ctrl-C sends the whole group: it finishes its kernels and ends when its stdin
# closes, without a traceback of its own.
_WORKER = (f"import os, signal\nif hasattr(os, 'nice'):\n    os.nice({WORKER_NICENESS})\n"
           "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
           "from hybridbatch.kernels.compiling import serve\nserve()")


class _Worker:
    """The worker process and the jobs sent to it, answered in order by a reader thread.
    `retired`: it was told to exit, idle, and takes no more jobs; `died`: it exited with jobs
    outstanding (they fail)."""

    def __init__(self):
        self.pid = os.getpid()
        self.jobs = {}
        self.ids = itertools.count()
        self.lock = threading.Lock()
        self.retired = self.died = False
        self.started = None           # when the jobs now outstanding began, for the notice
        self.finished = 0
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
                   HYBRIDBATCH_PRELOAD="0")     # it compiles kernels, never runs the package's functions
        self.process = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, bufsize=1, env=env)
        atexit.register(self.close)
        threading.Thread(target=self._replies, name="hybridbatch-kernel-compiles", daemon=True).start()

    def submit(self, job):
        """Send `job`; False where this worker takes no more (retired or gone)."""
        with self.lock:
            if self.retired or self.died:
                return False
            key = next(self.ids)
            if not self.jobs:
                self.started, self.finished = time.perf_counter(), 0
            self.jobs[key] = job
            try:
                self.process.stdin.write(json.dumps({"id": key, "path": job.path, "lanes": job.lanes,
                                                     "kernels": job.kernels}) + "\n")
                self.process.stdin.flush()
            except (OSError, ValueError):      # it has exited: the reader fails what is outstanding
                self.jobs.pop(key)
                return False
        return True

    def _replies(self):
        for line in self.process.stdout:
            reply = json.loads(line)
            with self.lock:
                job = self.jobs.pop(reply["id"], None)
                self.finished += 1
                drained = not self.jobs
                count, seconds = self.finished, time.perf_counter() - self.started
            if job is not None:
                job.finish(reply["error"])
            if drained:
                log.info("compiled %d fused kernel module%s in %.1f s; their blocks run fused from their next batch",
                         count, "" if count == 1 else "s", seconds)
                idle = threading.Timer(IDLE_SECONDS, self._retire_if_idle)
                idle.daemon = True
                idle.start()
        self.process.wait()
        with self.lock:
            jobs, self.jobs = list(self.jobs.values()), {}
            self.died = not self.retired
        for job in jobs:
            job.finish("the compile worker exited")

    def _retire_if_idle(self):
        with self.lock:
            if self.jobs or self.retired:
                return
            self.retired = True
        self.close()

    def close(self):
        """No more jobs: the worker exits once it has compiled those it has."""
        try:
            self.process.stdin.close()
        except OSError:
            pass


_worker = None
_starting = threading.Lock()
_broken = None        # why no worker runs here: one failed to start, or died


def submit(job):
    """Have a worker process compile `job`, starting one where none takes jobs (the first
    time, after an idle one retired, in a forked child); `job.done` is set when it is done.
    Where no worker can run, the job finishes at once with the reason as its error, and the
    caller compiles in process."""
    global _worker, _broken
    with _starting:
        while _broken is None:
            if _worker is None or _worker.retired or _worker.pid != os.getpid():
                try:
                    _worker = _Worker()
                except OSError as e:
                    _broken = f"cannot start a compile worker: {e}"
                    break
            if _worker.submit(job):
                return job
            if not _worker.retired:       # it exited with work to do
                _broken = "the compile worker exited"
    job.finish(_broken)
    return job


def wait(timeout=None):
    """Block until the worker has answered every job submitted so far (a benchmark's steady
    state runs fused); False if `timeout` seconds passed first."""
    with _starting:
        worker = _worker
    if worker is None:
        return True
    with worker.lock:
        jobs = list(worker.jobs.values())
    deadline = None if timeout is None else time.perf_counter() + timeout
    return all(job.done.wait(None if deadline is None else max(0.0, deadline - time.perf_counter()))
               for job in jobs)


def serve():
    """The worker: compile each job read from stdin into numba's disk cache, answer on stdout.
    It runs at a lower priority (WORKER_NICENESS, set by `_WORKER` where the OS has one): on a
    busy or single core the training process keeps the CPU and its batches run unfused a
    little longer, rather than sharing the core with a compile for seconds (a child-sum
    Tree-LSTM's four kernel modules took 4.5 s of CPU)."""
    replies = os.dup(1)
    os.dup2(2, 1)                         # whatever compiling prints goes to stderr, not into the replies
    log.setLevel(logging.WARNING)
    from .fused import compile_module
    for line in sys.stdin:
        request = json.loads(line)
        try:
            compile_module(request["path"], request["lanes"], request["kernels"])
            error = None
        except Exception as e:            # noqa: BLE001 -- reported, and the process compiles it itself
            error = f"{type(e).__name__}: {e}"
        try:
            os.write(replies, (json.dumps({"id": request["id"], "error": error}) + "\n").encode())
        except OSError:                   # the process that asked has ended: compile the rest for the next one
            pass


class _CoreCompileNotice(event.Listener):
    """Says once per process that hybridbatch's own numba functions are compiling (not loading
    from numba's cache): a machine's first run spends 15-45 s there, before the first batch."""

    said = False

    def on_start(self, ev):
        if self.said:
            return
        module = getattr(ev.data["dispatcher"].py_func, "__module__", "") or ""
        if module.startswith("hybridbatch."):
            type(self).said = True
            log.info("compiling hybridbatch's numba functions for this machine (first run only, 15-45 s; "
                     "later runs load them from numba's cache)")

    def on_end(self, ev):
        pass


event.register("numba:compile", _CoreCompileNotice())
