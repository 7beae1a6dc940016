"""`python -m hybridbatch.bench ...`: the benchmark command where the docs name it.

The harness lives in the workloads package (`hybridbatch_workloads.bench`, installed with
the `bench` extra); importing this module loads nothing, only running it does.
"""
if __name__ == "__main__":
    import runpy
    runpy.run_module("hybridbatch_workloads.bench", run_name="__main__", alter_sys=True)
