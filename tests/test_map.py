"""hb.map: per-instance code that reads values suspends at each read, and one flush per
round of reads computes every instance's pending nodes."""
import contextlib
import re
import traceback

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import hybridbatch as hb
from hybridbatch.record import mapping

SETTINGS = dict(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
N = 4


class _Layer(hb.HybridBlock):
    """tanh(W h + b), hybridized: one node per call at block granularity."""

    def __init__(self, W, b):
        super().__init__()
        self.W, self.b = W, b
        self.hybridize()

    def forward(self, h):
        return hb.tanh(self.W @ h + self.b)


def _params():
    rng = np.random.default_rng(0)
    p = {name: hb.Parameter(name, shape, init="normal", dtype=np.float64, rng=rng)
         for name, shape in (("W", (N, N)), ("U", (N, N)), ("b", (N,)))}
    p["layer"] = _Layer(p["W"], p["b"])
    return p


def _trainable(p):
    return {name: v for name, v in p.items() if isinstance(v, hb.Parameter)}


def _grads(params):
    return {name: np.array(p.grad) for name, p in _trainable(params).items()}


def _zero(params):
    for p in _trainable(params).values():
        p.zero_grad()


# ---------------------------------------------------------------------------------------
# Random per-instance programs: chains of ops with reads whose values pick the branch
# ---------------------------------------------------------------------------------------
STEPS = ("lin", "gate", "add_x", "scale", "read", "read")
READS = ("item", "float", "int", "compare", "bool", "asnumpy", "again")


def _program(p, x, seed, log):
    """One instance: a random chain of ops; at each read point the value read picks which
    op comes next, and how many steps a loop runs. Every value read goes to `log`."""
    rng = np.random.default_rng(seed)
    h = hb.tanh(p["W"] @ hb.array(x) + p["b"])
    last = None
    for _ in range(int(rng.integers(2, 10))):
        step = STEPS[rng.integers(len(STEPS))]
        if step == "lin":
            h = p["layer"](h)
        elif step == "gate":
            h = hb.sigmoid(p["U"] @ h) * h
        elif step == "add_x":
            h = h + x
        elif step == "scale":
            h = h * 0.5
        else:
            kind = READS[rng.integers(len(READS))]
            s = hb.sum(h)
            if kind == "item":
                v = s.item()
            elif kind == "float":
                v = float(h[1])
            elif kind == "int":
                v = int(s * 10.0)
            elif kind == "compare":
                v = bool(h[0] > 0.0)
            elif kind == "bool":
                v = bool(h[2] * 10.0)
            elif kind == "asnumpy":
                v = float(h.asnumpy()[3])
            else:                       # a value already read once: computed, no suspension
                v = last if last is not None else s.item()
            log.append(v)
            last = v
            if v > 0:
                h = hb.tanh(p["U"] @ h)
            else:
                for _ in range(int(abs(v) * 3) % 3 + 1):
                    h = h * h + p["b"]
    return hb.sum(h * h)


def _run(p, xs, seeds, batched, policy="tail-last", granularity="op"):
    """(outputs, per-instance read logs, parameter gradients, scope or None)."""
    _zero(p)
    logs = [[] for _ in xs]
    fn = lambda i: _program(p, xs[i], seeds[i], logs[i])   # noqa: E731
    if batched:
        with hb.batching(policy=policy, granularity=granularity) as scope:
            outs = hb.map(fn, range(len(xs)))
            total = hb.add_n(outs)
        total.backward()
    else:
        scope = None
        outs = hb.map(fn, range(len(xs)))
        hb.add_n(outs).backward()
    return [o.item() for o in outs], logs, _grads(p), scope


def _assert_logs_match(got, want, rel):
    """Per instance, the same number of reads with the same values (bools and ints as numbers)."""
    assert [len(log) for log in got] == [len(log) for log in want]
    for i, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(np.array(g, float), np.array(w, float), rtol=rel, atol=1e-12, err_msg=str(i))


@settings(**dict(SETTINGS, max_examples=30))
@given(seeds=st.lists(st.integers(0, 2 ** 31 - 1), min_size=1, max_size=9), data_seed=st.integers(0, 2 ** 16),
       policy=st.sampled_from(["tail-last", "agenda", "depth"]), granularity=st.sampled_from(["op", "block", "auto"]))
def test_random_programs_with_reads_match_eager(seeds, data_seed, policy, granularity):
    """Values, reads and parameter gradients of hb.map in a scope are the eager loop's,
    whatever the policy and granularity."""
    p = _params()
    xs = list(np.random.default_rng(data_seed).normal(size=(len(seeds), N)))
    want, want_logs, want_grads, _ = _run(p, xs, seeds, batched=False)
    got, got_logs, got_grads, scope = _run(p, xs, seeds, batched=True, policy=policy, granularity=granularity)
    _assert_logs_match(got_logs, want_logs, rel=1e-9)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    for name in want_grads:
        np.testing.assert_allclose(got_grads[name], want_grads[name], rtol=1e-9, atol=1e-12, err_msg=name)
    rounds = max(len(log) for log in want_logs)
    assert scope.stats.forced_flushes <= rounds       # one flush per round of reads, not per read


@settings(**SETTINGS)
@given(seeds=st.lists(st.integers(0, 2 ** 31 - 1), min_size=2, max_size=6), reader=st.integers(0, 5),
       data_seed=st.integers(0, 2 ** 16))
def test_a_read_in_one_instance_never_changes_anothers_values(seeds, reader, data_seed):
    """The same instances with and without extra reads (and the branches they take) in one of
    them: every other instance's reads and result are the same."""
    p = _params()
    reader %= len(seeds)
    xs = list(np.random.default_rng(data_seed).normal(size=(len(seeds), N)))
    base, base_logs, _, _ = _run(p, xs, seeds, batched=True)

    def reading(i, logs):
        if i != reader:
            return _program(p, xs[i], seeds[i], logs[i])
        h = p["W"] @ hb.array(xs[i])
        for _ in range(3):
            h = hb.tanh(h) if hb.sum(h).item() > 0 else h * 0.5
        return hb.sum(h)

    logs = [[] for _ in xs]
    with hb.batching():
        outs = hb.map(lambda i: reading(i, logs), range(len(xs)))
    for i in range(len(xs)):
        if i != reader:
            _assert_logs_match([logs[i]], [base_logs[i]], rel=1e-12)
            assert outs[i].item() == pytest.approx(base[i], rel=1e-12), i


# ---------------------------------------------------------------------------------------
# Batching: one flush per round of reads; the scope's bound over all its flushes
# ---------------------------------------------------------------------------------------
def _greedy(p, x, reads):
    """`reads` steps, each choosing its op from the value it reads: a decoder's loop."""
    h = hb.tanh(p["W"] @ hb.array(x))
    for _ in range(reads):
        h = hb.tanh(p["W"] @ h) if h[0] > 0 else hb.tanh(p["U"] @ h)
    return hb.sum(h)


def test_reads_in_a_map_force_one_flush_per_round():
    p = _params()
    xs = list(np.random.default_rng(1).normal(size=(16, N)))
    with hb.batching() as mapped:
        hb.map(lambda x: _greedy(p, x, 5), xs)
    with hb.batching() as looped:
        [_greedy(p, x, 5) for x in xs]
    assert mapped.stats.forced_flushes == 5 and looped.stats.forced_flushes == 16 * 5
    assert mapped.stats.flushes == 6 and looped.stats.flushes == 16 * 5 + 1
    assert mapped.stats.lower_bound == looped.stats.lower_bound
    assert mapped.stats.batches < looped.stats.batches / 8


def test_lower_bound_spans_the_scope_not_each_flush():
    """A loop that reads after every instance flushes once per instance: each flush alone is
    optimal, the scope is not; its bound says what batching the whole graph could reach."""
    p = _params()
    xs = list(np.random.default_rng(2).normal(size=(8, N)))
    with hb.batching() as looped:
        for x in xs:
            hb.sum(hb.tanh(p["W"] @ hb.tanh(p["W"] @ hb.array(x)))).item()
    per_flush = sum(plan.lower_bound() for plan in looped.plans)
    assert looped.stats.batches == per_flush
    assert looped.stats.lower_bound < per_flush / 4
    with hb.batching() as mapped:
        hb.map(lambda x: hb.sum(hb.tanh(p["W"] @ hb.tanh(p["W"] @ hb.array(x)))).item(), xs)
    assert mapped.stats.batches == mapped.stats.lower_bound == looped.stats.lower_bound


def test_reads_of_computed_values_do_not_suspend():
    p = _params()
    with hb.batching() as scope:
        shared = hb.sum(hb.tanh(p["W"] @ hb.array(np.ones(N))))
        shared.asnumpy()
        outs = hb.map(lambda k: shared * k if shared > 0 else shared * -k, [1.0, 2.0, 3.0])
    assert scope.stats.forced_flushes == 1 and scope.stats.flushes == 2
    assert outs[2].item() == pytest.approx(3.0 * abs(shared.item()), rel=1e-12)


def test_nested_map_batches_with_the_outer_instances():
    p = _params()
    xs = list(np.random.default_rng(3).normal(size=(4, N)))

    def outer(x):
        return hb.map(lambda k: _greedy(p, x * k, 3), [1.0, 2.0])

    eager = [[o.item() for o in pair] for pair in hb.map(outer, xs)]
    with hb.batching() as scope:
        outs = hb.map(outer, xs)
    np.testing.assert_allclose([[o.item() for o in pair] for pair in outs], eager, rtol=1e-12)
    assert scope.stats.forced_flushes == 3


def test_instance_greenlets_are_parked_and_reused_without_holding_results(monkeypatch):
    """A finished instance's greenlet runs the next map's instances; parked, it keeps no
    result (which would keep its scope and arenas alive), and at most POOL_LIMIT wait."""
    import gc
    import weakref

    monkeypatch.setattr(mapping, "_parked", type(mapping._parked)())    # this thread's pool, empty
    monkeypatch.setattr(mapping, "POOL_LIMIT", 3)

    class Result:
        pass

    def instance(x):
        (hb.array(np.float64(x)) * 2.0).item()
        return Result()

    with hb.batching() as scope:
        results = hb.map(instance, range(5))
    parked = list(mapping._parked.pool)
    assert len(parked) == 3 and not any(g.dead for g in parked)
    dropped = [weakref.ref(r) for r in results] + [weakref.ref(scope)]
    del results, scope
    gc.collect()
    assert all(ref() is None for ref in dropped)
    with hb.batching():
        hb.map(instance, range(2))
    assert mapping._parked.pool[:1] == parked[:1] and len(mapping._parked.pool) == 3


def test_a_finished_threads_parked_greenlets_are_freed():
    import gc
    import threading
    import weakref

    parked = []

    def instance(x):
        return (hb.array(np.float64(x)) * 2.0).item()

    def work():
        with hb.batching():
            assert hb.map(instance, range(20)) == [2.0 * x for x in range(20)]
        parked.extend(weakref.ref(g) for g in mapping._parked.pool)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gc.collect()
    assert len(parked) == 60 and all(ref() is None for ref in parked)


def test_each_instance_starts_in_an_empty_context_on_a_reused_greenlet():
    import contextvars
    seen = contextvars.ContextVar("seen", default=None)

    def instance(x):
        before = seen.get()
        seen.set(x)
        (hb.array(np.float64(x)) * 1.0).item()
        return before, seen.get()

    with hb.batching():
        first = hb.map(instance, [1, 2])
        second = hb.map(instance, [3, 4])
    assert first == [(None, 1), (None, 2)] and second == [(None, 3), (None, 4)]


def test_outside_a_scope_map_is_a_plain_loop(monkeypatch):
    monkeypatch.setattr(mapping, "greenlet", None)     # no greenlet needed there
    assert hb.map(lambda x: x * 2, (i for i in range(3))) == [0, 2, 4]


def test_without_greenlet_a_map_in_a_scope_names_the_extra(monkeypatch):
    monkeypatch.setattr(mapping, "greenlet", None)
    with hb.batching():
        with pytest.raises(ImportError, match=r"pip install hybridbatch\[map\]"):
            hb.map(lambda x: x, [1])


def test_reads_that_work_eagerly_work_batched():
    """int(), float(), bool(), item() and <, <=, >, >= read the numbers in both modes."""
    def reads(x):
        return (int(x * 2.0), float(x), bool(x), x.item(), x < 1.0, x <= 0.5, 2.0 > x, x >= x * 2.0)

    values = [np.float64(0.5), np.float64(-3.25), np.float64(0.0)]
    eager = [reads(hb.array(v)) for v in values]
    with hb.batching():
        batched = hb.map(lambda v: reads(hb.array(v)), values)
    assert batched == eager == [reads(v) for v in values]


# ---------------------------------------------------------------------------------------
# Failures
# ---------------------------------------------------------------------------------------
def _fails_on_three(x):
    v = hb.array(np.float64(x))
    if (v * 1.0).item() == 3.0:
        raise ValueError(f"bad instance {x}")
    return (v * 2.0).item()


@pytest.mark.parametrize("batched", [True, False])
def test_an_instance_error_is_raised_at_its_line_naming_it(batched):
    """Outside a scope too: the eager map had stopped at the first error, without notes or
    map_results, so recovery code that works batched failed eagerly."""
    with (hb.batching() if batched else contextlib.nullcontext()):
        with pytest.raises(ValueError, match="bad instance 3") as info:
            hb.map(_fails_on_three, [0, 1, 3, 4, 3])
    e = info.value
    assert "raised by hb.map instance 2 of 5: 3" in e.__notes__[0]
    assert "instances 4 raised too" in e.__notes__[1]
    assert e.map_results == [0.0, 2.0, None, 8.0, None]
    assert sorted(e.map_errors) == [2, 4]
    frames = traceback.extract_tb(e.__traceback__)
    assert frames[-1].name == "_fails_on_three" and "raise ValueError" in frames[-1].line


def _fails_in_rounds(x):
    """Instance 2 raises in the first round of reads, instance 0 in the third."""
    v = hb.array(np.float64(x))
    for r in range(3):
        v = v + 1.0
        v.item()
        if (x, r) == (2, 0):
            raise ValueError("instance 2, round 0")
        if (x, r) == (0, 2):
            raise KeyError("instance 0, round 2")
    return x


@pytest.mark.parametrize("batched", [True, False])
def test_of_several_failing_instances_the_lowest_index_is_raised(batched):
    """As a plain loop meets them, however the rounds ran: batched had raised the one that
    failed in the earliest round, so `except KeyError` caught in one mode only."""
    with (hb.batching() if batched else contextlib.nullcontext()):
        with pytest.raises(KeyError) as info:
            hb.map(_fails_in_rounds, range(3))
    assert list(info.value.map_errors) == [0, 2]
    assert info.value.map_results == [None, 1, None]


def test_an_instance_raising_greenlet_exit_ends_with_it_and_the_map_returns():
    """GreenletExit ends a greenlet quietly, handing the exception to its parent as a
    value: inside a scope the map keeps it as the instance's exception, and the other
    instances run to their end."""
    from greenlet import GreenletExit

    def stops(x):
        (hb.array(np.float64(x)) * 1.0).item()
        if x == 1:
            raise GreenletExit("instance 1 stops")
        return x

    with hb.batching():
        with pytest.raises(GreenletExit, match="instance 1 stops") as info:
            hb.map(stops, range(3))
    assert info.value.map_results == [0, None, 2]


def test_a_killed_greenlet_stops_its_map_outside_a_scope_at_once():
    """A kill (GreenletExit thrown into the greenlet running the map) is not an instance's
    Exception: the plain loop stops at it, and the later instances do not run."""
    from greenlet import GreenletExit, greenlet
    ran = []

    def instance(x):
        ran.append(x)
        greenlet.getcurrent().parent.switch()      # suspended here when the kill comes
        return x

    worker = greenlet(lambda: hb.map(instance, range(3)))
    worker.switch()
    worker.throw(GreenletExit("killed"))
    assert worker.dead and ran == [0]


def test_a_contextvar_set_in_an_instance_does_not_keep_its_scope_alive():
    """A parked greenlet's context was cleared only when it was handed its next instance:
    a contextvar holding a value kept the scope and its arenas alive until then."""
    import contextvars
    import gc
    import weakref
    held = contextvars.ContextVar("held")

    def instance(x):
        h = hb.tanh(hb.array(np.full(4, x, np.float32)))
        held.set(h)
        return float(hb.sum(h))

    with hb.batching() as scope:
        hb.map(instance, range(4))
    ref = weakref.ref(scope)
    del scope
    gc.collect()
    assert ref() is None


class _UnprintableInstance:
    def __repr__(self):
        raise RuntimeError("repr broken")


def test_an_instance_whose_repr_raises_still_raises_its_own_error():
    with hb.batching():
        with pytest.raises(ZeroDivisionError) as info:
            hb.map(lambda x: 1 / 0, [_UnprintableInstance()])
    assert "_UnprintableInstance" in info.value.__notes__[0]


@pytest.mark.parametrize("batched", [True, False])
def test_seed_inside_an_instance_is_refused(batched):
    """It replaced the process-wide stream, which the instance does not draw from: its
    draws did not change, and the code after the map drew from the new seed."""
    def reseeds(x):
        hb.seed(x)

    with (hb.batching() if batched else contextlib.nullcontext()):
        with pytest.raises(RuntimeError, match="seed before the map"):
            hb.map(reseeds, [1])


def test_an_error_a_kernel_raises_in_a_rounds_flush_names_its_batch_and_line():
    def check(a):
        if a[0] > 0.5:
            raise ValueError("bad row")
        return a

    def instance(i):
        y = hb.py_func(check, hb.array(np.full(2, i, np.float32)), out_shape=(2,))
        return float(hb.sum(y))

    with pytest.raises(ValueError, match="bad row") as info:
        with hb.batching(check_numerics=True):
            hb.map(instance, range(-1, 2))
    assert re.search(r"while the flush ran a batch of \d+ py_func.*recorded at .*test_map.py:\d+",
                     info.value.__notes__[-1])


@pytest.mark.filterwarnings("ignore:invalid value encountered in log")
def test_a_failed_flush_stops_every_instance():
    """A flush that fails abandons the scope: every suspended instance gets GreenletExit at
    its read, so its `finally` blocks run, and the flush's error is raised."""
    finished = []

    def instance(x):
        try:
            v = hb.log(hb.array(np.float64(x)))
            return v.item()
        finally:
            finished.append(x)

    with pytest.raises(hb.NumericsError):
        with hb.batching(check_numerics=True):
            hb.map(instance, [1.0, -1.0, 2.0])
    assert sorted(finished) == [-1.0, 1.0, 2.0]


def test_keyboard_interrupt_stops_the_other_instances():
    stopped = []

    def instance(x):
        try:
            v = hb.array(np.float64(x)) * 2.0
            v.item()
            if x == 1:
                raise KeyboardInterrupt
            v.item()
            (v * 3.0).item()
            return x
        finally:
            stopped.append(x)

    with hb.batching():
        with pytest.raises(KeyboardInterrupt):
            hb.map(instance, [0, 1, 2])
    assert sorted(stopped) == [0, 1, 2]


class _Reads(hb.HybridBlock):
    def __init__(self):
        super().__init__()
        self.hybridize()

    def forward(self, x):
        return x * 2.0 if (x * 1.0).item() > 0 else x


def test_a_read_in_a_traced_forward_says_to_read_outside_the_block():
    block = _Reads()
    for granularity in ("op", "block"):
        with hb.batching(granularity=granularity):
            with pytest.raises(hb.ScopeError, match="read it outside the block"):
                hb.map(lambda x: block(hb.array(x)), [np.ones(2)])


def test_rounds_of_one_structure_reuse_the_first_rounds_schedule():
    """Each round sits a step deeper than the last; the cache keys depths from the flush's
    shallowest node, so the rounds after the first hit it (they had never matched)."""
    W = hb.Parameter("W", (8, 8), rng=np.random.default_rng(0))

    def decode(i):
        h = hb.array(np.random.default_rng(i).standard_normal(8).astype(np.float32))
        for _ in range(10):
            h = hb.tanh(W @ h)
            if float(hb.sum(h)) > 100:
                break
        return h

    with hb.settings(plan_cache_size=1000), hb.batching() as scope:
        hb.map(decode, range(8))
    assert scope.stats.flushes == 10 and scope.stats.plan_cache_hits >= 8
