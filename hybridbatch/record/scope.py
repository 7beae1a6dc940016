"""The batching scope: records ops as graph nodes, flushes the pending delta in batches.

`with hb.batching() as scope:` makes recording the thread's mode. A flush (scope exit,
`.asnumpy()`, `scope.forward()`, `backward()`) schedules and runs every pending node, not
only the ancestors of the value asked for, so reading one value mid-scope keeps the rest
batched; recording may go on after a flush and the next flush runs the new delta.
"""
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from ..runtime.autograd import PARTIAL_BACKWARD, SECOND_BACKWARD, run_backward
from ..errors import BackwardError, ScopeError
from ..runtime.execute import run_forward
from .future import Future, future_of
from ..hybrid.granularity import choose_granularity
from .graph import Graph, Growable
from ..ops.shape import Input, ParamRead
from ..train.parameter import Parameter
from ..runtime import profile
from ..runtime.plan import Plan, graph_lower_bound
from ..schedule import DEFAULT_POLICY, get_policy
from ..hybrid.arguments import BlockInt
from ..runtime import backend
from . import eager, signature


class _Local(threading.local):
    scope = None          # the default of every thread: read as a plain attribute, no getattr


_local = _Local()
_sig_by_key = signature._sig_by_key
_input_sigs = {}     # (shape, dtype) -> the Input signature of a constant of that type
_new = object.__new__

GRANULARITIES = ("op", "block", "auto")
DEFAULT_GRANULARITY = "auto"
# Read as a constant, a computed value from outside a traced forward would lose its gradient
# (and keep its first value for every later call), where the un-hybridized forward has both.
_CAPTURED = ("a hybridized block's forward read a value computed outside it (a closure, global or attribute); "
             "a trace would keep it as a constant, without its gradient: pass it to the block as an argument")

# A trace records one program for every later call: a branch on a value read while tracing
# would bake one instance's value into all of them.
_READ_IN_TRACE = ("a hybridized block's forward, while traced, cannot read a value (asnumpy(), item(), float(), "
                  "a comparison): the trace records ops for every later call and cannot depend on one call's "
                  "numbers; return the value from forward and read it outside the block (inside hb.map the "
                  "read then batches)")


def current():
    """The batching scope recording on this thread, or None (eager mode). A scope exited on
    another thread (a generator holding it, closed there) is no longer this thread's."""
    scope = _local.scope
    if scope is not None and not scope.open:
        _local.scope = scope = None
    return scope


@dataclass
class Stats:
    """What the scope did. Times in seconds; recording = time in scope not spent below.
    `batches` against `nodes` (and `lower_bound`, the fewest batches any schedule could
    take) says how well the minibatch batched.

    >>> with hb.batching() as scope:
    ...     ys = [hb.tanh(hb.array([float(i)])) for i in range(8)]
    >>> scope.stats.nodes, scope.stats.batches, scope.stats.lower_bound, scope.stats.flushes
    (8, 1, 1, 1)
    """
    nodes: int
    batches: int
    lower_bound: int
    flushes: int
    forced_flushes: int     # of `flushes`, those a read of a pending value forced
    record_seconds: float
    schedule_seconds: float
    execute_seconds: float
    backward_seconds: float
    plan_cache_hits: int

    @property
    def plan_cache_hit_rate(self):
        """Share of this scope's flushes whose schedule came from the plan cache."""
        return self.plan_cache_hits / self.flushes if self.flushes else 0.0


class batching:
    """A recording scope. See the module docstring; `stats` reports after a flush. Inside
    it ops return Futures; at a flush (the scope's exit, or a read) nodes of one signature
    run together, so per-instance code of any shape runs in few batches.

    >>> W = hb.Parameter("W", (3, 3), init="zeros")
    >>> with hb.batching() as scope:
    ...     outs = []
    ...     for n in (2, 4, 3):                       # three sequences of different lengths
    ...         h = hb.array(np.zeros(3, np.float32))
    ...         for _ in range(n):
    ...             h = hb.tanh(W @ h + hb.array(np.ones(3, np.float32)))
    ...         outs.append(h)
    >>> scope.stats.nodes, scope.stats.batches       # 9 steps of 3 ops, 4 steps deep
    (27, 12)
    >>> outs[0].asnumpy().round(3)
    array([0.762, 0.762, 0.762], dtype=float32)
    """

    def __init__(self, policy=DEFAULT_POLICY, granularity=DEFAULT_GRANULARITY, check_numerics=False):
        if granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}, not {granularity!r}")
        self.policy = get_policy(policy)
        self.granularity = granularity
        self.check_numerics = check_numerics
        self.graph = Graph(track_origin=check_numerics)
        self.plans = []
        self.params = {}            # pid -> the Parameters recorded operands name by id
        self.programs = {}          # sig id -> the traced programs recorded (they hold their Parameters)
        self.held_program = None    # the last of them: a block called again is not looked up
        self.arenas = []
        self.loc_arena = Growable(np.int64)
        self.loc_row = Growable(np.int64)
        self.is_const = Growable(np.bool_)
        self.flushed = 0
        self.open = False
        self.tracing = False
        self.failure = None
        self.failed_plan = None      # the flush whose kernel raised, out of self.plans
        self._graph_spent = set()   # nodes a backward() without retain_graph ran from
        self._backward_failed = set()   # nodes whose backward() raised part way
        self._thread = threading.current_thread()   # the recording one: set again on entering
        self._times = dict(schedule=0.0, execute=0.0, backward=0.0, busy_inside=0.0)
        self._entered = self._exited = None
        self.auto_calls = {}        # granularity "auto": inlined block -> its calls since the last flush
        self.forced_plans = set()   # indices in self.plans of the flushes that reads of pending values forced
        self.map_round_plans = set()    # ... of those, the flushes of hb.map rounds
        self.node_lines = {}        # node -> the user's line that recorded it, for nodes that run alone
        self._since = None          # when the work the next flush ends began: entry, last flush or backward

    # -- scope protocol ---------------------------------------------------------------
    def __enter__(self):
        if (open_scope := current()) is not None:
            raise ScopeError("batching scopes do not nest; record into the open scope instead" +
                             open_scope._where_entered())
        if self._entered is not None:
            raise ScopeError("a batching scope can be entered once; make a new one")
        caller_frame = sys._getframe(1)
        self._entered_at = (caller_frame.f_code.co_filename, caller_frame.f_lineno)
        _local.scope = self
        self._thread = threading.current_thread()
        self.open = True
        self._entered = self._since = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb):
        if _local.scope is self:    # on another thread, that thread's own scope stays
            _local.scope = None
        try:
            if exc_type is None:
                self.forward()
            else:
                self.failure = exc
        finally:
            self.open = False
            self._exited = time.perf_counter()
        return False

    def _where_entered(self):
        """Where the open scope was entered: a generator paused inside its `with` block keeps
        it open, far from the line that fails."""
        if self._entered_at is None:
            return ""
        filename, line = self._entered_at
        return (f" (the open scope was entered at {filename}:{line}; a generator paused inside its `with` "
                f"block keeps it open until it finishes or is closed)")

    # class defaults, set on the scope when first needed
    _entered_at = None      # (file, line) of the `with` that entered the scope: _where_entered
    suspend = None          # while hb.map runs in this scope: its read hook (record/mapping.py)
    _parameter_values = None    # _of_parameters' nodes of this flush: key -> node id
    _bound = (0, 0)         # (flushed nodes, the lower bound over them): stats' cache

    # -- recording (the hot path) -----------------------------------------------------
    def record(self, op, args, attrs=(), aux=-1):
        """Append one node for `op` over `args`; returns its Future."""
        if not self.open:
            self._let_go_here()
            return eager.apply(op, args, attrs, aux)
        g = self.graph
        types = g.type
        n = len(args)
        a = args[0] if n else None
        # one or two values of this scope: the common cases (a unary op, a binary one)
        if n == 1 and a.__class__ is Future and a.scope is self:
            i = a.id
            codes = (types[i],)
            ids = (i,)
        elif n == 2 and a.__class__ is Future and a.scope is self and (b := args[1]).__class__ is Future \
                and b.scope is self:
            i, j = a.id, b.id
            codes = (types[i], types[j])
            ids = (i, j)
        elif n == 1 and a.__class__ is Parameter and not op.needs_batched:    # a table's lookup
            codes = (-a.pid - 1,)
            ids = ()
            self.params[a.pid] = a      # signatures name it by id: keep it alive
        else:
            codes, ids = [], []
            for a in args:
                if a.__class__ is Future and a.scope is self:
                    i = a.id
                    codes.append(types[i])
                    ids.append(i)
                    continue
                if a.__class__ is not Future:
                    if isinstance(a, Parameter):
                        codes.append(-a.pid - 1)
                        self.params[a.pid] = a      # signatures name it by id: keep it alive
                        continue
                    a = self.constant(a)
                else:
                    raise ScopeError(_CAPTURED if self.tracing else
                                     "a Future from another batching scope was used here; futures belong "
                                     "to the scope that recorded them (read it with .asnumpy() first)")
                i = a.id
                codes.append(types[i])
                ids.append(i)
            codes = tuple(codes)
            if not ids and op.needs_batched:
                return self._of_parameters(op, args, attrs, codes, aux)
        sig = _sig_by_key.get((op.id, attrs, codes)) or signature.intern(op, attrs, codes)
        if op.uses_aux and not (aux.__class__ is int and (0 <= aux < sig.aux_limit or sig.any_aux)):
            if aux.__class__ is BlockInt and self.tracing:
                aux = aux.code          # resolved per call from the block's integer arguments
            else:
                aux = op.index(aux)
                op.check_aux(sig, aux)
                if aux < 0 and sig.aux_limit > 0:     # accepted: an index counting from the end
                    aux += sig.aux_limit
        if g.origin is not None:
            return future_of(self, self._add(sig, ids, aux))
        # graph.add inlined, and the Future made without an __init__ frame: the hot path
        nid = len(types)
        g.sig.append(sig.id)
        types.append(sig.out_type)
        g.aux.append(aux)
        args = g.args
        args.extend(ids)
        g.arg_end.append(len(args))
        f = _new(Future)
        f.scope = self
        f.id = nid
        return f

    def _of_parameters(self, op, args, attrs, codes, aux):
        """A node of an op over Parameters only (`W[:64]`, `tanh(W)`): its first operand read
        as a per-instance value (ParamRead), so that the kernel has a batched operand. The value
        is the same at every call until the next flush, so a call like one still pending gets
        that node: a slice of a weight taken per call then reads the weight once per flush,
        not once per call. Only where aux is a plain int (an index, or none), not a function's
        handle (py_func)."""
        shared = aux.__class__ is int and not op.holds_aux
        key = (op.id, attrs, codes, aux)
        cache = self._parameter_values
        if cache is None:
            cache = self._parameter_values = {}
        elif shared:
            nid = cache.get(key, -1)
            if nid >= self.flushed:
                return future_of(self, nid)
        read = cache.get(codes[0], -1)
        if read < self.flushed:
            read = cache[codes[0]] = self.record(ParamRead, args[:1], (), 0).id
        f = self.record(op, (future_of(self, read),) + tuple(args[1:]), attrs, aux)
        if shared:
            cache[key] = f.id
        return f

    def _let_go_here(self):
        """A closed scope asked to record: where it is still this thread's (exited on another
        thread, a generator closed there), the thread goes back to eager mode, as current()
        does; anywhere else, the ScopeError."""
        if _local.scope is not self:
            raise ScopeError("this batching scope is closed; record ops inside `with hb.batching()`")
        _local.scope = None

    def record_ragged(self, op, fixed, args):
        """One node of ragged `op` (ops.registry.Op.ragged) over args when they are values
        of this scope of one type; otherwise `fixed`'s node, the op of that arity, which
        checks the operands and names what does not fit."""
        types = self.graph.type
        ids = []
        for a in args:
            if a.__class__ is not Future or a.scope is not self:
                return self.record(fixed, args)
            ids.append(a.id)
        code = types[ids[0]]
        for i in ids:
            if types[i] != code:
                return self.record(fixed, args)
        if not self.open:
            return self.record(fixed, args)
        sig = _sig_by_key.get((op.id, (), (code,))) or signature.intern(op, (), (code,))
        return future_of(self, self._add(sig, ids, -1))

    def note_line(self, nid):
        """Keep the line of the user's code that recorded node nid (explain() names it)."""
        self.node_lines[nid] = caller()

    def _add(self, sig, ids, aux):
        g = self.graph
        if g.origin is not None:
            g.origin.append(caller())
        return g.add(sig.id, (sig.out_type,), ids, aux)

    def constant(self, value):
        """Record an input node holding `value` (a numpy array, number, or eager Tensor)."""
        if not self.open:
            self._let_go_here()
            return eager.constant(value)
        if value.__class__ is np.ndarray and value.dtype.kind in "fiub" and backend.xp() is np:
            return self._owned_constant(value.copy())    # the common case: a copy, as to_array makes
        from .eager import Tensor, refuse_held_values, trainable_source
        refuse_held_values(value)
        if isinstance(value, Tensor):
            if self.tracing and value.sig.op.executed:
                raise ScopeError(_CAPTURED)
            source = trainable_source(value)
            if source is not None:
                raise ScopeError(f"an eager value computed from Parameter {source.name!r} was used in a batching "
                                 f"scope, where it would be a constant and its gradient lost: compute it inside "
                                 f"the scope, or pass value.asnumpy() to use it as a constant")
            value = value.value[0]
        elif isinstance(value, Future):
            if value.scope is self:
                raise ScopeError("a Future of this scope is already a recorded value: use it as it is "
                                 "(hb.array/constant take data, such as a numpy array)")
            raise ScopeError("a Future from another batching scope was used here")
        return self._owned_constant(backend.to_array(value))

    def owned_constant(self, value):
        """constant(value) for a fresh numpy array that nothing else holds: on the numpy
        backend it is recorded without constant's copy."""
        if self.open and backend.xp() is np:
            return self._owned_constant(value)
        return self.constant(value)

    # -- flushing ---------------------------------------------------------------------
    def forward(self):
        """Schedule and run every pending node (the delta since the last flush)."""
        self._check_thread()
        self._check_usable()
        start = self.flushed
        if start == len(self.graph):
            return
        t0 = time.perf_counter()
        try:
            plan = Plan(self.graph, start, self.policy, self.arenas, self.loc_arena, self.loc_row, self.is_const)
        except BaseException as e:      # a policy's error, say: a failed flush, as one whose kernel raised
            self._failed(e)
            raise
        t1 = time.perf_counter()
        self.plans.append(plan)
        try:
            run_forward(plan, self.arenas, backend.xp(), self.graph.origin)
            self.flushed = plan.stop    # once computed: another thread may read values below it
            done = time.perf_counter()
            since = self._since or t0
            if self.granularity == "auto":
                choose_granularity(plan, self.auto_calls, done - since)
                self.auto_calls = {}
            prof = profile.active()
            if prof is not None:
                prof.span("recording", since, t0)
                prof.span("scheduling", t0, t1, batches=plan.n_batches)
                prof.span("forward", t1, done)
            self._since = done
        except BaseException as e:
            self.plans.pop()
            self.failed_plan = plan     # explain names it apart
            self._failed(e)
            raise
        finally:
            t2 = time.perf_counter()
            self._times["schedule"] += t1 - t0
            self._times["execute"] += t2 - t1
            if self.open:
                self._times["busy_inside"] += t2 - t0

    def _failed(self, e):
        """A flush that failed, in its policy or in a kernel: stats and explain count the
        flushes that ran, so its index is no read's or map round's; the scope is unusable."""
        self.forced_plans.discard(len(self.plans))
        self.map_round_plans.discard(len(self.plans))
        self.failure = e

    def _owned_constant(self, value):
        """Record an input node holding `value`, an array of the backend that nothing else will
        write (a fresh array), its Input signature looked up by the array's type."""
        key = (value.shape, value.dtype)
        sig = _input_sigs.get(key)
        if sig is None:
            sig = _input_sigs[key] = signature.intern(Input, (signature.type_id(*key),), ())
        g = self.graph
        if g.origin is not None:
            nid = self._add(sig, (), -1)
        else:       # graph.add inlined: the hot path of an input array
            nid = len(g.type)
            g.sig.append(sig.id)
            g.type.append(sig.out_type)
            g.aux.append(-1)
            g.arg_end.append(len(g.args))
        g.constants[nid] = value
        return future_of(self, nid)

    def value(self, nid):
        """A copy of node nid's value, flushing first if it is still pending (await_flush)."""
        reader = _local.scope
        if reader is not None and reader.tracing:
            raise ScopeError(_READ_IN_TRACE)
        self._check_usable()
        if nid >= self.flushed:
            self.await_flush()
        return backend.to_numpy(self.arenas[self.loc_arena.data[nid]][self.loc_row.data[nid]]).copy()

    def await_flush(self):
        """The flush a read of a pending value needs. Inside an hb.map instance, the
        instance suspends instead, until the map's driver flushes for every instance."""
        if self.suspend is not None and self.suspend():
            return
        if self.flushed < len(self.graph):
            self.forced_plans.add(len(self.plans))
            if self.suspend is not None:    # the driver of a running hb.map: a round's flush
                self.map_round_plans.add(len(self.plans))
        self.forward()

    def backward(self, nid, retain_graph=False):
        """Gradients of scalar node nid into the Parameters it depends on (Future.backward)."""
        self._check_thread()
        shape = signature.TYPES[self.graph.type[nid]][0]
        if shape != ():
            raise ValueError(f"backward() needs a scalar; this value has shape {shape}")
        if nid in self._graph_spent:
            raise BackwardError(PARTIAL_BACKWARD if nid in self._backward_failed else SECOND_BACKWARD)
        if nid >= self.flushed:
            self.forward()
        self._check_usable()
        t0 = time.perf_counter()
        try:
            run_backward(self.plans, self.arenas, nid, self.loc_arena.data, self.loc_row.data,
                         self.flushed, backend.xp(), self.graph.origin)
        except BackwardError:       # a changed parameter: raised before any gradient is added
            raise
        except BaseException as e:
            self._graph_spent.add(nid)
            self._backward_failed.add(nid)
            e.add_note(PARTIAL_BACKWARD)
            raise
        self._since = time.perf_counter()
        spent = self._since - t0
        prof = profile.active()
        if prof is not None:
            prof.span("backward", t0, self._since)
        if not retain_graph:
            self._graph_spent.add(nid)
        self._times["backward"] += spent
        if self.open:
            self._times["busy_inside"] += spent

    def _check_thread(self):
        """An open scope is flushed and differentiated on its recording thread only: another
        thread's flush would run the delta while this one appends to it. Checked on these
        slow paths, not when recording or reading a computed value."""
        if self.open and threading.current_thread() is not self._thread:
            raise ScopeError(f"this batching scope is still recording on thread {self._thread.name!r}; thread "
                             f"{threading.current_thread().name!r} cannot flush it (read a pending value, call "
                             f"scope.forward()) or run backward() while it is open: do that on thread "
                             f"{self._thread.name!r}, or after its `with hb.batching()` block exits, when any "
                             f"thread may read its values")

    def _check_usable(self):
        """A tracing scope's inputs are placeholders with no values: flushing it would read
        uninitialized memory."""
        if self.tracing:
            raise ScopeError("this value was recorded while a hybridized block's forward was traced: it is a "
                             "placeholder with no value; return it from forward to read it")
        if self.failure is not None:
            raise ScopeError(f"this batching scope was abandoned by an exception "
                             f"({type(self.failure).__name__}: {self.failure}); its values are not available")

    # -- reporting --------------------------------------------------------------------
    def explain(self):
        """What the batcher did with this scope's flushed nodes: batches per signature, every
        node that ran alone and why (runtime/explain.py). Print it, or `.as_dict()`."""
        from ..runtime.explain import explain
        return explain(self)

    def to_dot(self, path=None):
        """The flushed graph coloured by batch (runtime/graph_dot.py): its DOT text, or, with
        a path, the file written (SVG for a .svg path where graphviz can render it)."""
        from ..runtime import graph_dot
        return graph_dot.dot_text(self) if path is None else graph_dot.write(self, path)

    @property
    def stats(self) -> Stats:
        t = self._times
        end = self._exited if self._exited is not None else time.perf_counter()
        inside = (end - self._entered) if self._entered is not None else 0.0
        return Stats(
            nodes=sum(p.n_executed for p in self.plans),
            batches=sum(p.n_batches for p in self.plans),
            lower_bound=self._lower_bound(),
            flushes=len(self.plans),
            forced_flushes=len(self.forced_plans),
            record_seconds=max(inside - t["busy_inside"], 0.0),
            schedule_seconds=t["schedule"],
            execute_seconds=t["execute"],
            backward_seconds=t["backward"],
            plan_cache_hits=sum(p.cache_hit for p in self.plans),
        )

    def _lower_bound(self):
        """ED-Batch's bound over every flushed node of the scope, as one graph: summed per
        flush it counted every flush a read forced as if nothing could batch across it."""
        if self._bound[0] != self.flushed:
            self._bound = (self.flushed, graph_lower_bound(self.graph, self.flushed))
        return self._bound[1]


def tracing():
    """A fresh scope that records without executing, current until `end_tracing`. It keeps
    each op's line, so check_numerics can point inside a traced block."""
    scope = batching(granularity="op")
    scope.graph.origin = []
    scope.open = scope.tracing = True
    scope._outer = current()
    _local.scope = scope
    return scope


def end_tracing(scope):
    _local.scope = scope._outer
    scope.open = False


def caller():
    """file:line of the first frame outside this package (where the user recorded the op)."""
    f = sys._getframe(2)
    while f is not None and f.f_globals.get("__name__", "").startswith("hybridbatch."):
        f = f.f_back
    return f"{f.f_code.co_filename}:{f.f_lineno}" if f is not None else "<unknown>"
