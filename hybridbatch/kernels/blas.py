"""Host matrix products: MKL when it is installed (through ctypes), numpy's BLAS otherwise.

Why not numpy alone: a recursive model multiplies the same weight by one small block of rows
per tree level. numpy's OpenBLAS packs the whole weight (2.6 MB for W1's U) again on every
call, so levels of fewer than 128 rows run at 13-67 GFLOP/s on this project's machine. MKL's
packed GEMM (`cblas_sgemm_pack` + `cblas_sgemm_compute`) packs a weight once and reuses it:
inside `packing()` (one forward run, one backward run) a shared weight is packed on its
second product and dropped at the end, so nothing stale survives a parameter update.

`use("numpy")` or HYBRIDBATCH_BLAS=numpy turns MKL off. MKL follows MKL_NUM_THREADS; when
that (or OMP_NUM_THREADS) is 1 its sequential layer is loaded, so no OpenMP runtime joins
the process. Only float32/float64 C- or Fortran-ordered operands on the host go to MKL; anything else
(cupy arrays, other dtypes, odd strides) is numpy's.
"""
import contextlib
import ctypes
import ctypes.util
import os
import threading
import warnings

import numpy as np
from numba import njit

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
B_MATRIX, PACKED = 162, 151
THREADING_SEQUENTIAL = 1
INTERFACE_LP64 = 0
SMALL_WEIGHT = 4096     # elements: smaller shared weights are multiplied by numpy (shared_product)
PACK_ROWS = 1024        # the batch rows MKL is told when it packs a weight (see _packed)


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


def _load():
    choice = os.environ.get("HYBRIDBATCH_BLAS", "").lower()
    if choice == "numpy":
        return None
    if choice not in ("", "mkl"):
        warnings.warn(f"HYBRIDBATCH_BLAS={choice!r} is neither 'numpy' nor 'mkl'; using MKL where it is "
                      f"available", stacklevel=2)
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


def name():
    """"mkl" or "numpy": the library host products go to."""
    return "mkl" if _active is not None else "numpy"


def available():
    """Whether MKL was found and loaded."""
    return _mkl is not None


def version():
    """MKL's version string, or None when it is not loaded."""
    return _mkl.version if _mkl is not None else None


def use(which):
    """Send host products to "mkl" (when available) or "numpy"."""
    global _active
    if which == "numpy":
        _active = None
    elif which == "mkl":
        if _mkl is None:
            raise RuntimeError("MKL is not available: install the `mkl` package (pip install 'hybridbatch[mkl]'), "
                               "and do not set HYBRIDBATCH_BLAS=numpy")
        _active = _mkl
    else:
        raise ValueError(f"unknown BLAS {which!r}; expected 'mkl' or 'numpy'")


@contextlib.contextmanager
def packing():
    """Within: each shared weight is packed once, on its second product, and reused."""
    outer = getattr(_state, "packed", None)
    if outer is None:
        _state.packed = {}
    try:
        yield
    finally:
        if outer is None:
            _state.packed = None


@njit(cache=True)
def address(a):
    """a's data pointer: a fifth of the cost of `a.ctypes.data` (which builds a
    Python object per call; a W1 step reads some 300 of them)."""
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
    "numpy" for this product only (the benchmark's reference rate), else the one in use."""
    return _gemm(_active if library is None else {"mkl": _mkl, "numpy": None}[library], a, b)


def add_product(c, a, b):
    """c += a @ b in place. With MKL one GEMM with beta=1 when c is a C-contiguous host
    array of the product's dtype: no product temporary and no second pass over c (a
    weight's gradient: 2.6 MB for W1's U). c must not overlap a or b."""
    ops = _mkl_operands(_active, a, b)
    if ops is None or not _accumulator(c, a, b):
        c += a @ b
    else:
        _call(_active, ops, a, b, 1.0, c)


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
    product: a weight used once (a leaf layer) is not worth its packing (~1 ms for W1's U).

    MKL is told PACK_ROWS rows whatever the batch: packed for a batch of under 16 rows (a
    tree's top levels, where backward starts), its form runs every later product of 32-400
    rows at about 60% of the speed of one packed for 128 rows or more, while batches of 2-8
    rows run as fast either way (W1 step, four in-process A/Bs: 0.949, 0.958, 0.966, 0.989).
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
    buf = np.empty(_active.pack_size[dt](B_MATRIX, PACK_ROWS, n, k) // dt.itemsize + 1, dt)
    _active.pack[dt](ROW_MAJOR, B_MATRIX, TRANS if transposed else NO_TRANS, PACK_ROWS, n, k, 1.0,
                     address(w0), w0.shape[1], address(buf))
    cache[key] = (w0, buf)
    return buf


def shared_product(x, w):
    """x @ w where w (k, n) is a shared weight and x (B, k) a batch of rows: (B, n), rows in order.

    Inside `packing()` with MKL, w is packed once per scope (from its second product on). With numpy, small batches take
    W^T X^T read back transposed (OpenBLAS is up to 2x faster that way below 64 rows).
    A weight of fewer than SMALL_WEIGHT elements (a 5-class output layer) goes to numpy:
    MKL's call costs 15-30 us where numpy's takes 3-9 for up to 64 rows.
    """
    if w.shape[0] * w.shape[1] < SMALL_WEIGHT and isinstance(x, np.ndarray):
        return x @ w
    if not _usable(_active, x, w) or 0 in x.shape or w.shape[1] == 0:
        if x.shape[0] >= 64 or not isinstance(x, np.ndarray):
            return x @ w
        return np.ascontiguousarray((w.T @ x.T).T)
    pw = _operand(w)
    if getattr(_state, "packed", None) is None or pw is None:
        return gemm(x, w)
    x = np.ascontiguousarray(x)
    B, k = x.shape
    n = w.shape[1]
    buf = _packed(pw[0], pw[1])
    if buf is None:
        return gemm(x, w)
    out = np.empty((B, n), x.dtype)
    _active.compute[x.dtype](ROW_MAJOR, NO_TRANS, PACKED, B, n, k, address(x), k, address(buf), n,
                             0.0, address(out), n)
    return out


_mkl = _load()
_active = _mkl
_state = threading.local()
