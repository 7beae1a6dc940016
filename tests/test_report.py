"""`python -m hybridbatch.bench W1 --report out.html`: one self-contained page, checked in
headless Chromium (Debian's `chromium`, which .ci/run installs) where one is on PATH."""
import json
import re
import shutil
import subprocess

import pytest

from hybridbatch_workloads.bench import cli

TINY = ["--hidden", "16", "--batch", "4", "--instances", "8", "--warmup", "4", "--eager-instances", "4",
        "--eager-warmup", "2", "--repeats", "1", "--synthetic-train", "40", "--synthetic-dev", "4",
        "--gemm-repeats", "1", "--no-progress"]
# a plain run, and a sweep of another workload
REPORTS = {"W1 run": ["W1"], "W2 sweep": ["W2", "--sweep", "batch", "--no-check"]}

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.fixture(scope="module", params=list(REPORTS))
def report(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    path = folder / "report.html"
    # --json keeps the sweep's own PNG next to it, out of the working directory
    assert cli.main([*REPORTS[request.param], *TINY, "--json", str(folder / "result.json"),
                     "--report", str(path)]) == 0
    return path


def _trace(page):
    return json.loads(re.search(r'<script type="application/json" id="trace-json">(.*?)</script>', page, re.S)[1])


def test_report_holds_every_section_and_loads_nothing_from_outside(report):
    page = report.read_text()
    images = re.findall(r"<img [^>]*>", page)
    assert images and all('src="data:image/png;base64,' in img for img in images)
    assert not re.search(r'(src|href)="(https?:|//|file:)', page) and "<link" not in page
    for row in ("depth", "agenda", "critical-path", "fsm-phase", "search"):
        assert f"<td>{row}</td>" in page                       # the policy table
    assert "Batches per signature" in page and "<td>block:" in page     # the explain table
    events = _trace(page)["traceEvents"]
    assert {"phase", "forward", "backward"} <= {e["cat"] for e in events}
    assert {e["name"] for e in events if e["cat"] == "phase"} >= {"recording", "forward", "backward", "update"}


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on PATH (chromium, chromium-browser or google-chrome); "
                                             ".ci/run installs Debian's chromium package")
def test_report_renders_in_headless_chromium(report, tmp_path):
    proc = subprocess.run([CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr",
                           "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", report.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = re.search(r'<div id="status">([^<]*)</div>', proc.stdout)
    assert status, proc.stdout[-3000:]
    # the page's own check after loading: every image decoded, no error, no console.error
    ok = re.fullmatch(r"ok images=(\d+) spans=(\d+)", status[1])
    assert ok, status[1]
    page = report.read_text()
    assert int(ok[1]) == page.count("<img ") and int(ok[2]) == len(_trace(page)["traceEvents"])
    assert "<svg" in proc.stdout                          # the timeline, drawn by the page's script
    uncaught = [line for line in proc.stderr.splitlines() if "CONSOLE" in line and "Uncaught" in line]
    assert not uncaught


@pytest.mark.parametrize("args", [["policies"], ["W1", "--cold"]])
def test_report_is_a_usage_error_where_nothing_would_write_it(args, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([*args, "--report", str(tmp_path / "x.html")])
    assert e.value.code == 2 and "--report" in capsys.readouterr().err
