"""Random ops: dropout, with masks that do not depend on how nodes are batched.

Each draw gets a key when it is recorded: the seed's stream, numbered in recording order
(`seed`, `next_key`), mixed into 63 bits. Element i of a node's mask is a hash of (key, i)
(splitmix64), so a node's mask is the same whether it runs alone (eager mode), in any batch,
in any schedule order or inside a block program; backward hashes it again instead of
storing it. Inside a traced forward a draw's key is a per-call integer column of the block
(hybrid/arguments.py, `draw_placeholder`), drawn afresh at each call. hb.map gives each
instance a stream of its own (`split`), so its draws do not depend on the interleaving; a
traced forward whose map did so replays those stream changes at each call (`replay_draws`).
"""
import itertools
import math
import threading

import numpy as np

from .registry import Op, register, check_float

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15        # splitmix64's increment: 2^64 / the golden ratio
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
KEY_LIMIT = 1 << 63                 # keys are non-negative int64 (a node's aux)


def _mix(z):
    """splitmix64's finalizer on a Python int (64 bits)."""
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


_stream = (0, itertools.count())    # (the seed mixed, the draw counter); hb.seed replaces both
_seeded = 0                         # the last seed
_rank = 0                           # this process's rank in an hb.distributed job (draw_apart)
_thread = threading.local()         # .stream: the stream this thread draws from instead (use), or None


def seed(n):
    """Restart the key stream from seed `n`: the draws after it (dropout masks) repeat the
    draws after any other `seed(n)`, in eager and batched runs alike. Process-wide; the
    stream starts as after seed(0).

    >>> x = hb.array(np.ones(8, np.float32))
    >>> hb.seed(7)
    >>> eager = hb.dropout(x, 0.5).asnumpy()
    >>> hb.seed(7)
    >>> with hb.batching():
    ...     batched = hb.dropout(x, 0.5)
    >>> bool((eager == batched.asnumpy()).all())
    True
    """
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"seed must be an integer, not {type(n).__name__}")
    if stream() is not None:
        raise RuntimeError("hb.seed inside an hb.map instance (or a thread drawing from a stream of its own) "
                           "would not reach its draws, which come from the instance's own stream: seed before "
                           "the map")
    global _stream, _seeded
    _seeded = int(n)
    _stream = (_mix((_seeded + _rank * _GOLDEN) & _MASK64), itertools.count())


def draw_apart(rank):
    """Give this process streams of its own in a job of several ranks (hb.distributed.init):
    rank r draws what seed(n) draws mixed with r, so data-parallel ranks drop different
    elements where they would all repeat one mask; rank 0 draws as one process does. The
    stream restarts from the last seed."""
    global _rank
    _rank = int(rank)
    seed(_seeded)


def split(n):
    """n streams of their own, seeded by the next key of the current one: hb.map gives one
    to each instance, so that an instance's draws do not depend on how the instances'
    recording interleaves (record/mapping.py)."""
    base = next_key()
    return [(_mix((base + (i + 1) * _GOLDEN) & _MASK64), itertools.count()) for i in range(n)]


def stream():
    """The stream this thread draws from instead of the process-wide one, or None (to `use`
    again later)."""
    return getattr(_thread, "stream", None)


def use(s):
    """Draw in this thread from stream `s` (one of `split`'s, or what `stream()` returned;
    None: the process-wide stream) from now on. Per thread: hb.map in a serving worker
    thread and draws in another thread do not interleave their streams."""
    _thread.stream = s


def next_key():
    """The key of the next draw (a non-negative int below KEY_LIMIT)."""
    base, counter = getattr(_thread, "stream", None) or _stream
    return _mix((base + next(counter) * _GOLDEN) & _MASK64) >> 1


def next_keys(n):
    """The keys of the next n draws, in order."""
    return [next_key() for _ in range(n)]


def replay_draws(events):
    """The keys of a traced forward's draws where hb.map gave its instances streams of
    their own (events: `draw_event`'s record of the trace), drawn as its plain forward
    draws them: ("key",) the next key of the current stream, ("split", n) n streams split
    from it, ("use", i) the i-th of the last split's streams from now on, ("end",) back to
    the stream current before that split."""
    keys, splits = [], []
    outer = stream()
    try:
        for event in events:
            kind = event[0]
            if kind == "key":
                keys.append(next_key())
            elif kind == "split":
                splits.append((split(event[1]), stream()))
            elif kind == "use":
                use(splits[-1][0][event[1]])
            else:
                use(splits.pop()[1])
    finally:
        use(outer)
    return keys


def keep_mask(xp, keys, shape, p):
    """(len(keys),) + shape bools: element i of row r is kept when the top 53 bits of
    splitmix64(keys[r] + (i + 1) * golden) reach p * 2^53, so with probability 1 - p."""
    n = math.prod(shape)
    u64 = xp.uint64
    z = keys.astype(u64)[:, None] + xp.arange(1, n + 1, dtype=u64)[None, :] * u64(_GOLDEN)
    z = (z ^ (z >> u64(30))) * u64(_MIX1)
    z = (z ^ (z >> u64(27))) * u64(_MIX2)
    z ^= z >> u64(31)
    keep = (z >> u64(11)) >= u64(math.ceil(p * 2.0 ** 53))
    return keep.reshape((len(keys),) + tuple(shape))


@register
class Dropout(Op):
    """x with each element zeroed with probability p and the rest scaled by 1 / (1 - p);
    attrs (p,), aux the node's key. Backward regenerates the mask from the key."""
    name = "dropout"
    uses_aux = True
    zero_exact = True

    def infer(self, attrs, shapes, dtypes):
        check_float(self.name, shapes, dtypes)
        return shapes[0], dtypes[0]

    def check_aux(self, sig, aux):
        if not 0 <= aux < KEY_LIMIT:
            raise ValueError(f"dropout: key {aux} outside [0, 2**63)")

    def aux_limit(self, sig):
        return KEY_LIMIT

    def _scaled_mask(self, xp, sig, aux):
        p = sig.attrs[0]
        dtype = sig.out_dtype
        keep = keep_mask(xp, aux, sig.in_shapes[0], p)
        return keep.astype(dtype) * dtype.type(1.0 / (1.0 - p))

    def forward(self, xp, sig, xs, aux):
        return xs[0] * self._scaled_mask(xp, sig, aux)

    def backward(self, xp, sig, xs, aux, y, gy, needs):
        return (gy * self._scaled_mask(xp, sig, aux),)
