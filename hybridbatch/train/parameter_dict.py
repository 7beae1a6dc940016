"""ParameterDict: an ordered name -> Parameter mapping that creates, collects and saves them.

    params = hb.ParameterDict(prefix="rnn_", seed=0)
    W = params.get("W", (H, H + X))            # created on first use ...
    W is params.get("W", (H, H + X))           # ... and returned afterwards
    trainer = hb.Trainer(params, "sgd", {"learning_rate": 0.1})
    params.save("rnn.npz"); params.load("rnn.npz")

Names are the full names (prefix included): `get` takes the short name and prepends the
prefix; indexing, iteration and the saved file use the full names.
"""
import os
import tempfile
import zipfile

import numpy as np

from .parameter import Parameter, cast_checked
from ..runtime import backend

__all__ = ["ParameterDict"]


class ParameterDict:
    """An ordered mapping full name -> Parameter.

    prefix: prepended to the names given to `get`.
    seed: when given, parameters created by `get` draw their initial values from one
        numpy Generator seeded with it, in creation order (reproducible models); otherwise
        each Parameter uses its own default generator.

    Iterating yields names (like a dict); `values()`/`items()` give the Parameters.

    >>> params = hb.ParameterDict(prefix="encoder_", seed=0)
    >>> w = params.get("W", (4, 3))
    >>> list(params), params.get("W") is w
    (['encoder_W'], True)
    """

    def __init__(self, prefix="", seed=None):
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        self.prefix = prefix
        self._rng = np.random.default_rng(seed) if seed is not None else None
        self._params = {}

    # -- creation ---------------------------------------------------------------------
    def get(self, name, shape=None, init="xavier", dtype=None, grad_req=None, rng=None):
        """The Parameter `prefix + name`, created with these arguments if it does not exist.

        An existing one is returned as it is; `shape` and `dtype` (when given) must equal its
        own. `init`, `rng` and `grad_req` only apply at creation. Creating a parameter needs
        `shape`; its dtype defaults to float32.
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"parameter names are non-empty strings, not {name!r}")
        full = self.prefix + name
        p = self._params.get(full)
        if p is not None:
            if shape is not None and tuple(int(s) for s in shape) != p.shape:
                raise ValueError(f"parameter {full!r} exists with shape {p.shape}; asked for shape "
                                 f"{tuple(shape)}")
            if dtype is not None and np.dtype(dtype) != p.dtype:
                raise ValueError(f"parameter {full!r} exists with dtype {p.dtype}; asked for dtype "
                                 f"{np.dtype(dtype)}")
            return p
        if shape is None:
            raise ValueError(f"parameter {full!r} does not exist yet; give its shape to create it")
        if rng is None:
            rng = self._rng
        p = Parameter(full, shape, init=init, dtype=np.float32 if dtype is None else dtype, rng=rng,
                      grad_req=grad_req)
        self._params[full] = p
        return p

    def add(self, param):
        """Insert an existing Parameter under its own name (an error if the name is taken by
        another Parameter)."""
        if not isinstance(param, Parameter):
            raise TypeError(f"ParameterDict holds Parameters, not {type(param).__name__}")
        have = self._params.get(param.name)
        if have is not None and have is not param:
            raise ValueError(f"a different parameter named {param.name!r} is already in this dict")
        self._params[param.name] = param
        return param

    def update(self, other):
        """Add every Parameter of `other` (a ParameterDict or a dict name -> Parameter).

        A name already bound to a *different* Parameter is an error, and then nothing is added.
        """
        if isinstance(other, ParameterDict):
            items = list(other.items())
        elif isinstance(other, dict):
            items = list(other.items())
        else:
            raise TypeError(f"update() takes a ParameterDict or a dict, not {type(other).__name__}")
        for name, p in items:
            if not isinstance(p, Parameter):
                raise TypeError(f"update(): {name!r} maps to a {type(p).__name__}, not a Parameter")
            have = self._params.get(name)
            if have is not None and have is not p:
                raise ValueError(f"cannot update: {name!r} is already bound to a different parameter")
        for name, p in items:
            self._params[name] = p

    # -- mapping ----------------------------------------------------------------------
    def __getitem__(self, name):
        try:
            return self._params[name]
        except KeyError:
            raise KeyError(f"no parameter named {name!r}; have {list(self._params)}") from None

    def __contains__(self, name):
        return name in self._params

    def __iter__(self):
        return iter(list(self._params))

    def __len__(self):
        return len(self._params)

    def keys(self):
        return list(self._params.keys())

    def values(self):
        return list(self._params.values())

    def items(self):
        return list(self._params.items())

    # -- gradients --------------------------------------------------------------------
    def zero_grad(self):
        """Zero every parameter's gradient."""
        for p in self._params.values():
            p.zero_grad()

    # -- persistence ------------------------------------------------------------------
    def save(self, path):
        """Write every parameter's data to `path` as an .npz archive (keys: full names).

        The file is written to exactly `path` (no suffix added), atomically.
        """
        write_npz(path, {name: p.data for name, p in self._params.items()})

    def load(self, path, allow_missing=False, ignore_extra=False):
        """Set every parameter's data from an .npz archive written by `save`.

        Every entry is checked before any parameter changes: a parameter of this dict absent
        from the file (unless allow_missing), an entry naming no parameter here (unless
        ignore_extra), an entry whose shape differs, whose values the parameter's dtype
        cannot hold (complex into float, float64 beyond float32's range, int64 beyond
        int32's), or a tied parameter (one Parameter under several names) given different
        values under its names raises ValueError. Values are cast to each parameter's dtype.
        """
        stored = read_npz(os.fspath(path))
        if "trainer" in stored and "trainer" not in self._params:
            raise ValueError(f"{os.fspath(path)} holds a Trainer's states (Trainer.save_states), not parameters: "
                             f"load it with trainer.load_states, and the weights from the file "
                             f"ParameterDict.save wrote")
        missing = [n for n in self._params if n not in stored]
        extra = [n for n in stored if n not in self._params]
        problems = []
        if missing and not allow_missing:
            problems.append(f"missing from the file: {missing}")
        if extra and not ignore_extra:
            problems.append(f"in the file but not in this dict: {extra}")
        cast = {}
        for name, p in self._params.items():
            if name not in stored:
                continue
            value = stored[name]
            if value.shape != p.shape:
                problems.append(f"{name!r} has shape {value.shape} in the file but {p.shape} here")
            else:
                value, problem = cast_checked(value, p.dtype)
                if problem is None:
                    cast[name] = value
                else:
                    problems.append(f"{name!r} in the file: {problem}")
        problems += _tied_conflicts(self._params, cast)
        if problems:
            raise ValueError(f"cannot load {os.fspath(path)!r}: " + "; ".join(problems))
        for name, p in self._params.items():
            if name in cast:
                p.data = cast[name]

    def __repr__(self):
        body = ", ".join(f"{n}: {p.shape}" for n, p in self._params.items())
        return f"ParameterDict(prefix={self.prefix!r}, {{{body}}})"


def write_npz(path, arrays):
    """Write arrays (name -> numpy or backend array) to exactly `path` as an .npz archive
    (np.savez would append .npz to another name), atomically, without pickles."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".npz-", suffix=".npz", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, value in arrays.items():
                with zf.open(name + ".npy", "w", force_zip64=True) as entry:
                    # order="C", not ascontiguousarray: that makes a 0-d array 1-d
                    np.lib.format.write_array(entry, np.asarray(backend.to_numpy(value), order="C"),
                                              allow_pickle=False)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read_npz(file):
    """{name: array} of every array in an .npz archive (a path or a binary file object), read
    without pickles."""
    try:
        with np.load(file, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (zipfile.BadZipFile, EOFError) as e:       # truncated or not an archive: name the file
        where = file if isinstance(file, (str, os.PathLike)) else "the archive"
        raise ValueError(f"{where} is not a readable .npz archive (truncated, or another kind of file): {e}") from e


def _tied_conflicts(params, cast):
    """Problems where one Parameter (tied weights) is named several times and the file gives
    its names different values: loading would keep the last and drop the others silently."""
    names_of = {}
    for name, p in params.items():
        if name in cast:
            names_of.setdefault(id(p), []).append(name)
    problems = []
    for names in names_of.values():
        first = cast[names[0]]
        for other in names[1:]:
            if not np.array_equal(first, cast[other], equal_nan=first.dtype.kind in "fc"):
                problems.append(f"{names[0]!r} and {other!r} are one tied parameter here, but the file gives "
                                f"them different values")
    return problems
