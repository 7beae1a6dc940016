"""The package as a whole: its version has one source, `hybridbatch.__version__`
(pyproject.toml reads it statically, and the installed distribution reports it); the core
loads neither the workloads package nor the bench extra's dependencies; its top level stays
small, one folder per stage."""
import ast
import importlib.metadata
import pathlib
import re
import subprocess
import sys
import tomllib

import hybridbatch as hb

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_version_is_a_release_string():
    assert re.fullmatch(r"\d+\.\d+\.\d+([ab]\d+|rc\d+)?(\.post\d+)?(\.dev\d+)?", hb.__version__)


def test_pyproject_takes_the_version_from_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hybridbatch.__version__"}


def test_version_is_a_literal_setuptools_can_read_without_importing():
    # setuptools reads `attr` by parsing the module; an expression would make it import
    # hybridbatch (numpy, numba) inside the isolated build environment
    tree = ast.parse((ROOT / "hybridbatch" / "__init__.py").read_text())
    literals = [node.value.value for node in tree.body
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)]
    assert literals == [hb.__version__]


def test_the_installed_distribution_reports_the_same_version():
    """`make test` installs this checkout (editable) into its venv: the distribution's
    metadata, which pip and importlib read, carries the package's own version."""
    assert importlib.metadata.version("hybridbatch") == hb.__version__


def test_the_core_loads_neither_the_workloads_nor_the_bench_dependencies():
    """Importing every module of hybridbatch (the `python -m hybridbatch.bench` entry point
    included: it loads the harness only when run) brings in no module of hybridbatch_workloads,
    matplotlib or threadpoolctl."""
    code = ("import pkgutil, importlib, sys, hybridbatch\n"
            "for m in pkgutil.walk_packages(hybridbatch.__path__, 'hybridbatch.'):\n"
            "    importlib.import_module(m.name)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'hybridbatch_workloads', 'matplotlib', 'threadpoolctl'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_top_level_holds_few_modules_and_documented_stage_folders():
    top = ROOT / "hybridbatch"
    modules = [p.name for p in top.glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= 8, modules
    for init in top.glob("*/__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and len(doc) > 40, f"{init.parent.name}/__init__.py says nothing of what it owns"
