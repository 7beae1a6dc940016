"""Trainer.save_states / load_states: training resumed from a checkpoint (weights and
states) equals uninterrupted training bit for bit, and a checkpoint that does not fit the
Trainer it is loaded into is refused with what differs, before anything changes."""
import zipfile

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch.train import CosineSchedule, StepSchedule, WarmUp


def make_model(seed=0):
    """An embedding, a tanh layer and a softmax readout: gradients by rows (the embedding)
    and dense ones."""
    pd = hb.ParameterDict(seed=seed)
    pd.get("E", (10, 4), init="uniform")
    pd.get("W", (6, 8))
    pd.get("b", (6,), init="zeros")
    pd.get("V", (3, 6))
    return pd


def loss(pd, words, label):
    x = hb.concat([hb.lookup(pd["E"], words[0]), hb.lookup(pd["E"], words[1])])
    h = hb.tanh(hb.affine(pd["W"], x, pd["b"]))
    return hb.pick_neg_log_softmax(pd["V"] @ h, label)


def make_batches(n, seed=1, size=5):
    rng = np.random.default_rng(seed)
    return [[((int(a), int(b)), int(y)) for a, b, y in zip(rng.integers(0, 10, size), rng.integers(0, 10, size),
                                                            rng.integers(0, 3, size))] for _ in range(n)]


def train(pd, trainer, batches):
    for batch in batches:
        with hb.batching():
            hb.add_n([loss(pd, words, label) for words, label in batch]).backward()
        trainer.step(len(batch))


def weights(pd):
    return {name: p.data.copy() for name, p in pd.items()}


RULES = [
    ("sgd", {"learning_rate": 0.2}, None),
    ("sgd", {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-3}, None),
    ("adam", {"learning_rate": 0.02, "wd": 1e-3}, None),
    ("adamw", {"learning_rate": 0.02, "wd": 0.05}, None),
    ("adagrad", {"learning_rate": 0.1, "clip_global_norm": 0.5}, None),
    ("rmsprop", {"learning_rate": 0.01}, None),
    ("rmsprop", {"learning_rate": 0.01, "momentum": 0.8, "centered": True, "wd": 1e-3}, None),
    ("sgd", {"learning_rate": 0.1, "momentum": 0.5}, StepSchedule(3, gamma=0.5)),
    ("adamw", {"learning_rate": 0.02}, WarmUp(3, then=CosineSchedule(6, final=1e-3))),
]
IDS = ["sgd", "momentum", "adam", "adamw", "adagrad-clipped", "rmsprop", "rmsprop-centered-momentum",
       "momentum-step-schedule", "adamw-warmup-cosine"]


def as_given(pd, kind):
    return pd if kind == "dict" else pd.values()


@pytest.mark.parametrize("kind", ["dict", "list"])
@pytest.mark.parametrize("optimizer, options, schedule", RULES, ids=IDS)
def test_resume_equals_uninterrupted_training_bit_for_bit(tmp_path, optimizer, options, schedule, kind):
    batches = make_batches(9)
    whole = make_model()
    train(whole, hb.Trainer(as_given(whole, kind), optimizer, options, schedule=schedule), batches)

    first = make_model()
    trainer = hb.Trainer(as_given(first, kind), optimizer, options, schedule=schedule)
    train(first, trainer, batches[:4])       # the warm-up ends inside the second part
    first.save(tmp_path / "weights.npz")
    trainer.save_states(tmp_path / "states.npz")

    # a fresh model and a Trainer with the rule's defaults: the file brings options and schedule
    resumed = make_model(seed=7)
    resumed.load(tmp_path / "weights.npz")
    again = hb.Trainer(as_given(resumed, kind), optimizer)
    again.load_states(tmp_path / "states.npz")
    assert again.step_count == 4 and again.optimizer.options() == trainer.optimizer.options()
    train(resumed, again, batches[4:])

    for name, value in weights(whole).items():
        assert np.array_equal(resumed[name].data, value), name


@pytest.mark.parametrize("optimizer, options, schedule", [r for r in RULES if r[:2] != ("sgd", {"learning_rate": 0.2})],
                         ids=[i for i in IDS if i != "sgd"])
def test_resuming_without_the_states_diverges(optimizer, options, schedule):
    """What the states carry matters for every rule but plain SGD at a fixed rate: without
    them, the resumed weights differ (the resume test above would catch a lost state)."""
    batches = make_batches(9)
    whole = make_model()
    train(whole, hb.Trainer(whole, optimizer, options, schedule=schedule), batches)
    part = make_model()
    train(part, hb.Trainer(part, optimizer, options, schedule=schedule), batches[:4])
    train(part, hb.Trainer(part, optimizer, options, schedule=schedule), batches[4:])
    assert not all(np.array_equal(part[n].data, v) for n, v in weights(whole).items())


def test_states_hold_the_step_count_options_and_schedule_position(tmp_path):
    pd = make_model()
    trainer = hb.Trainer(pd, "rmsprop", {"learning_rate": 0.05, "centered": True, "clip_global_norm": 2.0})
    train(pd, trainer, make_batches(2))
    trainer.set_schedule(WarmUp(4, then=StepSchedule(2, gamma=0.5)))     # starts at its step 0 now
    train(pd, trainer, make_batches(3, seed=2))
    trainer.save_states(tmp_path / "s.npz")

    other = hb.Trainer(make_model(), "rmsprop")
    other.load_states(tmp_path / "s.npz")
    assert other.step_count == 5 and other.clip_global_norm == 2.0
    assert other.optimizer.centered is True and other.learning_rate == 0.05
    assert repr(other.schedule) == repr(trainer.schedule)
    assert other.current_learning_rate == trainer.current_learning_rate == trainer.schedule(3, 0.05)


def test_a_parameter_not_updated_yet_is_saved_without_state(tmp_path):
    pd = make_model()
    pd["V"].grad_req = "null"
    trainer = hb.Trainer(pd, "adam", {"learning_rate": 0.05})
    train(pd, trainer, make_batches(2))
    trainer.save_states(tmp_path / "s.npz")
    with np.load(tmp_path / "s.npz", allow_pickle=False) as archive:
        assert not [n for n in archive.files if n.startswith("state.3.")]     # V is the 4th
        assert "state.1.m" in archive.files
    pd["V"].grad_req = "write"
    other = hb.Trainer(pd, "adam")
    other.load_states(tmp_path / "s.npz")
    train(pd, other, make_batches(1, seed=3))       # V starts with fresh moments
    assert other._states[3]["t"] == 1 and other._states[1]["t"] == 3


# -- refused loads ------------------------------------------------------------------------

@pytest.fixture
def saved(tmp_path):
    """A states file of an Adam Trainer over make_model() after two steps."""
    pd = make_model()
    trainer = hb.Trainer(pd, "adam", {"learning_rate": 0.05})
    train(pd, trainer, make_batches(2))
    path = tmp_path / "states.npz"
    trainer.save_states(path)
    return path


def assert_refused(trainer, path, match):
    """load_states raises ValueError matching `match` and leaves the Trainer as it was."""
    def snapshot():
        return trainer.step_count, trainer.optimizer.options(), [id(s) for s in trainer._states], trainer.schedule
    before = snapshot()
    with pytest.raises(ValueError, match=match):
        trainer.load_states(path)
    assert snapshot() == before


def test_another_optimizer_is_refused(saved):
    assert_refused(hb.Trainer(make_model(), "adamw"), saved, "optimizer 'adam'.*uses 'adamw'")


def test_other_parameter_names_are_refused(saved):
    pd = make_model()
    renamed = {("U" if name == "V" else name): p for name, p in pd.items()}
    assert_refused(hb.Trainer(renamed, "adam"), saved, r"no states for parameters \['U'\].*does not have: \['V'\]")


def test_another_shape_or_dtype_is_refused(saved):
    pd = make_model()
    pd._params["W"] = hb.Parameter("W", (6, 9))
    assert_refused(hb.Trainer(pd, "adam"), saved, r"'W' is float32 \(6, 8\) in the file and float32 \(6, 9\) here")
    pd._params["W"] = hb.Parameter("W", (6, 8), dtype=np.float64)
    assert_refused(hb.Trainer(pd, "adam"), saved, r"'W' is float32 \(6, 8\) in the file and float64 \(6, 8\) here")


def test_by_position_the_count_and_the_names_must_match(saved):
    params = make_model().values()
    assert_refused(hb.Trainer(params[:3], "adam"), saved, "states of 4 parameters.*trains 3")
    params[0], params[3] = hb.Parameter("F", (10, 4)), hb.Parameter("V", (3, 6))
    assert_refused(hb.Trainer(params, "adam"), saved, r"parameter 0 \('E' in the file\) is 'F' here")


def test_a_missing_state_entry_is_refused(saved, tmp_path):
    cut = tmp_path / "cut.npz"
    with zipfile.ZipFile(saved) as src, zipfile.ZipFile(cut, "w") as dst:
        for item in src.infolist():
            if item.filename != "state.1.v.npy":
                dst.writestr(item, src.read(item))
    assert_refused(hb.Trainer(make_model(), "adam"), cut, r"'W': the file lacks its state \['v'\]")


def test_a_state_of_another_shape_is_refused(saved, tmp_path):
    with np.load(saved, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    arrays["state.2.m"] = np.zeros(7, np.float32)
    arrays["state.2.t"] = np.array(1.5)
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    assert_refused(hb.Trainer(make_model(), "adam"), bad, r"'b': state 't' is float64 \(\), not an integer count; "
                                                          r"'b': state 'm' is float32 \(7,\), not float32 \(6,\)")


def test_a_weights_file_is_not_a_states_file(tmp_path):
    pd = make_model()
    pd.save(tmp_path / "weights.npz")
    assert_refused(hb.Trainer(pd, "sgd"), tmp_path / "weights.npz", "not a file Trainer.save_states wrote")
