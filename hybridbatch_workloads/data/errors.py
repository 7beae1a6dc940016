"""The error every reader in `hybridbatch_workloads.data` raises on malformed input."""
from __future__ import annotations

from hybridbatch.errors import HybridBatchError


_NOTHING = object()


class described(str):
    """A `found` value that is a description ("9 columns"), shown without quotes."""


def _show(found: object) -> str:
    if isinstance(found, described):
        return str(found)
    if isinstance(found, str):
        if found == "":
            return "end of line"
        if len(found) > 40:
            found = found[:37] + "..."
        return repr(found)
    return str(found)


class DataFormatError(HybridBatchError, ValueError):
    """A data file (or string) does not follow its format.

    `str(err)` reads ``FILE:LINE:COLUMN: expected ..., found ...`` (LINE and COLUMN are
    1-based; COLUMN counts characters; LINE and COLUMN are left out where they mean nothing,
    e.g. a JSON program node, whose path is in the message instead). The parts are kept as
    attributes: `filename`, `lineno`, `column`, `expected`, `found` (``""`` = the end of the
    line, None = not applicable) and `line` (the offending line, if known).
    """

    def __init__(self, expected: str, *, found: object = _NOTHING, filename: str | None = None,
                 lineno: int | None = None, column: int | None = None, line: str | None = None):
        self.expected = expected
        self.found = None if found is _NOTHING else found
        self.filename = filename
        self.lineno = lineno
        self.column = column
        self.line = line
        where = [str(filename) if filename is not None else "<string>"]
        if lineno is not None:
            where.append(str(lineno))
            if column is not None:
                where.append(str(column))
        msg = f"{':'.join(where)}: expected {expected}"
        if found is not _NOTHING:
            msg += f", found {_show(found)}"
        if line is not None and column is not None:
            msg += "\n" + _excerpt(line, column)
        super().__init__(msg)


def _excerpt(line: str, column: int, width: int = 70) -> str:
    """The line around `column` (1-based) with a caret under it."""
    i = max(column - 1, 0)
    start = max(0, i - width // 2)
    end = min(len(line), start + width)
    text = line[start:end]
    prefix = "..." if start > 0 else ""
    suffix = "..." if end < len(line) else ""
    return f"    {prefix}{text}{suffix}\n    {' ' * (len(prefix) + i - start)}^"
