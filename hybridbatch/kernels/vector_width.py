"""Compiling a numba kernel with 512-bit vectors where numba targets AVX-512.

LLVM's loop vectorizer prefers 256-bit vectors on AVX-512 CPUs. Kernels bound by their
arithmetic run faster with 512-bit ones: a Tree-LSTM's fused gate kernels 15-40%, the few-rows
kernel's g @ W about 25%. The width is a global LLVM option, so it is set only while numba
compiles (or loads) such a kernel, under numba's compiler lock, and put back to LLVM's
default after: the user's other numba code never sees it.
"""
import llvmlite.binding as llvm
from numba.core import config as numba_config
from numba.core.compiler_lock import global_compiler_lock

_DEFAULT_WIDTH = 0      # -force-vector-width=0: the vectorizer's cost model picks


def targets_avx512():
    """Whether numba compiles for a CPU with AVX-512: the host, unless NUMBA_CPU_FEATURES,
    NUMBA_CPU_NAME or NUMBA_ENABLE_AVX=0 chose another target (a portable cache, say)."""
    if not numba_config.ENABLE_AVX:
        return False
    if numba_config.CPU_FEATURES is not None:
        return "+avx512f" in numba_config.CPU_FEATURES.split(",")
    if numba_config.CPU_NAME not in (None, "host"):
        return False        # a named CPU: its width is left to LLVM
    try:
        return bool(llvm.get_host_cpu_features().get("avx512f", False))
    except RuntimeError:    # LLVM cannot tell on this host
        return False


WIDE_VECTORS = targets_avx512()


def compiled_wide(kernel, lanes=None):
    """Make numba compile `kernel` (a dispatcher) with `lanes`-wide vectors, whatever the
    argument types of the call that compiles it; lanes=None: 512 bits of the first
    argument's dtype, per compiled signature."""
    compile_types = kernel.compile

    def compile_wide(sig):
        width = lanes or 512 // sig[0].dtype.bitwidth
        with global_compiler_lock:
            llvm.set_option("", f"-force-vector-width={width}")
            try:
                return compile_types(sig)
            finally:
                llvm.set_option("", f"-force-vector-width={_DEFAULT_WIDTH}")
    kernel.compile = compile_wide
