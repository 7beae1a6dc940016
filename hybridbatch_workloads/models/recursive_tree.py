"""The bottom-up walk shared by the models on binary sentiment trees (W1, W4).

Every tree node is ONE call of a hybridized node block, which returns the node's state and
the summed loss of its subtree: a leaf is called as `node(word id, label)`, an internal node
as `block(*left state, *right state, label)`. Summing the subtree losses inside the blocks,
instead of in a per-tree `add_n` whose arity differs from tree to tree, keeps every loss in
the batches of the cells.
"""
import numbers

from hybridbatch.hybrid.block import Block


class RecursiveTreeModel(Block):
    """Base: subclasses set `self.node`, a block with an `output` layer (the per-node
    classifier), and may override `internal_blocks` to give internal nodes a choice of blocks.

    - `tree_loss(tree, types=None)`: the summed loss of every node;
    - `root_logits(tree, types=None)`: the classifier's logits at the root.

    `types` (only for several internal blocks): per internal node in post-order, the index
    of the block it uses.
    """

    def __init__(self, vocab):
        super().__init__()
        self.vocab = vocab

    def internal_blocks(self):
        """The blocks an internal node may use (`types` indexes them)."""
        return (self.node,)

    def _encode(self, tree, types):
        """(state..., subtree loss) of `tree`, one block call per node; `types` is an iterator
        (or None), consumed in post-order like `Tree.nodes()`."""
        if tree.is_leaf:
            return self.node(self.vocab.id(tree.word), tree.label)
        left = self._encode(tree.children[0], types)
        right = self._encode(tree.children[1], types)
        block = self.node if types is None else self.internal_blocks()[next(types)]
        return block(*left, *right, tree.label)

    def _types(self, tree, types):
        """`types` as an iterator, checked first: one valid block index per internal node (a
        wrong count, or a negative index that Python would wrap, would pick wrong blocks)."""
        if types is None:
            return None
        types = tuple(types)
        n = len(self.internal_blocks())
        valid = all(isinstance(k, numbers.Integral) and 0 <= k < n for k in types)
        if len(types) != tree.n_leaves - 1 or not valid:
            raise ValueError(f"types must give one block index in range({n}) per internal node: the "
                             f"tree has {tree.n_leaves - 1}, got {len(types)}: {types}")
        return iter(types)

    def tree_loss(self, tree, types=None):
        """Σ over every node of −log softmax(classifier(state))[label]."""
        return self._encode(tree, self._types(tree, types))[-1]

    def root_logits(self, tree, types=None):
        return self.node.output(self._encode(tree, self._types(tree, types))[0])
