"""Host matrix products: a compiled kernel for few rows, MKL (through ctypes) when it is
installed, numpy's BLAS otherwise.

Why not numpy alone: a recursive model multiplies the same weight by one small block of rows
per tree level. numpy's OpenBLAS packs the whole weight (2.6 MB for a 1280 x 512 float32
one) again on every call, so levels of fewer than 128 rows run at 13-67 GFLOP/s on this
project's machine. MKL's packed GEMM (`cblas_sgemm_pack` + `cblas_sgemm_compute`) packs a
weight once and reuses it: inside `packing()` (one forward run, one backward run) a shared
weight is packed on its second product and dropped at the end, so nothing stale survives a
parameter update. Fewer rows still are best served by streaming the weight once
(`few_rows.py`): 2-4x faster than either library below 16 rows there.

Why not MKL alone: on some CPUs numpy's OpenBLAS runs larger products faster (an AMD EPYC
here: 106-110 GFLOP/s against MKL's 92-94 from 64 rows up with OpenBLAS's AVX2 kernels,
about twice MKL's rate with its AVX-512 ones), while MKL stays ahead on few rows. In the
default mode, "auto", the three are timed on a range of row counts (about 0.5 s) once per
machine and BLAS setup, stored beside the fused kernels (`_calibrate`): a shared weight's
product of fewer than `kernel_below()` rows goes to the kernel, one of at least
`numpy_from()` rows to numpy, and the rest to MKL and its packed weights (`one_row()` picks for a single row). `hb.settings.blas = "mkl"` sends every
product to MKL, "numpy" every one to numpy (config.py); HYBRIDBATCH_BLAS=auto|mkl|numpy
picks the mode at import, and =numpy also keeps MKL from loading. MKL follows
MKL_NUM_THREADS; when that (or OMP_NUM_THREADS) is 1 its sequential layer is loaded, so no
OpenMP runtime joins the process. Only float32/float64 C- or Fortran-ordered operands on
the host go to MKL or the kernel; anything else (cupy arrays, other dtypes, odd strides) is
numpy's.
"""
import contextlib
import ctypes
import ctypes.util
import hashlib
import json
import math
import os
import platform
import tempfile
import threading
import time
import warnings

import llvmlite.binding as llvm
import numba
import numpy as np
from numba import njit

from . import few_rows, prefetch
from .compiling import log
from ..config import BLAS_MODES, settings

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
B_MATRIX, PACKED = 162, 151
THREADING_SEQUENTIAL = 1
INTERFACE_LP64 = 0
SMALL_WEIGHT = 4096     # elements: smaller shared weights are multiplied by numpy (shared_product)
PACK_ROWS = 1024        # the batch rows MKL is told when it packs a weight (see _packed)
ROWS_TRIED = (2, 4, 8, 16, 32, 64, 128, 256, 512)     # the row counts the calibration times (and 1)
NUMPY_MARGIN = 0.95     # the calibration divides numpy's measured times by this: MKL keeps near-ties
# The weight the calibration times (float32, 2.6 MB): a large shared weight, where the
# libraries' rates differ most; the routes measured on it serve every shape.
CALIBRATION_WEIGHT = (1280, 512)
CALIBRATION_FORMAT = 1      # of the stored calibration file (_store): a change makes every stored one stale
THREAD_VARIABLES = ("OMP_", "OPENBLAS_", "GOTO", "MKL_", "KMP_")     # environment that changes BLAS timings


def _library_path():
    """libmkl_rt from the `mkl` wheel's file list, else wherever the loader finds it."""
    try:
        from importlib.metadata import PackageNotFoundError, files
        for f in files("mkl") or ():
            if f.name.startswith(("libmkl_rt.so", "mkl_rt.")):
                return str(f.locate())
    except PackageNotFoundError:
        pass
    return ctypes.util.find_library("mkl_rt")


class _MKL:
    """The few MKL entry points used here, typed for ctypes."""

    def __init__(self, path):
        lib = ctypes.CDLL(path)
        # both must precede every other MKL call; 32-bit ints, whatever MKL_INTERFACE_LAYER says
        lib.MKL_Set_Interface_Layer.argtypes = [ctypes.c_int]
        lib.MKL_Set_Interface_Layer(INTERFACE_LP64)
        threads = os.environ.get("MKL_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
        if threads == "1":
            lib.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
            lib.MKL_Set_Threading_Layer(THREADING_SEQUENTIAL)
        text = ctypes.create_string_buffer(256)
        lib.mkl_get_version_string(text, len(text))
        self.version = text.value.decode(errors="replace").strip()
        i, p, sz = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
        self.gemm, self.pack, self.compute, self.pack_size = {}, {}, {}, {}
        for dtype, ch, real in ((np.float32, "s", ctypes.c_float), (np.float64, "d", ctypes.c_double)):
            dt = np.dtype(dtype)
            self.gemm[dt] = getattr(lib, f"cblas_{ch}gemm")
            self.gemm[dt].argtypes = [i, i, i, i, i, i, real, p, i, p, i, real, p, i]
            self.pack_size[dt] = getattr(lib, f"cblas_{ch}gemm_pack_get_size")
            self.pack_size[dt].argtypes, self.pack_size[dt].restype = [i, i, i, i], sz
            self.pack[dt] = getattr(lib, f"cblas_{ch}gemm_pack")
            self.pack[dt].argtypes = [i, i, i, i, i, i, real, p, i, p]
            self.compute[dt] = getattr(lib, f"cblas_{ch}gemm_compute")
            self.compute[dt].argtypes = [i, i, i, i, i, i, p, i, p, i, real, p, i]


def _mode():
    """The mode HYBRIDBATCH_BLAS asks for (an unknown one warns and is "auto")."""
    choice = os.environ.get("HYBRIDBATCH_BLAS", "").lower() or "auto"
    if choice not in BLAS_MODES:
        warnings.warn(f"HYBRIDBATCH_BLAS={choice!r} is not 'auto', 'mkl' or 'numpy'; using 'auto' (MKL where "
                      f"it is available)", stacklevel=3)
        return "auto"
    return choice


def _load(mode=None):
    """MKL, loaded, or None (not installed, unusable, or mode "numpy")."""
    if (_mode() if mode is None else mode) == "numpy":
        return None
    path = _library_path()
    if not path:
        return None
    try:
        mkl = _MKL(path)
        a = np.arange(6, dtype=np.float32).reshape(2, 3)
        ok = np.array_equal(_gemm(mkl, a, a.T), a @ a.T)     # small integers: exact
    except (OSError, AttributeError) as e:
        ok, why = False, e
    else:
        why = "a 2x3 product differs from numpy's"
    if not ok:
        warnings.warn(f"MKL at {path} is not usable ({why}); using numpy's BLAS", stacklevel=2)
        return None
    return mkl


def available():
    """Whether MKL was found and loaded."""
    return _mkl is not None


def version():
    """MKL's version string, or None when it is not loaded."""
    return _mkl.version if _mkl is not None else None


def kernel_below():
    """(rows for a C-ordered weight, rows for a transposed one): a shared weight's product
    of 2 up to this many rows (exclusive) runs in the few-rows kernel (`few_rows.py`),
    whatever numpy_from() says; 0 in "mkl" and "numpy" modes. Measured once (`_calibrate`)."""
    if settings.blas != "auto":
        return (0, 0)
    if _kernel_below is None:
        _calibrate()
    return _kernel_below


def numpy_from():
    """(rows for a C-ordered right operand, rows for a transposed one): a product a @ b over
    at least the count for b's layout goes to numpy (`_library`), fewer to MKL, unless the
    few-rows kernel takes it; inf: never (MKL), 0: always. In "auto" it is measured once
    (`_calibrate`)."""
    if settings.blas == "numpy":
        return (0, 0)
    if settings.blas == "mkl":
        return (math.inf, math.inf)
    if _numpy_from is None:
        _calibrate()
    return _numpy_from


def one_row():
    """(for a C-ordered right operand, for a transposed one): "kernel", "mkl" or "numpy", the
    library that multiplies a single row, whatever the row-count splits say. One row is a
    matrix-vector product, where MKL's packed product was 20-30% slower than numpy's GEMV on
    the AMD EPYC here, while it is 2x faster at 2-6 rows. Eager mode multiplies one row at a
    time: a slow choice here would slow the baseline that batching is measured against.
    Measured in the same calibration, with more rounds."""
    if settings.blas != "auto":
        return (settings.blas,) * 2
    if _one_row is None:
        _calibrate()
    return _one_row


def flip_below():
    """Rows below which numpy multiplies x by a transposed weight as (W x^T)^T (`_numpy_product`).

    Which layout OpenBLAS runs faster depends on its kernels: on the AMD EPYC here its AVX-512
    ones run the flipped product 1.1-2.5x faster below 128 rows of a 1280 x 512 weight, its
    AVX2 ones 8-13% faster below 16 rows and 3-15% slower from 32 (a C-ordered weight's flip
    was never more than 4% faster, and up to 20% slower). So it is measured once with
    ROWS_TRIED, the same least-total-cost rule choosing the count."""
    if _flip_below is None:
        _calibrate()
    return _flip_below


def _calibrate(rounds=3):
    """Set flip_below() and, in "auto", kernel_below(), numpy_from() and one_row(), once per
    process (the first product that routes by them): from this machine's stored calibration (`_stored`) where one matches
    `_calibration_key`, else measured (`_measure`, about 0.5 s) and stored for the next
    process. HYBRIDBATCH_RECALIBRATE=1 measures (and stores) whatever is stored."""
    global _numpy_from, _one_row, _flip_below, _kernel_below
    with _measuring:
        if _flip_below is not None and (_numpy_from is not None or settings.blas != "auto"):
            return
        key = _calibration_key(rounds)
        name = _calibration_file(key)
        found = None if os.environ.get("HYBRIDBATCH_RECALIBRATE") == "1" else _stored(name, key)
        if found is None:
            log.info("timing host matrix products to route them (once per machine and BLAS setup, about 0.5 s)")
            found = _measure(rounds)
            _store(name, key, found)
        _flip_below = found["flip_below"]
        if "one_row" in found:
            _kernel_below, _numpy_from, _one_row = found["kernel_below"], found["numpy_from"], found["one_row"]


def _measure(rounds):
    """{"flip_below": ...} and, in "auto", "kernel_below", "numpy_from" and "one_row" too,
    each a tuple over the two layouts, measured on CALIBRATION_WEIGHT in both layouts (x @ W.T,
    a layer's forward; g @ W, its input gradient): for 1 and each of ROWS_TRIED rows, the best
    of `rounds` runs of each library (MKL packed), numpy's times counted NUMPY_MARGIN slower.
    The splits are those of least total time over the sizes, so that one noisy size seldom
    moves them."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal(CALIBRATION_WEIGHT, dtype=np.float32)
    found, routes = {}, []
    with packing():
        for weight in (w, w.T):
            xs = [rng.standard_normal((rows, weight.shape[0]), dtype=np.float32) for rows in (1,) + ROWS_TRIED]
            # a one-row product takes tens of microseconds: more rounds, and the first
            # product of the process (still warming up) is not the one that decides
            tries = [8 * rounds] + [rounds] * len(ROWS_TRIED)
            numpy = [_best(lambda: x @ weight, r) for x, r in zip(xs, tries)]
            if weight is not w:
                flipped = [_best(lambda: _flipped(x, weight), rounds) for x in xs[1:]]
                i = _cheapest_split(flipped, numpy[1:])
                found["flip_below"] = _row_bound(i)
                numpy[1:] = flipped[:i] + numpy[1 + i:]
            if settings.blas != "auto":
                continue
            kernel = [_best(lambda: few_rows.product(x, weight), r) for x, r in zip(xs, tries)]
            mkl = ([_best(lambda: _mkl_shared_product(x, weight), r) for x, r in zip(xs, tries)]
                   if _mkl is not None else [math.inf] * len(xs))
            routes.append(_routes(kernel, mkl, [t / NUMPY_MARGIN for t in numpy]))
    if routes:
        found.update(zip(("kernel_below", "numpy_from", "one_row"), (tuple(r) for r in zip(*routes))))
    return found


def _calibration_key(rounds):
    """Everything a calibration's result depends on, JSON-ready: the CPU (its model, and the
    target and features numba compiles the few-rows kernel for), the versions of numpy, numba
    and MKL, the BLAS numpy was built with, the cores this process may run on and the
    variables that set the libraries' threads and kernels (OMP_*, OPENBLAS_*, GOTO*, MKL_*,
    KMP_*), what is measured (the mode, the dtype, the sizes), and the code of this module,
    the kernel and its prefetch. As a stored one reads back from JSON (lists, not tuples),
    so the two compare."""
    from numba.core import config as numba_config
    from .vector_width import WIDE_VECTORS
    blas_build = getattr(np.__config__, "CONFIG", {}).get("Build Dependencies", {}).get("blas", {})
    code = hashlib.sha256()
    for module in (__file__, few_rows.__file__, prefetch.__file__):
        with open(module, "rb") as f:
            code.update(f.read())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    key = {"format": CALIBRATION_FORMAT,
           "cpu": [_cpu_model(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()],
           "numba_target": [numba_config.CPU_NAME, numba_config.CPU_FEATURES, bool(numba_config.ENABLE_AVX),
                            WIDE_VECTORS],
           "numpy": np.__version__, "numba": numba.__version__, "mkl": version(),
           "numpy_blas": [blas_build.get(k) for k in ("name", "version", "openblas configuration")],
           "cores": cores,
           "env": sorted((k, v) for k, v in os.environ.items() if k.startswith(THREAD_VARIABLES)),
           "measured": ["routes" if settings.blas == "auto" else "flip_below", "float32",
                        list(CALIBRATION_WEIGHT), list(ROWS_TRIED), NUMPY_MARGIN, rounds],
           "code": code.hexdigest()}
    return json.loads(json.dumps(key))


def _cpu_model():
    """The CPU's model name where the OS tells it (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _calibration_file(key):
    """The file name of the calibration for `key`, in the kernel cache folder: one per key, so
    that processes of different thread settings on one machine keep theirs apart."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return f"blas_calibration_{digest}.json"


def _stored(name, key):
    """The calibration stored as `name` for `key`, or None where there is none, or the file is
    unreadable, malformed or of another key (it is then measured and written again)."""
    from .fused import cache_dir
    try:
        with open(cache_dir() / name) as f:
            stored = json.load(f)
        if stored["key"] != key:
            return None
        found = stored["routes"]
        bounds = {0, 2 * ROWS_TRIED[-1], *ROWS_TRIED[1:]}
        ok = found["flip_below"] in bounds and (key["measured"][0] != "routes" or (
            all(len(found[k]) == 2 for k in ("kernel_below", "numpy_from", "one_row"))
            and all(r in bounds for r in found["kernel_below"])
            and all(r in bounds or r == math.inf for r in found["numpy_from"])
            and all(r in ("kernel", "mkl", "numpy") for r in found["one_row"])))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {k: tuple(v) if isinstance(v, list) else v for k, v in found.items()} if ok else None


def _store(name, key, found):
    """Write the calibration for the next process: to a temporary file, then renamed to
    `name`, so that a reader never sees half a file. Where the folder cannot be written it
    warns: every process then measures again."""
    from .fused import cache_dir
    temporary = None
    try:
        folder = cache_dir()
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"key": key, "routes": found}, f)
        os.replace(temporary, folder / name)
    except OSError as e:
        warnings.warn(f"cannot store the BLAS calibration ({e}); it is measured again in every process",
                      stacklevel=4)
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def _routes(kernel, mkl, numpy):
    """(kernel_below, numpy_from, one_row) for one layout from each library's times for 1
    and ROWS_TRIED rows: MKL below a split and numpy from it, at least total time (a gemm's
    routing); then the kernel below a second split, against whichever library the first
    split gives each size (a shared weight's product). Ties: MKL, then the kernel, take more
    sizes. One row: the fastest of the three."""
    one = min(zip((kernel[0], mkl[0], numpy[0]), ("kernel", "mkl", "numpy")), key=lambda c: c[0])[1]
    m = _cheapest_split(mkl[1:], numpy[1:])
    libraries = mkl[1:1 + m] + numpy[1 + m:]
    k = _cheapest_split(kernel[1:], libraries)
    return _row_bound(k), (math.inf if m == len(ROWS_TRIED) else _row_bound(m)), one


def _row_bound(i):
    """The row count a split before ROWS_TRIED[i] stands for: 0 before the first size (a
    choice that never won), twice the last after it."""
    return 0 if i == 0 else ROWS_TRIED[i] if i < len(ROWS_TRIED) else 2 * ROWS_TRIED[-1]


def _cheapest_split(below, above):
    """i minimizing sum(below[:i]) + sum(above[i:]) (the largest i on a tie): times per size
    of ROWS_TRIED for a choice made below row count ROWS_TRIED[i] and its alternative."""
    costs = [sum(below[:i]) + sum(above[i:]) for i in range(len(ROWS_TRIED) + 1)]
    return min(range(len(costs)), key=lambda i: (costs[i], -i))


def _best(product, rounds):
    """The shortest of `rounds` timed runs of product(), after two untimed ones (the second
    packs a weight)."""
    product()
    product()
    best = math.inf
    for _ in range(rounds):
        t0 = time.perf_counter()
        product()
        best = min(best, time.perf_counter() - t0)
    return best


def _library(b, rows):
    """MKL or None (numpy) for a product over `rows` batch rows by the right operand b (for
    a weight's gradient G^T X, the rows summed over) in the mode in use."""
    if _mkl is None or settings.blas != "auto" or b.ndim != 2:
        return _mkl if settings.blas == "mkl" else None
    layout = not b.flags.c_contiguous
    if rows == 1:
        return _mkl if (_one_row or one_row())[layout] == "mkl" else None
    return _mkl if rows < (_numpy_from or numpy_from())[layout] else None


def _kernel_takes(x, w):
    """Whether the few-rows kernel multiplies x (B, k) by the shared weight w in the mode in use:
    plain host arrays (not a subclass numba would not type) of one native float32/float64."""
    if settings.blas != "auto" or x.__class__ is not np.ndarray or w.__class__ is not np.ndarray:
        return False
    if (x.ndim != 2 or w.ndim != 2 or x.dtype != w.dtype or x.dtype.char not in "fd" or not x.dtype.isnative
            or x.shape[1] != w.shape[0]):
        return False
    pw = _operand(w)
    if pw is None:
        return False
    layout, rows = pw[1], x.shape[0]
    if rows == 1:
        return (_one_row or one_row())[layout] == "kernel"
    return 1 < rows < (_kernel_below or kernel_below())[layout]


def mkl_sums(rows):
    """Whether add_product(c, a, b) summing over `rows` rows (a C-ordered b) sums by MKL
    straight into c (beta=1), rather than by numpy's product and a += pass over c."""
    return _mkl is not None and settings.blas != "numpy" and rows < numpy_from()[0]


@contextlib.contextmanager
def packing():
    """Within: each shared weight is packed once, on its second product, and reused; arrays
    derived from weights (`scoped`) are made once."""
    outer = getattr(_state, "packed", None)
    if outer is None:
        _state.packed = {}
    try:
        yield
    finally:
        if outer is None:
            _state.packed = None


def scoped(a, tag, make):
    """make()'s array, made once per `packing()` scope for array `a` (a shared weight) and
    `tag`, and kept there with `a`: an array derived from a weight (a convolution's
    reordered weight) keeps one address through the scope, so MKL packs it as it packs the
    weight itself. Outside a scope, make() every time."""
    cache = getattr(_state, "packed", None)
    if cache is None:
        return make()
    key = (id(a), tag)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = (a, make())      # holding a keeps its id from being reused in the scope
    return hit[1]


@njit(cache=True)
def address(a):
    """a's data pointer: a fifth of the cost of `a.ctypes.data` (which builds a
    Python object per call; a Tree-LSTM training step reads some 300 of them)."""
    return a.ctypes.data


def _operand(a):
    """(array, transposed) with `array` C-contiguous and op(array) == a; None if neither is."""
    if a.flags.c_contiguous:
        return a, False
    if a.T.flags.c_contiguous:
        return a.T, True
    return None


def _usable(lib, a, b):
    """Whether MKL takes a @ b; mismatched shapes go to numpy, which raises (MKL would read
    past the smaller operand)."""
    dt = a.dtype
    return (lib is not None and dt in lib.gemm and
            all(isinstance(m, np.ndarray) and m.ndim == 2 and m.dtype == dt for m in (a, b)) and
            a.shape[1] == b.shape[0])


def gemm(a, b, library=None):
    """a @ b for 2-D arrays; transposed views (a.T) cost no copy. `library`: "mkl" or
    "numpy" for this product only (the benchmark's reference rate), else the mode's choice
    by the inner dimension: the rows a weight's gradient G^T X sums over."""
    lib = _library(b, a.shape[-1]) if library is None else {"mkl": _mkl, "numpy": None}[library]
    return _gemm(lib, a, b)


def add_product(c, a, b, accumulate=True):
    """c += a @ b in place, or with accumulate False c = a @ b, c's old numbers not read (a
    gradient Parameter.zero_grad left void); routed like `gemm`. With MKL one GEMM when c
    is a C-contiguous host array of the product's dtype: no product temporary and no second
    pass over c (a weight's gradient: 2.6 MB for a 1280 x 512 float32 one). c must not
    overlap a or b."""
    lib = _library(b, a.shape[1])
    ops = _mkl_operands(lib, a, b)
    if ops is not None and _accumulator(c, a, b):
        _call(lib, ops, a, b, 1.0 if accumulate else 0.0, c)
    elif accumulate:
        c += a @ b
    elif isinstance(c, np.ndarray) and c.dtype == np.result_type(a, b) and c.flags.c_contiguous:
        np.matmul(a, b, out=c)
    else:
        c[...] = a @ b


def _accumulator(c, a, b):
    """Whether MKL may write a @ b's sum straight into c."""
    return (isinstance(c, np.ndarray) and c.dtype == a.dtype and c.flags.c_contiguous and
            c.flags.writeable and c.shape == (a.shape[0], b.shape[1]))


def _mkl_operands(lib, a, b):
    """((a0, ta), (b0, tb)), a0 and b0 C-contiguous with a == a0.T if ta (b likewise), when
    MKL takes a @ b; None when numpy must."""
    if not _usable(lib, a, b) or 0 in a.shape or b.shape[1] == 0:
        return None
    pa, pb = _operand(a), _operand(b)
    return None if pa is None or pb is None else (pa, pb)


def _call(lib, ops, a, b, beta, c):
    """c = a @ b + beta * c by MKL, c C-contiguous (a.shape[0], b.shape[1])."""
    (a0, ta), (b0, tb) = ops
    m, k = a.shape
    n = b.shape[1]
    lib.gemm[a.dtype](ROW_MAJOR, TRANS if ta else NO_TRANS, TRANS if tb else NO_TRANS, m, n, k, 1.0,
                      address(a0), a0.shape[1], address(b0), b0.shape[1], beta, address(c), n)


def _gemm(lib, a, b):
    ops = _mkl_operands(lib, a, b)
    if ops is None:
        return a @ b
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    _call(lib, ops, a, b, 0.0, out)
    return out


def _packed(w0, transposed):
    """The packed form of op(w0) in this packing() scope, or None on the weight's first
    product: a weight used once (a leaf layer) is not worth its packing (~1 ms for 1280 x 512).

    MKL is told PACK_ROWS rows whatever the batch: packed for a batch of under 16 rows (a
    tree's top levels, where backward starts), its form runs every later product of 32-400
    rows at about 60% of the speed of one packed for 128 rows or more, while batches of 2-8
    rows run as fast either way (Tree-LSTM training step, four in-process A/Bs: 0.949, 0.958,
    0.966, 0.989).
    """
    cache = _state.packed
    key = (address(w0), w0.shape, w0.dtype.char, transposed)
    hit = cache.get(key)
    if hit is None:
        cache[key] = (w0, None)     # holding w0 keeps its address from being reused in the scope
        return None
    if hit[1] is not None:
        return hit[1]
    dt = w0.dtype
    k, n = (w0.shape[1], w0.shape[0]) if transposed else w0.shape
    buf = np.empty(_mkl.pack_size[dt](B_MATRIX, PACK_ROWS, n, k) // dt.itemsize + 1, dt)
    _mkl.pack[dt](ROW_MAJOR, B_MATRIX, TRANS if transposed else NO_TRANS, PACK_ROWS, n, k, 1.0,
                  address(w0), w0.shape[1], address(buf))
    cache[key] = (w0, buf)
    return buf


def shared_product(x, w):
    """x @ w where w (k, n) is a shared weight and x (B, k) a batch of rows: (B, n), rows in order.

    Few rows go to the few-rows kernel (`kernel_below()`). Inside `packing()` with MKL, w is
    packed once per scope (from its second product on). A weight of fewer than SMALL_WEIGHT
    elements (a 5-class output layer) goes to numpy: MKL's call costs 15-30 us where numpy's
    takes 3-9 for up to 64 rows.
    """
    if w.shape[0] * w.shape[1] < SMALL_WEIGHT and isinstance(x, np.ndarray):
        return x @ w
    if _kernel_takes(x, w):
        return few_rows.product(x, w)
    if not _usable(_library(w, x.shape[0]), x, w) or 0 in x.shape or w.shape[1] == 0:
        return _numpy_product(x, w)
    return _mkl_shared_product(x, w)


def _numpy_product(x, w):
    """x @ w by numpy's BLAS; with a transposed weight (a layer's forward, x @ W.T) on fewer
    than flip_below() rows as (W x^T)^T, read back to rows."""
    if (x.shape[0] < (_flip_below if _flip_below is not None else flip_below()) and isinstance(x, np.ndarray)
            and w.T.flags.c_contiguous and not w.flags.c_contiguous):
        return _flipped(x, w)
    return x @ w


def _flipped(x, w):
    return np.ascontiguousarray((w.T @ x.T).T)


def _mkl_shared_product(x, w):
    """shared_product by MKL (x and w usable by it): packed inside `packing()`."""
    pw = _operand(w)
    if getattr(_state, "packed", None) is None or pw is None:
        return _gemm(_mkl, x, w)
    x = np.ascontiguousarray(x)
    B, k = x.shape
    n = w.shape[1]
    buf = _packed(pw[0], pw[1])
    if buf is None:
        return _gemm(_mkl, x, w)
    out = np.empty((B, n), x.dtype)
    _mkl.compute[x.dtype](ROW_MAJOR, NO_TRANS, PACKED, B, n, k, address(x), k, address(buf), n,
                          0.0, address(out), n)
    return out


_initial_mode = _mode()
_mkl = _load(_initial_mode)
settings.blas = "auto" if _initial_mode == "mkl" and _mkl is None else _initial_mode
_kernel_below = None    # "auto": kernel_below()'s measured row counts
_numpy_from = None  # "auto": numpy_from()'s measured row counts
_one_row = None     # "auto": one_row()'s measured choices
_flip_below = None  # flip_below()'s measured row count
_measuring = threading.Lock()
_state = threading.local()
