"""AdamW and RMSProp against numpy references of their docstring formulas, and the
learning-rate schedules: their shapes, and the rate each Trainer step uses."""
import math

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.train import CosineSchedule, StepSchedule, WarmUp
from hybridbatch.train.lr_schedule import schedule_from_config

W0 = np.array([[0.5, -1.0, 2.0], [0.25, 0.0, -0.75]])
B0 = np.array([0.1, -0.2])
GRADS = [  # four steps of (grad W, grad b), as summed over a batch of BATCH
    (np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]]), np.array([0.4, -0.8])),
    (np.array([[-0.5, 1.0, 2.0], [1.5, -1.0, 0.0]]), np.array([-1.2, 0.3])),
    (np.array([[0.2, 0.2, -0.2], [-0.4, 0.6, 0.8]]), np.array([0.0, 2.0])),
    (np.array([[0.7, -0.1, 0.3], [0.9, 0.0, -1.1]]), np.array([0.5, 0.5])),
]
BATCH = 4


def run_rule(name, options, schedule=None):
    """The float32 weights after the GRADS steps of this rule."""
    params = [hb.Parameter(n, w.shape, init="zeros") for n, w in (("W", W0), ("b", B0))]
    for p, w in zip(params, (W0, B0)):
        p.data = w
    trainer = hb.Trainer(params, name, options, schedule=schedule)
    for grads in GRADS:
        for p, g in zip(params, grads):
            p.grad = g
        trainer.step(BATCH)
    return [p.data for p in params]


def assert_close(got, expected):
    for a, e in zip(got, expected):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


# -- AdamW --------------------------------------------------------------------------------

def adamw_reference(lr, b1, b2, eps, wd, rates=None):
    ws = [W0.copy(), B0.copy()]
    ms, vs = [np.zeros_like(w) for w in ws], [np.zeros_like(w) for w in ws]
    for t, grads in enumerate(GRADS, start=1):
        rate = lr if rates is None else rates[t - 1]
        for i, g in enumerate(grads):
            g = g / BATCH
            ws[i] = ws[i] * (1 - rate * wd)
            ms[i] = b1 * ms[i] + (1 - b1) * g
            vs[i] = b2 * vs[i] + (1 - b2) * g * g
            ws[i] = ws[i] - rate * (ms[i] / (1 - b1 ** t)) / (np.sqrt(vs[i] / (1 - b2 ** t)) + eps)
    return ws


def test_adamw_matches_reference():
    lr, b1, b2, eps, wd = 0.05, 0.8, 0.95, 1e-6, 0.3
    got = run_rule("adamw", {"learning_rate": lr, "beta1": b1, "beta2": b2, "epsilon": eps, "wd": wd})
    assert_close(got, adamw_reference(lr, b1, b2, eps, wd))


def test_adamw_decay_follows_the_scheduled_rate():
    """The decay is lr * wd with the step's rate (PyTorch's AdamW), not the base rate."""
    schedule = StepSchedule(2, gamma=0.25)
    got = run_rule("adamw", {"learning_rate": 0.1, "wd": 0.5}, schedule)
    rates = [schedule(step, 0.1) for step in range(len(GRADS))]
    assert_close(got, adamw_reference(0.1, 0.9, 0.999, 1e-8, 0.5, rates))


def test_adamw_decay_is_decoupled_from_adams():
    """Adam's wd enters the moments, AdamW's does not; without decay they are one rule."""
    assert all(np.array_equal(a, b) for a, b in zip(run_rule("adam", {"learning_rate": 0.1}),
                                                    run_rule("adamw", {"learning_rate": 0.1, "wd": 0.0})))
    coupled = run_rule("adam", {"learning_rate": 0.1, "wd": 0.3})
    decoupled = run_rule("adamw", {"learning_rate": 0.1, "wd": 0.3})
    assert not np.allclose(coupled[0], decoupled[0], rtol=1e-3)


def test_adamw_defaults_are_pytorchs():
    o = hb.Trainer([hb.Parameter("w", (1,))], "adamw").optimizer
    assert o.options() == {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "wd": 0.01}


# -- RMSProp ------------------------------------------------------------------------------

def rmsprop_reference(lr, rho, momentum, eps, centered, wd):
    ws = [W0.copy(), B0.copy()]
    vs, gavgs, moms = ([np.zeros_like(w) for w in ws] for _ in range(3))
    for grads in GRADS:
        for i, g in enumerate(grads):
            g = g / BATCH + wd * ws[i]
            vs[i] = rho * vs[i] + (1 - rho) * g * g
            if centered:
                gavgs[i] = rho * gavgs[i] + (1 - rho) * g
                avg = np.sqrt(vs[i] - gavgs[i] ** 2) + eps
            else:
                avg = np.sqrt(vs[i]) + eps
            if momentum:
                moms[i] = momentum * moms[i] + g / avg
                ws[i] = ws[i] - lr * moms[i]
            else:
                ws[i] = ws[i] - lr * g / avg
    return ws


@pytest.mark.parametrize("momentum, centered, wd", [(0.0, False, 0.0), (0.9, False, 0.0), (0.0, True, 0.0),
                                                    (0.7, True, 0.1), (0.0, False, 0.2)])
def test_rmsprop_matches_reference(momentum, centered, wd):
    options = {"learning_rate": 0.01, "rho": 0.8, "momentum": momentum, "epsilon": 1e-6, "centered": centered,
               "wd": wd}
    assert_close(run_rule("rmsprop", options), rmsprop_reference(0.01, 0.8, momentum, 1e-6, centered, wd))


def test_rmsprop_options_are_checked():
    w = [hb.Parameter("w", (1,))]
    with pytest.raises(TypeError, match="'centered' must be True or False, not 1"):
        hb.Trainer(w, "rmsprop", {"centered": 1})
    with pytest.raises(ValueError, match="'rho' must be in"):
        hb.Trainer(w, "rmsprop", {"rho": 1.0})
    with pytest.raises(ValueError, match="'momentum'"):
        hb.Trainer(w, "rmsprop", {"momentum": -0.5})


# -- schedules ----------------------------------------------------------------------------

def test_step_schedule_multiplies_by_gamma_every_n_steps():
    s = StepSchedule(3, gamma=0.5)
    rates = [s(step, 0.8) for step in range(10)]
    assert rates[:3] == [0.8] * 3
    for step in range(1, 10):
        assert rates[step] == (rates[step - 1] * 0.5 if step % 3 == 0 else rates[step - 1])


def test_cosine_schedule_falls_from_base_to_its_floor_and_stays():
    s = CosineSchedule(8, final=0.1)
    rates = [s(step, 0.9) for step in range(12)]
    assert rates[0] == 0.9 and rates[4] == pytest.approx(0.5) and rates[8:] == [pytest.approx(0.1)] * 4
    assert all(a > b for a, b in zip(rates[:8], rates[1:9]))
    assert all(r >= 0.1 for r in rates)


def test_warm_up_rises_linearly_then_hands_over():
    cosine = CosineSchedule(5, final=0.01)
    s = WarmUp(4, then=cosine, start=0.02)
    rates = [s(step, 0.5) for step in range(12)]
    assert rates[0] == 0.02
    steps = np.diff(rates[:5])
    np.testing.assert_allclose(steps, steps[0])          # equal increments up to the hand-over
    assert rates[4:] == [cosine(step, 0.5) for step in range(8)]
    plain = WarmUp(2)
    assert [plain(step, 0.3) for step in range(4)] == [0.0, 0.15, 0.3, 0.3]


def test_trainer_steps_at_the_scheduled_rates():
    """With a gradient of 1, each plain SGD step moves the weight by exactly its rate."""
    schedule = WarmUp(2, then=StepSchedule(2, gamma=0.5))
    w = hb.Parameter("w", (1,), init="zeros", dtype=np.float64)
    trainer = hb.Trainer([w], "sgd", {"learning_rate": 0.4}, schedule=schedule)
    moves = []
    for _ in range(7):
        assert trainer.current_learning_rate == schedule(trainer.step_count, 0.4)
        before = float(w.data[0])
        w.grad = np.ones(1)
        trainer.step(1)
        moves.append(before - float(w.data[0]))
    np.testing.assert_allclose(moves, [schedule(step, 0.4) for step in range(7)], rtol=1e-12, atol=1e-15)
    assert trainer.learning_rate == 0.4       # the base stays the option


def test_set_schedule_starts_the_schedule_at_its_first_step():
    trainer = hb.Trainer([hb.Parameter("w", (1,))], "sgd", {"learning_rate": 0.2})
    for _ in range(5):
        trainer.step(1)
    trainer.set_schedule(WarmUp(4, start=0.05))
    assert trainer.current_learning_rate == 0.05 and trainer.step_count == 5
    trainer.step(1)
    assert trainer.current_learning_rate == WarmUp(4, start=0.05)(1, 0.2)
    trainer.set_schedule(None)
    assert trainer.current_learning_rate == 0.2


def test_schedule_config_round_trips():
    s = WarmUp(3, then=CosineSchedule(10, final=1e-4), start=1e-5)
    again = schedule_from_config(s.config())
    assert repr(again) == repr(s) and [again(k, 0.1) for k in range(15)] == [s(k, 0.1) for k in range(15)]
    with pytest.raises(ValueError, match="unknown schedule 'linear'"):
        schedule_from_config({"kind": "linear"})


@pytest.mark.parametrize("make, error, match", [
    (lambda: StepSchedule(0), ValueError, "every must be >= 1"),
    (lambda: StepSchedule(2.5), TypeError, "every must be an integer"),
    (lambda: StepSchedule(2, gamma=0.0), ValueError, "gamma must be finite and in"),
    (lambda: CosineSchedule(10, final=-1.0), ValueError, "final must be finite and >= 0"),
    (lambda: WarmUp(5, then="cosine"), TypeError, "then must be a Schedule"),
    (lambda: WarmUp(5, start=math.inf), ValueError, "start must be finite"),
])
def test_schedule_settings_are_checked(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_trainer_takes_only_a_schedule():
    with pytest.raises(TypeError, match="schedule must be a Schedule"):
        hb.Trainer([hb.Parameter("w", (1,))], "sgd", schedule="cosine")
