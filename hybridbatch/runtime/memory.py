"""Keep freed memory in the process, so batched kernels stop paying for page faults; and
reuse the arenas of earlier flushes.

Every flush allocates arenas, gradient arenas and kernel temporaries of a few MB, and frees
them at the end of the step. glibc hands blocks that large to mmap and back to the kernel on
free, so the next step touches fresh pages: one page fault per 4 KB, about 5-10% of a
Tree-LSTM training step on this project's machine. Raising the mmap threshold (glibc's maximum, 32 MB)
and the trim threshold makes freed blocks stay in the heap for the next step, as a caching
allocator would. The price: the process's resident memory does not shrink after a peak.

Applied once at import; set HYBRIDBATCH_KEEP_MEMORY=0 to leave malloc as it was. Other C
libraries (musl, macOS) are left alone.

Even from the heap, a new multi-MB array per arena and flush still cost a BiLSTM tagger
about 3.5% of a training step (in-process A/B, a Tree-LSTM 1.2%; numpy also asks the kernel
for huge pages on every allocation of 4 MB or more). So host arenas and gradient arenas come
from a pool of buffers (`empty`, `zeros`), the way a caching allocator keeps device memory: a
buffer is handed out again once nothing refers to it, which its reference count tells (every
numpy view keeps its base alive), so no scope has to give its arenas back. Each thread's pool
keeps at most `settings.pool_limit` bytes.
"""
import ctypes
import ctypes.util
import math
import os
import sys
import threading

import numpy as np

from ..config import settings

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20          # glibc's upper limit on 64-bit systems
TRIM_THRESHOLD = 1 << 30


def keep_freed_memory():
    """Tune glibc's malloc as described above; returns whether it was applied."""
    if os.environ.get("HYBRIDBATCH_KEEP_MEMORY", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


APPLIED = keep_freed_memory()


POOLED_BYTES = 256 << 10      # smaller arrays come from malloc as they are
BUFFERS_PER_SIZE = 8          # more arenas of one size class alive at once are not pooled
_pools = threading.local()    # per thread: size class -> buffers (1-D uint8)


def empty(xp, shape, dtype):
    """An uninitialized array: for the host, on a pooled buffer no live array uses (cupy
    keeps a pool of its own)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if xp is not np or nbytes < POOLED_BYTES:
        return xp.empty(shape, dtype)
    buf = _idle_buffer(nbytes)
    return buf[:nbytes].view(dtype).reshape(shape)


def zeros(xp, shape, dtype):
    """empty(), filled with zeros."""
    out = empty(xp, shape, dtype)
    out.fill(0)
    return out


def _idle_refs():
    """The reference count `_idle_buffer` sees for a buffer nothing else refers to, read the
    same way (the list, the loop variable, the call's argument: 3 on CPython 3.11; an
    interpreter that counts fewer of them gives its own number, and a live view still adds
    one)."""
    free = [np.empty(1, np.uint8)]
    for buf in free:
        return sys.getrefcount(buf)


def _idle_buffer(nbytes):
    """A pooled buffer of at least nbytes that no array refers to, or a new one (pooled while
    its size class has room). Sizes round up to a quarter power of two: arenas differ in
    rows from flush to flush, so an exact size would seldom come back."""
    size = 1 << max(0, (nbytes - 1).bit_length() - 3)
    size = -(-nbytes // size) * size
    pool = getattr(_pools, "by_size", None)
    if pool is None:
        pool = _pools.by_size = {}
        _pools.held = 0
    free = pool.setdefault(size, [])
    for buf in free:
        if sys.getrefcount(buf) == _IDLE_REFS:
            return buf
    buf = np.empty(size, np.uint8)
    if len(free) < BUFFERS_PER_SIZE and _pools.held + size <= settings.pool_limit:
        free.append(buf)
        _pools.held += size
    return buf


_IDLE_REFS = _idle_refs()
