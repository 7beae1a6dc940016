"""The package's numba functions load from numba's cache in the background at import."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# compiles update._descend for float32 into the cache (first process), or reports whether
# the import's background loading had loaded it before any call (second process)
_COMPILE = """
import numpy as np
from hybridbatch.kernels import update
update.descend(np.zeros(3, np.float32), np.ones(3, np.float32), 0.5)
"""
_LOADED = """
import hybridbatch
from hybridbatch.kernels import preload, update
preload.wait()
print(len(update._descend.overloads))
"""


def _python(code, cache, **env):
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                          env=dict(os.environ, PYTHONPATH=ROOT, NUMBA_CACHE_DIR=str(cache), **env)).stdout


def test_import_loads_cached_functions_before_their_first_call_unless_turned_off(tmp_path):
    assert _python(_LOADED, tmp_path).strip() == "0"      # nothing cached yet: nothing loaded, nothing compiled
    _python(_COMPILE, tmp_path)
    assert _python(_LOADED, tmp_path).strip() == "1"
    assert _python(_LOADED, tmp_path, HYBRIDBATCH_PRELOAD="0").strip() == "0"
