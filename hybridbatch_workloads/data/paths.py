"""Where the real data sets live (they are never part of the repository)."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import DataFormatError, described

__all__ = ["shared_data_dir", "find_data_file", "read_data_file", "ENV_VAR"]

ENV_VAR = "HYBRIDBATCH_DATA"


def shared_data_dir() -> Path | None:
    """The folder holding `sst/`, `ud_english_ewt/`, `clevr_programs/`, or None.

    `$HYBRIDBATCH_DATA` when set (None if it is not a folder); otherwise `../shared/data`
    next to the repository root (the checkout this package was imported from), if present.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env).expanduser()
        return p.resolve() if p.is_dir() else None
    repo_root = Path(__file__).resolve().parents[2]
    p = repo_root.parent / "shared" / "data"
    return p if p.is_dir() else None


def find_data_file(data_dir, subfolder, name) -> str:
    """`name` in `data_dir` itself or in its `subfolder` (the user may name either folder)."""
    for d in (data_dir, os.path.join(data_dir, subfolder)):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    raise FileNotFoundError(f"{name} is neither in {data_dir} nor in {os.path.join(data_dir, subfolder)}")


def read_data_file(data_dir, subfolder, name, reader) -> list:
    """reader(the file `find_data_file` finds): its instances. A file that holds none is a
    `DataFormatError`: training or evaluating on nothing fails far from the cause (a loss
    per instance dividing by zero)."""
    path = find_data_file(data_dir, subfolder, name)
    items = reader(path)
    if not items:
        raise DataFormatError("at least one instance", found=described("none"), filename=path)
    return items
