"""Trainable parameters and their initializers.

A Parameter is shared by every instance in a batch: ops that take one get a shared-parameter
signature (DyNet App. A), so all their calls batch into one kernel over the stacked instances.
"""
import itertools
import math
import operator
import sys
import threading
import weakref

import numpy as np

from ..runtime import backend
from ..errors import HybridBatchError
from ..kernels.scatter import add_outer, scatter_add_rows

_ids = itertools.count()
GRAD_REQS = ("write", "null")
_ASK = object()     # zero_grad: compute the rows to clear
_UNHELD = 2         # sys.getrefcount of a gradient array only its Parameter holds (and the call's argument)
# backward() may run on several threads at once (each scope's own): an add reads the void
# flag, then writes the gradient with the GIL released (BLAS); unguarded, two adds into a void
# gradient both wrote it and one thread's part was lost. Locks by pid, not one per Parameter:
# a Parameter stays copyable and picklable (deepcopy of a model).
_GRAD_LOCKS = tuple(threading.Lock() for _ in range(64))
_live = {}     # pid -> weak reference to the Parameter, dropped when it dies: by_id is read per
              # batch and step, and a dict's lookup is C (0.07 us, a WeakValueDictionary's 0.25)


def by_id(pid: int) -> "Parameter":
    """The live Parameter with this id (signatures refer to parameters by id). A traced block
    program refers to its parameters by id only, so one replaced after tracing may be gone."""
    ref = _live.get(pid)
    p = ref() if ref is not None else None
    if p is None:
        raise HybridBatchError(f"parameter #{pid} no longer exists but a traced block still uses it: was a "
                               f"Parameter of a hybridized block replaced after its first call? Assign "
                               f"parameters before the first call, or make a new block")
    return p


def _fan(shape):
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


class Initializer:
    """Callable (shape, dtype, rng) -> numpy array."""

    def __call__(self, shape, dtype, rng):
        raise NotImplementedError


class Zeros(Initializer):
    def __call__(self, shape, dtype, rng):
        return np.zeros(shape, dtype)


class Constant(Initializer):
    def __init__(self, value):
        self.value = value

    def __call__(self, shape, dtype, rng):
        return np.full(shape, self.value, dtype)


class Uniform(Initializer):
    def __init__(self, scale=0.07):
        self.scale = scale

    def __call__(self, shape, dtype, rng):
        return rng.uniform(-self.scale, self.scale, shape).astype(dtype)


class Normal(Initializer):
    def __init__(self, sigma=0.01):
        self.sigma = sigma

    def __call__(self, shape, dtype, rng):
        return (rng.standard_normal(shape) * self.sigma).astype(dtype)


class Xavier(Initializer):
    """Glorot uniform: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""

    def __init__(self, gain=1.0):
        self.gain = gain

    def __call__(self, shape, dtype, rng):
        fan_in, fan_out = _fan(shape)
        a = self.gain * math.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-a, a, shape).astype(dtype)


_INITS = {"zeros": Zeros, "uniform": Uniform, "normal": Normal, "xavier": Xavier, "glorot": Xavier}


def initializer(spec) -> Initializer:
    """An Initializer from a name ("xavier", "zeros", ...), a number (constant) or an instance."""
    if isinstance(spec, Initializer):
        return spec
    if isinstance(spec, (int, float)):
        return Constant(spec)
    try:
        return _INITS[spec]()
    except KeyError:
        raise ValueError(f"unknown initializer {spec!r}; expected one of {sorted(_INITS)}") from None


def _shape(name, shape):
    """shape as a tuple of ints >= 0, or a TypeError/ValueError: int() would read 2.5 as 2."""
    try:
        dims = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"parameter {name!r}: shape {shape!r} must hold integers") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"parameter {name!r}: shape {shape!r} must hold integers >= 0")
    return dims


def cast_checked(value, dtype, xp=np):
    """(value as a new array of dtype, None), or (None, why it cannot be): another kind (a
    float into an integer parameter truncates, complex into float drops), a finite float
    that overflows to inf, or an integer outside the integer dtype's range (astype wraps)."""
    value = xp.asarray(value)
    if not np.can_cast(value.dtype, dtype, casting="same_kind"):
        return None, f"{value.dtype} values cannot become {dtype}"
    with np.errstate(over="ignore", invalid="ignore"):
        cast = xp.array(value, dtype=dtype, copy=True)
    if dtype.kind == "f" and value.dtype.kind in "fiu" and (xp.isfinite(value) & ~xp.isfinite(cast)).any():
        return None, f"holds values beyond {dtype}'s range"
    if dtype.kind in "iu" and value.dtype.kind in "iu":
        info = np.iinfo(dtype)
        if ((value < info.min) | (value > info.max)).any():
            return None, f"holds values beyond {dtype}'s range"
    return cast, None


class Parameter:
    """A named trainable array with its gradient.

    `data` keeps its shape for life (signatures that name this parameter assume it);
    `grad` accumulates over backward calls until a Trainer step or `zero_grad()` clears it.
    grad_req defaults to "write" for floating-point dtypes and "null" (no gradient) for
    integers and bools, as a derivative there is not defined.

    Row tracking: while every gradient added since the last zero came as rows (an embedding
    lookup's), the parameter knows which rows are non-zero, so clearing and the update of
    a 20k-word embedding touch only the rows a minibatch used. Any dense addition, and any
    read of `.grad` from outside (the caller may write anywhere in it), turns tracking off
    until the next zero_grad().

    >>> w = hb.Parameter("w", (2, 3), init="zeros")
    >>> w
    Parameter('w', shape=(2, 3), dtype=float32)
    >>> hb.sum(w @ hb.array([1.0, 2.0, 3.0])).backward()
    >>> w.grad
    array([[1., 2., 3.],
           [1., 2., 3.]], dtype=float32)
    >>> w.zero_grad()
    """

    def __init__(self, name, shape, init="xavier", dtype=np.float32, rng=None, grad_req=None):
        self.name = name
        self.shape = _shape(name, shape)
        self.dtype = np.dtype(dtype)
        self.pid = next(_ids)
        rng = rng if rng is not None else np.random.default_rng(self.pid)
        value = initializer(init)(self.shape, self.dtype, rng)
        if np.shape(value) != self.shape:       # a wrong shape would broadcast silently in ops
            raise ValueError(f"parameter {name!r}: initializer {init!r} made shape {np.shape(value)}, "
                             f"not {self.shape}")
        self._data = backend.xp().asarray(value, dtype=self.dtype)
        self._grad = backend.xp().zeros(self.shape, self.dtype)
        self._grad_void = True     # True: _grad's numbers are not the gradient, which is zero,
        self._grad_factors = None  # or G^T X of these (G, X) (add_grad_outer): never with void False
        self._grad_rows = []       # row-index arrays added since the last zero; None: dense
        self.keep_grad_factors = False     # set by a Trainer whose step adds factors into the weight
        self.version = 0    # counts the changes of data (assigned, or a Trainer's step): backward checks it
        # validated by the property below; a parameter of integers or bools has no gradient
        self.grad_req = grad_req if grad_req is not None else "write" if self.dtype.kind in "fc" else "null"
        _live[self.pid] = weakref.ref(self, lambda _, pid=self.pid: _live.pop(pid, None))

    @property
    def grad_req(self):
        """"write" (trained) or "null" (frozen: no gradient is kept, a Trainer skips it)."""
        return self._grad_req

    @grad_req.setter
    def grad_req(self, value):
        if value not in GRAD_REQS:      # a typo ("nul") would otherwise train the parameter
            raise ValueError(f"parameter {self.name!r}: grad_req must be one of {GRAD_REQS}, not {value!r}")
        if value != "null" and self.dtype.kind not in "fc":   # an update would fail casting into it
            raise ValueError(f"parameter {self.name!r} holds {self.dtype}: only floating-point parameters "
                             f"have gradients (grad_req must be 'null')")
        if value == "null":             # a gradient kept from before would be applied after unfreezing
            self.zero_grad()
        self._grad_req = value

    @property
    def data(self):
        """The values, an array of the backend. Assigning copies the value; its shape must
        match, and values the dtype cannot hold raise ValueError."""
        return self._data

    @data.setter
    def data(self, value):
        cast, problem = cast_checked(value, self.dtype, backend.xp())   # a copy: never the caller's array
        if problem is not None:
            raise ValueError(f"parameter {self.name!r}: {problem}")
        if cast.shape != self.shape:
            raise ValueError(f"parameter {self.name!r} has shape {self.shape}; cannot set data of shape {cast.shape}")
        self._data = cast
        self.version += 1

    def set_data(self, value):
        """`p.data = value`, as a method."""
        self.data = value

    def __array__(self, dtype=None, copy=None):
        """np.asarray(W): a copy of its numbers, as for a computed value (without it numpy
        made an object array holding the Parameter)."""
        return np.array(backend.to_numpy(self._data), dtype=dtype, copy=True)

    @property
    def grad(self):
        """The gradient added up since the last step or zero_grad(). Reading it turns row
        tracking off, since the caller may write anywhere in it; peek_grad() does not."""
        self._grad_rows = None
        return self._grad_array()

    @grad.setter
    def grad(self, value):       # `p.grad *= s` assigns the same array back
        if value is not self._grad:
            value = backend.xp().asarray(value, dtype=self.dtype)
            if value.shape != self.shape:
                raise ValueError(f"parameter {self.name!r} has shape {self.shape}; cannot set a gradient "
                                 f"of shape {value.shape}")
            self._grad[...] = value
        self._grad_void = False
        self._grad_factors = None
        self._grad_rows = None

    def peek_grad(self):
        """grad for reading only: row tracking stays on, so a write would escape the row
        update and its clearing; on numpy the array is a read-only view."""
        grad = self._grad_array()
        if isinstance(grad, np.ndarray):
            grad = grad.view()
            grad.flags.writeable = False
        return grad

    def _grad_array(self):
        """_grad holding the gradient: its factors multiplied out, or zeros written, where
        add_grad_outer or zero_grad left it void."""
        if self._grad_void:
            if self._grad_factors is None:
                self._grad[...] = 0
            else:
                left, right = self._grad_factors
                self._grad_factors = None
                add_outer(self._grad, left, right, void=True)
            self._grad_void = False
        return self._grad

    @property
    def _grad_lock(self):
        return _GRAD_LOCKS[self.pid % len(_GRAD_LOCKS)]

    def add_grad(self, g):
        """grad += g (dense)."""
        with self._grad_lock:
            if self._grad_void and self._grad_factors is None:
                self._grad[...] = g
                self._grad_void = False
            else:
                self._grad_array()[...] += g
            self._grad_rows = None

    def add_grad_rows(self, rows, values):
        """grad[rows[k]] += values[k], rows may repeat."""
        with self._grad_lock:
            scatter_add_rows(self._grad_array(), rows, values)
            if self._grad_rows is not None:
                self._grad_rows.append(rows)
                if len(self._grad_rows) > 32:     # many backward calls without a step: compact
                    merged = self.grad_rows()
                    # past half the table, the dense update is as cheap: stop tracking
                    self._grad_rows = [merged] if 2 * len(merged) < self.shape[0] else None

    def add_grad_outer(self, left, right):
        """grad += left^T @ right (add_outer: a loop for few rows, a GEMM into grad for many;
        written, not added, where the gradient is void). With keep_grad_factors (a plain-SGD
        Trainer sets it on its parameters), a product of few rows into a void gradient (G
        and X far smaller than grad) is kept as copies of its factors instead: the step then
        adds it straight into the weight (descend_outer), one pass over the weight in place
        of writing the gradient and reading it back; anything else multiplies it out first.
        Other rules read the gradient, so for them the copies would be work for nothing."""
        with self._grad_lock:
            self._grad_rows = None
            void = self._grad_void and self._grad_factors is None
            if void and self.keep_grad_factors and self._few_rows(left):
                # G kept as its transpose, C-ordered: the layout add_outer's loop reads
                self._grad_factors = (np.array(left.T, self.dtype, order="C").T,
                                      right.astype(self.dtype, copy=True))
                return
            add_outer(self._grad if void else self._grad_array(), left, right, void=void)
            self._grad_void = False

    def _few_rows(self, left):
        """Whether a product over left's rows is worth keeping as factors: a host weight
        whose gradient holds 4x more numbers than both factors together."""
        if len(self.shape) != 2 or not isinstance(self._data, np.ndarray):
            return False
        m, n = self.shape
        return 4 * left.shape[0] * (m + n) <= m * n

    def descend_outer(self, coef):
        """data -= coef * grad where the gradient is still its factors (add_grad_outer), by
        scatter.add_outer: one pass over data up to its FEW_ROWS rows, a GEMM summing into
        data above; then zero_grad. False, having done nothing, otherwise."""
        if self._grad_factors is None:
            return False
        left, right = self._grad_factors
        add_outer(self._data, left, right, scale=-coef)
        self.zero_grad(None)
        return True

    def grad_rows(self):
        """The sorted rows where grad may be non-zero, or None when that is not known."""
        rows = self._grad_rows
        if rows is None:
            return None
        xp = backend.xp()
        if not rows:
            return xp.zeros(0, np.int64)
        # sorting and dropping repeats: xp.unique's hashing costs ~7x more on a minibatch's rows
        rows = xp.sort(xp.concatenate([xp.asarray(r).ravel() for r in rows]))
        first = xp.ones(len(rows), bool)
        first[1:] = rows[1:] != rows[:-1]
        return rows[first]

    def zero_grad(self, rows=_ASK):
        """Clear grad. rows: what grad_rows() just returned, when the caller has it. Cleared
        everywhere while nothing outside holds the gradient's array (a view of it counts),
        the gradient is marked void rather than written: the next weight GEMM writes into
        it without reading its old numbers, and a reader gets zeros first. A step thus
        saves a pass over each dense gradient; an array a caller kept is cleared in place,
        so it never shows stale numbers."""
        if rows is _ASK:
            rows = self.grad_rows()
        if rows is not None and self._grad_factors is not None:
            self._grad_array()          # the product holds numbers outside those rows
        self._grad_factors = None
        if rows is None:
            if sys.getrefcount(self._grad) <= _UNHELD:
                self._grad_void = True
            else:
                self._grad[...] = 0
        elif len(rows) and not self._grad_void:     # a void gradient is zero already
            self._grad[rows] = 0
        self.grad_zeroed()

    def grad_zeroed(self):
        """Restart row tracking once grad was zeroed wherever grad_rows() said: by zero_grad,
        or by an update that clears the gradient in the pass that reads it."""
        self._grad_rows = []

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    def __repr__(self):
        return f"Parameter({self.name!r}, shape={self.shape}, dtype={self.dtype.name})"
