"""Stable names of signatures, for what outlives a process (a learned policy's table).

Interned signature ids depend on what ran first, so a policy learned in one process names
its types by what they compute: op name, attrs and operand types, a shared Parameter by its
name and shape (its numeric id is per process), a traced block by its class name and
input types. Two signatures of a flush that still share a name (two instances of one
block class, such as TreeLSTM-2Type's two internal cells) are told apart by the creation
order of their parameters, the same in every process that builds the model the same way.
"""
import functools

from ..ops.shape import Input, Output
from ..train import parameter

_cache = {}        # signature id -> name (signatures are never dropped, so ids stay valid)


def _stable(x):
    """x as text without what differs between processes: a function by its qualified name,
    a partial by its parts, an object whose repr is its address by its class."""
    if isinstance(x, tuple):
        return "(" + ", ".join(_stable(v) for v in x) + ")"
    if isinstance(x, functools.partial):
        return f"partial{_stable((x.func,) + x.args + tuple(sorted(x.keywords.items())))}"
    if not hasattr(x, "__qualname__") and type(x).__repr__ is object.__repr__:
        x = type(x)
    if callable(x) and hasattr(x, "__qualname__"):
        return f"{getattr(x, '__module__', '')}.{x.__qualname__}"
    return repr(x)


def _name(sig):
    name = _cache.get(sig.id)
    if name is None:
        if sig.op is Input or sig.op is Output:
            # their attrs end in an interned type id (per process): name the type instead
            index = _stable(sig.attrs[:-1]) if sig.op is Output else ""
            name = f"{sig.op.name}{index}->{sig.out_dtype}{list(sig.out_shape)}"
        else:
            operands = [f"{dtype}{list(shape)}" if pid is None else f"{parameter.by_id(pid).name}:{dtype}{list(shape)}"
                        for pid, shape, dtype in zip(sig.params, sig.in_shapes, sig.in_dtypes)]
            name = f"{sig.op.name}{_stable(sig.attrs)}({', '.join(operands)})"
        _cache[sig.id] = name
    return name


def _first_param(sig):
    """The id of the oldest Parameter the signature (or its traced block) uses."""
    return min(sig.op.params_used(sig), default=-1)


def type_keys(sigs):
    """A stable key per Signature of one flush, distinct within the flush: the second and
    later signatures sharing a name, by parameter age, get #2, #3, ..."""
    keys = [_name(s) for s in sigs]
    if len(set(keys)) == len(keys):
        return tuple(keys)
    rank = {}
    for i in sorted(range(len(sigs)), key=lambda i: (keys[i], _first_param(sigs[i]), sigs[i].id)):
        rank[keys[i]] = rank.get(keys[i], 0) + 1
        if rank[keys[i]] > 1:
            keys[i] = f"{keys[i]}#{rank[keys[i]]}"
    return tuple(keys)
