"""Train W5's LSTM encoder-decoder (docs/workloads.md) and translate with beam search,
eagerly or batched.

Training is W5's teacher forcing. Decoding (hybridbatch_workloads/models/beam.py) handles
one sentence: each step advances its live hypotheses, reads their log-probabilities with
`.asnumpy()` and keeps the best `beam` extensions. `--mode batched` decodes each
minibatch through `hb.map` inside `hb.batching()`, so a step's decoder cells and output
layers of every sentence and hypothesis run together; `--mode eager` decodes sentence by
sentence. The held-out figure is the share of target positions whose word the decoded
sentence has at that position. `--compare` runs both modes from the same seed and says
whether their losses and translations agree.

    python examples/beam.py                         # 1,000 synthetic pairs, beam 4
    python examples/beam.py --epochs 0 --compare    # decoding only, untrained model
"""

from common import example_parser, train_reading_workload, summary  # noqa: E402

from hybridbatch_workloads.bench.workload_reading import Beam  # noqa: E402
from hybridbatch_workloads.cli_args import int_at_least  # noqa: E402


def main():
    ap = example_parser(summary(__doc__), epochs=1, batch=64, hidden=256, limit=1000, dev=100, lr=0.5,
                        what="pairs", hidden_help="embedding and LSTM size")
    ap.add_argument("--max-length", type=int_at_least(1), default=50, help="longest translation")
    args = ap.parse_args()
    print(f"W5 encoder-decoder with beam {Beam.beam}: {args.limit} training / {args.dev} held-out synthetic pairs, "
          f"hidden {args.hidden}", flush=True)
    train_reading_workload(lambda: Beam(hidden=args.hidden, seed=args.seed, synthetic_train=args.limit,
                                        synthetic_dev=args.dev, max_length=args.max_length),
                           args, "word accuracy", "sgd", {"learning_rate": args.lr, "clip_global_norm": 5.0})


if __name__ == "__main__":
    main()
