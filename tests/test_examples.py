"""The example scripts run end to end on their built-in synthetic data (tiny sizes), in
either mode, with any policy by name or a saved learned policy, and reject a bad --policy."""
import pytest

import hybridbatch as hb
from helpers import run_example

TINY = ["--limit", "16", "--hidden", "16", "--batch", "8"]


@pytest.mark.parametrize("script, args", [
    ("treelstm_sst.py", TINY + ["--dev-limit", "8", "--policy", "critical-path"]),
    ("treelstm_sst.py", TINY + ["--dev-limit", "8", "--model", "2type", "--mode", "eager"]),
    ("bilstm_tagger.py", TINY + ["--dev", "8", "--epochs", "1", "--policy", "search"]),
    ("lstm_nmt.py", TINY + ["--dev", "8", "--epochs", "1", "--granularity", "op"]),
    ("lattice_ner.py", TINY + ["--dev", "8", "--epochs", "1", "--policy", "greedy-frontier"]),
])
def test_training_example_runs_an_epoch(script, args):
    done = run_example(script, *args)
    assert done.returncode == 0, done.stderr
    assert "epoch 1" in done.stdout


def test_chains_example_compares_modes_and_policies():
    done = run_example("chains.py", "--chains", "8", "--max-len", "6", "--repeat", "1", "--steps", "1")
    assert done.returncode == 0, done.stderr
    assert "agenda" in done.stdout and "depth" in done.stdout and "step 1:" in done.stdout


def test_policy_flag_takes_a_saved_learned_policy(tmp_path):
    path = tmp_path / "policy.json"
    hb.FSMPolicy([], "sort", [], []).save(path)       # an empty table: its fallback decides every step
    done = run_example("lstm_nmt.py", *TINY, "--dev", "8", "--epochs", "1", "--policy", str(path))
    assert done.returncode == 0, done.stderr
    assert "FSMPolicy('sort'" in done.stdout and "epoch 1" in done.stdout


@pytest.mark.parametrize("value, message", [
    ("nope", "neither a policy (agenda, critical-path, depth, greedy-frontier, search, tail-last) nor a saved "
             "FSM policy"),
    (__file__, "not a saved FSM policy"),
])
def test_policy_flag_rejects_what_is_no_policy(value, message):
    done = run_example("treelstm_sst.py", "--policy", value)
    assert done.returncode == 2
    assert message in done.stderr
