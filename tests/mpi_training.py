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

    def __init__(self, rng, dtype):
        super().__init__()
        self.W = hb.Parameter("W", (CLASSES, DIM), rng=rng, dtype=dtype)
        self.b = hb.Parameter("b", (CLASSES,), init="zeros", dtype=dtype)
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
    ap.add_argument("--dtype", default="float32", help="the parameters' dtype")
    ap.add_argument("--rank1-rows", type=int, help="rank 1's table rows, unlike the others' (an error)")
    ap.add_argument("--masks", action="store_true", help="print whether the ranks' dropout masks differ, and stop")
    args = ap.parse_args()

    hb.distributed.init(timeout=args.timeout)
    if args.masks:
        hb.seed(5)
        mask = hb.dropout(hb.array(np.ones(256, np.float32)), 0.5).asnumpy()
        kept = hb.distributed.sum_over_ranks(mask > 0)      # per element: how many ranks kept it
        if hb.distributed.is_root():
            print("masks differ:", bool(((kept > 0) & (kept < hb.distributed.size())).any()))
        return
    rng = np.random.default_rng(100 + hb.distributed.rank())
    rows = args.rank1_rows if args.rank1_rows and hb.distributed.rank() == 1 else VOCAB
    table = hb.Parameter("table", (rows, DIM), init="uniform", rng=rng, dtype=np.dtype(args.dtype))
    output = Output(rng, np.dtype(args.dtype))
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
