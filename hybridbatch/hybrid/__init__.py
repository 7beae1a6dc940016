"""Hybrid blocks: `Block`/`HybridBlock`, tracing a forward into a block program, and the
passes over that program (loss folding, fusion, distinct rows) before it runs as one node
per call; `granularity.py` chooses between one node per call and inlined primitive ops.
"""
