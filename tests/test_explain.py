"""scope.explain(): batches per signature, and why each node that ran alone did."""
import json

import numpy as np

import hybridbatch as hb
from hybridbatch import nn
from helpers import lstm_chain_losses


def _reasons(scope):
    return [s.reason for s in scope.explain().singles]


def test_counts_add_up_to_the_scope_stats_and_the_dict_is_json():
    cell = nn.LSTMCell(4, 4, seed=0)
    cell.hybridize()
    with hb.batching() as scope:
        hb.add_n(lstm_chain_losses(cell, (2, 3, 5)))
    report = scope.explain()
    assert sum(s.batches for s in report.signatures) == scope.stats.batches == report.batches
    assert sum(s.nodes for s in report.signatures) == scope.stats.nodes
    lstm = next(s for s in report.signatures if s.description.startswith("block:LSTMCell"))
    assert lstm.description.endswith("-> ((4,), (4,))")        # h and c
    assert (lstm.batches, lstm.nodes, lstm.smallest, lstm.largest) == (5, 10, 1, 3)
    assert lstm.bytes_written == 10 * 4 * 4 * 2         # h and c, float32
    assert json.loads(json.dumps(report.as_dict()))["batches"] == scope.stats.batches
    assert "block:LSTMCell" in str(report)


def test_each_reason_a_node_ran_alone():
    cell = nn.ChildSumTreeLSTMCell(4, 4, seed=0)
    cell.hybridize()
    x = np.ones(4, np.float32)
    with hb.batching() as scope:
        leaves = [cell(x) for _ in range(3)]
        cell(x, *leaves[0])                               # arity 3, twice
        cell(x, *leaves[1])
        cell(x, *leaves[0], *leaves[1])                   # arity 5, once
        hb.tanh(hb.tanh(np.ones(2, np.float32)))           # a chain: tanh (2,) in two batches
        hb.tanh(np.ones(6, np.float32))                    # tanh on a shape of its own
        hb.py_func(np.negative, hb.sum(leaves[2][0]), out_shape=())
        hb.exp(np.ones(3, np.float32)).asnumpy()          # a read forces the flush
        hb.log(np.ones(3, np.float32))
    reasons = "\n".join(_reasons(scope))
    assert "an arity of its own (5 operands)" in reasons and "also ran with 1, 3" in reasons
    assert "its signature ran in 2 batches" in reasons
    # the chain's signature is also one no other tanh has: both are named
    assert "a shape of its own: tanh also ran on ((6,),) in this flush (shapes never batch together: pad to " \
           "one length, or keep per-instance lengths as lists" in reasons
    assert "hb.max of a list); and its signature ran in 2 batches" in reasons
    assert "a shape of its own: tanh also ran on ((2,),)" in reasons
    assert "py_func never batches" in reasons
    assert "the only node of its signature in the scope" in reasons       # log, after the read
    assert scope.stats.forced_flushes == 1


def test_signatures_alike_but_for_their_parameters_are_named_as_apart():
    """Two instances of one block, and two weights of one shape: each set of Parameters runs
    in batches of its own, which the report names (without the Parameter ids)."""
    experts = [nn.Dense(3, 4, seed=k) for k in range(2)]
    for e in experts:
        e.hybridize()
    w1, w2 = hb.Parameter("w1", (3, 4)), hb.Parameter("w2", (3, 4))
    x = np.ones(4, np.float32)
    with hb.batching() as scope:
        ys = [experts[0](x), experts[0](2 * x), experts[1](x), w1 @ x, w1 @ (2 * x), w2 @ x]
        hb.add_n([hb.sum(y) for y in ys])
    report = scope.explain()
    apart = {a.description: (a.signatures, a.batches, a.nodes) for a in report.apart}
    assert apart == {"block:Dense((4,); ()) -> (3,)": (2, 2, 3), "matmul(param(3, 4), (4,); ()) -> (3,)": (2, 2, 3)}
    reasons = _reasons(scope)
    assert sum("Parameters of its own: block:Dense also ran with other Parameters" in r for r in reasons) == 1
    assert sum("Parameters of its own: matmul also ran with other Parameters" in r for r in reasons) == 1
    assert "ran apart because their Parameters differ" in str(report)


def test_an_op_under_a_shape_per_length_is_named_with_the_axis_that_varies():
    """Its nodes batch within each length, so no node runs alone and the bound counts each
    length apart: nothing else in the report said that the lengths split the op."""
    W = hb.Parameter("W", (4, 4), init="uniform", rng=np.random.default_rng(0))
    with hb.batching() as scope:
        losses = []
        for n in [3, 4, 5, 6] * 3:
            x = hb.array(np.ones((n, 4), np.float32))
            losses.append(hb.sum(hb.softmax(hb.sum(hb.tanh(x @ W), axis=1))))
        hb.add_n(losses).asnumpy()
        hb.tanh(np.ones(4, np.float32)).asnumpy()        # another rank: not one of the four
    report = scope.explain()
    assert {s.description.split("(")[0] for s in report.singles} == {"add_n", "tanh"}    # the sum, the other rank
    by_shape = {a.op: (a.shapes, a.batches, a.nodes, a.axes) for a in report.by_shape}
    assert by_shape["softmax"] == (4, 4, 12, ((0,),))
    assert by_shape["tanh"] == (4, 4, 12, ((0,),))
    assert by_shape["matmul"] == (4, 4, 12, ((0,), ()))
    assert "  softmax: 4 shapes (operand 0 axis 0 varies), 4 batches, 12 nodes" in str(report)


def test_shapes_of_different_dtypes_are_not_counted_as_one_op_apart_by_shape():
    """Two lengths in each of two dtypes are two shape sets, not four: the dtypes split the
    op as well, and the report does not say the shapes did."""
    with hb.batching() as scope:
        for dtype in (np.float32, np.float64):
            hb.add_n([hb.sum(hb.tanh(np.ones(n, dtype))) for n in (3, 4) * 2]).asnumpy()
    assert scope.explain().by_shape == []


def test_two_blocks_of_one_class_count_each_shape_set_once():
    class Scale(hb.HybridBlock):
        def forward(self, x):
            return hb.tanh(x) * 2.0

    first, second = Scale(), Scale()
    first.hybridize()
    second.hybridize()
    with hb.batching(granularity="block") as scope:
        outs = [block(np.ones(n, np.float32)) for block in (first, second) for n in (2, 3, 4, 5)]
        hb.add_n([hb.sum(o) for o in outs]).asnumpy()
    (found,) = [a for a in scope.explain().by_shape if a.op == "block:Scale"]
    assert (found.shapes, found.batches, found.nodes, found.axes) == (4, 8, 8, ((0,),))


def test_a_tree_lstm_has_no_op_apart_by_shape():
    from helpers import lstm_chain_losses
    cell = hb.nn.LSTMCell(4, 4, seed=0)
    cell.hybridize()
    with hb.batching() as scope:
        hb.add_n(lstm_chain_losses(cell, (2, 3, 5, 7, 9))).asnumpy()
    assert scope.explain().by_shape == []


def test_a_rate_per_instance_is_named_as_a_signature_per_value():
    x = np.ones(3, np.float32)
    with hb.batching() as scope:
        hb.add_n([hb.sum(hb.dropout(hb.array(x * k), k / 4)) for k in (1.0, 2.0, 3.0)])
    reasons = _reasons(scope)
    assert sum("attributes of its own: dropout also ran with other attributes" in r
               and "a signature per value: keep to a few rates" in r for r in reasons) == 3


def test_a_node_alone_in_a_flush_a_read_forced():
    with hb.batching() as scope:
        for i in range(3):
            hb.exp(np.full(2, i, np.float32)).asnumpy()   # one read per instance: nothing batches
    report = scope.explain()
    assert report.forced_flushes == 3 == len(report.singles)
    assert all("the only such node in its flush, 2 more in other flushes, flushes that reads forced" in s.reason
               for s in report.singles)
    assert "3 forced by reads" in str(report)


def test_a_tail_after_the_last_read_of_an_hb_map_instance_is_named_as_split_by_rounds():
    """Instances that halt in different rounds record their losses in different flushes: the
    report says the rounds split them, and where to record such a tail instead."""
    cell, out = nn.Dense(4, 4, activation="tanh", seed=0), nn.Dense(2, 4, seed=1)
    cell.hybridize()
    out.hybridize()

    def halt_after(steps):
        h = cell(np.ones(4, np.float32))
        for _ in range(steps):
            h.asnumpy()                                   # a read per step: a round per step
            h = cell(h)
        return hb.pick_neg_log_softmax(out(h), 0)         # the tail, after the last read

    with hb.batching() as scope:
        hb.add_n(hb.map(halt_after, [1, 2, 3]))
    tails = [s.reason for s in scope.explain().singles if s.description.startswith("pick_neg_log_softmax")]
    assert len(tails) == 3
    assert all("more in other flushes: each hb.map round's flush batches what its instances recorded" in r
               and "compute it after hb.map" in r for r in tails)
    assert scope.stats.forced_flushes == 3


def test_a_split_is_named_by_the_flushes_its_own_signature_ran_in():
    """A scope with hb.map rounds and plain reads: nodes split by the reads are said so."""
    with hb.batching() as scope:
        hb.map(lambda x: hb.tanh(hb.array(x)).asnumpy(), [np.ones(2, np.float32)] * 2)     # a map round
        for i in range(2):
            hb.exp(np.full(3, i, np.float32)).asnumpy()       # alone in flushes that reads forced
    reasons = [s.reason for s in scope.explain().singles if s.description.startswith("exp")]
    assert len(reasons) == 2 and all("flushes that reads forced" in r for r in reasons)


def test_rows_gathered_by_index_are_counted():
    with hb.batching() as scope:
        hs = [hb.tanh(np.full(3, i, np.float32)) for i in range(4)]     # one batch
        [hb.exp(h) for h in hs]                           # reads its rows in one order,
        [hb.sigmoid(h) for h in reversed(hs)]             # and in the other: one of them copies
        w = hb.Parameter("w", (3,), init=1.0)
        [h * w for h in hs]                               # a shared Parameter is never gathered
    gathered = {s.description.split("(")[0]: s.bytes_gathered for s in scope.explain().signatures}
    assert sorted([gathered["exp"], gathered["sigmoid"]]) == [0, 4 * 3 * 4]
    assert gathered["mul"] <= 4 * 3 * 4                   # the h rows at most, never w


def test_a_tree_lstm_with_its_own_classifier_lists_the_classifier_and_loss_batches():
    cell, classifier = nn.TreeLSTMCell(4, 4, seed=0), nn.Dense(3, 4, seed=1)
    cell.hybridize()
    classifier.hybridize()

    def encode(depth, losses):
        if depth == 0:
            h, c = cell(np.ones(4, np.float32))
        else:
            h, c = cell(encode(depth - 1, losses), encode(depth - 2 if depth > 1 else 0, losses))
        losses.append(hb.pick_neg_log_softmax(classifier(h), depth % 3))
        return h, c

    with hb.batching() as scope:
        losses = []
        for depth in (1, 2, 3):
            encode(depth, losses)
        hb.add_n(losses)
    names = [s.description for s in scope.explain().signatures]
    assert any(n.startswith("block:Dense") for n in names)
    assert any(n.startswith("pick_neg_log_softmax") for n in names)
    assert any(n.startswith("block:TreeLSTMInternal") for n in names)


def test_a_py_func_node_is_named_with_its_line():
    with hb.batching() as scope:
        x = hb.sum(hb.tanh(np.ones(3, np.float32)))
        hb.py_func(np.negative, x, out_shape=())          # the line explain() names
    (single,) = [s for s in scope.explain().singles if s.description.startswith("py_func")]
    assert "py_func never batches" in single.reason
    assert single.reason.endswith(f"test_explain.py:{_line_of('hb.py_func(np.negative, x')}")


def _line_of(text):
    """The number of this file's first line holding `text`, this helper's own lines aside."""
    lines = open(__file__).read().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line and "_line_of" not in line)


def test_seconds_per_signature_where_a_profile_timed_the_batches():
    cell = nn.LSTMCell(4, 4, seed=0)
    cell.hybridize()

    def run():
        with hb.batching() as scope:
            (loss,) = lstm_chain_losses(cell, (3,))
        loss.backward()
        return scope.explain()

    plain = run()
    assert all(s.forward_seconds is None and s.backward_seconds is None for s in plain.signatures)
    with hb.profile():
        timed = run()
    lstm = next(s for s in timed.signatures if s.description.startswith("block:LSTMCell"))
    assert lstm.forward_seconds > 0 and lstm.backward_seconds > 0


def test_a_chain_of_a_signature_that_batched_elsewhere_is_not_called_its_own():
    """Only a signature that never ran two nodes in one batch is named as one no other node
    shares; a chain's last step of a shared shape is the chain's."""
    with hb.batching() as scope:
        for depth in (1, 1, 3):
            h = hb.array(np.ones(2, np.float32))
            for _ in range(depth):
                h = hb.tanh(h)
        hb.tanh(np.ones(6, np.float32))
    reasons = "\n".join(_reasons(scope))
    assert "its signature ran in 3 batches (5 nodes)" in reasons
    assert "; and its signature ran in 3 batches" not in reasons


def test_a_signature_the_policy_spread_past_its_longest_chain_is_named():
    """A CRF's forward pass over a GRU's emissions: critical path runs the emission layer
    once per step (its nodes never depend on each other), which the report did not say."""
    rnn, out = nn.GRUCell(3, 3, seed=2), nn.Dense(2, 3, seed=3)
    rnn.hybridize()
    out.hybridize()
    trans = hb.Parameter("trans", (2, 2), rng=np.random.default_rng(4))

    def loss(xs):
        h, emissions = hb.array(np.zeros(3, np.float32)), []
        for x in xs:
            h = rnn(x, h)
            emissions.append(out(h))
        alpha = emissions[0]
        for e in emissions[1:]:
            alpha = hb.logsumexp(hb.expand_dims(alpha, 1) + trans, axis=0) + e
        return hb.logsumexp(alpha)

    rng = np.random.default_rng(0)
    data = [[rng.standard_normal(3).astype(np.float32) for _ in range(n)] for n in (2, 3, 4, 5, 6, 6)]
    with hb.batching(policy="critical-path", granularity="block") as scope:
        hb.add_n([loss(xs) for xs in data])
    report = scope.explain()
    dense = next(s for s in report.signatures if s.description.startswith("block:Dense"))
    assert dense.chain == 1 and dense.flushes == 1 and dense.batches > 1
    assert f"block:Dense((3,); ()) -> (2,): {dense.batches} batches, its longest chain 1" in str(report)
    # the advice counts the same flushes under the other quick policies, the scope's own first
    counts = report.policies
    assert list(counts)[0] == "critical-path" and counts["critical-path"] == report.batches
    best = min(counts, key=counts.get)
    assert counts[best] < report.batches and f'policy="{best}" runs them in {counts[best]}' in str(report)
    with hb.batching(policy="greedy-frontier", granularity="block") as scope:
        hb.add_n([loss(xs) for xs in data])
    assert "ran in more batches than their longest chain" not in str(scope.explain())


def test_a_flush_whose_kernel_raised_is_named_apart_from_the_counts():
    """The flushes that ran make the figures; the one that raised is named after them, with
    its exception, so the counts and the lower bound describe the same nodes."""
    def fails(x):
        raise ValueError("no numbers today")

    scope = hb.batching()
    try:
        with scope:
            hb.exp(np.ones(2, np.float32)).asnumpy()
            ys = [hb.tanh(np.full(2, i, np.float32)) for i in range(3)]
            hb.py_func(fails, ys[0], out_shape=(2,)).asnumpy()
    except ValueError:
        pass
    report = scope.explain()
    assert (report.flushes, report.forced_flushes, report.nodes, report.batches) == (1, 1, 1, 1)
    assert scope.stats.lower_bound == report.batches
    assert report.failed == "flush 1 raised ValueError: no numbers today; its 4 nodes in 2 batches are not counted above"
    assert str(report).endswith(report.failed)


def test_recording_that_outweighs_the_work_of_primitive_ops_suggests_a_hybridized_block():
    """Plain hb ops record one Python call a node: a tagger written that way ran at 5x eager
    where the same math as one hybridized block ran at 17x, and the report said nothing."""
    from hybridbatch.runtime.explain import SignatureReport, _recording_hint

    def stats(record, nodes=5000):
        return hb.Stats(nodes=nodes, batches=10, lower_bound=10, flushes=1, forced_flushes=0, record_seconds=record,
                        schedule_seconds=0.01, execute_seconds=0.01, backward_seconds=0.01, plan_cache_hits=0)

    def report(name):
        return SignatureReport(f"{name}((4,); ()) -> (4,)", 1, 4, 4, 4, 4, 0, 64, None, None, 1, 1)

    hint = _recording_hint(stats(0.02), [report("tanh")])
    assert hint.startswith("recording took 0.0200 s, scheduling, running and backward 0.0300 s: 5000 nodes")
    assert "hybridize()" in hint
    assert _recording_hint(stats(0.01), [report("tanh")]) is None             # a third of the time or more
    assert _recording_hint(stats(0.02, nodes=100), [report("tanh")]) is None  # too few to tell
    assert _recording_hint(stats(0.02), [report("tanh"), report("block:Cell")]) is None   # blocks ran
