"""The package's numba functions load from numba's cache in the background at import."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# compiles update._descend for float32 into the cache (first process), or reports how many
# overloads the import's background loading had loaded before any call (second process)
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
# a fork right after the import, while the loader runs, from a thread that holds numba's
# compiler lock (the loader waits for it): the fork hook must not wait for the loader
_FORK = """
import os
import hybridbatch
from numba.core.compiler_lock import global_compiler_lock
with global_compiler_lock:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
print(os.waitpid(pid, 0)[1])
"""


def _python(code, cache=None, **env):
    env = {**os.environ, "PYTHONPATH": ROOT, "HYBRIDBATCH_PRELOAD": "1", **env}
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                          env=env, timeout=120).stdout.strip()


def test_import_loads_cached_functions_before_their_first_call_unless_turned_off(tmp_path):
    assert _python(_LOADED, tmp_path) == "0"        # nothing cached yet: nothing loaded, nothing compiled
    _python(_COMPILE, tmp_path)
    assert _python(_LOADED, tmp_path) == "1"
    assert _python(_LOADED, tmp_path, HYBRIDBATCH_PRELOAD="0") == "0"


def test_an_entry_for_another_machine_is_skipped_not_compiled(tmp_path):
    _python(_COMPILE, tmp_path)
    assert _python(_LOADED, tmp_path, NUMBA_CPU_NAME="generic") == "0"


def test_a_fork_under_numbas_compiler_lock_does_not_wait_for_the_loader():
    assert _python(_FORK) == "0"
