"""Offline scheduling study: tighter lower bounds (`bounds.py`), the exact automata of
independent parts (`automata.py`) and the rollout search (`search.py`). The runtime never
imports this package; the `"search"` policy loads it on first use.
"""
