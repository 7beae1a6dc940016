"""Fused kernels compiled in the background: a block's batches run its plain steps until its
kernels are ready, with the same numbers, and a batch's backward follows its forward."""
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import hybridbatch as hb
from hybridbatch import nn
from hybridbatch.kernels import compiling, fused
from hybridbatch.kernels.fused import FusedRun
from hybridbatch.nn.cells import TreeLSTMLeaf


class Held:
    """compiling.submit's stand-in: keeps the jobs until the test finishes them (the process
    then compiles the kernels itself, as after a worker's failure, but silently)."""

    def __init__(self):
        self.jobs = []

    def __call__(self, job):
        self.jobs.append(job)
        return job

    def finish(self, error=None):
        for job in self.jobs:
            job.finish(error)


@pytest.fixture
def held(tmp_path, monkeypatch):
    """An empty kernel cache, and background compiles that wait for the test."""
    monkeypatch.setenv("HYBRIDBATCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(fused, "_loaded", {})
    jobs = Held()
    monkeypatch.setattr(compiling, "submit", jobs)
    with hb.settings(compile_in_background=True):
        yield jobs


class Steps:
    """LSTM steps over a few sequences (a bias folded into the gate run, two run outputs),
    recorded, run and differentiated by the caller's schedule."""

    def __init__(self, hidden=8, seed=0):
        self.cell = nn.LSTMCell(hidden, 3, seed=seed)
        self.cell.hybridize()
        rng = np.random.default_rng(seed)
        self.cell.bias.data[:] = rng.standard_normal(self.cell.bias.data.shape)
        self.xs = rng.standard_normal((5, 4, 3)).astype(np.float32)
        self.hidden = hidden

    def record(self, read_c=True, unread=False):
        """The loss of every sequence (entered in a batching scope by the caller); with
        `unread`, also the steps of a sequence no loss reads."""
        losses = []
        for seq in self.xs:
            h = c = np.zeros(self.hidden, np.float32)
            for x in seq:
                h, c = self.cell(x, h, c)
            losses.append(hb.sum(h * h) + (hb.sum(c) if read_c else 0.0))
        if unread:
            h = c = np.zeros(self.hidden, np.float32)
            for x in self.xs[0]:
                h, c = self.cell(2.0 * x, h, c)
        return hb.add_n(losses)

    def grads(self):
        return [p.grad.copy() for p in (self.cell.weight, self.cell.bias)]

    def runs(self):
        return [u for p in self.cell._programs.values() for u in p.op._units or () if isinstance(u, FusedRun)]


def _step(model, **record):
    for p in (model.cell.weight, model.cell.bias):
        p.zero_grad()
    with hb.batching(granularity="block"):
        loss = model.record(**record)
    loss.backward()
    return loss.item(), model.grads()


def _reference(fusion, **record):
    with hb.settings(fusion=fusion, compile_in_background=False):
        return _step(Steps(), **record)


def _assert_agree(got, expected):
    assert got[0] == pytest.approx(expected[0], rel=1e-5)
    for a, b in zip(got[1], expected[1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def _calls(run, name, log):
    """Count the calls of a run's kernel (the op reads the attribute at each batch)."""
    kernel = getattr(run, name)
    setattr(run, name, lambda *args: log.append(name) or kernel(*args))


def test_while_kernels_compile_the_runs_go_on_unfused_with_the_same_numbers(held):
    model = Steps()
    got = _step(model)
    assert held.jobs and not any(job.done.is_set() for job in held.jobs)
    assert model.runs() and not any(run.kernels.ready for run in model.runs())
    _assert_agree(got, _reference(False))
    _assert_agree(got, _reference(True))


def test_once_compiled_the_next_batch_runs_the_kernels(held):
    model = Steps()
    _step(model)
    held.finish()
    calls = []
    for run in model.runs():
        _calls(run, "forward_kernel", calls)
        _calls(run, "backward_kernel", calls)
    got = _step(model)
    assert "forward_kernel" in calls and "backward_kernel" in calls
    assert all(run.kernels.ready for run in model.runs())
    _assert_agree(got, _reference(True))


def test_a_batch_whose_kernels_became_ready_after_its_forward_differentiates_unfused(held):
    """Its forward ran the plain steps; its backward does too, though the kernels are
    ready by then: one batch, one plan."""
    model = Steps()
    with hb.batching(granularity="block"):
        loss = model.record()
    loss.item()                 # the forward has run, unfused
    held.finish()
    calls = []
    for run in model.runs():
        assert run.kernels.available()
        _calls(run, "backward_kernel", calls)
    loss.backward()
    assert calls == []
    _assert_agree((loss.item(), model.grads()), _reference(False))


class TwoHeads(hb.HybridBlock):
    """One fused run with two outputs; the log keeps zero output gradients from being exact
    (autograd then gives an unread output no gradient at all)."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(2)
        self.w = hb.Parameter("w", (8, 3), rng=rng)
        self.b = hb.Parameter("b", (8,), rng=rng)

    def forward(self, x):
        a, g = hb.split(hb.affine(self.w, x, self.b), 2)
        s = hb.sigmoid(a)
        return s * hb.tanh(g), hb.log(s)


def _first_head_step(block, fusion=True):
    for p in (block.w, block.b):
        p.zero_grad()
    xs = np.random.default_rng(3).standard_normal((6, 3)).astype(np.float32)
    with hb.settings(fusion=fusion), hb.batching(granularity="block"):
        loss = hb.add_n([hb.sum(block(x)[0]) for x in xs])
    loss.backward()
    return loss.item(), [block.w.grad.copy(), block.b.grad.copy()]


def test_rows_the_loss_does_not_reach_are_differentiated_alike_while_kernels_compile(held, monkeypatch):
    """A batch whose runs still compile runs the program's plain steps, forward and
    backward; a backward that reaches only some rows (`saved_rows`) takes those rows of them."""
    from hybridbatch.hybrid.composite import Composite
    subsets = []
    saved_rows = Composite.saved_rows
    monkeypatch.setattr(Composite, "saved_rows", staticmethod(lambda saved, live: subsets.append(saved.units)
                                                              or saved_rows(saved, live)))
    model = Steps()
    got = _step(model, unread=True)
    assert not any(run.kernels.ready for run in model.runs())
    plain = [program.steps for program in model.cell._programs.values()]
    assert subsets and all(any(units is steps for steps in plain) for units in subsets)
    with hb.settings(fusion=False, compile_in_background=False):
        _assert_agree(got, _step(model, unread=True))


def test_a_backward_of_fewer_outputs_goes_unfused_while_its_kernel_compiles(held):
    """The log's output is never read: the run's backward needs a kernel without its terms,
    which compiles apart from the run's own pair; meanwhile that backward goes unfused."""
    block = TwoHeads()
    block.hybridize()
    _first_head_step(block)
    held.finish()
    before = len(held.jobs)
    got = _first_head_step(block)            # forward fused; the backward of one output compiling
    assert len(held.jobs) == before + 1 and not held.jobs[-1].done.is_set()
    plain = TwoHeads()
    plain.hybridize()
    unfused = _first_head_step(plain, fusion=False)
    _assert_agree(got, unfused)
    held.finish()
    _assert_agree(_first_head_step(block), unfused)  # and with that kernel


def test_a_child_sum_cell_trains_alike_before_and_after_its_kernels_are_ready(held):
    def step(cell, head, fusion=True):
        params = list(cell.collect_params().values()) + list(head.collect_params().values())
        for p in params:
            p.zero_grad()
        rng = np.random.default_rng(0)
        with hb.settings(fusion=fusion), hb.batching(granularity="block"):
            leaves = [cell(rng.standard_normal(4).astype(np.float32)) for _ in range(6)]
            a = cell(rng.standard_normal(4).astype(np.float32), *leaves[0], *leaves[1], *leaves[2])
            b = cell(rng.standard_normal(4).astype(np.float32), *a, *leaves[3])
            loss = hb.add_n([hb.pick_neg_log_softmax(head(h), i % 3) for i, (h, _) in enumerate([a, b] + leaves)])
        loss.backward()
        return loss.item(), [p.grad.copy() for p in params]

    def model():
        cell, head = nn.ChildSumTreeLSTMCell(8, 4, seed=0), nn.Dense(3, 8, seed=1)
        cell.hybridize()
        head.hybridize()
        return cell, head

    cell, head = model()
    first = step(cell, head)
    held.finish()
    second = step(cell, head)
    unfused = step(*model(), fusion=False)
    _assert_agree(first, unfused)
    _assert_agree(second, unfused)


class WordLeaf(hb.HybridBlock):
    """A Tree-LSTM leaf over a word's embedding: its whole program depends on the word
    alone, so a batch runs it once per distinct word (hybrid/distinct.py)."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(4)
        self.emb = hb.Parameter("emb", (10, 4), rng=rng)
        self.leaf = TreeLSTMLeaf(6, 4, rng)
        self.leaf.bias.data[:] = rng.standard_normal(18)

    def forward(self, word):
        return self.leaf(hb.lookup(self.emb, word))


def test_runs_shared_by_equal_words_go_unfused_alike(held):
    def step(block, fusion=True):
        params = [block.emb, block.leaf.weight, block.leaf.bias]
        for p in params:
            p.zero_grad()
        with hb.settings(fusion=fusion), hb.batching(granularity="block"):
            loss = hb.add_n([hb.sum(h * h) + hb.sum(c) for h, c in (block(w % 5) for w in range(32))])
        loss.backward()
        return loss.item(), [p.grad.copy() for p in params]

    def model():
        block = WordLeaf()
        block.hybridize()
        return block

    block = model()
    first = step(block)
    op = next(iter(block._programs.values())).op
    assert op.keyed_part(op.units(np)) is not None and not held.jobs[0].done.is_set()
    held.finish()
    unfused = step(model(), fusion=False)
    _assert_agree(first, unfused)
    _assert_agree(step(block), unfused)


def test_a_failed_background_compile_compiles_in_process_and_warns(held, caplog):
    model = Steps()
    _step(model)
    held.finish("SomeError: it broke")
    with caplog.at_level(logging.WARNING, logger="hybridbatch"):
        got = _step(model)
    assert all(run.kernels.ready for run in model.runs())
    assert "it broke" in caplog.text
    _assert_agree(got, _reference(True))


def test_a_block_says_once_that_its_kernels_compile_and_nothing_once_they_are_cached(held, caplog):
    with caplog.at_level(logging.INFO, logger="hybridbatch"):
        model = Steps()
        _step(model)
        _step(model)
    said = [r.getMessage() for r in caplog.records if "in the background" in r.getMessage()]
    assert len(said) == 1 and "block:LSTMCell" in said[0]
    held.finish()
    _step(model)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="hybridbatch"):
        _step(Steps(seed=1))                # a new trace of the same cell: its kernels are loaded
    assert not caplog.records


SCRIPT = textwrap.dedent("""
    import json, os, time
    from hybridbatch.kernels import compiling, fused
    from test_compile_background import Steps, _step

    compiling.IDLE_SECONDS = 0.2
    ready, workers, nicer = [], [], []
    for hidden in (8, 12):          # the second after the first worker retired, idle
        model = Steps(hidden)
        _step(model)
        workers.append(compiling._worker)
        runs = model.runs()
        waited = all(run.kernels.job.done.wait(300) for run in runs)
        nicer.append(os.getpriority(os.PRIO_PROCESS, workers[-1].process.pid) - os.getpriority(os.PRIO_PROCESS, 0))
        _step(model)
        ready.append(waited and all(run.kernels.ready for run in runs))
        while workers[-1].process.poll() is None:
            time.sleep(0.05)
    retired = [w.retired and not w.died for w in workers]
    print(json.dumps([ready, retired, workers[0] is not workers[1], nicer, *fused.compile_stats()]))
""")


def test_the_worker_process_compiles_into_the_cache_the_process_loads_from(tmp_path):
    """The real worker: it compiles the kernels, the training process only loads them; it
    runs WORKER_NICENESS below the training process; idle, it exits, and the next kernels
    start another."""
    env = dict(os.environ, HYBRIDBATCH_CACHE_DIR=str(tmp_path), PYTHONPATH=os.path.dirname(__file__))
    env.pop("NUMBA_CACHE_DIR", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    ready, retired, two, nicer, hits, compiled = json.loads(out.stdout.strip().splitlines()[-1])
    assert ready == [True, True] and retired == [True, True] and two
    assert nicer == [compiling.WORKER_NICENESS] * 2
    assert hits > 0 and compiled == 0
    assert out.stderr.count("compiling 1 fused kernel module in the background") == 2
    assert list(tmp_path.glob("__pycache__/fused_*.nbi"))


def test_compiling_hybridbatchs_own_numba_functions_is_said_once(monkeypatch, caplog):
    """numba's compile event (a cache load is not one) of a function of the package."""
    from numba import njit

    def first(x):
        return x + 1

    def second(x):
        return x + 2

    def elsewhere(x):
        return x + 3

    first.__module__ = second.__module__ = "hybridbatch.somewhere"
    monkeypatch.setattr(compiling._CoreCompileNotice, "said", False)
    with caplog.at_level(logging.INFO, logger="hybridbatch"):
        njit(elsewhere)(1)
        assert not caplog.records
        njit(first)(1)
        njit(second)(1)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "compiling hybridbatch's numba functions" in said[0]


class _Context:
    def refresh(self):
        pass

    def codegen(self):
        return None


class _KernelWithoutIndexInternals:
    """A kernel whose disk cache lacks the index internals _load_cached reads first (another
    numba version): only the public `load_overload`."""

    def __init__(self, cached):
        self.overloads, self.targetctx, self.compiled = {}, _Context(), []
        self._cache = type("Cache", (), {"_enabled": True,
                                         "load_overload": lambda _, sig, ctx: object() if cached else None})()

    def compile(self, sig):
        self.compiled.append(sig)


@pytest.mark.parametrize("cached", [True, False])
def test_a_cache_without_numbas_index_internals_is_asked_by_loading(cached):
    kernel = _KernelWithoutIndexInternals(cached)
    assert fused._load_cached(kernel, ("sig",)) is cached
    assert kernel.compiled == ([("sig",)] if cached else [])


def test_the_worker_outlives_a_terminals_ctrl_c_and_ends_with_its_stdin():
    """Ctrl-C reaches the whole foreground group: the worker stopped mid-kernel with a
    traceback of its own. It stays in the training process's session (autogroups would give
    another session its own share of the core, whatever its nice value) and ignores SIGINT."""
    from hybridbatch.kernels import compiling
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(compiling.__file__))),
               HYBRIDBATCH_PRELOAD="0")
    worker = subprocess.Popen([sys.executable, "-c", compiling._WORKER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    time.sleep(1.0)
    worker.send_signal(signal.SIGINT)
    time.sleep(0.5)
    assert worker.poll() is None
    assert os.getsid(worker.pid) == os.getsid(0)
    _, err = worker.communicate(timeout=60)       # closes its stdin
    assert worker.returncode == 0 and b"Traceback" not in err
