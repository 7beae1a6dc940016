"""Train the W2 / W3 BiLSTM part-of-speech tagger (docs/workloads.md), eagerly or batched.

The model (hybridbatch/models/bilstm_tagger.py) is written for one sentence with plain
Python loops; `--mode batched` records a minibatch inside `hb.batching()` and runs it in
batches, `--mode eager` runs the same code one sentence at a time. Every epoch prints the
mean training loss per sentence, the training throughput (forward + backward + SGD update,
sentences per second) and the tagging accuracy on held-out sentences.

    python examples/bilstm_tagger.py                          # synthetic data, W2, ~20 s
    python examples/bilstm_tagger.py --chars                  # W3: rare words by characters
    python examples/bilstm_tagger.py --data ../shared/data/ud_english_ewt --limit 0 --epochs 3
    mpirun -n 2 python examples/bilstm_tagger.py --distributed   # data-parallel: 32 sentences per rank per step

Words seen fewer than 5 times in the training sentences are UNK (W2) or embedded by the
character BiLSTM (W3, `--chars`). `--limit 0` trains on every sentence.
"""
import argparse
import time
from collections import Counter

# common first: one thread, the repository on the path
from common import (add_batching_args, add_distributed_arg, epoch_minibatches, load_or_exit, say,  # noqa: E402
                    start_distributed, step, total_over_ranks, summary)

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402
from hybridbatch_workloads.cli_args import int_at_least, positive_float  # noqa: E402
from hybridbatch_workloads.data.conllu import UPOS_TAGS, read_conllu, synthetic_tagging  # noqa: E402
from hybridbatch_workloads.data.paths import read_data_file  # noqa: E402
from hybridbatch_workloads.data.trees import Vocab  # noqa: E402
from hybridbatch_workloads.models.bilstm_tagger import BiLSTMTagger  # noqa: E402

SYNTHETIC_DEV = 300     # held-out synthetic sentences: the --dev default, and "all" of --dev 0


def load(args):
    """(train, dev) lists of (words, tags)."""
    if args.data:
        train = read_data_file(args.data, "ud_english_ewt", "en_ewt-ud-train.conllu", read_conllu)
        dev = read_data_file(args.data, "ud_english_ewt", "en_ewt-ud-dev.conllu", read_conllu)
    else:
        n_train = args.limit or 4000
        sents = synthetic_tagging(n_train + (args.dev or SYNTHETIC_DEV), seed=args.seed)
        train, dev = sents[:n_train], sents[n_train:]
    if args.limit:
        train = train[:args.limit]
    if args.dev:
        dev = dev[:args.dev]
    pairs = lambda sents: [([t.form for t in s], [t.upos for t in s]) for s in sents]  # noqa: E731
    return pairs(train), pairs(dev)


def train_epoch(model, trainer, data, args, rng, epoch):
    """One pass: (mean loss per sentence, sentences per second), over all ranks with --distributed."""
    total, seconds = 0.0, 0.0
    for batch in epoch_minibatches(data, args, rng, epoch):
        t0 = time.perf_counter()
        if args.mode == "eager":
            loss = hb.add_n([model.sentence_loss(w, t) for w, t in batch])
            loss.backward()
        else:
            with hb.batching(policy=args.policy, granularity=args.granularity):
                loss = hb.add_n([model.sentence_loss(w, t) for w, t in batch])
            loss.backward()
        step(trainer, args, len(batch))
        seconds += time.perf_counter() - t0
        total += loss.item()
    return total_over_ranks(total, args) / len(data), len(data) / seconds


def accuracy(model, data, args):
    correct = count = 0
    for i in range(0, len(data), args.batch):
        batch = data[i:i + args.batch]
        if args.mode == "eager":
            logits = [model.tag_logits(w) for w, _ in batch]
        else:
            with hb.batching(policy=args.policy, granularity=args.granularity):
                logits = [model.tag_logits(w) for w, _ in batch]
        for (_, tags), ls in zip(batch, logits):
            pred = [int(np.argmax(l.asnumpy())) for l in ls]
            correct += sum(p == model.tag_index[t] for p, t in zip(pred, tags))
            count += len(tags)
    return correct / max(count, 1)


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--data", help="folder with en_ewt-ud-{train,dev}.conllu (default: synthetic data)")
    ap.add_argument("--chars", action="store_true", help="W3: embed rare words by a character BiLSTM")
    ap.add_argument("--epochs", type=int_at_least(0), default=3)
    ap.add_argument("--batch", type=int_at_least(1), default=64)
    add_batching_args(ap)
    add_distributed_arg(ap)
    ap.add_argument("--hidden", type=int_at_least(2), default=256, help="word embedding and LSTM size (chars: half)")
    ap.add_argument("--lstmcell", action="store_true",
                    help="steps as nn.LSTMCell over [x; h] (default: input projections hoisted out of the "
                         "recurrence; the same model)")
    ap.add_argument("--limit", type=int_at_least(0), default=1000, help="training sentences (0: all)")
    ap.add_argument("--dev", type=int_at_least(0), default=SYNTHETIC_DEV, help="held-out sentences for accuracy (0: all)")
    ap.add_argument("--lr", type=positive_float, default=0.5)
    ap.add_argument("--seed", type=int_at_least(0), default=0)
    args = ap.parse_args()
    if args.hidden % 2:
        ap.error("--hidden must be even (the char BiLSTM gives hidden / 2 per direction)")

    train, dev = load_or_exit(lambda: load(args))
    counts = Counter(w for words, _ in train for w in words)
    word_vocab = Vocab.build(counts, min_count=5)
    char_vocab = Vocab.build(Counter(ch for w in counts for ch in w)) if args.chars else None
    model = BiLSTMTagger(word_vocab, UPOS_TAGS, char_vocab, embed=args.hidden, hidden=args.hidden,
                         char_embed=64, char_hidden=args.hidden // 2, hoist=not args.lstmcell, seed=args.seed)
    model.hybridize()
    trainer = hb.Trainer(model.parameters(), "sgd", {"learning_rate": args.lr, "clip_global_norm": 5.0})
    start_distributed(args, trainer)
    rare = sum(c for w, c in counts.items() if w not in word_vocab) / max(sum(counts.values()), 1)
    say(args, f"{'W3' if args.chars else 'W2'} tagger: {len(train)} train / {len(dev)} dev sentences "
          f"({'real' if args.data else 'synthetic'}), vocabulary {len(word_vocab)} words "
          f"({rare:.1%} of training tokens rarer than 5 -> {'chars' if args.chars else 'UNK'}), "
          f"hidden {args.hidden}, {args.mode}"
          + (f" ({args.granularity}, {args.policy})" if args.mode == "batched" else ""))
    say(args, f"dev accuracy before training: {accuracy(model, dev, args):.3f}")
    rng = np.random.default_rng(args.seed)
    for epoch in range(1, args.epochs + 1):
        loss, speed = train_epoch(model, trainer, train, args, rng, epoch)
        acc = accuracy(model, dev, args)
        say(args, f"epoch {epoch}: loss {loss:.3f} per sentence, {speed:.1f} sentences/s, dev accuracy {acc:.3f}")


if __name__ == "__main__":
    main()
