"""Train the W5 LSTM encoder-decoder (docs/workloads.md) on synthetic sentence pairs, eagerly or batched.

The model (hybridbatch/models/seq2seq.py) is written for one sentence pair with plain Python
loops: encoder steps over the source, then decoder steps over <s> + target with an output
layer and loss per target word (teacher forcing). `--mode batched` records a minibatch
inside `hb.batching()`, `--mode eager` runs the same code pair by pair. Every epoch prints
the training loss per target word, the training throughput (forward + backward + SGD
update, pairs per second), and on held-out pairs the loss per word, its perplexity and the
next-word accuracy.

    python examples/lstm_nmt.py                       # 1,000 pairs, 8,000-word vocabularies, ~1 min
    python examples/lstm_nmt.py --mode eager --limit 200 --epochs 1

There is no real parallel corpus in the shared data: the pairs come from
`hybridbatch_workloads.data.synthetic_nmt` (IWSLT-like lengths; target words partly translate the
aligned source word). The vocabularies are the most frequent training words (8,000 a side).
"""
import argparse
import math

# first: one thread, the repository on the path
from common import add_batching_args, run, summary, train_epoch  # noqa: E402

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402
from hybridbatch_workloads.cli_args import int_at_least, positive_float  # noqa: E402
from hybridbatch_workloads.bench.workload_nmt import W5NMT  # noqa: E402


def evaluate(workload, pairs, args):
    """(loss per target word, next-word accuracy) from the logits of every target position."""
    nll = correct = count = 0
    for i in range(0, len(pairs), args.batch):
        batch = pairs[i:i + args.batch]
        logits = run(lambda: [workload.predict(p) for p in batch], args.mode, args.policy, args.granularity)
        for pair, handles in zip(batch, logits):
            scores = np.stack([h.asnumpy() for h in handles]).astype(np.float64)
            gold = np.asarray(pair.target_out)
            top = scores.max(axis=1)
            log_z = top + np.log(np.exp(scores - top[:, None]).sum(axis=1))
            nll += float((log_z - scores[np.arange(len(gold)), gold]).sum())
            correct += int((scores.argmax(axis=1) == gold).sum())
            count += len(gold)
    return nll / count, correct / count


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    add_batching_args(ap)
    ap.add_argument("--hidden", type=int_at_least(1), default=256, help="embedding and LSTM size")
    ap.add_argument("--batch", type=int_at_least(1), default=64)
    ap.add_argument("--epochs", type=int_at_least(0), default=2)
    ap.add_argument("--limit", type=int_at_least(1), default=1000, help="training pairs")
    ap.add_argument("--dev", type=int_at_least(1), default=200, help="held-out pairs")
    ap.add_argument("--lr", type=positive_float, default=0.5)
    ap.add_argument("--seed", type=int_at_least(0), default=0)
    args = ap.parse_args()

    workload = W5NMT(hidden=args.hidden, seed=args.seed, synthetic_train=args.limit, synthetic_dev=args.dev)
    workload.hybridize()
    train, dev = workload.train_instances(), workload.dev_instances()
    trainer = hb.Trainer(workload.parameters(), "sgd", {"learning_rate": args.lr, "clip_global_norm": 5.0})
    words = sum(len(p.target_out) for p in train)
    print(f"W5: {len(train)} training / {len(dev)} held-out pairs (synthetic), vocabularies "
          f"{len(workload.source_vocab)} / {len(workload.target_vocab)}, hidden {args.hidden}, {args.mode}"
          + (f" ({args.policy}, {args.granularity})" if args.mode == "batched" else ""))
    rng = np.random.default_rng(args.seed)
    for epoch in range(1, args.epochs + 1):
        total, seconds = train_epoch(workload.loss, trainer, train, args, rng)
        dev_loss, dev_acc = evaluate(workload, dev, args)
        print(f"epoch {epoch}: loss/word {total / words:.3f}  {len(train) / seconds:.1f} pairs/s  "
              f"dev loss/word {dev_loss:.3f} (perplexity {math.exp(dev_loss):.0f})  "
              f"next-word accuracy {100 * dev_acc:.1f}%")


if __name__ == "__main__":
    main()
