"""Learning-rate schedules: the rate of each Trainer step as a function of the step count.

    schedule = WarmUp(100, then=CosineSchedule(10_000, final=1e-5))
    trainer = hb.Trainer(params, "adamw", {"learning_rate": 1e-3}, schedule=schedule)

A schedule holds no state of its own: `schedule(step, base)` is the rate of the step
numbered `step` (0 for the first) given the optimizer's `learning_rate` as `base`. The
Trainer counts the steps, so its step count and the schedule's settings (`config()`) are
all `Trainer.save_states` needs to resume the schedule where it was.
"""
import math
import numbers
import operator

__all__ = ["Schedule", "StepSchedule", "CosineSchedule", "WarmUp", "schedule_from_config"]


def _count(owner, name, value):
    """value as an int >= 1, or a TypeError/ValueError naming the schedule and the setting."""
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{owner}: {name} must be an integer, not {type(value).__name__}") from None
    if value < 1:
        raise ValueError(f"{owner}: {name} must be >= 1, not {value}")
    return value


def _rate(owner, name, value, low=0.0, low_open=False, high=None):
    """value as a finite float in its range, or a TypeError/ValueError naming the setting."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a real number, not {type(value).__name__}")
    value = float(value)
    if not (math.isfinite(value) and (value > low if low_open else value >= low)
            and (high is None or value <= high)):
        bound = f"in ({low}, {high}]" if high is not None else f"> {low}" if low_open else f">= {low}"
        raise ValueError(f"{owner}: {name} must be finite and {bound}, not {value!r}")
    return value


class Schedule:
    """Base of the schedules: `__call__(step, base)` gives the rate, `config()` the settings
    as a JSON-ready dict that `schedule_from_config` turns back into an equal schedule."""

    kind = "schedule"

    def __call__(self, step, base):
        raise NotImplementedError

    def config(self):
        raise NotImplementedError

    def __repr__(self):
        settings = [f"{k}={getattr(self, k)!r}" for k in self.config() if k != "kind"]
        return f"{type(self).__name__}({', '.join(settings)})"


class StepSchedule(Schedule):
    """base * gamma ** (step // every): the rate multiplied by gamma after every `every` steps."""

    kind = "step"

    def __init__(self, every, gamma=0.1):
        self.every = _count("StepSchedule", "every", every)
        self.gamma = _rate("StepSchedule", "gamma", gamma, low_open=True, high=1.0)

    def __call__(self, step, base):
        return base * self.gamma ** (step // self.every)

    def config(self):
        return {"kind": self.kind, "every": self.every, "gamma": self.gamma}


class CosineSchedule(Schedule):
    """Half a cosine from base down to `final` over `steps` steps, then `final`:

        final + (base - final) * (1 + cos(pi * min(step, steps) / steps)) / 2
    """

    kind = "cosine"

    def __init__(self, steps, final=0.0):
        self.steps = _count("CosineSchedule", "steps", steps)
        self.final = _rate("CosineSchedule", "final", final)

    def __call__(self, step, base):
        done = min(step, self.steps) / self.steps
        return self.final + (base - self.final) * (1.0 + math.cos(math.pi * done)) / 2.0

    def config(self):
        return {"kind": self.kind, "steps": self.steps, "final": self.final}


class WarmUp(Schedule):
    """A linear rise from `start` to the rate `then` begins with, over `steps` steps; then
    `then` (base when None), counting its steps from the end of the warm-up:

        start + (then(0, base) - start) * step / steps     step < steps
        then(step - steps, base)                           afterwards
    """

    kind = "warmup"

    def __init__(self, steps, then=None, start=0.0):
        self.steps = _count("WarmUp", "steps", steps)
        if then is not None and not isinstance(then, Schedule):
            raise TypeError(f"WarmUp: then must be a Schedule or None, not {type(then).__name__}")
        self.then = then
        self.start = _rate("WarmUp", "start", start)

    def _after(self, step, base):
        return base if self.then is None else self.then(step, base)

    def __call__(self, step, base):
        if step >= self.steps:
            return self._after(step - self.steps, base)
        return self.start + (self._after(0, base) - self.start) * step / self.steps

    def config(self):
        return {"kind": self.kind, "steps": self.steps, "start": self.start,
                "then": None if self.then is None else self.then.config()}


SCHEDULES = {cls.kind: cls for cls in (StepSchedule, CosineSchedule, WarmUp)}


def schedule_from_config(config):
    """The schedule whose config() is `config` (what Trainer.save_states wrote)."""
    settings = dict(config)
    cls = SCHEDULES.get(settings.pop("kind", None))
    if cls is None:
        raise ValueError(f"unknown schedule {config.get('kind')!r}; expected one of {sorted(SCHEDULES)}")
    if cls is WarmUp and settings.get("then") is not None:
        settings["then"] = schedule_from_config(settings["then"])
    return cls(**settings)
