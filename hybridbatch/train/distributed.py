"""Data-parallel training over MPI (mpi4py): every rank runs the same model on its own slice
of each minibatch, and the ranks sum their gradients before every Trainer step.

    # mpirun -n 4 python train.py
    hb.distributed.init()
    hb.distributed.broadcast_parameters(params)      # rank 0's initial weights everywhere
    trainer = hb.Trainer(params, "adam", {"learning_rate": 1e-3})
    hb.distributed.broadcast_trainer(trainer)        # and its optimizer state (a resumed run)
    for epoch in range(epochs):
        mine = hb.distributed.shard(items, seed, epoch)
        for i in range(0, len(mine), batch):
            with hb.batching():
                loss = hb.add_n([model(x) for x in mine[i:i + batch]])
                loss.backward()
            trainer.step(hb.distributed.allreduce_gradients(params, len(mine[i:i + batch])))
        total = hb.distributed.sum_over_ranks(loss.item())   # every rank calls a collective
        if hb.distributed.is_root():
            print(epoch, total)
            trainer.save_states("states.npz")

Each epoch, `shard` gives every rank its part of one shared random order; the parts of two
ranks interleave into the order one process would read:

    >>> hb.distributed.shard(list("abcdefg"), seed=0, epoch=0, rank=0, size=1)
    ['c', 'e', 'd', 'g', 'f', 'a', 'b']
    >>> hb.distributed.shard(list("abcdefg"), seed=0, epoch=0, rank=0, size=2)
    ['c', 'd', 'f']
    >>> hb.distributed.shard(list("abcdefg"), seed=0, epoch=0, rank=1, size=2)
    ['e', 'g', 'a']

`allreduce_gradients` sums every rank's gradients and returns the number of instances they
came from, all ranks together; the Trainer divides by that, so each rank's update is the
average over the global minibatch, the same as one process stepping on all of it (up to
float summation order). Clipping then sees the global gradient too. Dense gradients travel in
one allreduce buffer per step; an embedding whose gradient is a few rows (row tracking,
parameter.py) sends only those rows and their indices, gathered from every rank.

MPI collectives wait forever for a rank that died or stopped calling them. A rank that raises
an uncaught exception aborts the whole job (init installs the hook; mpirun also ends the job
when a process is killed). For the other cases (a rank that hangs, one that left the training
loop early or called sys.exit) every collective here waits at most `timeout` seconds (init's),
then prints which rank gave up and why and aborts the job. Work that rank 0 alone does
between steps (evaluation, checkpoints) must take less than that.
"""
import io
import json
import sys
import time

import numpy as np

from ..errors import HybridBatchError
from ..ops import random
from ..runtime import backend
from .optim import _collect
from .parameter_dict import read_npz

__all__ = ["DistributedError", "init", "rank", "size", "is_root", "broadcast_parameters", "broadcast_trainer",
           "allreduce_gradients", "sum_over_ranks", "shard", "last_step_bytes"]

DEFAULT_TIMEOUT = 20.0      # seconds: a stuck job ends within 30 s
_ROW_INDEX = np.dtype(np.int64)


class DistributedError(HybridBatchError, RuntimeError):
    """hb.distributed cannot run: mpi4py or an MPI library is missing, or it is misused."""


class _World:
    """The communicator and the collective timeout, made once by init()."""

    def __init__(self, mpi, timeout):
        self.mpi = mpi
        self.comm = mpi.COMM_WORLD
        self.timeout = timeout
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.step_bytes = (0, 0)


_world = None


def init(timeout=DEFAULT_TIMEOUT):
    """Join the MPI job (started by `mpirun -n N`; a plain `python` run is a job of 1 rank).
    timeout: the longest, in seconds, any collective waits for the other ranks before the
    job is aborted. Called again, it only sets the timeout."""
    global _world
    if not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if _world is None:
        try:
            from mpi4py import MPI
        except (ImportError, RuntimeError, OSError) as e:
            raise DistributedError(
                f"hb.distributed needs mpi4py and an MPI library: install an MPI (Debian: apt-get install "
                f"openmpi-bin libopenmpi-dev), then pip install 'hybridbatch[distributed]' ({e})") from None
        _world = _World(MPI, float(timeout))
        if _world.size > 1:
            sys.excepthook = _aborting(sys.excepthook)
            random.draw_apart(_world.rank)      # each rank its own dropout masks
    _world.timeout = float(timeout)


def _aborting(excepthook):
    """`excepthook`, then MPI_Abort: a rank that fails ends the job at once, where exiting
    normally would wait in MPI_Finalize for ranks that wait for it."""
    def report_and_abort(kind, value, traceback):
        excepthook(kind, value, traceback)
        sys.stderr.write(f"hb.distributed: rank {_world.rank} of {_world.size} failed; aborting the job\n")
        sys.stderr.flush()
        _world.comm.Abort(1)
    return report_and_abort


def _joined():
    """The world, joined with init()'s defaults on first use."""
    if _world is None:
        init()
    return _world


def rank():
    """This process's rank, 0 .. size() - 1."""
    return _joined().rank


def size():
    """The number of ranks in the job."""
    return _joined().size


def is_root():
    """Whether this is rank 0, the one that logs and writes checkpoints."""
    return rank() == 0


def _wait(request, what):
    """Wait for a non-blocking collective, at most the timeout; past it, abort the job with a
    message (a blocked collective cannot be cancelled, so there is nothing to go on with)."""
    world = _world
    deadline = time.monotonic() + world.timeout
    pause = 0.0
    while not request.Test():
        if time.monotonic() > deadline:
            sys.stderr.write(
                f"hb.distributed: rank {world.rank} of {world.size} waited {world.timeout:g} s in {what} "
                f"without an answer from the other ranks: one died, hangs, or left the loop early (every rank "
                f"must make the same calls, with the same number of steps); aborting the job\n")
            sys.stderr.flush()
            world.comm.Abort(1)
        time.sleep(pause)
        pause = min(2 * pause or 1e-5, 2e-4)    # short: MPI progresses the exchange only inside Test


def _broadcast_buffer(buffer, what):
    world = _joined()
    if world.size > 1:
        _wait(world.comm.Ibcast(buffer, root=0), what)


def _broadcast_bytes(payload, what):
    """Rank 0's bytes on every rank (`payload` is read on rank 0 only)."""
    length = np.array([len(payload) if is_root() else 0], np.int64)
    _broadcast_buffer(length, what)
    buffer = np.frombuffer(payload, np.uint8).copy() if is_root() else np.empty(int(length[0]), np.uint8)
    _broadcast_buffer(buffer, what)
    return buffer.tobytes()


def broadcast_parameters(params):
    """Set every rank's parameters to rank 0's (params: a list, dict or ParameterDict), so
    that all ranks start from the same weights whatever their seeds. First every rank checks
    its parameters' names, shapes and dtypes against rank 0's, and all raise DistributedError
    if any rank's differ (a table sized from one rank's own vocabulary, say): the steps after
    would exchange gradients of unlike shapes. Values travel as bytes, so any dtype does."""
    items, _ = _collect(params)
    if _joined().size > 1:
        _check_layout(items)
    for p in items:
        value = np.ascontiguousarray(backend.to_numpy(p.data))
        raw = value.reshape(-1).view(np.uint8)
        _broadcast_buffer(raw, f"broadcast_parameters ({p.name!r})")
        if not is_root():
            p.data = raw.view(value.dtype).reshape(value.shape)


def _check_layout(items):
    """DistributedError on every rank unless every rank's parameters match rank 0's names,
    shapes and dtypes, in order."""
    mine = [[p.name, list(p.shape), p.dtype.name] for p in items]
    root = json.loads(_broadcast_bytes(json.dumps(mine).encode(), "broadcast_parameters (shapes)"))
    differ = [f"{m[0]!r} {tuple(m[1])} {m[2]} where rank 0 has {r[0]!r} {tuple(r[1])} {r[2]}"
              for m, r in zip(mine, root) if m != r]
    if len(mine) != len(root):
        differ.append(f"{len(mine)} parameters where rank 0 has {len(root)}")
    flags = _gather_table(np.array([float(bool(differ))]), "broadcast_parameters (shapes)")[:, 0]
    if differ:
        raise DistributedError(f"rank {rank()}'s parameters differ from rank 0's: {'; '.join(differ[:5])} (make "
                               f"every rank build the same model: sizes from shared data, not a rank's own part)")
    if flags.any():
        raise DistributedError(f"ranks {', '.join(str(r) for r in np.flatnonzero(flags))} have parameters unlike "
                               f"rank 0's (their errors name them)")


def broadcast_trainer(trainer):
    """Set every rank's Trainer state to rank 0's: what save_states writes (optimizer state,
    step count, options, schedule), e.g. after rank 0 alone loaded a checkpoint."""
    payload = b""
    if is_root():
        out = io.BytesIO()
        np.savez(out, **trainer.states_arrays())
        payload = out.getvalue()
    payload = _broadcast_bytes(payload, "broadcast_trainer")
    if not is_root():
        trainer.load_states_arrays(read_npz(io.BytesIO(payload)), "rank 0's Trainer state")


def _gather_table(row, what):
    """Every rank's float64 `row`, stacked: (size, len(row))."""
    world = _world
    table = np.empty((world.size, len(row)), np.float64)
    _wait(world.comm.Iallgather(row, table), what)
    return table


def allreduce_gradients(params, batch_size):
    """Sum every trained parameter's gradient over the ranks, in place on each rank, and
    return the global batch size (the sum of every rank's `batch_size`): pass it to
    `trainer.step`, so that the update averages over all ranks' instances.

    Per step: one small gather of each rank's batch size and gradient rows, one allreduce of
    the dense gradients packed into a buffer per dtype, and one gather of the sparse rows
    (indices and values of every row-tracked gradient, while all ranks' rows together are less
    than twice the table's bytes, which a ring allreduce would move).
    Every rank must call it at every step, with its parameters in the same order."""
    world = _joined()
    if world.size == 1:
        return batch_size
    items = [p for p in _collect(params)[0] if p.grad_req != "null"]
    rows = [p.grad_rows() for p in items]
    row_counts = [-1 if r is None else len(r) for r in rows]
    table = _gather_table(np.array([batch_size, *row_counts], np.float64), "allreduce_gradients")
    counts = table[:, 1:].astype(np.int64)
    sparse, row_bytes = [], []
    for i, p in enumerate(items):
        if (counts[:, i] < 0).any():
            continue
        # each rank receives every rank's rows once, where a ring allreduce moves about twice
        # the table through each rank's link
        sent = p.dtype.itemsize * int(np.prod(p.shape[1:], dtype=np.int64)) + _ROW_INDEX.itemsize
        if counts[:, i].sum() * sent < 2 * p.dtype.itemsize * int(np.prod(p.shape)):
            sparse.append(i)
            row_bytes.append(sent)
    chosen = set(sparse)
    dense_bytes = _allreduce_dense([p for i, p in enumerate(items) if i not in chosen])
    sparse_bytes = _allgather_rows([items[i] for i in sparse], [rows[i] for i in sparse], counts[:, sparse],
                                   np.array(row_bytes, np.int64))
    world.step_bytes = (dense_bytes, sparse_bytes)
    return float(table[:, 0].sum())


def _allreduce_dense(params):
    """Sum the gradients of `params` over the ranks: one buffer per dtype. Returns its bytes."""
    total = 0
    for dtype in sorted({p.dtype for p in params}, key=str):
        group = [p for p in params if p.dtype == dtype]
        # MPI has no float16: such gradients are summed in float32
        buffer = np.concatenate([backend.to_numpy(p.peek_grad()).ravel() for p in group]).astype(
            np.float32 if dtype == np.float16 else dtype, copy=False)
        _wait(_world.comm.Iallreduce(_world.mpi.IN_PLACE, buffer), f"allreduce_gradients ({dtype} gradients)")
        start = 0
        for p in group:
            end = start + int(np.prod(p.shape, dtype=np.int64))
            p.grad = buffer[start:end].reshape(p.shape)
            start = end
        total += buffer.nbytes
    return total


def _allgather_rows(params, rows, counts, row_bytes):
    """Make each parameter's gradient the sum over the ranks of their gradient rows: every
    rank sends its rows' indices and values (one byte buffer for all of `params`), then adds
    the others' into its own. counts[r, k]: rank r's row count of params[k]; row_bytes[k]:
    the bytes one row of params[k] sends, its index and its values. Returns the bytes
    gathered."""
    if not params:
        return 0
    world = _world
    sizes = counts @ row_bytes                  # bytes each rank sends
    parts = []
    for p, r in zip(params, rows):
        parts.append(np.asarray(backend.to_numpy(r), _ROW_INDEX).view(np.uint8))
        parts.append(np.ascontiguousarray(backend.to_numpy(p.peek_grad()[r])).view(np.uint8).ravel())
    mine = np.concatenate(parts)
    gathered = np.empty(int(sizes.sum()), np.uint8)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    _wait(world.comm.Iallgatherv(mine, [gathered, sizes, offsets, world.mpi.BYTE]), "allreduce_gradients (sparse rows)")
    xp = backend.xp()
    for k, (p, r) in enumerate(zip(params, rows)):
        indices, values = [], []
        for source in range(world.size):
            n = int(counts[source, k])
            at = int(offsets[source] + counts[source, :k] @ row_bytes[:k])
            indices.append(gathered[at:at + n * _ROW_INDEX.itemsize].view(_ROW_INDEX))
            at += n * _ROW_INDEX.itemsize
            values.append(gathered[at:at + n * int(row_bytes[k] - _ROW_INDEX.itemsize)].view(p.dtype)
                          .reshape((n,) + p.shape[1:]))
        p.zero_grad(r)
        p.add_grad_rows(xp.asarray(np.concatenate(indices)), xp.asarray(np.concatenate(values)))
    return gathered.nbytes


def last_step_bytes():
    """(dense, sparse): the bytes of gradients the last allreduce_gradients call exchanged per
    rank: the dense allreduce buffers' size, and the sparse rows gathered from all ranks."""
    return _joined().step_bytes


def sum_over_ranks(value):
    """value (a number or numpy array) summed over the ranks, e.g. a loss to log on rank 0."""
    world = _joined()
    total = np.array(value, np.float64)     # a copy, C-contiguous
    if world.size > 1:
        _wait(world.comm.Iallreduce(world.mpi.IN_PLACE, total.reshape(-1)), "sum_over_ranks")
    return float(total) if total.ndim == 0 else total


def shard(items, seed, epoch, rank=None, size=None):
    """This rank's items for one epoch: all ranks draw the same permutation of `items` from
    (seed, epoch), drop its last len(items) % size entries so that every rank gets as many
    (and so takes as many steps), and rank r takes every size-th one from position r. The
    k-th minibatches of b items on N ranks are then together the k-th minibatch of N * b
    items of one process reading the same permutation. rank, size: those of this process
    unless given."""
    world = _joined() if rank is None or size is None else None
    rank = world.rank if rank is None else rank
    size = world.size if size is None else size
    order = np.random.default_rng([seed, epoch]).permutation(len(items))
    return [items[j] for j in order[:len(items) // size * size][rank::size]]
