"""A per-instance RNN over chains of different lengths, run eagerly and batched.

Each instance is a chain h_t = tanh(W @ [h_{t-1}; x_t] + b) of its own length, ending in
one classification loss. The model is written for one instance with a plain Python loop;
inside `hb.batching()` the same code is recorded and run in batches. The script runs
forward + backward of one minibatch eagerly and under both batching policies, prints
nodes, batches, the lower bound, times and the largest differences from eager, then
takes a few plain-SGD steps on the minibatch with the agenda policy.

    python examples/chains.py [--chains 64] [--hidden 64] [--seed 0] [--steps 5]
"""
import argparse
import time

import numpy as np

import hybridbatch as hb
from hybridbatch_workloads.cli_args import int_at_least, positive_float


class ChainRNN:
    def __init__(self, input_size, hidden, classes, seed):
        rng = np.random.default_rng(seed)
        self.hidden = hidden
        self.W = hb.Parameter("W", (hidden, hidden + input_size), rng=rng)
        self.b = hb.Parameter("b", (hidden,), init="zeros")
        self.V = hb.Parameter("V", (classes, hidden), rng=rng)
        self.params = [self.W, self.b, self.V]

    def loss(self, xs, label):
        """One instance: any length, ordinary Python control flow."""
        h = hb.array(np.zeros(self.hidden, np.float32))
        for x in xs:
            h = hb.tanh(self.W @ hb.concat([h, hb.array(x)]) + self.b)
        return hb.pick_neg_log_softmax(self.V @ h, label)

    def zero_grad(self):
        for p in self.params:
            p.zero_grad()

    def grads(self):
        return [np.array(p.grad) for p in self.params]


def make_minibatch(n, input_size, classes, min_len, max_len, seed):
    """Chains of lengths min_len..max_len (both ends included); the label depends on the data."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, max_len + 1, n)
    lengths[:2] = (min_len, max_len)[:n]
    data = []
    for n_steps in lengths:
        xs = [rng.standard_normal(input_size).astype(np.float32) for _ in range(n_steps)]
        label = int(np.argmax(sum(x[:classes] for x in xs)))
        data.append((xs, label))
    return data


def run_eager(model, data):
    """Forward + backward, one instance at a time: (per-instance losses, grads, seconds)."""
    model.zero_grad()
    t0 = time.perf_counter()
    losses = [model.loss(xs, y) for xs, y in data]
    hb.add_n(losses).backward()
    seconds = time.perf_counter() - t0
    return np.array([l.item() for l in losses]), model.grads(), seconds, None


def run_batched(model, data, policy):
    """Forward + backward in one batching scope: (losses, grads, seconds, stats)."""
    model.zero_grad()
    t0 = time.perf_counter()
    with hb.batching(policy=policy) as scope:
        losses = [model.loss(xs, y) for xs, y in data]
        total = hb.add_n(losses)
    total.backward()
    seconds = time.perf_counter() - t0
    return np.array([l.item() for l in losses]), model.grads(), seconds, scope.stats


def measure(fn, repeat):
    """Warm up once (numba cache, signature interning), then keep the median-time run."""
    fn()
    runs = sorted((fn() for _ in range(repeat)), key=lambda r: r[2])
    return runs[len(runs) // 2]


def main():
    ap = argparse.ArgumentParser(description="Per-instance RNN over variable-length chains: eager vs batched.")
    ap.add_argument("--chains", type=int_at_least(1), default=64, help="instances in the minibatch")
    ap.add_argument("--hidden", type=int_at_least(1), default=64, help="hidden size")
    ap.add_argument("--input", type=int_at_least(1), default=32, help="input vector size")
    ap.add_argument("--classes", type=int_at_least(1), default=5)
    ap.add_argument("--min-len", type=int_at_least(0), default=2)
    ap.add_argument("--max-len", type=int_at_least(0), default=40)
    ap.add_argument("--seed", type=int_at_least(0), default=0)
    ap.add_argument("--repeat", type=int_at_least(1), default=3, help="timed runs per mode (median shown)")
    ap.add_argument("--steps", type=int_at_least(0), default=5, help="SGD steps on the minibatch afterwards (0: none)")
    ap.add_argument("--lr", type=positive_float, default=0.05)
    a = ap.parse_args()
    if a.min_len > a.max_len:
        ap.error(f"--min-len {a.min_len} is above --max-len {a.max_len}")

    model = ChainRNN(a.input, a.hidden, a.classes, a.seed)
    data = make_minibatch(a.chains, a.input, a.classes, a.min_len, a.max_len, a.seed + 1)
    lengths = [len(xs) for xs, _ in data]
    print(f"{a.chains} chains, lengths {min(lengths)}..{max(lengths)} (mean {np.mean(lengths):.1f}), "
          f"hidden {a.hidden}, input {a.input}, {a.classes} classes, seed {a.seed}")
    print("forward + backward of the minibatch; times are medians of "
          f"{a.repeat} runs after a warm-up\n")

    eager_losses, eager_grads, eager_s, _ = measure(lambda: run_eager(model, data), a.repeat)
    rows = []
    for policy in ("agenda", "depth"):
        losses, grads, seconds, st = measure(lambda: run_batched(model, data, policy), a.repeat)
        d_loss = float(np.max(np.abs(losses - eager_losses)))
        d_grad = max(float(np.max(np.abs(g - e))) for g, e in zip(grads, eager_grads))
        rows.append((policy, st, seconds, d_loss, d_grad))

    head = (f"{'mode':<8}{'nodes':>8}{'batches':>9}{'lower bd':>10}{'seconds':>10}{'speedup':>9}"
            f"{'max|dloss|':>12}{'max|dgrad|':>12}")
    print(head)
    print("-" * len(head))
    nodes = rows[0][1].nodes
    print(f"{'eager':<8}{nodes:>8}{nodes:>9}{'-':>10}{eager_s:>10.4f}{'1.0x':>9}{'-':>12}{'-':>12}")
    for policy, st, seconds, d_loss, d_grad in rows:
        print(f"{policy:<8}{st.nodes:>8}{st.batches:>9}{st.lower_bound:>10}{seconds:>10.4f}"
              f"{eager_s / seconds:>8.1f}x{d_loss:>12.1e}{d_grad:>12.1e}")
    print("\n(eager runs one kernel per node; nodes = executed ops, inputs not counted)")

    print(f"\n{'mode':<8}{'record s':>10}{'schedule s':>12}{'execute s':>11}{'backward s':>12}{'flushes':>9}")
    for policy, st, *_ in rows:
        print(f"{policy:<8}{st.record_seconds:>10.4f}{st.schedule_seconds:>12.4f}{st.execute_seconds:>11.4f}"
              f"{st.backward_seconds:>12.4f}{st.flushes:>9}")

    if a.steps:
        print(f"\nSGD on this minibatch (agenda, lr {a.lr}): mean loss per step")
        for step in range(a.steps):
            losses, grads, _, _ = run_batched(model, data, "agenda")
            for p in model.params:
                p.data -= a.lr / a.chains * p.grad
                p.zero_grad()
            print(f"  step {step + 1}: {losses.mean():.4f}")

    worst = max(max(r[3] for r in rows), max(r[4] for r in rows))
    if not worst < 1e-3:
        raise SystemExit(f"batched results differ from eager by {worst:.3g}")


if __name__ == "__main__":
    main()
