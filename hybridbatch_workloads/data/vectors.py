"""Synthetic labeled vectors for W8 (mixture of experts).

W8 has no corpus of its own (Suarez & Zhu time the layer on random inputs). Here the inputs
come from clusters, and each cluster labels its points with its own linear rule, so that a
gate has regions to route and experts have different functions to learn.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["LabeledVector", "synthetic_vectors"]


class LabeledVector(NamedTuple):
    x: np.ndarray       # float32, shape (dim,)
    label: int


def synthetic_vectors(n: int, dim: int = 256, classes: int = 10, clusters: int = 64,
                      seed: int = 0) -> list[LabeledVector]:
    """`n` vectors: a cluster centre (unit normal) plus noise (sd 0.5), labeled by the argmax
    of the cluster's random linear map. The clusters and their rules depend on the sizes
    only, the points on `seed`, so train and held-out sets drawn with two seeds agree."""
    if n < 0 or dim < 1 or classes < 1 or clusters < 1:
        raise ValueError("n must be >= 0 and dim, classes, clusters >= 1")
    rules = np.random.default_rng([dim, classes, clusters])
    centres = rules.standard_normal((clusters, dim))
    maps = rules.standard_normal((clusters, classes, dim))
    rng = np.random.default_rng(seed)
    which = rng.integers(0, clusters, n)
    xs = (centres[which] + 0.5 * rng.standard_normal((n, dim))).astype(np.float32)
    labels = np.einsum("ncd,nd->nc", maps[which], xs).argmax(axis=1)
    return [LabeledVector(x, int(y)) for x, y in zip(xs, labels)]
