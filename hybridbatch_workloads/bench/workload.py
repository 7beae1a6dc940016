"""The interface every benchmark workload implements (W1, W2, W3, ... of docs/workloads.md).

A workload owns its data (real files from `data_dir`, else its synthetic generator), its
vocabulary and its model, and exposes the model per instance: the harness decides whether
those calls run eagerly or inside `hb.batching()`.
"""
import numpy as np

import hybridbatch as hb


def data_of(wl):
    """What a workload runs on, as results name it: its data source, folder, or synthetic."""
    return getattr(wl, "data_source", None) or wl.data_dir or "synthetic"


class SyntheticOnly(ValueError):
    """--data given to a workload that has no real-data reader (it runs on its generator)."""


class Workload:
    """Subclasses set `name`, `self._train`, `self._dev` and `self.model` (a Block), and
    implement loss, predict, gold and forward_flops; the rest has defaults over those."""

    name = ""
    description = ""

    def __init__(self, hidden=256, data_dir=None, seed=0):
        self.hidden = hidden
        self.data_dir = data_dir
        self.seed = seed

    def train_instances(self):
        """The training instances (list), in the order the harness consumes them."""
        return self._train

    def dev_instances(self):
        """Held-out instances for accuracy (list)."""
        return self._dev

    def loss(self, instance):
        """The instance's scalar training loss (a Future inside a scope, a Tensor outside)."""
        raise NotImplementedError

    def minibatch_loss(self, instances):
        """The scalar loss of a training minibatch: the sum of its instances' losses."""
        return hb.add_n([self.loss(x) for x in instances])

    def predict(self, instance):
        """Handles whose values are the instance's logits (one per predicted item)."""
        raise NotImplementedError

    def predict_minibatch(self, instances):
        """predict() of every instance, run in the caller's mode (inside a scope: recorded)."""
        return [self.predict(x) for x in instances]

    def read_prediction(self, prediction):
        """The values of what predict() returned: one logits array per predicted item."""
        return [h.asnumpy() for h in ([prediction] if hasattr(prediction, "asnumpy") else prediction)]

    def score(self, instance, values):
        """(correct, total) of one instance's read prediction: the argmax of each logits
        array against the gold label."""
        gold = self.gold(instance)
        return sum(int(np.argmax(v)) == int(g) for v, g in zip(values, gold)), len(gold)

    def gold(self, instance):
        """The instance's gold labels, in the order of predict()."""
        raise NotImplementedError

    def parameters(self):
        """Every trainable Parameter (a list, no duplicates)."""
        return self.model.parameters()

    def hybridize(self):
        """Hybridize the model's blocks (block and auto granularity need it)."""
        self.model.hybridize()

    def forward_flops(self, instance):
        """Multiply-add FLOPs (2 per MAC) of the instance's matrix products in the forward pass.

        Training is counted as 3x this (forward, and two products per matmul backward).
        """
        raise NotImplementedError


class ReadingWorkload(Workload):
    """A workload whose per-instance code reads values as it runs (a parser's transition
    scores, a gate, a beam's log-probabilities) and decides on them. A read inside a scope
    would flush the scope for that one instance, so the minibatch runs through `hb.map`:
    inside a scope, every instance runs until it reads, and one flush computes the reads of
    all of them; outside, a plain loop. predict() returns the decoded output itself."""

    def minibatch_loss(self, instances):
        return hb.add_n(hb.map(self.loss, instances))

    def predict_minibatch(self, instances):
        return hb.map(self.predict, instances)

    def read_prediction(self, prediction):
        return prediction

    def score(self, instance, values):
        raise NotImplementedError


REFERENCE_HIDDEN = 256


def scaled(size, hidden):
    """docs/workloads.md size `size` at the harness's `hidden` knob, whose default 256 means the
    reference sizes: a workload whose sizes are not 256 (MV-RNN d = 64, the Lattice LSTM's 50
    and 100) scales them by hidden / 256, so that `--hidden` and the hidden sweep vary them."""
    return max(1, round(size * hidden / REFERENCE_HIDDEN))
