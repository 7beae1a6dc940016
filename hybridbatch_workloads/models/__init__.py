"""The reference workloads (docs/workloads.md), written per instance."""
from .tree_lstm import TreeLSTMNode, TreeLSTMSentiment

__all__ = ["TreeLSTMNode", "TreeLSTMSentiment"]
