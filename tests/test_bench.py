"""The benchmark harness (`python -m hybridbatch.bench`) end to end on tiny settings."""
import json
import os
import statistics
import subprocess
import sys

import pytest

import hybridbatch as hb
from hybridbatch_workloads.bench import cli
from hybridbatch_workloads.bench.harness import Config, run_benchmark
from hybridbatch_workloads.bench.machine import THREAD_VARS
from hybridbatch_workloads.bench.registry import UnknownWorkload, make_workload
from hybridbatch_workloads.bench.workload_treelstm import W1TreeLSTM
from hybridbatch_workloads.data.trees import Tree

TINY = ["--hidden", "16", "--batch", "4", "--instances", "12", "--warmup", "4",
        "--eager-instances", "4", "--eager-warmup", "2", "--repeats", "1",
        "--synthetic-train", "40", "--synthetic-dev", "5", "--gemm-repeats", "2", "--no-progress"]

TRAIN_SPLIT = {"record", "schedule", "forward", "backward", "update", "other"}


def _check_part(part, batched):
    assert part["throughput"] > 0 and part["seconds"] > 0
    assert part["flops"] > 0 and part["flops_per_second"] > 0 and part["efficiency"] > 0
    # each run is judged against the GEMM rate measured next to it
    assert len(part["efficiency_runs"]) == len(part["throughput_runs"])
    assert part["efficiency"] == pytest.approx(statistics.median(part["efficiency_runs"]))
    assert sum(part["split_shares"].values()) == pytest.approx(1.0, abs=1e-6)
    assert all(v >= 0 for v in part["split_seconds"].values())
    if batched:
        assert part["nodes"] > 0
        assert part["batches"] >= part["lower_bound"] > 0
        assert part["batches_over_lower_bound"] >= 1.0


def test_cli_end_to_end_subprocess(tmp_path):
    out = tmp_path / "w1.json"
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}   # exercises the re-exec
    proc = subprocess.run([sys.executable, "-m", "hybridbatch_workloads.bench", "W1", *TINY, "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "training inst/s" in proc.stdout and "speedup" in proc.stdout
    res = json.loads(out.read_text())
    assert res["workload"] == "W1"
    assert res["config"]["hidden"] == 16 and res["config"]["granularity"] == "block"
    m = res["machine"]
    assert m["thread_settings"] == {v: "1" for v in THREAD_VARS}
    for key in ("numpy", "numba", "cpu_model", "python"):
        assert m[key]
    assert res["gemm"]["shape"] == [1024, 512, 1280] and res["gemm"]["flops_per_second"] > 0
    assert res["eager_instances"] == 4
    for phase in ("train", "infer"):
        _check_part(res["batched"][phase], True)
        _check_part(res["eager"][phase], False)
        assert res["speedup"][phase] > 0
    assert set(res["batched"]["train"]["split_seconds"]) == TRAIN_SPLIT
    assert res["batched"]["train"]["instances"] == 12 and res["batched"]["train"]["minibatches"] == 3
    assert res["check"]["max_rel_loss_diff"] < 1e-3


def test_in_process_no_eager_other_policy():
    res = run_benchmark(Config(hidden=8, batch=3, instances=7, warmup=3, repeats=2, eager=False,
                               policy="depth", granularity="op", gemm_repeats=1,
                               workload_options={"synthetic_train": 20, "synthetic_dev": 2}),
                        progress=False, info=False)
    assert res["eager"] is None and res["speedup"] == {"train": None, "infer": None}
    assert res["batched"]["train"]["minibatches"] == 3
    assert len(res["batched"]["train"]["throughput_runs"]) == 2
    _check_part(res["batched"]["train"], True)
    _check_part(res["batched"]["infer"], True)


def test_no_distinct_rows_runs_every_row_and_says_so(tmp_path, capsys, monkeypatch):
    from hybridbatch.hybrid import distinct
    seen = []
    real = distinct.KeyedPart.split
    monkeypatch.setattr(distinct.KeyedPart, "split",
                        lambda self, ints, size: seen.append(size) or real(self, ints, size))
    out = tmp_path / "r.json"
    args = ["W1", "--hidden", "8", "--instances", "4", "--warmup", "2", "--eager-instances", "2",
            "--eager-warmup", "1", "--repeats", "1", "--synthetic-train", "20", "--synthetic-dev", "2",
            "--gemm-repeats", "1", "--no-progress", "--no-check", "--no-distinct-rows", "--json", str(out)]
    assert cli.main(args) == 0
    assert json.loads(out.read_text())["config"]["distinct_rows"] is False
    assert "distinct rows off" in capsys.readouterr().out
    assert seen == [] and hb.settings.distinct_rows       # restored after the run


def test_sweep_writes_png_and_json(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    args = ["W1", "--sweep", "batch", "--hidden", "8", "--instances", "4", "--warmup", "2",
            "--eager-instances", "2", "--eager-warmup", "1", "--repeats", "1", "--synthetic-train", "20",
            "--synthetic-dev", "2", "--gemm-repeats", "1", "--no-progress", "--no-check", "--json", str(out)]
    assert cli.main(args) == 0
    png = tmp_path / "sweep.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sweep = json.loads(out.read_text())
    assert sweep["sweep"] == "batch" and sweep["values"] == [1, 8, 32, 64, 128, 256]
    assert [r["config"]["batch"] for r in sweep["results"]] == sweep["values"]
    assert all(r["speedup"]["train"] > 0 for r in sweep["results"])
    assert "sweep over batch" in capsys.readouterr().out


def test_w1_forward_flops_exact():
    wl = W1TreeLSTM(hidden=256, synthetic_train=3, synthetic_dev=1)
    leaf = lambda w: Tree(2, w)                               # noqa: E731
    tree = Tree(3, children=(leaf("a"), Tree(2, children=(leaf("b"), leaf("c")))))   # 3 leaves, 2 internal
    expected = 2 * (3 * 768 * 256 + 2 * 1280 * 512 + 5 * 5 * 256)
    assert wl.forward_flops(tree) == expected
    assert wl.embed == 256 and len(wl.train_instances()) == 3 and len(wl.dev_instances()) == 1


def test_w1_reads_real_layout(tmp_path):
    (tmp_path / "sst").mkdir()
    (tmp_path / "sst" / "train.txt").write_text("(3 (2 a) (4 b))\n(1 (1 bad) (2 c))\n")
    (tmp_path / "sst" / "dev.txt").write_text("(2 (2 a) (2 z))\n")
    for d in (tmp_path, tmp_path / "sst"):
        wl = W1TreeLSTM(hidden=8, data_dir=str(d))
        assert len(wl.train_instances()) == 2 and len(wl.dev_instances()) == 1
        assert len(wl.vocab) == 5                             # <unk>, a, b, bad, c
        assert wl.gold(wl.dev_instances()[0]) == [2]


def test_unknown_workload():
    with pytest.raises(UnknownWorkload):
        make_workload("W99")


def test_policies_command_writes_table_png_and_json(tmp_path, capsys):
    out = tmp_path / "policies.json"
    args = ["policies", "--workloads", "w1,W4-2type", "--hidden", "8", "--batch", "4", "--eval-batches", "2",
            "--no-progress", "--json", str(out)]
    assert cli.main(args) == 0
    assert (tmp_path / "policies.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = json.loads(out.read_text())
    assert [r["workload"] for r in res["results"]] == ["W1", "W4-2TYPE"]
    for r in res["results"]:
        assert r["eval_minibatches"] == 2 and r["lower_bound"] > 0
        for name, p in r["policies"].items():
            assert p["batches"] >= p["lower_bound"] == r["lower_bound"], name
            assert p["schedule_seconds"] > 0
            assert ("train_throughput" in p) == (name != "search")      # search: batches and one timing
            assert p.get("train_throughput", 1) > 0
            assert (p["learn_seconds"] is not None) == name.startswith("fsm-")
        assert r["policies"]["search"]["batches"] <= r["policies"]["critical-path"]["batches"]
        # the learned policies never do worse than agenda on these small trees
        assert min(r["policies"][n]["batches"] for n in res["policies"] if n.startswith("fsm-")) \
            <= r["policies"]["agenda"]["batches"]
    text = capsys.readouterr().out
    assert "batches executed" in text and "W4-2TYPE" in text


def test_policies_command_rejects_unknown_workloads(capsys):
    assert cli.main(["policies", "--workloads", "W1,W99", "--no-progress"]) == 2
    assert "W99" in capsys.readouterr().err


@pytest.mark.parametrize("batch", [1, 64, 100, 128, 256])
def test_eager_runs_whole_minibatches_by_default_so_it_steps_as_often_as_batched(batch):
    n = Config(batch=batch).resolved().eager_instances
    assert n >= 128 and n % batch == 0 and n - batch < 128


def test_an_eager_instance_count_asked_for_is_kept():
    assert Config(batch=256, eager_instances=32).resolved().eager_instances == 32


def test_policies_command_rejects_a_workload_named_twice(capsys):
    assert cli.main(["policies", "--workloads", "W1,w2,W1 ", "--no-progress"]) == 2
    assert "W1 more than once" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value, message", [
    ("--hidden", "0", "must be an integer >= 1, got '0'"),
    ("--hidden", "abc", "must be an integer >= 1, got 'abc'"),
    ("--batch", "0", "must be an integer >= 1, got '0'"),
    ("--instances", "-5", "must be an integer >= 1, got '-5'"),
    ("--repeats", "0", "must be an integer >= 1, got '0'"),
    ("--warmup", "-1", "must be an integer >= 0, got '-1'"),
    ("--eager-instances", "-1", "must be an integer >= 0, got '-1'"),
    ("--eager-warmup", "-1", "must be an integer >= 0, got '-1'"),
    ("--eval-batches", "0", "must be an integer >= 1, got '0'"),
    ("--seed", "-1", "must be an integer >= 0, got '-1'"),
    ("--gemm-repeats", "0", "must be an integer >= 1, got '0'"),
    ("--synthetic-train", "0", "must be an integer >= 1, got '0'"),
    ("--synthetic-dev", "-1", "must be an integer >= 0, got '-1'"),
    ("--lr", "0", "must be a finite number > 0, got '0'"),
    ("--lr", "-0.1", "must be a finite number > 0, got '-0.1'"),
    ("--lr", "nan", "must be a finite number > 0, got 'nan'"),
    ("--lr", "inf", "must be a finite number > 0, got 'inf'"),
    ("--policy", "bogus", "'bogus' is neither a policy (agenda, critical-path, depth, greedy-frontier, "
                          "search, tail-last) nor a saved FSM policy file"),
    ("--policy", __file__, "not a saved FSM policy"),
])
def test_cli_rejects_bad_flag_values_as_usage_errors(flag, value, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["W1", flag, value, "--no-progress"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m hybridbatch.bench")
    assert f"argument {flag}: " in err and message in err


def test_cli_policy_flag_takes_a_saved_learned_policy(tmp_path, capsys):
    path = tmp_path / "policy.json"
    hb.FSMPolicy([], "sort", [], []).save(path)       # an empty table: its fallback decides every step
    out = tmp_path / "w1.json"
    assert cli.main(["W1", *TINY, "--no-eager", "--policy", str(path), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["policy"].startswith("FSMPolicy('sort'")
    assert "policy FSMPolicy('sort'" in capsys.readouterr().out
