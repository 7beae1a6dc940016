"""Attention of one query over a per-instance set of vectors, whose size differs per instance."""
import numpy as np

from .. import api as F
from ..hybrid.block import Block, HybridBlock
from .basic import Dense


class _KeyValue(HybridBlock):
    """One set element: (projected query, element) -> (each head's scaled score, then each
    head's value). Traced once, so an element is one node that batches with every other
    element of every instance."""

    def __init__(self, dim, value_dim, heads, seed):
        super().__init__()
        self.heads, self.scale = heads, 1.0 / np.sqrt(dim // heads)
        self.key = Dense(dim, value_dim, use_bias=False, seed=seed)
        self.value = Dense(dim, value_dim, use_bias=False, seed=None if seed is None else seed + 1)

    def _heads(self, x):
        return F.split(x, self.heads) if self.heads > 1 else [x]

    def forward(self, query, element):
        keys, values = self._heads(self.key(element)), self._heads(self.value(element))
        scores = [F.sum(q * k) * self.scale for q, k in zip(self._heads(query), keys)]
        return tuple(scores) + tuple(values)


class Attention(Block):
    """Scaled dot-product attention (Vaswani et al. 2017) of a query vector over a set of
    value vectors, with `heads` heads of dim / heads each: per head, softmax_i(q . k_i /
    sqrt(dim / heads)) weights the values v_i; the heads' contexts are concatenated and
    projected to `units` (dim by default).

    `forward(query, values)` takes `values` as a Python list of vectors of length
    `value_dim`, of any length per instance. A plain Block rather than a HybridBlock: the
    softmax and weighted sum over the list are the ragged list ops, which batch the sets of
    every size together in a scope (a traced program would fix the count)."""

    def __init__(self, query_dim, value_dim, dim, heads=1, units=None, seed=None):
        super().__init__()
        if heads < 1 or dim % heads:
            raise ValueError(f"Attention's dim ({dim}) must be a positive multiple of heads ({heads})")
        self.heads = heads
        self.query = Dense(dim, query_dim, use_bias=False, seed=seed)
        self.key_value = _KeyValue(dim, value_dim, heads, None if seed is None else seed + 1)
        self.output = Dense(units or dim, dim, use_bias=False, seed=None if seed is None else seed + 3)

    def forward(self, query, values):
        if len(values) == 0:
            raise ValueError("Attention needs at least one value to attend over, got an empty list")
        q = self.query(query)
        elements = [self.key_value(q, v) for v in values]
        contexts = [F.weighted_sum(F.softmax([e[h] for e in elements]), [e[self.heads + h] for e in elements])
                    for h in range(self.heads)]
        return self.output(contexts[0] if self.heads == 1 else F.concat(contexts))
