"""Train the W9 arc-hybrid dependency parser (docs/workloads.md), eagerly or batched, and
report LAS on held-out sentences.

The model (hybridbatch_workloads/models/parser.py) parses one sentence with plain Python:
a stack, a buffer, and at every transition a score read with `.asnumpy()` that decides the
next step (training: the hinge loss against the static oracle's transition; decoding: the
best valid transition). `--mode batched` runs each minibatch through `hb.map` inside
`hb.batching()`, so the reads of all its sentences share one flush per transition;
`--mode eager` runs the same code sentence by sentence. `--compare` trains both from the
same seed and says whether their losses and held-out parses agree.

    python examples/parser.py                                        # synthetic, ~1 min
    python examples/parser.py --data ../shared/data --limit 0 --dev 0 --compare   # one EWT epoch, both modes

Training uses the projective sentences only (the static oracle reaches no other tree); the
count of skipped ones is printed. LAS counts every word, punctuation included.
"""

from common import example_parser, load_or_exit, train_reading_workload, summary  # noqa: E402

from hybridbatch_workloads.bench.workload_reading import W9Parser  # noqa: E402


def main():
    ap = example_parser(summary(__doc__), epochs=1, batch=64, hidden=256, limit=1000, dev=300, lr=1e-3,
                        what="sentences", all_with_zero=True,
                        hidden_help="256 gives docs/workloads.md sizes (word 100, POS 25, BiLSTM 200, MLP 100); "
                                    "others scale them",
                        lr_help="Adam's learning rate, as BIST (SGD on the hinge loss diverges)")
    ap.add_argument("--data", help="folder with en_ewt-ud-{train,dev}.conllu, or its parent (default: synthetic)")
    args = ap.parse_args()

    def make_workload():
        return W9Parser(hidden=args.hidden, data_dir=args.data, seed=args.seed, train_sentences=args.limit or None,
                        dev_sentences=args.dev or None, synthetic_train=args.limit or 4000,
                        synthetic_dev=args.dev or 500)

    wl = load_or_exit(make_workload)
    print(f"W9 parser: {len(wl.train_instances())} projective training sentences "
          f"({wl.skipped_nonprojective} non-projective skipped), {len(wl.dev_instances())} held out "
          f"({'real' if args.data else 'synthetic'}), {len(wl.vocab.words)} words, {len(wl.vocab.labels)} labels",
          flush=True)
    train_reading_workload(make_workload, args, "LAS", "adam", {"learning_rate": args.lr}, first=wl)


if __name__ == "__main__":
    main()
