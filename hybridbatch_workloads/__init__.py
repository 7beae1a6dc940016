"""The reference workloads (docs/workloads.md): their models (`models/`), data readers and
synthetic generators (`data/`) and the benchmark harness (`bench/`). It imports hybridbatch
as any user's code does; hybridbatch never imports it. Install with the `bench` extra.
"""
