"""W8: a sparsely-gated mixture of experts (Shazeer et al. 2017), one example per call.

A gate (a linear layer) scores the experts for the example; the code reads the scores,
calls only the k best experts (each 256 -> 256 relu -> 256) and mixes their outputs with the
softmax of the k chosen gate scores; a linear classifier on the mixture gives the loss.
Written for one example: `hb.map` runs a minibatch side by side inside `hb.batching()`, so
the gates of all examples run as one product, and each expert runs once over the examples
that chose it.
"""
from __future__ import annotations

import numpy as np

import hybridbatch as hb
from hybridbatch import nn

__all__ = ["Expert", "MixtureOfExperts"]


class Expert(hb.HybridBlock):
    """x -> W2 relu(W1 x + b1) + b2."""

    def __init__(self, dim, seed=0):
        super().__init__()
        self.hidden = nn.Dense(dim, dim, activation="relu", seed=seed)
        self.output = nn.Dense(dim, dim, seed=seed + 1)

    def forward(self, x):
        return self.output(self.hidden(x))


class MixtureOfExperts(hb.Block):
    """`loss(x, label)` / `logits(x)` of one example; `chosen(x)` the experts it calls."""

    def __init__(self, experts=64, dim=256, k=2, classes=10, seed=0):
        super().__init__()
        if not 1 <= k <= experts:
            raise ValueError(f"k must be between 1 and the number of experts ({experts}), not {k}")
        self.n_experts, self.k = experts, k
        self.gate = nn.Dense(experts, dim, seed=seed)
        for e in range(experts):
            setattr(self, f"expert{e}", Expert(dim, seed=seed + 2 + 2 * e))
        self.classifier = nn.Dense(classes, dim, seed=seed + 1)

    def expert(self, e):
        return getattr(self, f"expert{e}")

    def mixture(self, x):
        """(the k best experts' outputs weighted by the softmax of their gate scores, their ids)."""
        gate = self.gate(x)
        scores = gate.asnumpy()
        chosen = [int(e) for e in np.argsort(-scores, kind="stable")[:self.k]]
        top = float(scores[chosen[0]])
        weights = [hb.exp(hb.pick(gate, e) - top) for e in chosen]
        total = hb.add_n(weights)
        return hb.add_n([(w / total) * self.expert(e)(x) for w, e in zip(weights, chosen)]), chosen

    def logits(self, x):
        return self.classifier(self.mixture(x)[0])

    def loss(self, x, label):
        return hb.pick_neg_log_softmax(self.logits(x), label)
