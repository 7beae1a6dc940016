"""The user's side of the project: example scripts, data readers and `python -m hybridbatch.bench`
given odd flags or odd files answer with a usage error or a one-line message, never a
traceback or a silently wrong result."""
import os

import pytest

from helpers import run_example


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


# ---------------------------------------------------------------------------------------------
# --data: a wrong folder, a malformed file, an empty file
# ---------------------------------------------------------------------------------------------

BENCH_TINY = ["--hidden", "8", "--batch", "4", "--instances", "4", "--warmup", "0", "--repeats", "1",
              "--eager-instances", "2", "--eager-warmup", "0", "--gemm-repeats", "1", "--no-progress"]


def _sst_dir(tmp_path, train, dev="(3 (2 a) (2 b))\n"):
    (tmp_path / "train.txt").write_text(train)
    (tmp_path / "dev.txt").write_text(dev)
    return str(tmp_path)


@pytest.mark.parametrize("script, files, message", [
    ("treelstm_sst.py", {}, "train.txt is neither in"),
    ("treelstm_sst.py", {"train.txt": "(3 (2 a) (2 b)\n", "dev.txt": "(1 x)\n"},
     "train.txt:1:15: expected ')' closing the node opened at column 1"),
    ("treelstm_sst.py", {"train.txt": "\n", "dev.txt": "(1 x)\n"}, "train.txt: expected at least one instance"),
    ("treelstm_sst.py", {"train.txt": "(1 x)\n", "dev.txt": ""}, "dev.txt: expected at least one instance"),
    ("bilstm_tagger.py", {"en_ewt-ud-train.conllu": "# only a comment\n", "en_ewt-ud-dev.conllu": ""},
     "en_ewt-ud-train.conllu: expected at least one instance"),
    ("bilstm_tagger.py", {"en_ewt-ud-train.conllu": "(3 (2 a) (2 b))\n", "en_ewt-ud-dev.conllu": ""},
     "en_ewt-ud-train.conllu:1:1: expected 10 tab-separated columns"),
    ("lattice_ner.py", {"train.txt": "", "dev.txt": "a O\n", "lexicon.txt": "ab\n"},
     "train.txt: expected at least one instance"),
])
def test_example_data_problem_is_one_line_not_a_traceback(tmp_path, script, files, message):
    """A wrong --data folder or a malformed file died in a traceback (FileNotFoundError,
    DataFormatError); an empty file trained on nothing and died dividing by zero."""
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    done = run_example(script, "--data", str(tmp_path), "--hidden", "8", "--epochs", "1")
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("workload, train, message", [
    ("W1", None, "train.txt is neither in"),
    ("W1", "", "train.txt: expected at least one instance"),
    ("w4-treegru", "(3 (2 a) (2 b)\n", "train.txt:1:15: expected ')'"),
])
def test_bench_data_problem_is_an_error_message(tmp_path, capsys, workload, train, message):
    from hybridbatch_workloads.bench import cli
    data = str(tmp_path) if train is None else _sst_dir(tmp_path, train)
    assert cli.main([workload, "--data", data, *BENCH_TINY]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


def test_tagger_example_dev_0_on_synthetic_data_still_evaluates():
    """--dev 0 means "all held-out sentences"; on synthetic data it drew none and printed a
    dev accuracy of 0.000 over nothing."""
    done = run_example("bilstm_tagger.py", "--limit", "8", "--dev", "0", "--hidden", "8", "--epochs", "0")
    assert done.returncode == 0, done.stderr
    assert "8 train / 300 dev sentences" in done.stdout
    assert "dev accuracy before training: 0.000" not in done.stdout


# ---------------------------------------------------------------------------------------------
# python -m hybridbatch.bench: outputs
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--json", "--plot"])
@pytest.mark.parametrize("where", ["a folder", "under a file", "/proc"])
def test_bench_unwritable_output_is_refused_before_the_run(tmp_path, capsys, flag, where):
    """--json and --plot are written after the whole run; a path that cannot be written
    (a folder, a path under a file, a folder that root may "access" but not write in, as
    /proc) died in a traceback after minutes of measuring."""
    from hybridbatch_workloads.bench import cli
    if where == "/proc" and not os.path.isdir("/proc/self"):
        pytest.skip("no /proc on this system")
    (tmp_path / "f").write_text("")
    path = {"a folder": tmp_path, "under a file": tmp_path / "f" / "out.json", "/proc": "/proc/hb_out.json"}[where]
    with pytest.raises(SystemExit) as e:
        cli.main(["W1", *BENCH_TINY, "--synthetic-train", "4", flag, str(path)])
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert f"argument {flag}: cannot write" in err and "inst/s" not in out


def test_bench_output_probe_keeps_symlinks_and_does_not_open_pipes(tmp_path):
    """The writability probe made and removed the file itself: through a dangling symlink
    it made the target and removed the link; a FIFO without a reader blocked the parse."""
    from hybridbatch_workloads.cli_args import output_file
    link = tmp_path / "w1.json"
    link.symlink_to(tmp_path / "results.json")
    assert output_file(str(link)) == str(link)
    assert link.is_symlink() and not (tmp_path / "results.json").exists()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert output_file(str(fifo)) == str(fifo)      # returns at once instead of waiting for a reader


def test_bench_output_folder_is_created(tmp_path, capsys):
    from hybridbatch_workloads.bench import cli
    out = tmp_path / "new" / "deeper" / "w1.json"
    assert cli.main(["W1", *BENCH_TINY, "--synthetic-train", "4", "--json", str(out)]) == 0
    assert out.is_file()


def test_bench_json_is_strict_json(tmp_path):
    """A diverged loss (NaN) or a rate over zero seconds (inf) was written as a bare NaN /
    Infinity, which no strict JSON parser reads; such a figure is now null."""
    import json
    from hybridbatch_workloads.bench import cli
    out = tmp_path / "res.json"
    cli._write_json(str(out), {"loss_per_instance": float("nan"), "speedup": {"train": float("inf")},
                               "throughput_runs": [12.5, float("-inf")], "instances": 4})

    def refuse(name):
        raise AssertionError(f"{name} in the JSON")
    assert json.loads(out.read_text(), parse_constant=refuse) == {
        "loss_per_instance": None, "speedup": {"train": None}, "throughput_runs": [12.5, None], "instances": 4}


# ---------------------------------------------------------------------------------------------
# python -m hybridbatch.bench: flags that do not apply
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["policies", "--sweep", "hidden"], "--sweep applies to one workload's benchmark, not to policies"),
    (["policies", "--policy", "depth"], "--policy applies to one workload's benchmark, not to policies"),
    (["POLICIES", "--instances", "16"], "--instances applies to one workload's benchmark, not to policies"),
    (["policies", "--no-eager"], "--no-eager applies to one workload's benchmark, not to policies"),
    (["W1", "--workloads", "W2"], "--workloads applies to policies only"),
    (["w2", "--no-throughput"], "--no-throughput applies to policies only"),
    (["W1", "--plot", "w1.png"], "--plot applies to --sweep and policies only"),
    (["W1", "--cold", "--warmup", "3"], "--warmup does not apply to --cold"),
    (["W1", "--cold", "--no-eager"], "--no-eager does not apply to --cold"),
    (["W1", "--sweep", "hidden", "--hidden", "32"], "--hidden is what --sweep hidden varies"),
    (["W1", "--data", ".", "--synthetic-train", "5"], "--synthetic-train sizes the synthetic data"),
])
def test_bench_flag_that_does_not_apply_is_a_usage_error(capsys, argv, message):
    """These were accepted and silently ignored: `policies --sweep hidden` ran the policy
    comparison, `W1 --workloads W2` benchmarked W1, `W1 --plot x.png` wrote no plot,
    `--sweep hidden --hidden 32` swept 32..512, `--synthetic-train` with --data read all."""
    from hybridbatch_workloads.bench import cli
    with pytest.raises(SystemExit) as e:
        cli.main([*argv, "--no-progress"])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("outputs, message", [
    (["W1", "--sweep", "batch", "--json", "{d}/out.png"], "--json and the plot beside --json name one file"),
    (["W1", "--json", "{d}/out.json", "--report", "{d}/out.json"], "--json and --report name one file"),
    (["W1", "--sweep", "batch", "--plot", "{d}/p.png", "--report", "{d}/p.png"], "--plot and --report name one file"),
])
def test_bench_outputs_naming_one_file_are_a_usage_error(tmp_path, capsys, outputs, message):
    """The later output overwrote the earlier one, both reported as written."""
    from hybridbatch_workloads.bench import cli
    with pytest.raises(SystemExit) as e:
        cli.main([a.format(d=tmp_path) for a in outputs] + ["--no-progress"])
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_bench_data_for_a_synthetic_only_workload_is_one_line(capsys):
    from hybridbatch_workloads.bench import cli
    assert cli.main(["W5", "--data", ".", *BENCH_TINY]) == 2
    assert "error: W5 has no real-data reader" in capsys.readouterr().err


@pytest.mark.parametrize("workloads", [",", " ", ""])
def test_policies_with_no_workload_named_is_an_error(tmp_path, capsys, workloads):
    """`--workloads ,` compared nothing and wrote an empty table, plot and JSON."""
    from hybridbatch_workloads.bench import cli
    out = tmp_path / "p.json"
    assert cli.main(["policies", "--workloads", workloads, "--no-progress", "--json", str(out)]) == 2
    assert "names no workload" in capsys.readouterr().err and not out.exists()


def test_policies_with_a_batch_too_big_for_the_data_is_an_error(capsys):
    """The comparison needs 8 minibatches of training instances, 11 with the training runs; a
    bigger --batch than the data allows died in a ValueError traceback."""
    from hybridbatch_workloads.bench import cli
    assert cli.main(["policies", "--workloads", "w6", "--batch", "512", "--hidden", "8", "--no-throughput",
                     "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: W6: 2000 training instances, the comparison needs 4096 (8 minibatches") and "--batch" in err


# ---------------------------------------------------------------------------------------------
# data readers: a UTF-8 byte order mark (as Windows editors write)
# ---------------------------------------------------------------------------------------------

BOM = "\ufeff"
CONLLU = "# text = The dog\n1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tdog\tdog\tNOUN\tNN\t_\t0\troot\t_\t_\n"


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_readers_skip_a_utf8_byte_order_mark(tmp_path, newline):
    """read_lexicon kept the mark in its first word (which then never matched); the other
    readers refused the file with a misleading error at line 1 column 1."""
    from hybridbatch_workloads.data import read_clevr_programs, read_conllu, read_ptb_trees
    from hybridbatch_workloads.data.lattice import read_char_ner, read_lexicon

    def write(name, text):
        path = tmp_path / name
        path.write_bytes((BOM + text).replace("\n", newline).encode("utf-8"))
        return path
    assert read_lexicon(write("lexicon.txt", "北京\n上海\n")) == ["北京", "上海"]
    assert read_char_ner(write("ner.txt", "北 B-GPE.NAM\n京 I-GPE.NAM\n")) == [("北京", ["B-GPE.NAM", "I-GPE.NAM"])]
    assert [t.to_ptb() for t in read_ptb_trees(write("t.txt", "(3 (2 a) (2 b))\n"))] == ["(3 (2 a) (2 b))"]
    assert [[t.form for t in s] for s in read_conllu(write("c.conllu", CONLLU))] == [["The", "dog"]]
    assert read_conllu(write("d.conllu", CONLLU.split("\n", 1)[1]))[0][0].form == "The"
    programs = read_clevr_programs(write("p.json", '{"questions": [{"program": [{"type": "scene"}]}]}'))
    assert [[n.function for n in p] for p in programs] == [["scene"]]


def test_reader_error_after_a_byte_order_mark_points_at_the_right_byte(tmp_path):
    from hybridbatch_workloads.data import DataFormatError, read_ptb_trees
    path = tmp_path / "t.txt"
    path.write_bytes(BOM.encode() + b"(3 (2 a) (2 b))\n(2 \xff)\n")
    with pytest.raises(DataFormatError, match=r"t.txt:2: expected UTF-8 text, found byte 0xff at byte column 4"):
        read_ptb_trees(path)


def test_the_install_steps_warm_up_takes_no_workload_or_known_ones(capsys):
    """The Makefile runs it with none; a bad name or size is its own usage error."""
    from hybridbatch_workloads.bench.warm_up import parse_args
    assert parse_args([]).workloads == [] and parse_args(["w1", "childsum", "--hidden", "128"]).workloads == ["W1", "CHILDSUM"]
    for argv, message in ((["W99"], "unknown workload 'W99'"), (["--hidden", "0"], "--hidden")):
        with pytest.raises(SystemExit):
            parse_args(argv)
        assert message in capsys.readouterr().err
