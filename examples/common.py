"""What every training example shares: one thread per docs/workloads.md, the repository on the
import path, the --mode/--policy/--granularity flags, shuffled minibatches, and running a
piece of the model eagerly or batched.

Import it first: the thread settings must be in place before numpy loads its BLAS.
"""
import os
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import hybridbatch as hb  # noqa: E402
from hybridbatch_workloads.cli_args import policy_arg  # noqa: E402
from hybridbatch_workloads.data import DataFormatError  # noqa: E402
from hybridbatch.schedule import DEFAULT_POLICY, POLICIES  # noqa: E402


def add_batching_args(ap):
    """--mode, --policy and --granularity, the same in every training example."""
    ap.add_argument("--mode", choices=("batched", "eager"), default="batched")
    ap.add_argument("--policy", type=policy_arg, default=DEFAULT_POLICY,
                    help=f"{', '.join(sorted(POLICIES))}, or a saved FSM policy file ({DEFAULT_POLICY})")
    ap.add_argument("--granularity", choices=("block", "op", "auto"), default="block")


def load_or_exit(load):
    """load() (which reads --data), ending the script with the reader's one-line message
    (file:line:column, what was expected) rather than a traceback when --data names no data
    folder or holds a malformed or empty file."""
    try:
        return load()
    except (FileNotFoundError, DataFormatError) as e:
        sys.exit(str(e))


def minibatches(items, size, rng):
    """The items in a fresh random order, `size` at a time."""
    order = rng.permutation(len(items))
    for i in range(0, len(items), size):
        yield [items[j] for j in order[i:i + size]]


def run(fn, mode, policy=DEFAULT_POLICY, granularity="block"):
    """fn() inside a batching scope (mode "batched") or as it is (mode "eager")."""
    if mode == "eager":
        return fn()
    with hb.batching(policy=policy, granularity=granularity):
        return fn()


def train_epoch(loss_of, trainer, items, args, rng):
    """One pass over items in shuffled minibatches of args.batch: the summed loss of each
    minibatch (args.mode, args.policy, args.granularity), backward, a Trainer step.
    Returns (total loss, seconds)."""
    total, start = 0.0, time.perf_counter()
    for batch in minibatches(items, args.batch, rng):
        loss = run(lambda: hb.add_n([loss_of(x) for x in batch]), args.mode, args.policy, args.granularity)
        loss.backward()
        trainer.step(len(batch))
        total += loss.item()
    return total, time.perf_counter() - start
