"""A tiny classifier trained with hb.distributed, launched by tests/test_distributed.py under
`mpirun -n N` (or as a plain process: 1 rank). Rank 0 writes the final parameters to --out.

Each rank starts from its own random weights, so broadcast_parameters matters; an embedding
table gives row-tracked (sparse) gradients and a hybridized dense layer dense ones; the
instances run through hb.map, and one reads a value as it runs.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402

VOCAB, DIM, CLASSES, INSTANCES = 40, 6, 3, 640


class Output(hb.HybridBlock):
    """The logits of a bag of words' summed embedding."""

    def __init__(self, rng):
        super().__init__()
        self.W = hb.Parameter("W", (CLASSES, DIM), rng=rng)
        self.b = hb.Parameter("b", (CLASSES,), init="zeros")
        self.hybridize()

    def forward(self, h):
        return hb.affine(self.W, hb.tanh(h), self.b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--optimizer", default="sgd")
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--granularity", default="block")
    ap.add_argument("--out")
    ap.add_argument("--fail-at", type=int, help="rank 1 fails at this step: raises, or hangs (--hang)")
    ap.add_argument("--hang", action="store_true")
    ap.add_argument("--timeout", type=float, default=hb.distributed.DEFAULT_TIMEOUT)
    args = ap.parse_args()

    hb.distributed.init(timeout=args.timeout)
    rng = np.random.default_rng(100 + hb.distributed.rank())
    table = hb.Parameter("table", (VOCAB, DIM), init="uniform", rng=rng)
    output = Output(rng)
    params = {"table": table, "W": output.W, "b": output.b}
    hb.distributed.broadcast_parameters(params)
    options = {"learning_rate": 0.5 if args.optimizer == "sgd" else 0.05}
    trainer = hb.Trainer(params, args.optimizer, options)
    hb.distributed.broadcast_trainer(trainer)

    data = np.random.default_rng(7)
    items = [(list(data.integers(0, VOCAB, int(data.integers(1, 6)))), int(data.integers(0, CLASSES)))
             for _ in range(INSTANCES)]

    def loss(item):
        words, label = item
        h = hb.add_n([hb.lookup(table, w) for w in words])
        if hb.sum(h).item() > 100.0:    # a read: the instance suspends here under hb.map
            h = h * 0.5
        return hb.pick_neg_log_softmax(output(h), label)

    batch = args.global_batch // hb.distributed.size()
    step, epoch = 0, 0
    while step < args.steps:
        mine = hb.distributed.shard(items, seed=3, epoch=epoch)
        for i in range(0, len(mine), batch):
            if step == args.fail_at and hb.distributed.rank() == 1:
                if args.hang:
                    time.sleep(120)
                raise RuntimeError("rank 1 fails on purpose")
            chunk = mine[i:i + batch]
            with hb.batching(granularity=args.granularity):
                total = hb.add_n(hb.map(loss, chunk))
            total.backward()
            trainer.step(hb.distributed.allreduce_gradients(params, len(chunk)))
            step += 1
            if step == args.steps:
                break
        epoch += 1
    if hb.distributed.is_root() and args.out:
        np.savez(args.out, **{name: p.data for name, p in params.items()})


if __name__ == "__main__":
    main()
