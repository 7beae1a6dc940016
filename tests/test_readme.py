"""The README's usage example runs and does what it says."""
import pathlib
import re

import numpy as np


def test_readme_example_runs_batched():
    readme = pathlib.Path(__file__).resolve().parents[1] / "README.md"
    code = re.findall(r"```python\n(.*?)```", readme.read_text(), re.S)[0]
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    scope, loss = namespace["scope"], namespace["loss"]
    assert np.isfinite(loss.asnumpy())
    assert scope.stats.batches == scope.stats.lower_bound < scope.stats.nodes
    assert np.abs(namespace["W"].grad).sum() > 0
