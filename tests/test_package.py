"""The package's version has one source, `hybridbatch.__version__`: pyproject.toml reads it
statically (no import at build time), and an installed copy of this checkout reports it."""
import ast
import importlib.metadata
import json
import pathlib
import re
import tomllib

import pytest

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
