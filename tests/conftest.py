"""Fixtures shared by the test modules; plain helpers are in helpers.py and graphs.py."""
import pytest

import hybridbatch as hb
from hybridbatch.hybrid import distinct
from helpers import needs_mkl


@pytest.fixture(autouse=True)
def compile_in_this_process():
    """Fused kernels compile in the step that needs them, as the tests expect them fused; the
    tests of background compiles (test_compile_background.py) turn it back on."""
    with hb.settings(compile_in_background=False):
        yield


@pytest.fixture(params=["numpy", pytest.param("mkl", marks=needs_mkl), pytest.param("auto", marks=needs_mkl)])
def library(request):
    """Each test on numpy's BLAS, and where MKL is loaded on MKL and on the automatic choice."""
    with hb.settings(blas=request.param):
        yield request.param


@pytest.fixture
def splits(monkeypatch):
    """The (distinct keys, rows) of every batch that shared rows (hybrid/distinct.py)."""
    seen = []
    real = distinct.KeyedPart.split

    def spy(self, ints, size):
        out = real(self, ints, size)
        if out is not None:
            seen.append((len(out[0]), size))
        return out
    monkeypatch.setattr(distinct.KeyedPart, "split", spy)
    return seen
