"""Recording: what a call inside `hb.batching()` turns into.

The scope (`scope.py`) appends one node per op or block call to a flat graph (`graph.py`),
keyed by an interned signature (`signature.py`) and handed back as a two-slot `Future`
(`future.py`); `operators.py` gives Futures, Tensors and Parameters Python's operators, and
`eager.py` runs the same ops at once, one instance at a time, outside a scope.
"""
