"""Train the W6 Lattice LSTM NER tagger (docs/workloads.md), eagerly or batched.

The model (hybridbatch/models/lattice_lstm.py) is written for one sentence with plain
Python loops: a character cell per character, a word cell per lexicon word found in the
sentence, and an output layer and loss per character. `--mode batched` records a minibatch
inside `hb.batching()`, `--mode eager` runs the same code sentence by sentence. Every epoch
prints the training loss per character, the training throughput (forward + backward + SGD
update, sentences per second) and, on held-out sentences, the tag accuracy over all
characters and over the characters of entity mentions (gold tag other than O).

    python examples/lattice_ner.py                                    # synthetic lattices
    python examples/lattice_ner.py --data DIR --limit 0 --epochs 5    # DIR/{train,dev,lexicon}.txt

Real data: `train.txt` / `dev.txt` hold one character and its BIO tag per line with a blank
line between sentences (e.g. Weibo NER), `lexicon.txt` one word per line; DIR may also be
their parent folder holding `lattice_ner/`.
"""
import argparse

# first: one thread, the repository on the path
from common import add_batching_args, load_or_exit, run, summary, train_epoch  # noqa: E402

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402
from hybridbatch_workloads.cli_args import int_at_least, positive_float  # noqa: E402
from hybridbatch_workloads.bench.workload_lattice import W6Lattice  # noqa: E402


def accuracy(workload, sentences, args):
    """(tag accuracy over all characters, over the characters of entity mentions)."""
    ok = n = ok_entity = n_entity = 0
    for i in range(0, len(sentences), args.batch):
        batch = sentences[i:i + args.batch]
        logits = run(lambda: [workload.predict(s) for s in batch], args.mode, args.policy, args.granularity)
        for sent, handles in zip(batch, logits):
            pred = np.array([int(np.argmax(h.asnumpy())) for h in handles])
            gold = np.asarray(sent.tags)
            entity = gold != 0                      # tag id 0 is "O"
            ok += int((pred == gold).sum())
            n += len(gold)
            ok_entity += int((pred == gold)[entity].sum())
            n_entity += int(entity.sum())
    return ok / max(n, 1), ok_entity / max(n_entity, 1)


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--data", help="folder with train.txt, dev.txt and lexicon.txt (default: synthetic lattices)")
    add_batching_args(ap)
    ap.add_argument("--hidden", type=int_at_least(1), default=256,
                    help="size knob: 256 gives docs/workloads.md's embedding 50 and hidden 100 (scaled by hidden / 256)")
    ap.add_argument("--batch", type=int_at_least(1), default=64)
    ap.add_argument("--epochs", type=int_at_least(0), default=5)
    ap.add_argument("--limit", type=int_at_least(0), default=640, help="training sentences (0: all)")
    ap.add_argument("--dev", type=int_at_least(0), default=200, help="held-out sentences (0: all)")
    ap.add_argument("--lr", type=positive_float, default=1.0)
    ap.add_argument("--seed", type=int_at_least(0), default=0)
    args = ap.parse_args()

    workload = load_or_exit(lambda: W6Lattice(hidden=args.hidden, data_dir=args.data, seed=args.seed,
                                              train_sentences=args.limit or None, dev_sentences=args.dev or None,
                                              synthetic_train=args.limit or 2000, synthetic_dev=args.dev or 200))
    workload.hybridize()
    train, dev = workload.train_instances(), workload.dev_instances()
    trainer = hb.Trainer(workload.parameters(), "sgd", {"learning_rate": args.lr, "clip_global_norm": 5.0})
    chars = sum(len(s.chars) for s in train)
    words = sum(len(s.words) for s in train)
    print(f"W6: {workload.description}")
    print(f"{workload.data_source}: {len(train)} training / {len(dev)} held-out sentences, {chars} characters, "
          f"{words} lexicon matches (one per {chars / max(words, 1):.2f} characters), {len(workload.tags)} tags, "
          f"{args.mode}" + (f" ({args.policy}, {args.granularity})" if args.mode == "batched" else ""))
    rng = np.random.default_rng(args.seed)
    for epoch in range(1, args.epochs + 1):
        total, seconds = train_epoch(workload.loss, trainer, train, args, rng)
        acc, acc_entity = accuracy(workload, dev, args)
        print(f"epoch {epoch}: loss/character {total / chars:.3f}  {len(train) / seconds:.1f} sentences/s  "
              f"dev tag accuracy {100 * acc:.1f}% (entity characters {100 * acc_entity:.1f}%)")


if __name__ == "__main__":
    main()
