"""hb.profile(): phases and per-batch times over many scopes, and their Chrome trace."""
import json
import time

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch import nn
from helpers import lstm_chain_losses


def _train(cell, trainer, steps=2):
    scopes = []
    for _ in range(steps):
        with hb.batching() as scope:
            loss = hb.add_n(lstm_chain_losses(cell, (2, 3, 5)))
        loss.backward()
        trainer.step(3)
        scopes.append(scope)
    return scopes


def test_profile_adds_up_every_scopes_batches_and_phases(tmp_path):
    cell = nn.LSTMCell(4, 4, seed=0)
    cell.hybridize()
    trainer = hb.Trainer(cell.parameters(), "sgd", {"learning_rate": 0.1})
    _train(cell, trainer, 1)                 # traced and compiled before the profile
    with hb.profile() as prof:
        scopes = _train(cell, trainer)
    assert set(prof.phases()) == {"recording", "scheduling", "forward", "backward", "update"}
    top = prof.top()
    assert sum(r["batches"] for r in top) == sum(s.stats.batches for s in scopes)
    assert sum(r["nodes"] for r in top) == sum(s.stats.nodes for s in scopes)
    lstm = next(r for r in top if r["signature"].startswith("block:LSTMCell"))   # the order is by time
    assert lstm["forward_seconds"] > 0
    assert lstm["backward_seconds"] > 0
    path = prof.chrome_trace(tmp_path / "t.json")
    events = json.loads(path.read_text())["traceEvents"]
    assert len(events) == len(prof.events)
    assert all(e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 for e in events)
    batches = [e for e in events if e["cat"] in ("forward", "backward")]
    assert {e["name"] for e in batches} >= {"block:LSTMCell", "sum", "add_n"}
    assert "block:LSTMCell" in str(prof)


def test_nothing_is_kept_outside_a_profile_and_blocks_do_not_nest():
    prof = hb.profile()
    with hb.batching():
        hb.tanh(np.ones(2, np.float32))
    assert prof.events == [] and prof.top() == []
    with prof:
        with pytest.raises(RuntimeError, match="neither nest nor overlap"):
            with hb.profile():
                pass


def test_events_past_max_events_are_counted_not_kept():
    with hb.profile(max_events=3) as prof:
        for i in range(3):
            with hb.batching():
                hb.tanh(np.full(2, i, np.float32))
    assert len(prof.events) == 3 and prof.dropped > 0
    assert prof.top()[0]["batches"] == 3         # the sums go on
    assert set(prof.phases()) == {"recording", "scheduling", "forward"}     # the phases' too
    with hb.profile(max_events=0) as none_kept:
        with hb.batching():
            hb.sum(hb.tanh(np.ones(2, np.float32)) * hb.Parameter("w", (2,), init=1.0)).backward()
    assert none_kept.events == [] and none_kept.phases()["backward"] > 0


@pytest.mark.parametrize("bad", [-1, 2.5, None])
def test_max_events_must_be_a_count(bad):
    with pytest.raises(ValueError, match="max_events must be an int >= 0"):
        hb.profile(max_events=bad)


def test_the_trace_of_three_w1_training_steps_holds_the_documented_events(tmp_path):
    from hybridbatch_workloads.bench.registry import make_workload
    wl = make_workload("W1", hidden=8)
    wl.hybridize()
    trainer = hb.Trainer(wl.parameters(), "sgd", {"learning_rate": 0.05})
    pool = list(wl.train_instances())
    with hb.profile() as prof:
        for i in range(3):
            with hb.batching():
                loss = wl.minibatch_loss(pool[8 * i:8 * (i + 1)])
            loss.backward()
            trainer.step(8)
    events = json.loads(prof.chrome_trace(tmp_path / "w1.json").read_text())["traceEvents"]
    phases = [e["name"] for e in events if e["cat"] == "phase"]
    assert phases.count("update") == 3 and phases.count("backward") == 3
    assert set(phases) == {"recording", "scheduling", "forward", "backward", "update"}
    batches = [e for e in events if e["cat"] in ("forward", "backward")]
    assert {e["cat"] for e in batches} == {"forward", "backward"}
    assert {e["name"] for e in batches} == {r["signature"].split("(")[0] for r in prof.top(10 ** 6)}
    assert [e["cat"] for e in events if e["name"] == "weight gradients"] == ["weights"] * 3
    assert all(e["args"]["nodes"] >= 1 for e in batches)


def test_a_backward_that_raised_charges_no_later_time_to_its_batch():
    """The batch it was timing stayed open, and the next backward closed it: a py_func's
    backward showed the second that passed in between."""
    W = hb.Parameter("W", (4, 4), init=0.1)
    with hb.profile() as prof:
        with hb.batching():
            y = hb.sum(hb.py_func(lambda a: a * 2, W @ hb.array(np.ones(4, np.float32)), out_shape=(4,)))
        with pytest.raises(NotImplementedError):
            y.backward()
        time.sleep(0.3)
        with hb.batching():
            z = hb.sum(hb.tanh(W @ hb.array(np.ones(4, np.float32))))
        z.backward()
    assert max(row["backward_seconds"] for row in prof.top(10)) < 0.2


def test_the_deferred_weight_products_are_timed_apart_from_every_batch(monkeypatch):
    """Backward sums each weight's G^T X after its batches; the profile charged that time
    to whichever batch ran last (an embedding lookup topped a tagger's backward list)."""
    from hybridbatch.runtime import autograd
    add_parts = autograd._add_parts

    def slow(p, parts, xp):
        time.sleep(0.1)
        add_parts(p, parts, xp)

    monkeypatch.setattr(autograd, "_add_parts", slow)
    table, W = hb.Parameter("E", (5, 4), init=0.1), hb.Parameter("W", (3, 4), init=0.1)
    with hb.profile() as prof:
        with hb.batching():
            loss = hb.add_n([hb.sum(W @ hb.lookup(table, i)) for i in range(3)])
        loss.backward()
    assert prof.weight_gradient_seconds() >= 0.1
    assert all(r["backward_seconds"] < 0.1 for r in prof.top(10))
    assert "weight gradients:" in str(prof)


def test_a_profile_entered_inside_a_scope_counts_from_its_start():
    with hb.batching():
        y = hb.tanh(hb.array(np.ones(3, np.float32)))
        time.sleep(0.3)
        with hb.profile() as prof:
            y.asnumpy()
    assert prof.phases()["recording"] < 0.2
