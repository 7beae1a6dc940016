"""W2's BiLSTM tagger in PyTorch: the outside peer of `python -m hybridbatch.bench W2`.

    make peers        # benchmarks/peers/.venv with torch (CPU build)
    benchmarks/peers/.venv/bin/python benchmarks/peers/pytorch_tagger.py \
        --data ../shared/data/ud_english_ewt --json torch_w2.json

The model is docs/workloads.md's W2 as a PyTorch user writes it for a minibatch: an embedding
of 256 (words seen fewer than 5 times in the training sentences -> UNK, id 0), one packed
bidirectional `nn.LSTM` of 256 each way, `nn.Linear(512, 17)` per token, cross-entropy summed
over every token of the minibatch (the sum of the sentences' summed losses), divided by the
minibatch size before `backward` as `hb.Trainer.step(batch)` rescales, and SGD (lr 0.05).
The protocol is the harness's: one thread (`torch.set_num_threads(1)`), minibatches of 64,
128 warm-up sentences trained and inferred, then per run the same sentences
`hybridbatch_workloads/bench/harness.py` draws (run r: a permutation of the sentences after
the warm-up ones from `numpy.random.default_rng(seed * 1000 + r + 1)`), trained then
inferred; throughput is the median over runs. Inference reads every sentence's logits into
numpy, as the harness reads every logits handle.

Sentences come from `en_ewt-ud-train.conllu` (`--data`, read here in a few lines) or from a
JSON file of encoded sentences (`--sentences`, as `benchmarks/natural.py` writes it from the
hybridbatch workload, synthetic data included). This file imports neither hybridbatch nor its
workloads package, which need numba: the peer's venv holds torch and numpy only.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np      # noqa: E402  (after the thread variables)
import torch            # noqa: E402
from torch import nn    # noqa: E402
from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence   # noqa: E402

UPOS_TAGS = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON",
             "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X")
MIN_COUNT = 5


def read_conllu(path):
    """[(words, upos tags)] per sentence; multiword-token and empty-node lines skipped."""
    sents, words, tags = [], [], []
    with open(path, encoding="utf-8-sig") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip():
                if words:
                    sents.append((words, tags))
                    words, tags = [], []
                continue
            if line.startswith("#"):
                continue
            cols = line.split("\t")
            if "-" in cols[0] or "." in cols[0]:
                continue
            words.append(cols[1])
            tags.append(cols[3])
    if words:
        sents.append((words, tags))
    return sents


def encode(sents):
    """(vocabulary size, [(word ids, tag ids)]): ids by frequency as hybridbatch's `Vocab`."""
    counts = Counter(w for ws, _ in sents for w in ws)
    kept = sorted((w for w, c in counts.items() if c >= MIN_COUNT), key=lambda w: (-counts[w], w))
    index = {w: i for i, w in enumerate(kept, 1)}
    tag = {t: i for i, t in enumerate(UPOS_TAGS)}
    return len(kept) + 1, [([index.get(w, 0) for w in ws], [tag[t] for t in ts]) for ws, ts in sents]


def load(args):
    if args.sentences:
        with open(args.sentences) as f:
            d = json.load(f)
        return d["vocab_size"], [(s[0], s[1]) for s in d["train"]], d.get("source", args.sentences)
    path = args.data
    if os.path.isdir(path):
        for p in (os.path.join(path, "en_ewt-ud-train.conllu"),
                  os.path.join(path, "ud_english_ewt", "en_ewt-ud-train.conllu")):
            if os.path.isfile(p):
                path = p
                break
    vocab_size, pool = encode(read_conllu(path))
    return vocab_size, pool, path


class Tagger(nn.Module):
    def __init__(self, vocab_size, embed=256, hidden=256, tags=len(UPOS_TAGS)):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed)
        self.lstm = nn.LSTM(embed, hidden, bidirectional=True)
        self.output = nn.Linear(2 * hidden, tags)

    def forward(self, sentences):
        """Logits (total tokens, tags), the sentences' tokens one after another."""
        packed = pack_sequence([self.embedding(s) for s in sentences], enforce_sorted=False)
        states, lengths = pad_packed_sequence(self.lstm(packed)[0])      # (T, B, 2H)
        return self.output(torch.cat([states[:n, b] for b, n in enumerate(lengths.tolist())]))


def draw(pool, n, rng):
    """n instances as the harness's `_take` draws them: permutations of the pool, as needed."""
    out = []
    while len(out) < n:
        out.extend(pool[i] for i in rng.permutation(len(pool))[:n - len(out)])
    return out


def _minibatches(seq, size):
    return [seq[i:i + size] for i in range(0, len(seq), size)]


def _tensors(mb):
    return [torch.tensor(ids) for ids, _ in mb], torch.tensor([t for _, ts in mb for t in ts])


def train(model, opt, instances, batch):
    loss_sum, t0 = 0.0, time.perf_counter()
    for mb in _minibatches(instances, batch):
        words, gold = _tensors(mb)
        loss = nn.functional.cross_entropy(model(words), gold, reduction="sum")
        opt.zero_grad()
        (loss / len(mb)).backward()
        opt.step()
        loss_sum += loss.item()
    return time.perf_counter() - t0, loss_sum / len(instances)


def infer(model, instances, batch):
    correct = total = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for mb in _minibatches(instances, batch):
            words, gold = _tensors(mb)
            logits = model(words).numpy()
            correct += int((logits.argmax(1) == gold.numpy()).sum())
            total += len(gold)
    return time.perf_counter() - t0, correct / total


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="en_ewt-ud-train.conllu, or a folder holding it (or ud_english_ewt/)")
    src.add_argument("--sentences", help="JSON {vocab_size, train: [[word ids], [tag ids]]...}")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--instances", type=int, default=1280)
    ap.add_argument("--warmup", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--first-run", type=int, default=0, help="index r of the first run's sample (0)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    vocab_size, pool, source = load(args)
    model = Tagger(vocab_size)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    warm = pool[:args.warmup]
    rest = pool[args.warmup:] if len(pool) > args.warmup else pool
    if warm:
        train(model, opt, warm, args.batch)
        infer(model, warm, args.batch)
    runs = []
    for r in range(args.first_run, args.first_run + args.repeats):
        sample = draw(rest, args.instances, np.random.default_rng(args.seed * 1000 + r + 1))
        t_train, loss = train(model, opt, sample, args.batch)
        t_infer, acc = infer(model, sample, args.batch)
        runs.append({"train": args.instances / t_train, "infer": args.instances / t_infer,
                     "loss_per_instance": loss, "accuracy": acc})
        print(f"run {r}: train {runs[-1]['train']:.1f} inst/s, infer {runs[-1]['infer']:.1f} inst/s",
              file=sys.stderr)
    res = {"peer": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
           "python": platform.python_version(), "data": source, "vocab_size": vocab_size,
           "config": vars(args), "runs": runs,
           "train": statistics.median(r["train"] for r in runs),
           "infer": statistics.median(r["infer"] for r in runs)}
    print(f"pytorch W2 tagger ({source}): training {res['train']:.1f} inst/s, inference "
          f"{res['infer']:.1f} inst/s (median of {len(runs)})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
