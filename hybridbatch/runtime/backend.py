"""Where arrays live: the array module (`xp`) every kernel is written against.

numpy is the default; `use("cupy")` switches to the GPU when cupy and a device are present.
Kernels receive `xp` explicitly, so one implementation serves both.
"""
import numpy as np

_xp = np


def xp():
    """The array module in use (numpy or cupy)."""
    return _xp


def use(name: str) -> None:
    """Select the array module: "numpy" or "cupy"."""
    global _xp
    if name == "numpy":
        _xp = np
    elif name == "cupy":
        try:
            import cupy
            cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # ImportError, or CUDA errors without a device
            raise RuntimeError(f"cupy backend unavailable: {e}") from e
        _xp = cupy
    else:
        raise ValueError(f"unknown backend {name!r}; expected 'numpy' or 'cupy'")


def gpu_available() -> bool:
    """True when cupy imports and sees at least one CUDA device."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def to_numpy(a):
    """A host (numpy) copy of an array from either backend."""
    if isinstance(a, (np.ndarray, np.generic)):
        return np.asarray(a)
    return a.get()


def to_array(value):
    """A new array on the current backend; Python numbers and lists become float32 when real.

    Always a copy: a recorded value is read at a later flush (and eager reverse mode reads
    its inputs again), so a caller reusing its buffer (`h *= 0.5`) must not change it."""
    is_array = hasattr(value, "dtype") and hasattr(value, "shape")
    out = _xp.array(value, copy=True) if is_array else np.asarray(value)
    if out.dtype.kind in "OUSVMm":    # None, strings, objects, dates: numpy holds them, no kernel takes them
        raise TypeError(f"{type(value).__name__} {value!r:.60} is not a value: an operand must be a Future, "
                        f"Tensor, Parameter, number or numeric array")
    if is_array:
        return out
    if out.dtype.kind == "f":
        out = out.astype(np.float32)
    return _xp.asarray(out)
