"""Train the W1 Tree-LSTM sentiment classifier (docs/workloads.md), or a W4 tree variant, eagerly or batched.

The model (hybridbatch_workloads/models/tree_lstm.py; `--model` picks W1 written plainly from
the nn layers (natural.py), or W4's tree_gru.py, the two-type Tree-LSTM or mv_rnn.py, on the
same trees) is a recursive Python function over ONE tree;
`--mode batched` records a minibatch inside `hb.batching()` and runs it in batches, `--mode
eager` runs the same code tree by tree. Every epoch prints the mean training loss per tree,
training throughput (forward + backward + SGD update, trees per second) and the root
accuracy on the dev trees (5 classes) and the SST-2 accuracy on its non-neutral roots.

    python examples/treelstm_sst.py                                  # synthetic SST-shaped trees
    python examples/treelstm_sst.py --data ../shared/data/sst --limit 0 --epochs 1
    python examples/treelstm_sst.py --model mvrnn                    # W4 MV-RNN (d = hidden / 4)
    mpirun -n 2 python examples/treelstm_sst.py --distributed       # data-parallel: 32 trees per rank per step

`--save model.npz` writes the trained model and its vocabulary. `Model` serves a plain W1
saved so (`--model natural --save model.npz`) over HTTP, batching concurrent requests:

    python -m hybridbatch.serve --model examples/treelstm_sst.py:Model --params model.npz --port 8080
    curl -d '{"tree": "(3 (2 a) (3 (3 good) (2 film)))"}' localhost:8080/infer
"""
import argparse

# common first: one thread, the repository on the path
from common import (add_batching_args, add_distributed_arg, load_or_exit, on_root, run, say, start_distributed,
                    train_epoch, summary)

import numpy as np  # noqa: E402

import hybridbatch as hb  # noqa: E402
from hybridbatch_workloads.cli_args import int_at_least, output_file, positive_float  # noqa: E402
from hybridbatch.train.parameter_dict import write_npz  # noqa: E402
from hybridbatch_workloads.bench.registry import make_workload  # noqa: E402
from hybridbatch_workloads.bench.workload_treelstm import CLASSES  # noqa: E402
from hybridbatch_workloads.data.trees import MAX_TREE_DEPTH, Vocab, parse_ptb  # noqa: E402
from hybridbatch_workloads.models.natural import NaturalTreeLSTM  # noqa: E402

MODELS = {"treelstm": "W1", "natural": "W1-NATURAL", "treegru": "W4-TREEGRU", "2type": "W4-2TYPE",
          "mvrnn": "W4-MVRNN"}


class Model:
    """The serving form of a plain W1 (`NaturalTreeLSTM`) saved by `--model natural --save
    PATH`, for `python -m hybridbatch.serve`: a request is {"tree": a binary tree in SST's
    PTB brackets (its labels are read and ignored)}, the reply the root's 5 class scores and
    the predicted class."""

    def __init__(self, params):
        with np.load(params, allow_pickle=False) as archive:
            if "vocabulary" not in archive.files or "embedding.weight" not in archive.files:
                raise ValueError(f"{params} holds no plain W1 and its vocabulary: save the model with "
                                 "examples/treelstm_sst.py --model natural --save PATH")
            words = archive["vocabulary"].tolist()
            embed = archive["embedding.weight"].shape[1]
            hidden = archive["classifier.weight"].shape[1]
        self.net = NaturalTreeLSTM(Vocab(words[1:], unk=words[0]), embed=embed, hidden=hidden, classes=CLASSES)
        self.net.collect_params().load(params, ignore_extra=True)     # every parameter, checked; not the words
        self.net.hybridize()
        self.net.eval()

    def parse(self, payload):
        """The request's tree; ValueError (the server's 400) names what is wrong."""
        if not isinstance(payload, dict) or not isinstance(payload.get("tree"), str):
            raise ValueError('expected a JSON object {"tree": "(LABEL ...)"} with the tree in PTB brackets')
        tree = parse_ptb(payload["tree"], filename="tree")
        if tree.depth > MAX_TREE_DEPTH:
            raise ValueError(f"the tree is {tree.depth} deep; at most {MAX_TREE_DEPTH}")
        return tree

    def infer(self, tree):
        return self.net.root_logits(tree)

    def respond(self, scores):
        return {"label": int(np.argmax(scores)), "scores": scores.tolist()}


def save_model(workload, path):
    """The trained parameters and the vocabulary in one .npz archive at exactly `path` (Model reads it)."""
    arrays = {name: p.data for name, p in workload.model.collect_params().items()}
    write_npz(path, {"vocabulary": np.array(workload.vocab.words), **arrays})


def accuracy(workload, trees, mode, policy, granularity, batch):
    correct = binary_correct = binary_total = 0
    for i in range(0, len(trees), batch):
        chunk = trees[i:i + batch]
        logits = run(lambda: [workload.predict(t)[0] for t in chunk], mode, policy, granularity)
        for tree, out in zip(chunk, logits):
            scores = out.asnumpy()
            correct += int(np.argmax(scores) == tree.label)
            if tree.label != 2:
                binary_total += 1
                binary_correct += int((scores[3:].max() > scores[:2].max()) == (tree.label > 2))
    return correct / max(len(trees), 1), binary_correct / max(binary_total, 1)


def main():
    ap = argparse.ArgumentParser(description=summary(__doc__))
    ap.add_argument("--data", help="folder with SST train.txt / dev.txt (default: synthetic trees)")
    ap.add_argument("--model", choices=sorted(MODELS), default="treelstm",
                    help="W1 Tree-LSTM, or W4: Tree-GRU, two-type Tree-LSTM, MV-RNN")
    add_batching_args(ap)
    add_distributed_arg(ap)
    ap.add_argument("--hidden", type=int_at_least(1), default=256)
    ap.add_argument("--batch", type=int_at_least(1), default=64)
    ap.add_argument("--epochs", type=int_at_least(0), default=1)
    ap.add_argument("--limit", type=int_at_least(0), default=640, help="training trees (0: all)")
    ap.add_argument("--dev-limit", type=int_at_least(0), default=300, help="dev trees (0: all)")
    ap.add_argument("--lr", type=positive_float, default=0.05)
    ap.add_argument("--seed", type=int_at_least(0), default=0)
    ap.add_argument("--save", metavar="PATH", type=output_file, help="write the trained model and vocabulary here (.npz)")
    args = ap.parse_args()

    workload = load_or_exit(lambda: make_workload(MODELS[args.model], hidden=args.hidden, data_dir=args.data,
                                                  seed=args.seed, train_trees=args.limit or None,
                                                  dev_trees=args.dev_limit or None))
    workload.hybridize()
    train, dev = workload.train_instances(), workload.dev_instances()
    batched = args.mode == "batched"
    trainer = hb.Trainer(workload.parameters(), "sgd", {"learning_rate": args.lr})
    start_distributed(args, trainer)
    rng = np.random.default_rng(args.seed)
    say(args, f"{workload.name}: {workload.description}")
    say(args, f"{workload.data_source}: {len(train)} training trees, {len(dev)} dev trees, "
          f"vocabulary {len(workload.vocab)}, hidden {args.hidden}, {args.mode}"
          + (f" ({args.policy}, {args.granularity})" if batched else ""))
    for epoch in range(1, args.epochs + 1):
        total, seconds = train_epoch(workload.loss, trainer, train, args, rng, epoch)
        acc, acc2 = accuracy(workload, dev, args.mode, args.policy, args.granularity, args.batch)
        say(args, f"epoch {epoch}: loss/tree {total / len(train):.3f}  {len(train) / seconds:.1f} trees/s  "
              f"dev root accuracy {100 * acc:.1f}% (binary {100 * acc2:.1f}%)")
    if args.save and on_root(args):     # every rank holds the same parameters
        save_model(workload, args.save)
        print(f"saved the model and its vocabulary to {args.save}")


if __name__ == "__main__":
    main()
