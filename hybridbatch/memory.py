"""Keep freed memory in the process, so batched kernels stop paying for page faults.

Every flush allocates arenas, gradient arenas and kernel temporaries of a few MB, and frees
them at the end of the step. glibc hands blocks that large to mmap and back to the kernel on
free, so the next step touches fresh pages: one page fault per 4 KB, about 5-10% of a W1
training step on this project's machine. Raising the mmap threshold (glibc's maximum, 32 MB)
and the trim threshold makes freed blocks stay in the heap for the next step, as a caching
allocator would. The price: the process's resident memory does not shrink after a peak.

Applied once at import; set HYBRIDBATCH_KEEP_MEMORY=0 to leave malloc as it was. Other C
libraries (musl, macOS) are left alone.
"""
import ctypes
import ctypes.util
import os

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
