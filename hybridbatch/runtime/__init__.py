"""Runtime: turns a recorded graph and a policy's batches into a plan (`plan.py`, cached by
`plan_cache.py`; where rows live, `layout.py`), runs it forward (`execute.py`) and in reverse
(`autograd.py`), on arenas from `memory.py`, with numpy or cupy arrays (`backend.py`).
"""
