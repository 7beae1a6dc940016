"""Train W8's sparsely-gated mixture of experts (docs/workloads.md), eagerly or batched.

The model (hybridbatch_workloads/models/moe.py) handles one example: it reads its gate's
scores with `.asnumpy()`, calls only the k best experts, and mixes them by the softmax of
their scores. `--mode batched` runs each minibatch through `hb.map` inside `hb.batching()`:
the gates of all examples run as one product, then each expert once over the examples that
chose it. `--mode eager` is the plain loop over examples and their experts. `--compare`
trains both from the same seed and says whether they agree.

    python examples/moe.py                          # 64 experts, top 2, minibatches of 256
    python examples/moe.py --experts 16 --compare
"""

from common import example_parser, train_reading_workload, summary  # noqa: E402

from hybridbatch_workloads.bench.workload_reading import W8Gate  # noqa: E402
from hybridbatch_workloads.cli_args import int_at_least  # noqa: E402


def main():
    ap = example_parser(summary(__doc__), epochs=2, batch=256, hidden=256, limit=4096, dev=512, lr=0.1,
                        what="examples", hidden_help="input and expert size")
    ap.add_argument("--experts", type=int_at_least(1), default=64)
    ap.add_argument("--k", type=int_at_least(1), default=2, help="experts per example")
    args = ap.parse_args()
    if args.k > args.experts:
        ap.error("--k must not exceed --experts")
    print(f"W8 mixture of experts: {args.experts} experts of {args.hidden}, top {args.k}, {args.limit} training / "
          f"{args.dev} held-out synthetic examples", flush=True)
    train_reading_workload(lambda: W8Gate(hidden=args.hidden, seed=args.seed, synthetic_train=args.limit,
                                          synthetic_dev=args.dev, experts=args.experts, k=args.k),
                           args, "accuracy", "sgd", {"learning_rate": args.lr})


if __name__ == "__main__":
    main()
