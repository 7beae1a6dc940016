"""Training: `Trainer` applies an update rule to Parameters from their accumulated gradients.

    trainer = hb.Trainer(params, "adam", {"learning_rate": 1e-3, "clip_global_norm": 5.0})
    for minibatch in data:
        with hb.batching():
            loss = hb.add_n([model(x) for x in minibatch])
            loss.backward()
        trainer.step(len(minibatch))

The gradient rule (Gluon's): `backward()` *adds* into `Parameter.grad`, in eager mode and
in batching scopes alike, so several backward calls before a step sum their gradients.
`step(batch_size)` consumes them: it scales them by 1/batch_size, clips them (optionally),
updates every parameter, and then zeroes every gradient it used. Gradients therefore never
leak from one step into the next, and no `zero_grad()` is needed between steps; call
`trainer.zero_grad()` only to discard gradients without stepping.

Updates are in place on `param.data` and `param.grad`, with the backend's array module.
When a gradient is known to live in a few rows (embedding lookups) and the rule leaves
zero-gradient rows unchanged (`Optimizer.rows_only`: plain SGD), only those rows are
updated and cleared: the same result as the dense update, without passes over the table.
Plain SGD on numpy float32/float64 arrays updates and clears in one compiled pass
(kernels/update.py), dense or by rows.
"""
import math
import numbers

import numpy as np

from ..errors import NumericsError
from .parameter import Parameter
from .parameter_dict import ParameterDict
from ..kernels.update import descend_and_clear
from ..runtime import backend

__all__ = ["Trainer", "Optimizer", "SGD", "Adam", "Adagrad", "OPTIMIZERS"]


class _Option:
    """A numeric optimizer option, validated by _number on every assignment."""

    def __init__(self, **limits):
        self.limits = limits

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        return self if obj is None else obj.__dict__[self.name]

    def __set__(self, obj, value):
        obj.__dict__[self.name] = _number(self.name, value, **self.limits)


def _number(name, value, low=None, high=None, low_open=False, high_open=False):
    """`value` as a float, or a ValueError naming the option and its allowed range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"option {name!r} must be a real number, not {type(value).__name__}")
    value = float(value)
    ok = math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        lo = "-inf" if low is None else f"{low}"
        hi = "inf" if high is None else f"{high}"
        rng = ("(" if low_open or low is None else "[") + f"{lo}, {hi}" + (")" if high_open or high is None else "]")
        raise ValueError(f"option {name!r} must be in {rng}, not {value!r}")
    return value


class Optimizer:
    """An update rule. Subclasses list their options (with defaults) in `defaults`, implement
    `create_state(param)` (per-parameter state, e.g. moments) and `update(weight, grad, state,
    scale)`, which changes `weight` in place by the gradient scale * grad: the Trainer's
    1/batch_size and clipping factor come apart, so a rule can fold them into a coefficient
    instead of making a pass over grad. `update` may use grad as scratch space (`apply`
    zeroes it afterwards)."""

    name = "optimizer"
    defaults: dict = {"learning_rate": 0.01, "wd": 0.0}

    def __init__(self, **options):
        unknown = sorted(set(options) - set(self.defaults))
        if unknown:
            raise ValueError(f"unknown option(s) {unknown} for optimizer {self.name!r}; "
                             f"it takes {sorted(self.defaults)} (and the Trainer takes 'clip_global_norm')")
        for key, default in self.defaults.items():
            setattr(self, key, options.get(key, default))

    # validated attributes shared by every rule
    learning_rate = _Option(low=0.0)

    wd = _Option(low=0.0)

    def create_state(self, param):
        return None

    def update(self, weight, grad, state, scale=1.0):
        raise NotImplementedError

    def apply(self, param, state, scale, rows=None):
        """Update param.data by scale * its gradient, then zero the gradient: everywhere, or
        only in `rows` (what grad_rows() gave, where rows_only(state) says that is the same)."""
        weight, grad = param.data, param.peek_grad()
        if rows is None:
            self.update(weight, grad, state, scale)
        elif len(rows):
            w, g = weight[rows], grad[rows]
            self.update(w, g, state, scale)
            weight[rows] = w
        param.zero_grad(rows)

    def rows_only(self, state):
        """Whether updating only the rows that have a gradient equals the dense update, i.e.
        a zero gradient leaves a row unchanged (no decay, no momentum, no moments)."""
        return False

    def _decayed(self, weight, grad, scale):
        """(g, s) with s * g = scale * grad + wd * weight (L2 weight decay, as MXNet's
        optimizers do), in place in grad. Without decay the scale stays apart for the rule to
        fold into a coefficient; with it, it is applied first, as the decay must not be scaled."""
        if not self.wd:
            return grad, scale
        if scale != 1.0:
            grad *= scale
        grad += self.wd * weight
        return grad, 1.0

    def _gradient(self, weight, grad, scale):
        """scale * grad + wd * weight, in place in grad, for rules that square the gradient
        (squared unscaled, a large float32 sum could overflow)."""
        g, s = self._decayed(weight, grad, scale)
        if s != 1.0:
            g *= s
        return g

    def __repr__(self):
        opts = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.defaults)
        return f"{type(self).__name__}({opts})"


class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum (MXNet's form):

        g = grad + wd * w
        mom = momentum * mom - lr * g;  w += mom      (momentum > 0)
        w -= lr * g                                   (momentum == 0)
    """

    name = "sgd"
    defaults = {"learning_rate": 0.01, "momentum": 0.0, "wd": 0.0}

    momentum = _Option(low=0.0, high=1.0, high_open=True)

    def create_state(self, param):
        # the momentum buffer is made on first use, so momentum may be turned on later
        return {"mom": None}

    def rows_only(self, state):
        return not self.wd and not self.momentum and state["mom"] is None

    def update(self, weight, grad, state, scale=1.0):
        g, s = self._decayed(weight, grad, scale)
        mom = state["mom"]
        if not self.momentum and mom is None:
            g *= self.learning_rate * s     # in place: the gradient is spent after its update (no temporary)
            weight -= g
            return
        if mom is None:
            mom = state["mom"] = backend.xp().zeros_like(weight)
        mom *= self.momentum
        mom -= (self.learning_rate * s) * g
        weight += mom

    def apply(self, param, state, scale, rows=None):
        """Plain SGD is one compiled pass that also clears the gradient, where numpy makes three."""
        if self.rows_only(state) and descend_and_clear(param.data, param.peek_grad(),
                                                       self.learning_rate * scale, rows):
            param.grad_zeroed()
        else:
            super().apply(param, state, scale, rows)


def _state_dtype(param):
    """float32 for a float16 parameter's moments: see _in_float32."""
    return np.float32 if param.dtype == np.float16 else param.dtype


def _in_float32(update):
    """The rule run in float32 on a float16 weight, written back rounded. In float16,
    epsilon (1e-8, 1e-7) vanishes next to the denominator and (1 - beta2) * g**2 underflows
    to 0, so an element with a zero or tiny gradient got 0 / 0 = NaN or x / 0 = inf."""
    def run(self, weight, grad, state, scale=1.0):
        if weight.dtype != np.float16:
            return update(self, weight, grad, state, scale)
        wide = weight.astype(np.float32)
        update(self, wide, grad.astype(np.float32), state, scale)
        weight[...] = wide
    run.__doc__ = update.__doc__
    return run


class Adam(Optimizer):
    """Adam (Kingma & Ba, Algorithm 1), with bias-corrected moments; t counts this
    parameter's updates:

        g = grad + wd * w
        m = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g**2
        w -= lr * (m / (1 - beta1**t)) / (sqrt(v / (1 - beta2**t)) + epsilon)
    """

    name = "adam"
    defaults = {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "wd": 0.0}

    beta1 = _Option(low=0.0, high=1.0, high_open=True)

    beta2 = _Option(low=0.0, high=1.0, high_open=True)

    epsilon = _Option(low=0.0, low_open=True)

    def create_state(self, param):
        xp = backend.xp()
        dtype = _state_dtype(param)
        return {"t": 0, "m": xp.zeros(param.shape, dtype), "v": xp.zeros(param.shape, dtype)}

    @_in_float32
    def update(self, weight, grad, state, scale=1.0):
        xp = backend.xp()
        g = self._gradient(weight, grad, scale)
        state["t"] += 1
        t, m, v = state["t"], state["m"], state["v"]
        m *= self.beta1
        m += (1.0 - self.beta1) * g
        v *= self.beta2
        g *= g                                   # grad is scratch from here on
        v += (1.0 - self.beta2) * g
        denom = xp.sqrt(v / (1.0 - self.beta2 ** t))
        denom += self.epsilon
        weight -= (self.learning_rate / (1.0 - self.beta1 ** t)) * m / denom


class Adagrad(Optimizer):
    """AdaGrad (Duchi et al.), as MXNet writes it:

        g = grad + wd * w;  history += g**2;  w -= lr * g / (sqrt(history) + epsilon)
    """

    name = "adagrad"
    defaults = {"learning_rate": 0.01, "epsilon": 1e-7, "wd": 0.0}

    epsilon = _Option(low=0.0, low_open=True)

    def create_state(self, param):
        return backend.xp().zeros(param.shape, _state_dtype(param))

    @_in_float32
    def update(self, weight, grad, state, scale=1.0):
        xp = backend.xp()
        g = self._gradient(weight, grad, scale)
        state += g * g
        denom = xp.sqrt(state)
        denom += self.epsilon
        weight -= self.learning_rate * g / denom


OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adagrad": Adagrad}


def _collect(params):
    """A list of distinct Parameters from a list/tuple, a dict name -> Parameter or a ParameterDict.

    A mapping may bind one Parameter to several names: `collect_params()` of a model with
    tied weights lists the shared one under each block's path. Those names are one
    parameter, updated once. A list naming one twice is a mistake and an error."""
    if isinstance(params, Parameter):
        raise TypeError("Trainer takes a collection of Parameters (a list, a dict or a ParameterDict); "
                        "wrap a single one in a list")
    if isinstance(params, (ParameterDict, dict)):
        items = list({id(p): p for p in params.values()}.values())
    elif isinstance(params, (list, tuple)):
        items = list(params)
    else:
        raise TypeError(f"Trainer takes a list/tuple of Parameters, a dict name -> Parameter or a "
                        f"ParameterDict, not {type(params).__name__}")
    seen = set()
    for p in items:
        if not isinstance(p, Parameter):
            raise TypeError(f"Trainer got a {type(p).__name__} where a Parameter was expected")
        if id(p) in seen:
            raise ValueError(f"parameter {p.name!r} is listed twice; it would be updated twice per step")
        seen.add(id(p))
    return items


class Trainer:
    """Applies one optimizer to a set of Parameters.

    trainer = Trainer(params, optimizer, optimizer_params)

    params: a list/tuple of Parameters, a dict name -> Parameter, or a ParameterDict.
    optimizer: "sgd", "adam" or "adagrad" (or an Optimizer instance).
    optimizer_params: the rule's options, e.g. {"learning_rate": 0.1, "momentum": 0.9,
        "wd": 1e-4} for sgd or beta1/beta2/epsilon for adam; plus "clip_global_norm": a
        positive float, the largest L2 norm of all (rescaled) gradients taken together.
        Unknown names raise ValueError.

    Zero-grad rule: backward() accumulates (adds) into Parameter.grad until a step.
    `step(batch_size)` consumes the gradients: it rescales them by 1/batch_size, clips
    them, updates the parameters and then zeroes every gradient it used. So gradients of
    several backward() calls before one step are summed (accumulate over sub-batches by
    calling backward() on each and passing the total batch size to step), but nothing
    carries over from one step to the next: a user cannot silently accumulate across
    steps. `zero_grad()` discards gradients without updating.

    Parameters with grad_req == "null" are frozen: never updated, their grad untouched.
    """

    def __init__(self, params, optimizer="sgd", optimizer_params=None):
        self._params = _collect(params)
        options = dict(optimizer_params or {})
        clip = options.pop("clip_global_norm", None)
        self.clip_global_norm = None if clip is None else _number("clip_global_norm", clip, low=0.0, low_open=True)
        if isinstance(optimizer, Optimizer):
            if options:
                raise ValueError(f"optimizer_params {sorted(options)} given with an Optimizer instance; "
                                 f"set them on the instance instead")
            self.optimizer = optimizer
        elif isinstance(optimizer, str):
            cls = OPTIMIZERS.get(optimizer.lower())
            if cls is None:
                raise ValueError(f"unknown optimizer {optimizer!r}; expected one of {sorted(OPTIMIZERS)}")
            self.optimizer = cls(**options)
        else:
            raise TypeError(f"optimizer must be a name or an Optimizer, not {type(optimizer).__name__}")
        self._states = [None] * len(self._params)
        self._created = [False] * len(self._params)
        self.last_grad_norm = None   # the global norm before clipping, when clipping is on

    @property
    def params(self):
        """The trained Parameters, in order (a new list)."""
        return list(self._params)

    @property
    def learning_rate(self):
        return self.optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        self.optimizer.learning_rate = value

    def _active(self):
        return [(i, p) for i, p in enumerate(self._params) if p.grad_req != "null"]

    def zero_grad(self):
        """Discard the accumulated gradients of every trained parameter (grad_req "null" aside)."""
        for _, p in self._active():
            p.zero_grad()

    def global_norm(self):
        """The L2 norm of all trained parameters' current gradients taken together."""
        xp = backend.xp()
        total = 0.0
        for _, p in self._active():
            g = p.peek_grad().ravel().astype(np.float64)    # float64: no overflow of the squares
            total += float(xp.dot(g, g))
        return math.sqrt(total)

    def step(self, batch_size):
        """Rescale gradients by 1/batch_size, clip, update every parameter, zero the gradients.

        batch_size: the number of instances whose losses were summed into the gradients (a
        positive number). With clipping on, a non-finite gradient norm raises NumericsError
        and leaves parameters and gradients as they were.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Real) or not batch_size > 0 \
                or not math.isfinite(batch_size):
            raise ValueError(f"step() needs a positive batch_size (the number of instances summed "
                             f"into the gradients), not {batch_size!r}")
        active = self._active()
        scale = 1.0 / float(batch_size)
        if self.clip_global_norm is not None:
            norm = self.global_norm() * scale
            self.last_grad_norm = norm
            if not math.isfinite(norm):
                bad = [p.name for _, p in active if not np.all(np.isfinite(backend.to_numpy(p.peek_grad())))]
                raise NumericsError(f"gradient norm is {norm}; non-finite gradients in {bad or 'the sum'}; "
                                    f"no update was made")
            if norm > self.clip_global_norm:
                scale *= self.clip_global_norm / norm
        for i, p in active:
            state = self._state(i, p)
            # an embedding's rows: only those this minibatch looked up
            rows = p.grad_rows() if self.optimizer.rows_only(state) else None
            self.optimizer.apply(p, state, scale, rows)

    def _state(self, i, p):
        """Parameter i's optimizer state, made on its first update."""
        if not self._created[i]:
            self._states[i] = self.optimizer.create_state(p)
            self._created[i] = True
        return self._states[i]

    def __repr__(self):
        return (f"Trainer({len(self._params)} parameters, {self.optimizer!r}, "
                f"clip_global_norm={self.clip_global_norm})")
