"""Interning of exact signature keys into small integers.

A signature says which recorded nodes may run as one batched kernel: the op, its attributes
and, per operand, either the operand's type (shape + dtype) or the id of the shared
Parameter. Keys are compared exactly (dict lookup on the full tuple), so two different ops
never share a signature the way colliding bare hashes could. The same lookup memoizes shape
inference: a key seen before costs one dict hit.
"""
import threading

import numpy as np

from ..errors import ShapeError
from ..train import parameter as _parameter

_lock = threading.RLock()
_type_ids: dict = {}
TYPES: list = []          # type id -> (shape, dtype)
_sig_by_key: dict = {}
SIGS: list = []           # signature id -> Signature


def type_id(shape, dtype) -> int:
    """Intern (shape, dtype) -> small int. The id is published after its TYPES entry, so a
    thread that finds it without the lock can read TYPES[id] at once."""
    key = (shape, dtype)
    tid = _type_ids.get(key)
    if tid is None:
        with _lock:
            tid = _type_ids.get(key)
            if tid is None:
                TYPES.append((shape, np.dtype(dtype)))
                tid = _type_ids[key] = len(TYPES) - 1
    return tid


class Signature:
    """Everything a batch of nodes with this key shares.

    codes: per operand, a type id (>= 0, a per-instance value gathered across the batch)
    or -(pid + 1) (a shared Parameter passed to the kernel once).
    """

    __slots__ = ("id", "op", "attrs", "codes", "in_shapes", "in_dtypes", "shared", "params",
                 "node_positions", "out_shape", "out_dtype", "out_type", "batchable", "aux_limit", "any_aux")

    def __init__(self, sid, op, attrs, codes):
        self.id = sid
        self.op = op
        self.attrs = attrs
        self.codes = codes
        shapes, dtypes, params = [], [], []
        for c in codes:
            if c >= 0:
                shape, dtype = TYPES[c]
                params.append(None)
            else:
                p = _parameter.by_id(-c - 1)
                shape, dtype = p.shape, p.dtype
                params.append(-c - 1)
            shapes.append(shape)
            dtypes.append(dtype)
        self.in_shapes = tuple(shapes)
        self.in_dtypes = tuple(dtypes)
        self.params = tuple(params)
        self.shared = tuple(p is not None for p in params)
        self.node_positions = tuple(i for i, p in enumerate(params) if p is None)
        out_shape, out_dtype = op.infer(attrs, self.in_shapes, self.in_dtypes)
        self.out_shape = tuple(out_shape)
        self.out_dtype = np.dtype(out_dtype)
        self.out_type = type_id(self.out_shape, self.out_dtype)
        self.batchable = op.batchable
        # recording checks a node's integer inline against this bound (0 <= aux < n), or takes
        # any int where any_aux, and asks op.check_aux only outside that; -1: no such bound
        limit = op.aux_limit(self) if op.uses_aux else None
        self.aux_limit = -1 if limit is None else limit
        self.any_aux = op.uses_aux and op.any_aux

    def describe(self):
        args = ", ".join(f"param#{p}{s}" if p is not None else f"{s}"
                         for p, s in zip(self.params, self.in_shapes))
        program = getattr(self.op, "program", None)     # a block call: every output's shape
        out = self.out_shape if program is None or len(program.out_types) == 1 else \
            "(" + ", ".join(str(TYPES[t][0]) for t in program.out_types) + ")"
        return f"{self.op.name}({args}; {self.attrs}) -> {out}"

    def __repr__(self):
        return f"Signature({self.id}: {self.describe()})"


def intern(op, attrs, codes) -> Signature:
    """The Signature for this exact key, inferring its output shape on first sight.

    Raises ShapeError (not cached) when the operand shapes do not fit the op.
    """
    key = (op.id, attrs, codes)
    sig = _sig_by_key.get(key)
    if sig is not None:
        return sig
    with _lock:
        sig = _sig_by_key.get(key)
        if sig is None:
            sig = Signature(len(SIGS), op, attrs, codes)
            SIGS.append(sig)
            _sig_by_key[key] = sig
    return sig


def check(cond, op_name, shapes, why):
    """Raise ShapeError naming the op and every operand shape unless `cond`."""
    if not cond:
        shown = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(f"{op_name}: operands of shapes {shown} do not fit: {why}")
