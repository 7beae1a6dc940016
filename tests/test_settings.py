"""hb.settings (hybridbatch/config.py): checked writes, scoped overrides that always restore,
the thin setters, and settings that change what the engine runs."""
import threading

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch import config, nn
from hybridbatch.kernels import blas
from hybridbatch.kernels.fused import FusedRun
from hybridbatch.runtime.plan_cache import CACHE


def _values():
    return {name: getattr(hb.settings, name) for name in config.DECLARED}


def test_defaults():
    # the tests compile fused kernels in process (conftest.py)
    assert _values() == {name: s.default for name, s in config.DECLARED.items()} | {
        "blas": hb.blas_library(), "compile_in_background": False}
    assert config.DECLARED["compile_in_background"].default is True
    assert repr(hb.settings).startswith("settings(fusion=True, distinct_rows=True")


def test_an_override_holds_inside_and_restores_on_exit():
    before = _values()
    with hb.settings(fusion=False, distinct_min_rows=4, plan_cache_size=5) as s:
        assert s is hb.settings
        assert (hb.settings.fusion, hb.settings.distinct_min_rows, hb.settings.plan_cache_size) == (False, 4, 5)
        assert hb.settings.distinct_rows == before["distinct_rows"]       # the others untouched
    assert _values() == before


def test_an_override_restores_on_an_exception():
    before = _values()
    with pytest.raises(KeyError):
        with hb.settings(distinct_rows=False, auto_min_batch=2):
            raise KeyError("inside")
    assert _values() == before


def test_nested_overrides_restore_level_by_level():
    with hb.settings(fusion=False, plan_cache_size=3):
        with hb.settings(fusion=True, distinct_max_share=0.5):
            assert hb.settings.fusion and hb.settings.distinct_max_share == 0.5
            assert hb.settings.plan_cache_size == 3
        assert not hb.settings.fusion and hb.settings.distinct_max_share == 0.75
    assert hb.settings.fusion and hb.settings.plan_cache_size == 32


def test_a_write_inside_an_override_is_undone_on_exit():
    with hb.settings(fusion=True):
        with hb.settings(pool_limit=1 << 20):
            hb.settings.pool_limit = 1 << 10
            hb.set_fusion(False)
            assert hb.settings.pool_limit == 1 << 10
        assert hb.settings.pool_limit == 256 << 20      # back to its value on entry
        assert not hb.settings.fusion                   # not named by the override: as written


def test_an_override_works_as_a_decorator():
    @hb.settings(distinct_rows=False)
    def read():
        return hb.settings.distinct_rows
    assert read() is False and read() is False
    assert hb.settings.distinct_rows is True


def test_an_override_is_process_wide():
    seen = []
    with hb.settings(fusion=False):
        thread = threading.Thread(target=lambda: seen.append(hb.settings.fusion))
        thread.start()
        thread.join()
    assert seen == [False]


@pytest.mark.parametrize("write", [lambda: hb.settings(fusoin=False), lambda: setattr(hb.settings, "fusoin", False)],
                         ids=["override", "attribute"])
def test_an_unknown_name_lists_the_settings(write):
    with pytest.raises(AttributeError, match="no setting 'fusoin'; the settings are: fusion, distinct_rows, .*pool_limit"):
        write()


@pytest.mark.parametrize("name, value, error, message", [
    ("fusion", 1, TypeError, "fusion is True or False, not 1"),
    ("distinct_rows", "no", TypeError, "True or False"),
    ("distinct_min_rows", 2.5, TypeError, "whole number"),
    ("distinct_min_rows", -1, ValueError, "0 or more"),
    ("plan_cache_size", True, TypeError, "plan_cache_size is a whole number"),
    ("auto_min_batch", None, TypeError, "whole number"),
    ("pool_limit", -5, ValueError, "0 or more"),
    ("distinct_max_share", 1.5, ValueError, "from 0 to 1"),
    ("distinct_max_share", float("nan"), ValueError, "from 0 to 1"),
    ("distinct_max_share", "half", TypeError, "share of a batch"),
    ("blas", "openblas", ValueError, "expected 'auto', 'mkl' or 'numpy'"),
    ("blas", None, ValueError, "unknown BLAS"),
])
def test_a_bad_value_raises_and_changes_nothing(name, value, error, message):
    before = _values()
    with pytest.raises(error, match=message):
        setattr(hb.settings, name, value)
    with pytest.raises(error, match=message):
        hb.settings(**{"pool_limit": 1, name: value})   # raises at the call, before any block runs
    assert _values() == before


def test_values_are_stored_in_their_plain_type():
    with hb.settings(fusion=np.bool_(False), plan_cache_size=np.int64(4), distinct_max_share=1):
        assert hb.settings.fusion is False
        assert type(hb.settings.plan_cache_size) is int and type(hb.settings.distinct_max_share) is float


def test_mkl_cannot_be_chosen_where_it_is_not_loaded(monkeypatch):
    monkeypatch.setattr(blas, "_mkl", None)
    with pytest.raises(RuntimeError, match="install the `mkl` package"):
        hb.settings(blas="mkl")


def test_the_setters_write_the_settings():
    with hb.settings(fusion=True, distinct_rows=True, plan_cache_size=32, blas="numpy"):
        hb.set_fusion(0)
        hb.set_distinct_rows([])
        hb.set_plan_cache_size(7)
        hb.set_blas("auto")
        assert (hb.settings.fusion, hb.settings.distinct_rows, hb.settings.plan_cache_size) == (False, False, 7)
        assert hb.settings.blas == hb.blas_library() == "auto"
        with pytest.raises(ValueError, match="0 or more"):
            hb.set_plan_cache_size(-1)
        assert hb.settings.plan_cache_size == 7
    assert hb.settings.fusion and hb.settings.distinct_rows and hb.settings.plan_cache_size == 32


def test_an_override_left_unentered_changes_nothing():
    hb.settings(fusion=False)
    assert hb.settings.fusion


# -- what runs -----------------------------------------------------------------------------

def _lstm_steps(cell, steps=3):
    with hb.batching(granularity="block"):
        h = c = np.zeros(5, np.float32)
        for t in range(steps):
            h, c = cell(np.full(3, 0.1 * t, np.float32), h, c)
        loss = hb.sum(h)
    loss.backward()
    return loss.item(), cell.weight.grad.copy()


def test_fusion_off_runs_no_fused_kernel():
    cell = nn.LSTMCell(5, 3, seed=0)
    cell.hybridize()
    _lstm_steps(cell)
    runs = [u for program in cell._programs.values() for u in program.op.units(np) if isinstance(u, FusedRun)]
    assert runs
    calls = []
    for run in runs:
        run.forward_kernel = lambda *args, kernel=run.forward_kernel: calls.append(1) or kernel(*args)
    cell.weight.zero_grad()
    with hb.settings(fusion=False):
        plain = _lstm_steps(cell)
    assert calls == []
    cell.weight.zero_grad()
    fused = _lstm_steps(cell)
    assert calls
    assert fused[0] == pytest.approx(plain[0], rel=1e-5)
    np.testing.assert_allclose(fused[1], plain[1], rtol=1e-4, atol=1e-6)


def test_a_smaller_plan_cache_drops_the_oldest_schedules():
    x = np.ones(3, np.float32)
    W = hb.Parameter("W", (3, 3), rng=np.random.default_rng(0))
    with hb.settings(plan_cache_size=4):
        for depth in range(1, 5):
            with hb.batching():
                h = hb.array(x)
                for _ in range(depth):
                    h = hb.tanh(W @ h)
        assert len(CACHE) == 4
        with hb.settings(plan_cache_size=1):
            assert len(CACHE) == 1
            with hb.batching() as scope:
                h = hb.tanh(W @ hb.tanh(W @ hb.tanh(W @ hb.tanh(W @ hb.array(x)))))
            assert scope.stats.plan_cache_hits == 1        # the most recent schedule stayed
        with hb.settings(plan_cache_size=0):
            assert len(CACHE) == 0


def test_blas_override_routes_products():
    with hb.settings(blas="numpy"):
        assert blas.kernel_below() == (0, 0) and blas.one_row() == ("numpy", "numpy")
        assert blas.numpy_from() == (0, 0)
