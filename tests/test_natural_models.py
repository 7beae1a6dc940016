"""The plain formulations (models/natural.py, W1-NATURAL, W2-NATURAL, CHILDSUM): batched losses
and gradients equal eager ones at both granularities, the tree walk, and the harness runs them
(and its cold-start measurement)."""
import numpy as np
import pytest

import hybridbatch as hb
from helpers import check_harness_runs
from hybridbatch_workloads.bench.cli import main as bench_main
from hybridbatch_workloads.bench.harness import Config, run_cold_start
from hybridbatch_workloads.bench.registry import make_workload
from hybridbatch_workloads.bench.workload_natural import ChildSum, ParsedSentence
from hybridbatch_workloads.data import Vocab
from hybridbatch_workloads.models.natural import ChildSumTreeLSTM, dependency_children

NATURAL = ("W1-NATURAL", "W2-NATURAL", "CHILDSUM")


def _tiny(name):
    return make_workload(name, hidden=16, synthetic_train=5, synthetic_dev=2)


@pytest.fixture(scope="module", params=NATURAL)
def workload(request):
    wl = _tiny(request.param)
    wl.hybridize()
    return wl


def _grads(params):
    out = [p.grad.copy() for p in params]
    for p in params:
        p.zero_grad()
    return out


@pytest.mark.parametrize("granularity", ["block", "op"])
def test_minibatch_loss_and_gradients_equal_eager(workload, granularity):
    xs = workload.train_instances()
    params = workload.parameters()
    for p in params:
        p.zero_grad()
    ref = [workload.loss(x) for x in xs]
    for loss in ref:
        loss.backward()
    ref_grads = _grads(params)
    with hb.batching(granularity=granularity) as scope:
        total = workload.minibatch_loss(xs)
    total.backward()
    grads = _grads(params)
    np.testing.assert_allclose(total.item(), sum(r.item() for r in ref), rtol=1e-5)
    for g, r in zip(grads, ref_grads):
        assert np.abs(r).max() > 0
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-6)
    assert scope.stats.batches >= scope.stats.lower_bound > 0


def test_predict_gives_one_logits_per_gold_label(workload):
    x = workload.dev_instances()[0]
    eager = [h.asnumpy() for h in workload.predict(x)]
    with hb.batching(granularity="block"):
        handles = workload.predict(x)
    assert len(handles) == len(workload.gold(x)) == len(eager)
    for h, e in zip(handles, eager):
        np.testing.assert_allclose(h.asnumpy(), e, rtol=1e-5, atol=1e-6)


def test_natural_w1_computes_the_tuned_w1():
    """Same seed, same parameters: the plain and the tuned formulation give the same losses."""
    tuned, natural = _tiny("W1"), _tiny("W1-NATURAL")
    assert [p.shape for p in tuned.parameters()] == [p.shape for p in natural.parameters()]
    for x in tuned.train_instances():
        np.testing.assert_allclose(natural.loss(x).item(), tuned.loss(x).item(), rtol=1e-5)


def test_dependency_children():
    # "the cat sat down": the <- cat, cat <- sat (root), down <- sat
    assert dependency_children([2, 3, 0, 3]) == ((3,), (), (1,), (2, 4), ())


def test_child_sum_cell_runs_every_arity():
    """A root with ten leaf dependents and a chain: arities 0, 1 and 10, batched == eager."""
    model = ChildSumTreeLSTM(Vocab(["a", "b"]), ["X", "Y"], embed=8, hidden=8, seed=0)
    model.hybridize()
    sents = [([1] * 11, dependency_children([0] + [1] * 10), [0] + [1] * 10),
             ([2, 1, 1], dependency_children([0, 1, 2]), [1, 0, 1])]
    eager = [model.sentence_loss(*s).item() for s in sents]
    for granularity in ("block", "op", "auto"):
        with hb.batching(granularity=granularity):
            losses = [model.sentence_loss(*s) for s in sents]
        np.testing.assert_allclose([l.item() for l in losses], eager, rtol=1e-5)
    with pytest.raises(ValueError, match="one tag per token"):
        model.node_losses([1, 2], dependency_children([0, 1]), [0])


def test_child_sum_flops_count_each_arity():
    wl = ChildSum.__new__(ChildSum)
    wl.hidden = 4
    x = ParsedSentence(["a", "b", "c"], ["X"] * 3, [0, 0, 0], [0, 0, 0], dependency_children([0, 1, 1]))
    H = 4
    leaf = 3 * H * H + 17 * H
    root = leaf + 3 * H * H + H * H + 2 * H * H
    assert wl.forward_flops(x) == 2 * (root + 2 * leaf)


@pytest.mark.parametrize("name", NATURAL)
def test_harness_runs_each_natural_workload(name):
    """By its registry name, at its default (block) granularity."""
    check_harness_runs(name)


def test_cold_start_reports_three_passes():
    res = run_cold_start(Config(workload="childsum", hidden=8, batch=3, instances=4,
                                workload_options={"synthetic_train": 12, "synthetic_dev": 2}), progress=False)
    assert res["config"]["granularity"] == "block"
    for part in ("cold", "next", "steady"):
        assert res[part]["instances"] == 4 and res[part]["throughput"] > 0
    assert 0 < res["cold"]["first_minibatch_seconds"] <= res["cold"]["seconds"]
    assert set(res["caches"]) == {"HYBRIDBATCH_CACHE_DIR", "NUMBA_CACHE_DIR"} and "thread_settings" in res["machine"]


def test_cold_is_one_configuration():
    with pytest.raises(SystemExit):
        bench_main(["W1", "--cold", "--sweep", "hidden"])
