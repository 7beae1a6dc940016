"""Workload names (W1 ... W7; W4 is three models; the plain formulations W1-NATURAL and W2-NATURAL,
and CHILDSUM; the workloads that read values as they run, W9, W8-GATE, W8 and BEAM) -> Workload
classes, imported only when asked for.

Names are upper case: the command line and `Config` upper-case what the user types."""
from __future__ import annotations

import importlib

# name -> (module, class)
WORKLOADS = {
    "W1": ("hybridbatch_workloads.bench.workload_treelstm", "W1TreeLSTM"),
    "W2": ("hybridbatch_workloads.bench.workload_tagger", "W2Tagger"),
    "W3": ("hybridbatch_workloads.bench.workload_tagger", "W3Tagger"),
    "W4-TREEGRU": ("hybridbatch_workloads.bench.workload_tree_variants", "W4TreeGRU"),
    "W4-2TYPE": ("hybridbatch_workloads.bench.workload_tree_variants", "W4TreeLSTM2Type"),
    "W4-MVRNN": ("hybridbatch_workloads.bench.workload_tree_variants", "W4MVRNN"),
    "W5": ("hybridbatch_workloads.bench.workload_nmt", "W5NMT"),
    "W6": ("hybridbatch_workloads.bench.workload_lattice", "W6Lattice"),
    "W7": ("hybridbatch_workloads.bench.workload_module_net", "W7ModuleNet"),
    "W1-NATURAL": ("hybridbatch_workloads.bench.workload_natural", "W1Natural"),
    "W2-NATURAL": ("hybridbatch_workloads.bench.workload_natural", "W2Natural"),
    "CHILDSUM": ("hybridbatch_workloads.bench.workload_natural", "ChildSum"),
    "W9": ("hybridbatch_workloads.bench.workload_reading", "W9Parser"),
    "W8-GATE": ("hybridbatch_workloads.bench.workload_reading", "W8Gate"),
    "W8": ("hybridbatch_workloads.bench.workload_reading", "W8"),
    "BEAM": ("hybridbatch_workloads.bench.workload_reading", "Beam"),
}

# granularity used when the command line names none: every tree node, recurrent step, lattice
# cell, program module and per-step output of these models is one hybridized block call
DEFAULT_GRANULARITY = {"W1": "block", "W2": "block", "W3": "block", "W4-TREEGRU": "block",
                       "W4-2TYPE": "block", "W4-MVRNN": "block", "W5": "block", "W6": "block", "W7": "block",
                       "W1-NATURAL": "block", "W2-NATURAL": "block", "CHILDSUM": "block",
                       "W9": "block", "W8-GATE": "block", "W8": "block", "BEAM": "block"}


SYNTHETIC_ONLY = {"W5", "W8-GATE", "W8", "BEAM"}     # no real-data reader: they run on their generators


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
