"""malloc tuning at import: on by default with glibc, off with HYBRIDBATCH_KEEP_MEMORY=0."""
import os
import platform
import subprocess
import sys

import pytest


def _applied(env_value):
    env = dict(os.environ)
    env.pop("HYBRIDBATCH_KEEP_MEMORY", None)
    if env_value is not None:
        env["HYBRIDBATCH_KEEP_MEMORY"] = env_value
    out = subprocess.run([sys.executable, "-c", "import hybridbatch.memory as m; print(m.APPLIED)"],
                         env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc tuning applies to glibc only")
def test_freed_memory_is_kept_by_default_with_glibc():
    assert _applied(None) == "True"


def test_opt_out_leaves_malloc_alone():
    assert _applied("0") == "False"
