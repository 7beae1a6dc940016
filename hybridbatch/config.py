"""Engine-wide settings in one place: `hb.settings`.

    hb.settings.fusion                     # read one
    hb.settings.plan_cache_size = 64       # set one for the rest of the process
    with hb.settings(fusion=False, distinct_rows=False):
        ...                                # both off in here; as they were after, even on error

Every write is checked (an unknown name raises AttributeError listing the settings, a bad
value TypeError or ValueError) before anything changes. The engine reads a setting where it
uses it (per flush, per batch, per product) as a plain attribute of this one object, as
cheap as reading a module global; a change applies from the next read on.

Settings are process-wide, not per thread: an override made in one thread applies to every
thread while it lasts, and overrides of one setting from several threads at once restore in
whatever order their blocks end.
"""
import contextlib
import numbers
import threading
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

BLAS_MODES = ("auto", "mkl", "numpy")


def _flag(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} is True or False, not {value!r}")
    return bool(value)


def _count(name, value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} is a whole number, not {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be 0 or more, not {value}")
    return int(value)


def _share(name, value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} is a share of a batch (a number from 0 to 1), not {value!r}")
    if not 0 <= value <= 1:
        raise ValueError(f"{name} is a share of a batch, from 0 to 1, not {value}")
    return float(value)


def _blas_mode(name, value):
    if not isinstance(value, str) or value not in BLAS_MODES:
        raise ValueError(f"unknown BLAS {value!r}; expected 'auto', 'mkl' or 'numpy'")
    if value == "mkl":
        from .kernels import blas      # here, not at the top: blas reads these settings
        if not blas.available():
            raise RuntimeError("MKL is not available: install the `mkl` package (pip install "
                               "'hybridbatch[mkl]'), and do not set HYBRIDBATCH_BLAS=numpy")
    return str(value)


def _trim_plan_cache():
    from .runtime.plan_cache import CACHE     # here, not at the top: plan_cache reads these settings
    CACHE.trim()


class Setting(NamedTuple):
    """One setting: its default, check(name, value) -> the value stored (or the error), and
    what runs after it changes."""
    default: object
    check: Callable
    changed: Callable | None = None


DECLARED = {
    # Elementwise runs of hybridized blocks as fused numba kernels (block granularity, numpy
    # backend): one pass over the gates instead of one numpy pass per op, and a backward
    # without temporaries (measured in docs/architecture.md). Off: every op runs in numpy.
    "fusion": Setting(True, _flag),
    # A block program's part that depends only on one integer argument (a word's embedding
    # and its layer) runs once per distinct value in a batch (hybrid/distinct.py) ...
    "distinct_rows": Setting(True, _flag),
    # ... in batches of at least this many rows (fewer: np.unique and the copies cost more
    # than they save) ...
    "distinct_min_rows": Setting(16, _count),
    # ... with at most this share of the rows distinct (more: every row runs).
    "distinct_max_share": Setting(0.75, _share),
    # Schedules kept for reuse by structure (runtime/plan_cache.py); 0 turns the cache off.
    "plan_cache_size": Setting(32, _count, _trim_plan_cache),
    # Host matrix products (kernels/blas.py): "auto" routes each by its rows to the few-rows
    # kernel, MKL or numpy as measured; "mkl" or "numpy" sends every one there. Set at import
    # from HYBRIDBATCH_BLAS ("auto" where it is unset, or asks for MKL and MKL does not load).
    "blas": Setting("auto", _blas_mode),
    # granularity="auto" measures a block inlined as well as whole once its calls in a flush
    # came in several signatures, with a median batch below this and 1 call in 8 or more in
    # such a batch (hybrid/granularity.py).
    "auto_min_batch": Setting(8, _count),
    # Bytes of idle arena buffers each thread's pool keeps for reuse (runtime/memory.py);
    # lowering it keeps fewer from then on, it does not free what is pooled.
    "pool_limit": Setting(256 << 20, _count),
    # A fused kernel that is not in numba's disk cache compiles in a worker process while
    # its run's steps go on unfused (kernels/compiling.py): a new block's first batches do
    # not wait seconds for it. Off: it compiles in the step that first needs it.
    "compile_in_background": Setting(True, _flag),
}


class Settings:
    """The engine-wide settings (`DECLARED` lists them): read and set as attributes, or
    override some for a `with` block by calling it. Every write is checked before it lands.

    >>> before = hb.settings.fusion
    >>> with hb.settings(fusion=False, plan_cache_size=0):
    ...     print(hb.settings.fusion, hb.settings.plan_cache_size)
    False 0
    >>> hb.settings.fusion == before
    True
    >>> hb.settings.fusoin = False
    Traceback (most recent call last):
    ...
    AttributeError: hybridbatch has no setting 'fusoin'; the settings are: fusion, ...
    """

    __slots__ = tuple(DECLARED)

    def __init__(self):
        for name, setting in DECLARED.items():
            object.__setattr__(self, name, setting.default)

    def __setattr__(self, name, value):
        self._store({name: _checked(name, value)})

    def __call__(self, **values):
        """A context manager (or decorator) under which the given settings hold; on exit,
        even by an exception, each is put back to its value on entry. Checked here, so a
        bad name or value raises before the block runs. Process-wide: every thread sees
        the override while it lasts."""
        return self._overridden({name: _checked(name, value) for name, value in values.items()})

    @contextlib.contextmanager
    def _overridden(self, values):
        with _writing:
            before = {name: getattr(self, name) for name in values}
            self._store(values)
        try:
            yield self
        finally:
            self._store(before)

    def _store(self, values):
        with _writing:
            for name, value in values.items():
                object.__setattr__(self, name, value)
                if DECLARED[name].changed is not None:
                    DECLARED[name].changed()

    def __repr__(self):
        return "settings(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in DECLARED) + ")"


def _checked(name, value):
    """value as stored for setting `name`, or the error that says what is wrong."""
    if name not in DECLARED:
        raise AttributeError(f"hybridbatch has no setting {name!r}; the settings are: {', '.join(DECLARED)}")
    return DECLARED[name].check(name, value)


_writing = threading.RLock()       # a write of several settings lands whole
settings = Settings()
"""`hb.settings`: the one Settings object the engine reads."""


def set_fusion(enabled: bool) -> None:
    """settings.fusion: run elementwise runs of hybridized blocks as fused numba kernels
    (on by default; off, every op runs in numpy, to compare or to debug a kernel).

    >>> before = hb.settings.fusion
    >>> hb.set_fusion(False)
    >>> hb.settings.fusion
    False
    >>> hb.set_fusion(before)
    """
    settings.fusion = bool(enabled)


def set_distinct_rows(enabled: bool) -> None:
    """settings.distinct_rows: compute a block's integer-keyed part once per distinct key
    (a frequent word's embedding and its layer, once per batch).

    >>> before = hb.settings.distinct_rows
    >>> hb.set_distinct_rows(False)
    >>> hb.settings.distinct_rows
    False
    >>> hb.set_distinct_rows(before)
    """
    settings.distinct_rows = bool(enabled)


def set_plan_cache_size(capacity: int) -> None:
    """settings.plan_cache_size: how many schedules the process keeps for reuse (0 disables),
    so that minibatches of a structure seen before skip scheduling.

    >>> before = hb.settings.plan_cache_size
    >>> hb.set_plan_cache_size(64)
    >>> hb.settings.plan_cache_size
    64
    >>> hb.set_plan_cache_size(before)
    """
    settings.plan_cache_size = capacity


def set_blas(mode: str) -> None:
    """settings.blas: host products by MKL ("mkl"), numpy ("numpy"), or routed by their rows
    to the few-rows kernel, MKL and numpy as measured ("auto"). "mkl" raises RuntimeError
    where MKL is not installed.

    >>> before = hb.blas_library()
    >>> hb.set_blas("numpy")
    >>> hb.blas_library()
    'numpy'
    >>> hb.set_blas(before)
    """
    settings.blas = mode


def blas_library() -> str:
    """settings.blas: the BLAS mode in use, "auto", "mkl" or "numpy" (to report with a
    benchmark's timings).

    >>> hb.blas_library() in ("auto", "mkl", "numpy")
    True
    """
    return settings.blas
