"""Benchmarks of the reference workloads (docs/workloads.md): `python -m hybridbatch.bench W1`.

- `workload.Workload`: the interface a workload implements (W1 in `workload_treelstm`,
  W2/W3 in `workload_tagger`);
- `harness.run_benchmark(Config(...))`: the measurement protocol, batched vs eager;
- `sweep.run_sweep` / `sweep.plot_sweep`: the hidden-size and minibatch-size variants;
- `cli.main`: the command line.
"""
