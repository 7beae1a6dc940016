"""Hybrid blocks: `Block`/`HybridBlock` (block.py), tracing a forward into a Program
(tracing.py, on the placeholders of arguments.py), the Program of named Steps (program.py),
the passes over its steps (passes.py: loss folding, fusion; distinct.py: distinct rows) and
the Composite op that runs it as one node per call (composite.py); `granularity.py` chooses
between one node per call and inlined primitive ops.
"""
