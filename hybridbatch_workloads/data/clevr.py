"""CLEVR functional programs (W7, IEP module networks): reader and synthetic generator.

A program is a list of `ProgramNode(function, inputs)` in an order where `inputs` index
earlier nodes; the last node is the answer. Real data: `read_clevr_programs(
"../shared/data/clevr_programs")` (875 programs). Without it, `synthetic_programs(n)` draws
CLEVR-like programs over a 40-function vocabulary, 10-25 nodes each.
"""
from __future__ import annotations

import glob
import json
import os
from typing import Any, NamedTuple

import numpy as np

from .errors import DataFormatError, described

__all__ = ["ProgramNode", "read_clevr_programs", "synthetic_programs", "CLEVR_FUNCTIONS",
           "program_depth"]


class ProgramNode(NamedTuple):
    """One module call: the function's name and the indices of the nodes it reads."""
    function: str
    inputs: tuple[int, ...]


# ---------------------------------------------------------------------------------------------
# Reader
# ---------------------------------------------------------------------------------------------

def _json_files(path_or_dir: str | os.PathLike) -> list[str]:
    p = os.fspath(path_or_dir)
    if os.path.isdir(p):
        files = sorted(glob.glob(os.path.join(p, "*.json")))
        if not files:
            raise FileNotFoundError(f"no *.json files in {p}")
        return files
    if not os.path.exists(p):
        raise FileNotFoundError(p)
    return [p]


def _node_name(node: dict, with_values: bool) -> str | None:
    name = node.get("type", node.get("function"))
    if not isinstance(name, str):
        return None
    if with_values:
        values = node.get("value_inputs", node.get("side_inputs")) or []
        if values:
            name = f"{name}[{','.join(str(v) for v in values)}]"
    return name


def _parse_program(nodes: Any, where: str, filename: str,
                   with_values: bool) -> list[ProgramNode]:
    def fail(expected: str, found: object) -> DataFormatError:
        return DataFormatError(f"{expected} at {where}", found=found, filename=filename)

    if not isinstance(nodes, list) or not nodes:
        raise fail("a non-empty list of program nodes",
                   described("an empty list" if isinstance(nodes, list) else type(nodes).__name__))
    prog = []
    for i, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise fail(f"a node object (dict) as node {i}", described(type(node).__name__))
        name = _node_name(node, with_values)
        if name is None:
            raise fail(f"a string 'type' (or 'function') in node {i}",
                       described(repr(node.get("type", node.get("function")))))
        inputs = node.get("inputs", [])
        if (not isinstance(inputs, list)
                or not all(isinstance(j, int) and not isinstance(j, bool) and 0 <= j < i
                           for j in inputs)):
            raise fail(f"'inputs' of node {i} ({name}) listing earlier nodes (0..{i - 1})",
                       described(repr(inputs)))
        prog.append(ProgramNode(name, tuple(inputs)))
    return prog


def read_clevr_programs(path_or_dir: str | os.PathLike, *,
                        with_values: bool = False) -> list[list[ProgramNode]]:
    """Every program of a CLEVR questions JSON file, or of every `*.json` in a folder (sorted).

    Takes both layouts: `{"questions": [...]}` (or a bare list of questions) whose `program`
    is one program (official CLEVR v1.0, nodes with `function`) or a list of programs, one
    per image (the `shared/data/clevr_programs` sample, nodes with `type`). Each program comes
    back as a list of `ProgramNode(function, inputs)`, in file order. With `with_values`, a
    node's value inputs are folded into its name as IEP does (`filter_color[gray]`).
    Malformed input raises `DataFormatError` (JSON syntax errors with line and column).
    """
    programs: list[list[ProgramNode]] = []
    for fn in _json_files(path_or_dir):
        try:
            with open(fn, encoding="utf-8-sig") as f:      # -sig: skip a byte order mark
                data = json.load(f)
        except json.JSONDecodeError as e:
            raise DataFormatError(f"valid JSON ({e.msg})", filename=fn, lineno=e.lineno,
                                  column=e.colno) from None
        except UnicodeDecodeError as e:
            raise DataFormatError("UTF-8 text", found=described(f"undecodable bytes ({e.reason})"),
                                  filename=fn) from None
        questions = data.get("questions") if isinstance(data, dict) else data
        if not isinstance(questions, list):
            raise DataFormatError("a top-level object with a 'questions' list, or a list",
                                  found=described(type(questions).__name__), filename=fn)
        for qi, q in enumerate(questions):
            if not isinstance(q, dict) or "program" not in q:
                raise DataFormatError(f"a question object with a 'program' at questions[{qi}]",
                                      found=described(f"keys {sorted(q)}" if isinstance(q, dict)
                                                      else type(q).__name__), filename=fn)
            prog = q["program"]
            if isinstance(prog, list) and prog and all(isinstance(p, list) for p in prog):
                for pi, p in enumerate(prog):
                    programs.append(_parse_program(p, f"questions[{qi}].program[{pi}]", fn,
                                                   with_values))
            else:
                programs.append(_parse_program(prog, f"questions[{qi}].program", fn,
                                               with_values))
    return programs


def program_depth(program: list[ProgramNode] | list[tuple[str, tuple[int, ...]]]) -> int:
    """Depth (in nodes) of the output node: 1 + the deepest of its inputs, recursively."""
    depth: list[int] = []
    for _, inputs in program:
        depth.append(1 + max((depth[j] for j in inputs), default=0))
    return depth[-1] if depth else 0


# ---------------------------------------------------------------------------------------------
# Synthetic programs (W7)
# ---------------------------------------------------------------------------------------------

_COLORS = ("gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow")
_SIZES = ("large", "small")
_SHAPES = ("cube", "sphere", "cylinder")
_MATERIALS = ("rubber", "metal")
_RELATIONS = ("left", "right", "front", "behind")
_ATTRS = ("color", "size", "shape", "material")

# the 40 modules (IEP style: a filter per value), name -> arity
CLEVR_FUNCTIONS: dict[str, int] = {"scene": 0}
CLEVR_FUNCTIONS.update({f"filter_color[{v}]": 1 for v in _COLORS})
CLEVR_FUNCTIONS.update({f"filter_size[{v}]": 1 for v in _SIZES})
CLEVR_FUNCTIONS.update({f"filter_shape[{v}]": 1 for v in _SHAPES})
CLEVR_FUNCTIONS.update({f"filter_material[{v}]": 1 for v in _MATERIALS})
CLEVR_FUNCTIONS["unique"] = 1
CLEVR_FUNCTIONS.update({f"relate[{v}]": 1 for v in _RELATIONS})
CLEVR_FUNCTIONS.update({"count": 1, "exist": 1})
CLEVR_FUNCTIONS.update({f"query_{a}": 1 for a in _ATTRS})
CLEVR_FUNCTIONS.update({f"same_{a}": 1 for a in _ATTRS})
CLEVR_FUNCTIONS.update({"union": 2, "intersect": 2, "equal_integer": 2, "less_than": 2,
                        "greater_than": 2})
CLEVR_FUNCTIONS.update({f"equal_{a}": 2 for a in _ATTRS})
assert len(CLEVR_FUNCTIONS) == 40

_FILTERS = tuple(f for f in CLEVR_FUNCTIONS if f.startswith("filter_"))
_RELATES = tuple(f for f in CLEVR_FUNCTIONS if f.startswith("relate["))
# question families (root shapes) and how often each is drawn
_FAMILIES = (("count", 0.2), ("exist", 0.2), ("query", 0.3), ("compare_integer", 0.15),
             ("compare_attribute", 0.15))
# a set-valued subtree grows by: a filter (a chain, as most of CLEVR), relate(unique(.)),
# same_<attr>(unique(.)), or a union / intersect of two sets (split point uniform: unbalanced)
_SET_STEPS = (("filter", 0.66), ("relate", 0.22), ("same", 0.06), ("binary", 0.06))


class _Builder:
    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list[ProgramNode] = []

    def emit(self, name: str, inputs: tuple[int, ...]) -> int:
        self.nodes.append(ProgramNode(name, inputs))
        return len(self.nodes) - 1

    def pick(self, options: tuple[str, ...]) -> str:
        return options[int(self.rng.integers(len(options)))]

    def set_(self, budget: int) -> int:
        """A set-valued subtree of exactly `budget` nodes (budget >= 1), emitted in post-order."""
        if budget == 1:
            return self.emit("scene", ())
        steps = [(s, w) for s, w in _SET_STEPS if budget >= (2 if s == "filter" else 3)]
        w = np.array([w for _, w in steps])
        step = steps[int(self.rng.choice(len(steps), p=w / w.sum()))][0]
        if step == "filter":
            return self.emit(self.pick(_FILTERS), (self.set_(budget - 1),))
        if step == "relate":
            return self.emit(self.pick(_RELATES), (self.obj(budget - 1),))
        if step == "same":
            return self.emit(f"same_{self.pick(_ATTRS)}", (self.obj(budget - 1),))
        return self.binary(self.pick(("union", "intersect")), budget - 1, self.set_, 1)

    def obj(self, budget: int) -> int:
        """unique(set): exactly `budget` >= 2 nodes."""
        return self.emit("unique", (self.set_(budget - 1),))

    def binary(self, name: str, budget: int, child, min_child: int) -> int:
        """name(child(x), child(budget - x)), x uniform: one side is often much bigger."""
        x = int(self.rng.integers(min_child, budget - min_child + 1))
        a = child(x)
        b = child(budget - x)
        return self.emit(name, (a, b))

    def program(self, length: int) -> list[ProgramNode]:
        names = [f for f, _ in _FAMILIES]
        w = np.array([p for _, p in _FAMILIES])
        family = names[int(self.rng.choice(len(names), p=w / w.sum()))]
        if family in ("count", "exist"):
            self.emit(family, (self.set_(length - 1),))
        elif family == "query":
            self.emit(f"query_{self.pick(_ATTRS)}", (self.obj(length - 1),))
        elif family == "compare_integer":
            op = self.pick(("equal_integer", "less_than", "greater_than"))
            self.binary(op, length - 1, lambda b: self.emit("count", (self.set_(b - 1),)), 2)
        else:
            attr = self.pick(_ATTRS)
            self.binary(f"equal_{attr}", length - 1,
                        lambda b: self.emit(f"query_{attr}", (self.obj(b - 1),)), 3)
        return self.nodes


def synthetic_programs(n: int, seed: int = 0, min_len: int = 10,
                       max_len: int = 25) -> list[list[ProgramNode]]:
    """`n` CLEVR-like programs for W7 over the 40 `CLEVR_FUNCTIONS` (arity 0, 1 or 2).

    Length uniform in `min_len..max_len` (10-25). Built from CLEVR's question families
    (count / exist / query_<attr> of a set, compare two counts, compare two attributes) over
    set-valued chains of filters, relate(unique(.)), same_<attr>(unique(.)) and occasional
    union / intersect, every binary split drawn uniformly, so trees are deep and unbalanced
    as in CLEVR. Nodes come in depth-first post-order (an input's whole subtree, first input
    first, before the node; the answer node last), the order `read_clevr_programs` returns.
    Deterministic in `seed`; `synthetic_programs(k, s)` is a prefix of `synthetic_programs(n, s)`.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    if not 7 <= min_len <= max_len:
        raise ValueError("need 7 <= min_len <= max_len")
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        out.append(_Builder(rng).program(length))
    return out
