"""The user's side of the project: example scripts, data readers and `python -m hybridbatch.bench`
given odd flags or odd files answer with a usage error or a one-line message, never a
traceback or a silently wrong result."""
import os
import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def run_example(script, *args):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True, text=True,
                          env=env, timeout=120)


# ---------------------------------------------------------------------------------------------
# example scripts: numeric flags
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("script, args, message", [
    ("treelstm_sst.py", ["--batch", "0"], "--batch: must be an integer >= 1"),
    ("treelstm_sst.py", ["--hidden", "0"], "--hidden: must be an integer >= 1"),
    ("treelstm_sst.py", ["--limit", "-3"], "--limit: must be an integer >= 0"),
    ("bilstm_tagger.py", ["--hidden", "0"], "--hidden: must be an integer >= 2"),
    ("bilstm_tagger.py", ["--seed", "-1"], "--seed: must be an integer >= 0"),
    ("lattice_ner.py", ["--lr", "0"], "--lr: must be a finite number > 0"),
    ("lstm_nmt.py", ["--dev", "0"], "--dev: must be an integer >= 1"),
    ("lstm_nmt.py", ["--limit", "0"], "--limit: must be an integer >= 1"),
    ("chains.py", ["--repeat", "0"], "--repeat: must be an integer >= 1"),
    ("chains.py", ["--min-len", "5", "--max-len", "3"], "--min-len 5 is above --max-len 3"),
])
def test_example_flag_out_of_range_is_a_usage_error(script, args, message):
    """These used to die in a traceback (range() step 0, ZeroDivisionError, an empty median)
    or, for a negative --limit, silently train on all but the last few instances."""
    done = run_example(script, *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr


def test_chains_example_runs_a_single_chain():
    done = run_example("chains.py", "--chains", "1", "--max-len", "4", "--repeat", "1", "--steps", "0")
    assert done.returncode == 0, done.stderr
    assert "1 chains, lengths 2..2" in done.stdout
