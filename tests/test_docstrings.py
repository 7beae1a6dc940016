"""Every public name of hybridbatch (`hb.__all__`) says what it is in its docstring and
shows it with a doctest example, and every example runs and prints what it says."""
import doctest

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.config import DECLARED

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def docstring(name):
    """The docstring that documents hb.<name>: a module's own, a function's or a class's, and
    for an instance (hb.settings) its class's."""
    return getattr(hb, name).__doc__ or ""


def doctests(name):
    """The doctests of hb.<name>'s own docstring (not its members'), run with hb and np."""
    finder = doctest.DocTestFinder(recurse=False)
    return finder.find(getattr(hb, name), f"hb.{name}", globs={"hb": hb, "np": np})


@pytest.mark.parametrize("name", hb.__all__)
def test_docstring_says_what_it_is_then_shows_it(name):
    text = docstring(name)
    assert ">>> " in text, f"hb.{name}'s docstring has no example (>>> lines)"
    assert text.split(">>> ")[0].strip(), f"hb.{name}'s docstring starts with its example, not what it is"


@pytest.mark.parametrize("name", hb.__all__)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # NumericsError's example makes a NaN
def test_example_runs(name):
    tests = [t for t in doctests(name) if t.examples]
    assert tests, f"hb.{name} has no doctest example"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report = []
    every_setting = {n: getattr(hb.settings, n) for n in DECLARED}
    with hb.settings(**every_setting):          # an example that changes a setting leaves no trace
        for test in tests:
            runner.run(test, out=report.append)
    assert runner.failures == 0, f"hb.{name}'s example fails:\n" + "".join(report)
    assert runner.tries >= 1
