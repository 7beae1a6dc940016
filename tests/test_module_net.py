"""W7, the IEP module network: batched runs give eager mode's losses and gradients at every
granularity, the workload runs through the harness and its example trains, it reads the
CLEVR programs when they are present, and a program the model cannot run is refused at the
call."""
import numpy as np
import pytest

from helpers import check_harness_runs, run_example

import hybridbatch as hb
from hybridbatch_workloads.bench.workload_module_net import (W7ModuleNet, forward_execution_speedup, main,
                                                             program_functions)
from hybridbatch_workloads.data import shared_data_dir
from hybridbatch_workloads.data.clevr import CLEVR_FUNCTIONS, ProgramNode, synthetic_programs
from hybridbatch_workloads.models.module_net import ModuleNetwork

CHANNELS, SIDE, ANSWERS = 3, 4, 5


def _questions(n):
    """n short synthetic programs, each with a scene map and an answer."""
    rng = np.random.default_rng(3)
    return [(p, rng.standard_normal((CHANNELS, SIDE, SIDE)).astype(np.float32), i % ANSWERS)
            for i, p in enumerate(synthetic_programs(n, seed=5, min_len=7, max_len=12))]


def _losses_and_grads(net, questions, granularity):
    """Every question's loss and every parameter's gradient, eagerly (granularity None) or batched."""
    params = net.parameters()
    for p in params:
        p.zero_grad()
    if granularity is None:
        losses = [net.loss(*q) for q in questions]
        for loss in losses:
            loss.backward()
    else:
        with hb.batching(granularity=granularity):
            losses = [net.loss(*q) for q in questions]
            hb.add_n(losses).backward()
    return np.array([loss.item() for loss in losses]), [p.grad.copy() for p in params]


@pytest.mark.parametrize("granularity", ["auto", "block", "op"])
def test_batched_programs_give_eager_losses_and_gradients(granularity):
    net = ModuleNetwork(CLEVR_FUNCTIONS, channels=CHANNELS, side=SIDE, answers=ANSWERS, seed=1)
    net.hybridize()
    questions = _questions(6)
    want_losses, want_grads = _losses_and_grads(net, questions, None)
    got_losses, got_grads = _losses_and_grads(net, questions, granularity)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5, atol=1e-6)
    called = {node.function for p, _, _ in questions for node in p}
    assert len(called) > 8 and any(len(node.inputs) == 2 for p, _, _ in questions for node in p)
    assert sum(np.abs(g).sum() > 0 for g in want_grads) > len(called), "the called modules get gradients"
    for got, want in zip(got_grads, want_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_w7_runs_through_the_harness():
    res = check_harness_runs("W7")
    speedup = forward_execution_speedup(res)
    assert speedup["train"] > 0 and speedup["infer"] > 0


@pytest.mark.parametrize("text, message", [
    (None, "No such file"), ("{", "Expecting property name"), ("[]", "not a `python -m hybridbatch.bench` result"),
    ('{"workload": "W7", "config": {}, "batched": {}, "eager": null}', "no eager runs"),
])
def test_the_speedup_command_names_a_file_it_cannot_read(tmp_path, text, message):
    path = tmp_path / "w7.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(SystemExit) as stop:
        main([str(path)])
    assert str(stop.value).startswith(f"{path}: ") and message in str(stop.value)


@pytest.mark.skipif(shared_data_dir() is None or not (shared_data_dir() / "clevr_programs").is_dir(),
                    reason="the shared data (clevr_programs) is absent; set HYBRIDBATCH_DATA")
def test_w7_reads_the_clevr_programs():
    wl = W7ModuleNet(hidden=8, data_dir=shared_data_dir())
    train, dev = wl.train_instances(), wl.dev_instances()
    assert train and dev
    # the sample calls filters without a value as well, which get modules of their own
    assert set(wl.functions) > set(CLEVR_FUNCTIONS)
    wl.hybridize()
    questions = train[:4] + dev[:4]
    with hb.batching():
        batched = [wl.loss(q) for q in questions]
    eager = [wl.loss(q).item() for q in questions]
    np.testing.assert_allclose([f.item() for f in batched], eager, rtol=1e-5)


def test_the_example_trains_eagerly_and_batched_alike():
    done = run_example("module_net.py", "--limit", "16", "--dev", "8", "--hidden", "16", "--batch", "8",
                       "--epochs", "1", "--compare")
    assert done.returncode == 0, done.stderr
    assert "batched epoch 1" in done.stdout and "eager and batched agree" in done.stdout


def test_a_program_the_model_cannot_run_is_refused():
    net = ModuleNetwork({"scene": 0, "unique": 1}, channels=CHANNELS, side=SIDE, answers=ANSWERS)
    scene = np.zeros((CHANNELS, SIDE, SIDE), np.float32)
    with pytest.raises(KeyError, match="no module for function 'count'"):
        net.loss([ProgramNode("scene", ()), ProgramNode("count", (0,))], scene, 0)
    with pytest.raises(ValueError, match=r"node 1 \(unique\) has 2 inputs; its module takes 1"):
        net.loss([ProgramNode("scene", ()), ProgramNode("unique", (0, 0))], scene, 0)
    with pytest.raises(ValueError, match="arities must be 0, 1 or 2"):
        ModuleNetwork({"scene": 3})
    with pytest.raises(ValueError, match="'unique' is called with 2 inputs and elsewhere with 1"):
        program_functions([[ProgramNode("scene", ()), ProgramNode("unique", (0, 0))]])
