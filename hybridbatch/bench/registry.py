"""Workload names (W1, W2, W3) -> Workload classes, imported only when asked for."""
from __future__ import annotations

import importlib

# name -> (module, class)
WORKLOADS = {
    "W1": ("hybridbatch.bench.workload_treelstm", "W1TreeLSTM"),
    "W2": ("hybridbatch.bench.workload_tagger", "W2Tagger"),
    "W3": ("hybridbatch.bench.workload_tagger", "W3Tagger"),
}

# granularity used when the command line names none: Tree-LSTM nodes are one hybridized
# block call each; the taggers' cells likewise
DEFAULT_GRANULARITY = {"W1": "block", "W2": "block", "W3": "block"}


class UnknownWorkload(LookupError):
    pass


def workload_class(name):
    """The Workload subclass for `name` (case-insensitive); LookupError if it is unknown or its
    module is not importable."""
    key = name.upper()
    if key not in WORKLOADS:
        raise UnknownWorkload(f"unknown workload {name!r}; expected one of {', '.join(WORKLOADS)}")
    module, cls = WORKLOADS[key]
    try:
        return getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as e:
        raise UnknownWorkload(f"workload {key} is not available: {module}.{cls} could not be "
                              f"imported ({type(e).__name__}: {e})") from e


def make_workload(name, hidden=256, data_dir=None, seed=0, **extra):
    """An instance of workload `name`; `extra` keywords go to its constructor."""
    return workload_class(name)(hidden=hidden, data_dir=data_dir, seed=seed, **extra)
