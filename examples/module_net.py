"""Train W7's IEP module network (docs/workloads.md) on CLEVR programs, eagerly or batched.

The model (hybridbatch_workloads/models/module_net.py) has one residual conv module per
program function; for one question it walks the program tree from the answer node down,
calls each node's module on its inputs' feature maps (the scene module on the question's
scene features) and classifies the answer node's map. `--mode batched` runs a minibatch
inside `hb.batching()`: the calls of every program batch by function. `--data` reads the
CLEVR program sample (train from `CLEVR_train_*.json`, held out from `CLEVR_val_*.json`);
without it the programs are synthetic. Scene features and answers are stand-ins (see
hybridbatch_workloads/bench/workload_module_net.py).

    python examples/module_net.py                       # synthetic programs, minibatches of 64
    python examples/module_net.py --data ../shared/data/clevr_programs --compare
"""

from common import example_parser, load_or_exit, train_reading_workload, summary  # noqa: E402

from hybridbatch_workloads.bench.workload_module_net import W7ModuleNet  # noqa: E402


def main():
    ap = example_parser(summary(__doc__), epochs=2, batch=64, hidden=256, limit=2000, dev=300, lr=0.05,
                        what="synthetic programs",
                        hidden_help="size knob: 256 gives 32 feature-map channels, and channels scale with it")
    ap.add_argument("--data", metavar="DIR", default=None, help="the clevr_programs folder or its parent")
    args = ap.parse_args()

    def make():
        return W7ModuleNet(hidden=args.hidden, data_dir=args.data, seed=args.seed, synthetic_train=args.limit,
                           synthetic_dev=args.dev)

    probe = load_or_exit(make)
    print(f"W7 module network: {len(probe.functions)} modules of {probe.channels} x 8 x 8, "
          f"{len(probe.train_instances())} training / {len(probe.dev_instances())} held-out programs "
          f"({probe.data_source})", flush=True)
    train_reading_workload(make, args, "accuracy", "sgd", {"learning_rate": args.lr}, first=probe)


if __name__ == "__main__":
    main()
