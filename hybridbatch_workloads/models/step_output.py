"""A per-step output layer whose loss calls chain into one running total (W5, W6).

A sequence's loss as an `add_n` of its steps' losses has one arity, hence one signature, per
sequence length: a minibatch would run one small batch per distinct length. Instead, each
step's call takes the running total and returns it plus its own loss (as W1 sums subtree
losses inside its node block), so all steps' losses batch with the output layer.
"""
from hybridbatch import api as hb
from hybridbatch.hybrid.block import HybridBlock
from hybridbatch.nn import Dense


class StepOutput(HybridBlock):
    """(h) -> logits; (h, label[, total]) -> [total +] −log softmax(W h + b)[label]."""

    def __init__(self, classes, hidden, seed=0):
        super().__init__()
        self.dense = Dense(classes, hidden, seed=seed)

    def forward(self, h, label=None, total=None):
        logits = self.dense(h)
        if label is None:
            return logits
        loss = hb.pick_neg_log_softmax(logits, label)
        return loss if total is None else total + loss

    def sequence_loss(self, states, labels):
        """Σ over steps of the loss of (state, label): one call per step, chained.

        One label per step, checked: zipping a shorter list would silently drop steps."""
        if len(states) != len(labels) or not len(labels):
            raise ValueError(f"a sequence loss needs one label per step and at least one step; got "
                             f"{len(states)} steps and {len(labels)} labels")
        total = None
        for h, y in zip(states, labels):
            total = self(h, y) if total is None else self(h, y, total)
        return total
