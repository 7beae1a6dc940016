"""What every training example shares: one thread per docs/workloads.md, the repository on the
import path, the --mode/--policy/--granularity flags, shuffled minibatches, and running a
piece of the model eagerly or batched.

Import it first: the thread settings must be in place before numpy loads its BLAS.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from hybridbatch_workloads.bench.machine import one_thread  # noqa: E402  (numpy not yet)

one_thread()

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402
from hybridbatch.record.scope import GRANULARITIES  # noqa: E402
from hybridbatch_workloads.cli_args import int_at_least, policy_arg, positive_float, summary  # noqa: E402,F401
from hybridbatch_workloads.data import DataFormatError  # noqa: E402
from hybridbatch.schedule import DEFAULT_POLICY, POLICIES  # noqa: E402


def add_batching_args(ap):
    """--mode, --policy and --granularity, the same in every training example."""
    ap.add_argument("--mode", choices=("batched", "eager"), default="batched")
    ap.add_argument("--policy", type=policy_arg, default=DEFAULT_POLICY,
                    help=f"{', '.join(sorted(POLICIES))}, or a saved FSM policy file ({DEFAULT_POLICY})")
    ap.add_argument("--granularity", choices=GRANULARITIES, default="block")


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


def add_distributed_arg(ap):
    ap.add_argument("--distributed", action="store_true",
                    help="data-parallel over the ranks of `mpirun -n N` (hb.distributed): each step takes --batch "
                         "instances over all ranks, --batch / N on each; rank 0 prints")


def distributed(args):
    """Whether this run trains over MPI ranks (examples without --distributed lack the flag)."""
    return getattr(args, "distributed", False)


def start_distributed(args, trainer):
    """With --distributed: join the MPI job and give every rank rank 0's weights and
    optimizer state; --batch must split evenly over the ranks."""
    if not distributed(args):
        return
    try:
        hb.distributed.init()
    except hb.distributed.DistributedError as e:
        sys.exit(str(e))
    if args.batch % hb.distributed.size():
        sys.exit(f"--batch {args.batch} does not split over {hb.distributed.size()} ranks")
    hb.distributed.broadcast_parameters(trainer.params)
    hb.distributed.broadcast_trainer(trainer)


def on_root(args):
    """Whether this process speaks for the run: always, and with --distributed rank 0 only
    (every rank computes the same)."""
    return not distributed(args) or hb.distributed.is_root()


def say(args, *values, **kwargs):
    """print(*values) on the root process (on_root)."""
    if on_root(args):
        print(*values, **kwargs)


def epoch_minibatches(items, args, rng, epoch):
    """This process's minibatches of one epoch: all items shuffled by rng, args.batch at a
    time; with --distributed this rank's shard of the epoch, args.batch / ranks at a time."""
    if not distributed(args):
        return minibatches(items, args.batch, rng)
    mine = hb.distributed.shard(items, args.seed, epoch)
    per_rank = args.batch // hb.distributed.size()
    return (mine[i:i + per_rank] for i in range(0, len(mine), per_rank))


def step(trainer, args, batch_size):
    """trainer.step over this process's batch_size instances, or with --distributed over
    every rank's, their gradients summed first."""
    if distributed(args):
        batch_size = hb.distributed.allreduce_gradients(trainer.params, batch_size)
    trainer.step(batch_size)


def total_over_ranks(value, args):
    """value summed over the ranks with --distributed (a loss), else value."""
    return hb.distributed.sum_over_ranks(value) if distributed(args) else value


def run(fn, mode, policy=DEFAULT_POLICY, granularity="block"):
    """fn() inside a batching scope (mode "batched") or as it is (mode "eager")."""
    if mode == "eager":
        return fn()
    with hb.batching(policy=policy, granularity=granularity):
        return fn()


def train_epoch(loss_of, trainer, items, args, rng, epoch=0):
    """One pass over items in shuffled minibatches of args.batch (epoch_minibatches): the
    summed loss of each minibatch (args.mode, args.policy, args.granularity), backward, a
    Trainer step. The instances run through hb.map, so a model that reads values as it runs
    still batches. Returns (total loss over all ranks, seconds)."""
    total, start = 0.0, time.perf_counter()
    for batch in epoch_minibatches(items, args, rng, epoch):
        loss = run(lambda: hb.add_n(hb.map(loss_of, batch)), args.mode, args.policy, args.granularity)
        loss.backward()
        step(trainer, args, len(batch))
        total += loss.item()
    return total_over_ranks(total, args), time.perf_counter() - start


def add_compare_arg(ap):
    ap.add_argument("--compare", action="store_true",
                    help="train and evaluate eagerly, then batched, from the same seed, and say whether "
                         "their losses and predictions agree")


def _agree(a, b):
    """Predictions agree: equal, or arrays equal up to float32 summation order."""
    if isinstance(a, np.ndarray):
        return np.allclose(a, b, rtol=1e-4, atol=1e-5)
    return a == b


def _train_modes(build, evaluate, args, metric, optimizer, options, first=None):
    """Per mode (eager, then batched with --compare; else args.mode), from a fresh model of
    the same seed: `build()` -> (model, training instances, its per-instance loss), a
    Trainer, args.epochs epochs of train_epoch, each followed by `evaluate(model, mode)` ->
    (held-out predictions, their `metric`). Prints a line per epoch; with --compare, whether
    the modes agree. `first`: what build() would return, made already, for the first mode."""
    outcome = {}
    for mode in ("eager", "batched") if args.compare else (args.mode,):
        margs = argparse.Namespace(**{**vars(args), "mode": mode})
        model, train, loss_of = first if first is not None else build()
        first = None
        model.hybridize()
        trainer = hb.Trainer(model.parameters(), optimizer, options)
        rng = np.random.default_rng(args.seed)
        hb.seed(args.seed)
        losses, predictions = [], []
        for epoch in range(1, args.epochs + 1):
            total, seconds = train_epoch(loss_of, trainer, train, margs, rng)
            start = time.perf_counter()
            predictions, score = evaluate(model, mode)
            losses.append(total / len(train))
            print(f"{mode} epoch {epoch}: loss {losses[-1]:.4f} per instance, {len(train) / seconds:.1f} "
                  f"instances/s; dev {metric} {score:.4f} ({len(predictions) / (time.perf_counter() - start):.1f} "
                  "instances/s)", flush=True)
        outcome[mode] = losses, predictions
    if args.compare:
        report_agreement(outcome)


def train_reading_workload(make_workload, args, metric, optimizer, options, first=None):
    """Train and evaluate a workload that reads values as it runs (a
    `hybridbatch_workloads.bench.workload.ReadingWorkload`, made by `make_workload()`, or
    `first` for the first mode): per epoch, its training loss (instances through hb.map, as
    in train_epoch) and the `metric` of its predictions on the held-out instances. With
    --compare, in both modes from fresh workloads of the same seed."""

    def build(workload):
        return workload, workload.train_instances(), workload.loss

    def evaluate(workload, mode):
        dev, predictions, right, count = workload.dev_instances(), [], 0, 0
        for i in range(0, len(dev), args.batch):
            batch = dev[i:i + args.batch]
            found = run(lambda: workload.predict_minibatch(batch), mode, args.policy, args.granularity)
            for x, p in zip(batch, found):
                p = workload.read_prediction(p)
                r, n = workload.score(x, p)
                predictions.append(p)
                right, count = right + r, count + n
        return predictions, right / max(count, 1)

    _train_modes(lambda: build(make_workload()), evaluate, args, metric, optimizer, options,
                 None if first is None else build(first))


def report_agreement(outcome):
    """Say whether outcome["eager"] and outcome["batched"] (each: per-epoch training losses,
    held-out predictions) agree."""
    (eager_losses, eager_out), (batched_losses, batched_out) = outcome["eager"], outcome["batched"]
    same_losses = np.allclose(batched_losses, eager_losses, rtol=1e-4)
    differ = sum(not _agree(a, b) for a, b in zip(eager_out, batched_out))
    compared = [what for what, n in (("training losses", len(eager_losses)),
                                     ("every held-out prediction", len(eager_out))) if n]
    if not compared:
        print("eager and batched: nothing to compare (no epochs trained, no held-out instances)")
    elif same_losses and not differ:
        print(f"eager and batched agree: {' and '.join(compared)}")
    else:
        print(f"eager and batched differ: losses {eager_losses} vs {batched_losses}, "
              f"{differ} of {len(eager_out)} held-out predictions")


def example_parser(description, *, epochs, batch, hidden, limit, dev, lr, what, hidden_help=None,
                   lr_help=None, all_with_zero=False):
    """The command line every per-instance example shares (its own flags are added by the
    caller): --epochs, --batch, the batching flags, --compare, --hidden, --limit and --dev
    (counts of `what`, training and held out; with all_with_zero, 0 means all), --lr, --seed."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--epochs", type=int_at_least(0), default=epochs)
    ap.add_argument("--batch", type=int_at_least(1), default=batch)
    add_batching_args(ap)
    add_compare_arg(ap)
    ap.add_argument("--hidden", type=int_at_least(1), default=hidden, help=hidden_help)
    count, all_ = (int_at_least(0), " (0: all)") if all_with_zero else (int_at_least(1), "")
    ap.add_argument("--limit", type=count, default=limit, help=f"training {what}{all_}")
    ap.add_argument("--dev", type=count, default=dev, help=f"held-out {what}{all_}")
    ap.add_argument("--lr", type=positive_float, default=lr, help=lr_help)
    ap.add_argument("--seed", type=int_at_least(0), default=0)
    return ap


def train_classifier(make_model, train, dev, args, optimizer="adam", options=None):
    """Train a per-instance classifier (`model.loss(instance)`, `model.logits(instance)`,
    `instance.label`) for args.epochs, printing each epoch's training loss and held-out
    accuracy (in eval() mode). Dropout draws from `hb.seed(args.seed)`, so with --compare
    an eager and a batched run from fresh models draw the same masks and must agree."""

    def build():
        model = make_model()
        return model, train, model.loss

    def evaluate(model, mode):
        model.eval()
        logits = []
        for i in range(0, len(dev), args.batch):
            batch = dev[i:i + args.batch]
            logits += [h.asnumpy() for h in run(lambda: [model.logits(x) for x in batch], mode,
                                               args.policy, args.granularity)]
        model.train()
        predictions = [int(np.argmax(v)) for v in logits]
        return predictions, np.mean([p == x.label for p, x in zip(predictions, dev)]) if dev else 0.0

    _train_modes(build, evaluate, args, "accuracy", optimizer, options or {"learning_rate": args.lr})
