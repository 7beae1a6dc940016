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

The rate of each step is the optimizer's `learning_rate`, or what a schedule
(lr_schedule.py) makes of it at the Trainer's step count. `save_states(path)` writes what
the next steps depend on besides the weights (every parameter's optimizer state, the step
count, the optimizer's options and the schedule) so that `load_states(path)` into a fresh
Trainer resumes training exactly, bit for bit.
"""
import json
import math
import numbers
import os
import time

import numpy as np

from ..errors import NumericsError
from .lr_schedule import Schedule, schedule_from_config
from .parameter import Parameter
from .parameter_dict import ParameterDict, read_npz, write_npz
from ..kernels.update import descend
from ..runtime import profile
from ..runtime import backend

__all__ = ["Trainer", "Optimizer", "SGD", "Adam", "AdamW", "Adagrad", "RMSProp", "OPTIMIZERS"]


class _Option:
    """A numeric optimizer option, validated by _number on every assignment. It has no
    __get__: a read finds the value in the instance's __dict__ at a plain attribute's cost
    (a step reads options once per parameter)."""

    def __init__(self, **limits):
        self.limits = limits

    def __set_name__(self, owner, name):
        self.name = name

    def __set__(self, obj, value):
        obj.__dict__[self.name] = self.validate(value)

    def validate(self, value):
        return _number(self.name, value, **self.limits)


class _Flag(_Option):
    """A yes/no optimizer option: a bool, as 0/1 or a string would pass for one by accident."""

    def validate(self, value):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"option {self.name!r} must be True or False, not {value!r}")
        return bool(value)


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
    `create_state(param)` (per-parameter state: a dict name -> array, int step count, or None
    for a buffer made on first use) and `update(weight, grad, state, scale, lr)`, which
    changes `weight` in place by the gradient scale * grad at learning rate lr (the
    schedule's, which may differ from the option): the Trainer's 1/batch_size and clipping
    factor come apart, so a rule can fold them into a coefficient instead of making a pass
    over grad. `update` may use grad as scratch space (`apply` zeroes it afterwards)."""

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
        """The parameter's state before its first update: a dict (the Trainer reads None as
        not made yet)."""
        return {}

    def update(self, weight, grad, state, scale, lr):
        raise NotImplementedError

    def apply(self, param, state, scale, lr, rows=None):
        """Update param.data by scale * its gradient at rate lr, then zero the gradient:
        everywhere, or only in `rows` (what grad_rows() gave, where rows_only(state) says
        that is the same)."""
        weight, grad = param.data, param._grad_array()
        if rows is None:
            self.update(weight, grad, state, scale, lr)
        elif len(rows):
            w, g = weight[rows], grad[rows]
            self.update(w, g, state, scale, lr)
            weight[rows] = w
        del grad        # held here, the gradient would be cleared by a pass (Parameter.zero_grad)
        param.zero_grad(rows)

    def options(self):
        """The option values by name (what save_states records)."""
        return {key: getattr(self, key) for key in self.defaults}

    def state_arrays(self, state):
        """A parameter's state as numpy arrays by entry name (a buffer not made yet is left out)."""
        return {key: np.asarray(backend.to_numpy(value) if hasattr(value, "shape") else value)
                for key, value in state.items() if value is not None}

    def state_from_arrays(self, param, arrays):
        """(state, problems): the state `state_arrays` gave, rebuilt for `param` on the current
        backend, or the reasons it cannot be: an entry missing, one this rule does not keep,
        or one whose shape or dtype differs from the state this rule makes for `param`."""
        state, problems = self.create_state(param), []
        for key in sorted(set(arrays) - set(state)):
            problems.append(f"state {key!r} is not one {self.name} keeps")
        for key, fresh in state.items():
            value = arrays.get(key)
            if value is None:
                if fresh is not None:       # a buffer made on first use may be absent
                    problems.append(f"state {key!r} is missing")
                continue
            if isinstance(fresh, int):
                if value.shape != () or value.dtype.kind not in "iu":
                    problems.append(f"state {key!r} is {value.dtype} {value.shape}, not an integer count")
                else:
                    state[key] = int(value)
                continue
            # a buffer made on first use is in the parameter's dtype, or float32 for float16
            dtypes = {fresh.dtype} if fresh is not None else {param.dtype, np.dtype(_state_dtype(param))}
            if value.shape != param.shape or value.dtype not in dtypes:
                want = " or ".join(sorted(str(d) for d in dtypes))
                problems.append(f"state {key!r} is {value.dtype} {value.shape}, not {want} {param.shape}")
            else:
                state[key] = backend.xp().array(value, copy=True)
        return state, problems

    def rows_only(self, state):
        """Whether updating only the rows that have a gradient equals the dense update, i.e.
        a zero gradient leaves a row unchanged (no decay, no momentum, no moments)."""
        return False

    @property
    def descends_factors(self):
        """Whether `apply` adds a weight gradient still kept as its factors straight into the
        weight (Parameter.descend_outer) rather than reading the gradient: plain SGD."""
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

    def rows_only(self, state):     # descends_factors, written out: read per parameter and step
        return not self.wd and not self.momentum and state["mom"] is None

    @property
    def descends_factors(self):
        return not self.wd and not self.momentum

    def update(self, weight, grad, state, scale, lr):
        g, s = self._decayed(weight, grad, scale)
        mom = state["mom"]
        if not self.momentum and mom is None:
            g *= lr * s     # in place: the gradient is spent after its update (no temporary)
            weight -= g
            return
        if mom is None:
            mom = state["mom"] = backend.xp().zeros_like(weight)
        mom *= self.momentum
        mom -= (lr * s) * g
        weight += mom

    def apply(self, param, state, scale, lr, rows=None):
        """Plain SGD is one compiled pass, where numpy makes two; given rows, that pass also
        clears the gradient's rows (a dense gradient is cleared without one: zero_grad). A
        gradient still held as factors is added into the weight in one pass (descend_outer)."""
        if self.rows_only(state):
            if rows is None and param.descend_outer(lr * scale):
                return
            if descend(param.data, param._grad_array(), lr * scale, rows):
                if rows is None:
                    param.zero_grad(None)
                else:
                    param.grad_zeroed()
                return
        super().apply(param, state, scale, lr, rows)


def _state_dtype(param):
    """float32 for a float16 parameter's moments: see _in_float32."""
    return np.float32 if param.dtype == np.float16 else param.dtype


def _in_float32(update):
    """The rule run in float32 on a float16 weight, written back rounded. In float16,
    epsilon (1e-8, 1e-7) vanishes next to the denominator and (1 - beta2) * g**2 underflows
    to 0, so an element with a zero or tiny gradient got 0 / 0 = NaN or x / 0 = inf."""
    def run(self, weight, grad, state, scale, lr):
        if weight.dtype != np.float16:
            return update(self, weight, grad, state, scale, lr)
        wide = weight.astype(np.float32)
        update(self, wide, grad.astype(np.float32), state, scale, lr)
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
    def update(self, weight, grad, state, scale, lr):
        self._descend(weight, self._gradient(weight, grad, scale), state, lr)

    def _descend(self, weight, g, state, lr):
        """The moment updates and the step by the gradient g (spent: used as scratch)."""
        xp = backend.xp()
        state["t"] += 1
        t, m, v = state["t"], state["m"], state["v"]
        m *= self.beta1
        m += (1.0 - self.beta1) * g
        v *= self.beta2
        g *= g
        v += (1.0 - self.beta2) * g
        denom = xp.sqrt(v / (1.0 - self.beta2 ** t))
        denom += self.epsilon
        weight -= (lr / (1.0 - self.beta1 ** t)) * m / denom


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as PyTorch's AdamW: the decay
    shrinks the weight by lr * wd instead of entering the moments, so it is not rescaled by
    them. With the same t, m and v as Adam:

        w *= 1 - lr * wd
        m = beta1 * m + (1 - beta1) * grad;  v = beta2 * v + (1 - beta2) * grad**2
        w -= lr * (m / (1 - beta1**t)) / (sqrt(v / (1 - beta2**t)) + epsilon)
    """

    name = "adamw"
    defaults = {**Adam.defaults, "wd": 0.01}

    @_in_float32
    def update(self, weight, grad, state, scale, lr):
        if scale != 1.0:
            grad *= scale
        if self.wd:
            weight *= 1.0 - lr * self.wd
        self._descend(weight, grad, state, lr)


class Adagrad(Optimizer):
    """AdaGrad (Duchi et al.), as MXNet writes it:

        g = grad + wd * w;  history += g**2;  w -= lr * g / (sqrt(history) + epsilon)
    """

    name = "adagrad"
    defaults = {"learning_rate": 0.01, "epsilon": 1e-7, "wd": 0.0}

    epsilon = _Option(low=0.0, low_open=True)

    def create_state(self, param):
        return {"history": backend.xp().zeros(param.shape, _state_dtype(param))}

    @_in_float32
    def update(self, weight, grad, state, scale, lr):
        xp = backend.xp()
        g = self._gradient(weight, grad, scale)
        history = state["history"]
        history += g * g
        denom = xp.sqrt(history)
        denom += self.epsilon
        weight -= lr * g / denom


class RMSProp(Optimizer):
    """RMSProp (Hinton), with PyTorch's formulas (epsilon outside the square root) and the
    decay named rho, as in Gluon and Keras:

        g = grad + wd * w
        v = rho * v + (1 - rho) * g**2
        avg = sqrt(v) + epsilon                                     (centered=False)
        gavg = rho * gavg + (1 - rho) * g;  avg = sqrt(v - gavg**2) + epsilon   (centered=True)
        mom = momentum * mom + g / avg;  w -= lr * mom               (momentum > 0)
        w -= lr * g / avg                                            (momentum == 0)

    The centered variant (Graves 2013) divides by an estimate of the gradient's standard
    deviation instead of its root mean square. gavg and mom are made on first use, so
    either may be turned on later.
    """

    name = "rmsprop"
    defaults = {"learning_rate": 0.001, "rho": 0.9, "momentum": 0.0, "epsilon": 1e-8, "centered": False,
                "wd": 0.0}

    rho = _Option(low=0.0, high=1.0, high_open=True)

    momentum = _Option(low=0.0, high=1.0, high_open=True)

    epsilon = _Option(low=0.0, low_open=True)

    centered = _Flag()

    def create_state(self, param):
        return {"v": backend.xp().zeros(param.shape, _state_dtype(param)), "gavg": None, "mom": None}

    @_in_float32
    def update(self, weight, grad, state, scale, lr):
        xp = backend.xp()
        g = self._gradient(weight, grad, scale)
        v = state["v"]
        v *= self.rho
        v += (1.0 - self.rho) * (g * g)
        if self.centered:
            if state["gavg"] is None:
                state["gavg"] = xp.zeros_like(weight)
            gavg = state["gavg"]
            gavg *= self.rho
            gavg += (1.0 - self.rho) * g
            avg = v - gavg * gavg
            xp.maximum(avg, 0.0, out=avg)     # >= 0 exactly; rounding could make it -1e-12, and sqrt NaN
            xp.sqrt(avg, out=avg)
        else:
            avg = xp.sqrt(v)
        avg += self.epsilon
        g /= avg
        if not self.momentum and state["mom"] is None:
            g *= lr
            weight -= g
            return
        if state["mom"] is None:
            state["mom"] = xp.zeros_like(weight)
        mom = state["mom"]
        mom *= self.momentum
        mom += g
        weight -= lr * mom


OPTIMIZERS = {cls.name: cls for cls in (SGD, Adam, AdamW, Adagrad, RMSProp)}


def _collect(params):
    """(Parameters, names): the distinct Parameters of a list/tuple, a dict name -> Parameter
    or a ParameterDict, and for a mapping the name each is first listed under (save_states
    matches parameters by these; a list's are matched by position, names None).

    A mapping may bind one Parameter to several names: `collect_params()` of a model with
    tied weights lists the shared one under each block's path. Those names are one
    parameter, updated once. A list naming one twice is a mistake and an error."""
    if isinstance(params, Parameter):
        raise TypeError("Trainer takes a collection of Parameters (a list, a dict or a ParameterDict); "
                        "wrap a single one in a list")
    if isinstance(params, (ParameterDict, dict)):
        first = {}
        for name, p in params.items():
            first.setdefault(id(p), (name, p))
        names, items = [n for n, _ in first.values()], [p for _, p in first.values()]
    elif isinstance(params, (list, tuple)):
        items = list(params)
        names = [None] * len(items)
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
    return items, names


STATES_FORMAT = 1     # the layout save_states writes; load_states refuses others


class Trainer:
    """Applies one optimizer to a set of Parameters.

    trainer = Trainer(params, optimizer, optimizer_params, schedule=None)

    params: a list/tuple of Parameters, a dict name -> Parameter, or a ParameterDict.
    optimizer: "sgd", "adam", "adamw", "adagrad" or "rmsprop" (or an Optimizer instance).
    optimizer_params: the rule's options, e.g. {"learning_rate": 0.1, "momentum": 0.9,
        "wd": 1e-4} for sgd or beta1/beta2/epsilon for adam; plus "clip_global_norm": a
        positive float, the largest L2 norm of all (rescaled) gradients taken together.
        Unknown names raise ValueError.
    schedule: a learning-rate schedule (lr_schedule.py) or None: the rate of each step is
        schedule(steps taken under it, learning_rate) instead of learning_rate.

    Zero-grad rule: backward() accumulates (adds) into Parameter.grad until a step.
    `step(batch_size)` consumes the gradients: it rescales them by 1/batch_size, clips
    them, updates the parameters and then zeroes every gradient it used. So gradients of
    several backward() calls before one step are summed (accumulate over sub-batches by
    calling backward() on each and passing the total batch size to step), but nothing
    carries over from one step to the next: a user cannot silently accumulate across
    steps. `zero_grad()` discards gradients without updating.

    Parameters with grad_req == "null" are frozen: never updated, their grad untouched.

    >>> w = hb.Parameter("w", (2,), init=1.0)
    >>> trainer = hb.Trainer([w], "sgd", {"learning_rate": 0.1})
    >>> with hb.batching():
    ...     total = hb.add_n([hb.sum(w * hb.array(x)) for x in ([1.0, 0.0], [3.0, 2.0])])
    >>> total.backward()
    >>> trainer.step(batch_size=2)             # w -= 0.1 * grad / 2
    >>> w.data
    array([0.8, 0.9], dtype=float32)
    """

    def __init__(self, params, optimizer="sgd", optimizer_params=None, schedule=None):
        self._params, self._names = _collect(params)
        if not self._params:
            raise ValueError("Trainer got no parameters to train; a Block's collect_params() misses the blocks "
                             "held in a plain list or dict (use nn.Sequential, or one attribute each)")
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
        self._states = [None] * len(self._params)      # a parameter's optimizer state, made on its first update
        if self.optimizer.descends_factors and self.clip_global_norm is None:
            for p in self._params:       # its step adds a few-row gradient's factors into the weight
                p.keep_grad_factors = True
        self.step_count = 0          # the step() calls that updated
        self.set_schedule(schedule)
        self.last_grad_norm = None   # the global norm before clipping, when clipping is on

    @property
    def params(self):
        """The trained Parameters, in order (a new list)."""
        return list(self._params)

    @property
    def learning_rate(self):
        """The optimizer's learning_rate: the rate of every step, or a schedule's base."""
        return self.optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        self.optimizer.learning_rate = value

    @property
    def schedule(self):
        return self._schedule

    def set_schedule(self, schedule):
        """Schedule the learning rate from the next step on, starting at the schedule's step 0
        (None: every step at learning_rate)."""
        if schedule is not None and not isinstance(schedule, Schedule):
            raise TypeError(f"schedule must be a Schedule (StepSchedule, CosineSchedule, WarmUp) or None, "
                            f"not {type(schedule).__name__}")
        self._schedule = schedule
        self._schedule_steps = 0

    @property
    def current_learning_rate(self):
        """The rate the next step() uses."""
        if self._schedule is None:
            return self.optimizer.learning_rate
        return self._schedule(self._schedule_steps, self.optimizer.learning_rate)

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
        lr = self.current_learning_rate
        start = time.perf_counter()
        for i, p in active:
            state = self._state(i, p)
            # an embedding's rows: only those this minibatch looked up
            rows = p.grad_rows() if self.optimizer.rows_only(state) else None
            self.optimizer.apply(p, state, scale, lr, rows)
            p.version += 1
        prof = profile.active()
        if prof is not None:
            prof.span("update", start, time.perf_counter())
        self.step_count += 1
        self._schedule_steps += 1

    def _state(self, i, p):
        """Parameter i's optimizer state, made on its first update."""
        state = self._states[i]
        if state is None:
            state = self._states[i] = self.optimizer.create_state(p)
        return state

    # -- checkpoints ----------------------------------------------------------------------
    def save_states(self, path):
        """Write everything the next steps depend on besides the weights to `path` (an .npz
        archive, no pickles, written atomically): every parameter's optimizer state, the
        step count, the optimizer's name and options, clip_global_norm, and the schedule with
        its position. Save the weights too (ParameterDict.save, Block.save_parameters)."""
        write_npz(path, self.states_arrays())

    def states_arrays(self):
        """What save_states writes, as arrays by name (hb.distributed sends them to every rank)."""
        arrays, entries = {}, []
        for i, (name, p) in enumerate(zip(self._names, self._params)):
            kept = None
            if self._states[i] is not None:
                saved = self.optimizer.state_arrays(self._states[i])
                kept = sorted(saved)
                arrays.update({f"state.{i}.{key}": value for key, value in saved.items()})
            entries.append({"name": name, "parameter": p.name, "shape": list(p.shape), "dtype": p.dtype.name,
                            "state": kept})
        meta = {"format": STATES_FORMAT, "optimizer": self.optimizer.name, "options": self.optimizer.options(),
                "clip_global_norm": self.clip_global_norm, "step_count": self.step_count,
                "schedule": None if self._schedule is None else self._schedule.config(),
                "schedule_steps": self._schedule_steps, "parameters": entries}
        arrays["trainer"] = np.array(json.dumps(meta))
        return arrays

    def load_states(self, path):
        """Restore what save_states wrote, so the next steps equal those the saving Trainer
        would have taken, bit for bit (with the weights loaded as well).

        The optimizer's options, clip_global_norm and the schedule become the saved ones;
        set any of them after loading to go on with others. Parameters are matched by name
        when both Trainers were given a dict or ParameterDict, by position otherwise. Every
        difference is checked before anything changes: another optimizer, parameters
        missing or extra, another shape or dtype, a state entry missing or malformed raise
        ValueError naming each.
        """
        path = os.fspath(path)
        self.load_states_arrays(read_npz(path), repr(path))

    def load_states_arrays(self, stored, source):
        """load_states from the arrays states_arrays gave; `source` names them in errors."""
        meta = _states_meta(stored, source)
        if meta["optimizer"] != self.optimizer.name:
            raise ValueError(f"cannot load {source}: it holds the states of optimizer {meta['optimizer']!r}, "
                             f"and this Trainer uses {self.optimizer.name!r}")
        problems = []
        try:
            options = type(self.optimizer)(**meta["options"]).options()
        except (TypeError, ValueError) as e:
            problems.append(f"its options: {e}")
        try:
            clip = meta["clip_global_norm"]
            clip = None if clip is None else _number("clip_global_norm", clip, low=0.0, low_open=True)
            schedule = None if meta["schedule"] is None else schedule_from_config(meta["schedule"])
        except (TypeError, ValueError) as e:
            problems.append(f"its schedule or clip_global_norm: {e}")
        states = self._loaded_states(meta["parameters"], stored, problems)
        if problems:
            raise ValueError(f"cannot load {source}: " + "; ".join(problems))
        for key, value in options.items():
            setattr(self.optimizer, key, value)
        self.clip_global_norm = clip
        self.set_schedule(schedule)
        self._schedule_steps = meta["schedule_steps"]
        self.step_count = meta["step_count"]
        self._states = states

    def _loaded_states(self, entries, stored, problems):
        """Each parameter's state from the file (None where it had none yet), matched to this
        Trainer's parameters; what does not match goes to `problems`."""
        by_name = None not in self._names and all(e["name"] is not None for e in entries)
        if by_name:
            here = {n: i for i, n in enumerate(self._names)}
            missing = [n for n in self._names if n not in {e["name"] for e in entries}]
            extra = [e["name"] for e in entries if e["name"] not in here]
            if missing:
                problems.append(f"no states for parameters {missing}")
            if extra:
                problems.append(f"states for parameters this Trainer does not have: {extra}")
            pairs = [(repr(e["name"]), here[e["name"]], k, e) for k, e in enumerate(entries) if e["name"] in here]
        else:
            if len(entries) != len(self._params):
                problems.append(f"it has the states of {len(entries)} parameters, and this Trainer "
                                f"trains {len(self._params)}")
            pairs = [(f"parameter {k} ({e['parameter']!r} in the file)", k, k, e)
                     for k, e in enumerate(entries[:len(self._params)])]
        states = [None] * len(self._params)
        for label, i, k, entry in pairs:
            p = self._params[i]
            if not by_name and entry["parameter"] != p.name:
                problems.append(f"{label} is {p.name!r} here")
            if tuple(entry["shape"]) != p.shape or entry["dtype"] != p.dtype.name:
                problems.append(f"{label} is {entry['dtype']} {tuple(entry['shape'])} in the file and "
                                f"{p.dtype.name} {p.shape} here")
                continue
            if entry["state"] is None:
                continue
            keys = {key: f"state.{k}.{key}" for key in entry["state"]}
            lost = [key for key, stored_as in keys.items() if stored_as not in stored]
            if lost:
                problems.append(f"{label}: the file lacks its state {lost}")
                continue
            states[i], wrong = self.optimizer.state_from_arrays(p, {key: stored[s] for key, s in keys.items()})
            problems += [f"{label}: {w}" for w in wrong]
        return states

    def __repr__(self):
        return (f"Trainer({len(self._params)} parameters, {self.optimizer!r}, "
                f"clip_global_norm={self.clip_global_norm}, schedule={self._schedule!r})")


def _states_meta(stored, source):
    """The description save_states wrote into the archive, or a ValueError saying why the
    file is not one it wrote."""
    if "trainer" not in stored:
        raise ValueError(f"cannot load {source}: it is not a file Trainer.save_states wrote (no 'trainer' entry; "
                         f"weights are loaded with ParameterDict.load or Block.load_parameters)")
    try:
        meta = json.loads(str(stored["trainer"][()]))
    except (ValueError, TypeError) as e:
        raise ValueError(f"cannot load {source}: its 'trainer' entry is not readable: {e}") from None
    if not isinstance(meta, dict) or meta.get("format") != STATES_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        raise ValueError(f"cannot load {source}: it has states format {found!r}; this version reads "
                         f"{STATES_FORMAT}")
    return meta
