"""Blocks: parameters and child blocks registered by attribute, like Gluon and PyTorch modules.

A HybridBlock's forward uses only hb ops, so `hybridize()` can trace it once per input
signature into a Program (tracing.py, program.py). Inside `hb.batching(granularity="block")`
each call of a hybridized block is then ONE graph node and a batch of such calls runs the
traced program once on the stacked inputs (composite.py); at op granularity the program is
replayed op by op so primitive ops batch across block boundaries; eagerly it is replayed for
one instance.
"""
import inspect
import os
import sys
import threading
import warnings
import weakref

import numpy as np

from ..record import eager, scope as _scope
from ..errors import ScopeError
from ..record.future import Future
from ..train.parameter import Parameter
from ..train.parameter_dict import ParameterDict
from .arguments import INT, STATIC
from .granularity import AutoChoice
from .program import StepByStep
from .tracing import trace


_local = _scope._local         # its .scope: the batching scope recording on this thread, or None
_new = object.__new__
_traced = weakref.WeakSet()      # HybridBlocks holding traced programs
_traces_made = 0    # traces finished so far: a block made after the last one no trace has read
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _callers_level():
    """warnings.warn's stacklevel, from its caller's frame, of the first frame outside this
    package: the user's line, whichever entry point (an assignment, hybridize(),
    save_parameters()) and however many of the package's frames lie between."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


_hybridizing = threading.local()   # .depth: hybridize() calls open on this thread


def _forget_traces():
    """Drop every traced program, to be retraced at its block's next call. A trace bakes in
    what forward read from its block: child blocks, Parameters, flags its Python control
    flow tested; and a parent's trace inlines its children's. So any block attribute
    assigned after tracing may have changed what every trace computes."""
    for block in list(_traced):
        block._programs.clear()
        block._programs_of_modes.clear()
    _traced.clear()


def _select_traces_of_modes():
    """Point every traced block at its programs for the training modes its tree has now.
    A trace bakes in the modes its forward and the children it inlines read (dropout or
    not), so each tuple of modes keeps its own programs: eval() and train() between epochs
    trace each mode once."""
    for block in list(_traced):
        modes = block._tree_modes()
        if modes != block._modes:
            block._programs_of_modes[block._modes] = block._programs
            object.__setattr__(block, "_programs", block._programs_of_modes.pop(modes, {}))
            object.__setattr__(block, "_modes", modes)


class Block:
    """Base of every model piece. Assigning a Parameter or a Block to an attribute registers
    it; assigning or deleting any attribute drops the traced programs (see _forget_traces).
    `forward` is per-instance code (any Python control flow); calling the block runs it.

    >>> class Scale(hb.Block):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.w = hb.Parameter("w", (2,), init=2.0)
    ...     def forward(self, x):
    ...         return self.w * x
    >>> block = Scale()
    >>> block(hb.array([1.0, 3.0])).asnumpy()
    array([2., 6.], dtype=float32)
    >>> list(block.collect_params())
    ['w']
    """

    def __init__(self):
        object.__setattr__(self, "_children", {})
        object.__setattr__(self, "_params", {})
        if "_born" not in self.__dict__:     # __init__ run again on a block a trace read: it stays read
            object.__setattr__(self, "_born", _traces_made)

    def __setattr__(self, name, value):
        if "_children" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}.__init__ must call super().__init__() "
                               f"before assigning attributes")
        self._unregister(name)
        if isinstance(value, Block):
            self._children[name] = value
        elif isinstance(value, Parameter):
            self._params[name] = value
        elif isinstance(value, (list, tuple, dict)):
            self._warn_unregistered(name, value)
        object.__setattr__(self, name, value)

    def _warn_unregistered(self, name, container):
        """Warn when a list, tuple or dict holds Blocks or Parameters this block has not
        registered: collect_params, a Trainer, save_parameters and hybridize() never see them."""
        members = container.values() if isinstance(container, dict) else container
        known = {id(v) for v in self._children.values()} | {id(v) for v in self._params.values()}
        missed = [v for v in members if isinstance(v, (Block, Parameter)) and id(v) not in known]
        if missed:
            warnings.warn(f"{type(self).__name__}.{name} holds {len(missed)} Block(s)/Parameter(s) that are not "
                          f"registered: collect_params(), a Trainer, save_parameters() and hybridize() will not "
                          f"see them. Use nn.Sequential, or assign each to an attribute of its own.",
                          UserWarning, stacklevel=_callers_level())

    def _warn_unregistered_in_tree(self):
        """_warn_unregistered for the containers of every block in the tree as they are now:
        one filled after its assignment (an empty list, then append) was not checked then."""
        for block in self._tree():
            for name, value in block.__dict__.items():
                if value.__class__ in (list, tuple, dict):
                    block._warn_unregistered(name, value)

    def __delattr__(self, name):
        object.__delattr__(self, name)
        self._unregister(name)

    def _unregister(self, name):
        """Forget the Block or Parameter registered as `name`, and every trace: forward may
        have read the attribute (see _forget_traces). Not where no trace has ended since
        this block was made: none can have read it (a model built while another trains,
        or a block made inside forward, had every trace in the process redone)."""
        self._children.pop(name, None)
        self._params.pop(name, None)
        if _traced and _traces_made != self._born:
            _forget_traces()

    training = True     # train() / eval() set it on an instance; nn.Dropout reads it

    def forward(self, *args):
        """One instance's computation, which subclasses define; calling the block calls it."""
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def train(self, mode=True):
        """Training mode (mode=True) or evaluation mode for this block and every block in
        it; in evaluation mode nn.Dropout is the identity. Returns the block."""
        changed = False
        for block in self._tree():
            if block.training != bool(mode):
                object.__setattr__(block, "training", bool(mode))
                changed = True
        if changed and _traced:
            _select_traces_of_modes()
        return self

    def eval(self):
        """Evaluation mode: train(False)."""
        return self.train(False)

    def _tree(self):
        """This block and every block in it, once each, in registration order."""
        seen, order, todo = set(), [], [self]
        while todo:
            block = todo.pop()
            if id(block) not in seen:
                seen.add(id(block))
                order.append(block)
                todo.extend(reversed(list(block._children.values())))
        return order

    def _tree_modes(self):
        return tuple(block.training for block in self._tree())

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def children(self):
        """The child blocks by attribute name (a new dict)."""
        return dict(self._children)

    def collect_params(self, prefix=""):
        """Every Parameter of this block and its children, keyed by dotted attribute path."""
        self._warn_unregistered_in_tree()
        params = ParameterDict()
        params.update(dict(self._named_params(prefix)))
        return params

    def parameters(self):
        """Every distinct Parameter of this block and its children, a shared one once: what a
        Trainer takes."""
        self._warn_unregistered_in_tree()
        return list({id(p): p for _, p in self._named_params("")}.values())

    def _named_params(self, prefix):
        for name, p in self._params.items():
            yield prefix + name, p
        for name, child in self._children.items():
            yield from child._named_params(f"{prefix}{name}.")

    def save_parameters(self, path):
        """Write every parameter's value to an .npz archive at exactly `path` (np.savez would
        append .npz to another name, and loading from `path` would fail), keyed by dotted path."""
        self.collect_params().save(path)

    def load_parameters(self, path):
        """Read values saved by save_parameters (ParameterDict.load: names, shapes and dtypes
        checked before any parameter changes)."""
        self.collect_params().load(path)

    def hybridize(self, active=True):
        """Hybridize every HybridBlock in this tree (Gluon semantics), each through its own
        hybridize(); the outermost call checks the tree for unregistered blocks once."""
        depth = getattr(_hybridizing, "depth", 0)
        if not depth:
            self._warn_unregistered_in_tree()
        _hybridizing.depth = depth + 1
        try:
            for child in self._children.values():
                child.hybridize(active)
        finally:
            _hybridizing.depth -= 1

    def __repr__(self):
        lines = [f"{type(self).__name__}("]
        for name, p in self._params.items():
            lines.append(f"  {name}: Parameter{p.shape}")
        for name, child in self._children.items():
            lines.append("  " + f"({name}): {child!r}".replace("\n", "\n  "))
        return "\n".join(lines) + ")" if len(lines) > 1 else f"{type(self).__name__}()"


class HybridBlock(Block):
    """A block whose forward uses only hb ops, so it can be traced and batched whole: after
    hybridize(), each argument signature is traced once into a program, and the calls of a
    batch replay it together (fused elementwise runs included).

    >>> class MLP(hb.HybridBlock):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.hidden = hb.nn.Dense(4, 3, activation="tanh", seed=0)
    ...         self.out = hb.nn.Dense(2, 4, seed=0)
    ...     def forward(self, x):
    ...         return self.out(self.hidden(x))
    >>> net = MLP()
    >>> net.hybridize()
    >>> with hb.batching() as scope:
    ...     ys = [net(np.full(3, v, np.float32)) for v in range(5)]
    >>> ys[0].shape, scope.stats.batches           # five calls, one batch
    ((2,), 1)
    >>> bool(np.allclose(ys[4].asnumpy(), net(np.full(3, 4, np.float32)).asnumpy(), atol=1e-5))
    True
    """

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "_active", False)
        object.__setattr__(self, "_programs", {})     # call key -> Program, for the modes `_modes`
        object.__setattr__(self, "_modes", None)      # its tree's training modes when traced
        object.__setattr__(self, "_programs_of_modes", {})   # other modes' programs, kept
        object.__setattr__(self, "auto_inline", False)   # granularity="auto"'s choice for this block
        object.__setattr__(self, "auto_choice", AutoChoice())   # ... and the measurements behind it

    def hybridize(self, active=True):
        """Trace forward (again) at the next call, as Gluon's hybridize() does."""
        object.__setattr__(self, "_active", active)
        _forget_traces()
        super().hybridize(active)

    def __call__(self, *args, **kwargs):
        scope = _local.scope
        if scope is not None and not scope.open:    # exited on another thread: eager here again
            scope = _scope.current()
        if kwargs:
            if not self._active or (scope is not None and scope.tracing):   # forward runs as written
                return self.forward(*args, **kwargs)
            args = _by_position(self, args, kwargs)
        if scope is not None and self._active and not scope.tracing:   # a trace inlines the call
            # the hot path, written out in this frame: exact class tests are cheaper than isinstance
            g = scope.graph
            types = g.type
            ints = None
            a = args[0] if len(args) == 1 else None
            if a.__class__ is Future and a.scope is scope:     # one value of this scope: most common
                i = a.id
                ids = (i,)
                key = (types[i],)
            elif a.__class__ is np.ndarray:     # one input array: a constant
                i = scope.constant(a).id
                ids = (i,)
                key = (types[i],)
            else:
                ids, key = [], []
                for a in args:
                    if a.__class__ is Future and a.scope is scope:     # the common cases first
                        i = a.id
                        ids.append(i)
                        key.append(types[i])
                    elif a.__class__ is int:
                        key.append(INT)
                        ints = [a] if ints is None else ints + [a]
                    elif a.__class__ is np.ndarray:     # an input array: a constant
                        i = scope.constant(a).id
                        ids.append(i)
                        key.append(types[i])
                    elif isinstance(a, Parameter):
                        key.append(a)
                    elif isinstance(a, _FLAGS):
                        key.append(_flag(a))
                    elif isinstance(a, (int, np.integer)):
                        key.append(INT)
                        ints = [int(a)] if ints is None else ints + [int(a)]
                    else:
                        i = _as_handle(a, scope, self, args).id
                        ids.append(i)
                        key.append(types[i])
                key = tuple(key)
            program = self._programs.get(key) or self._program(key)
            if scope.held_program is not program:   # the scope keeps the programs it records (their Parameters)
                scope.held_program = scope.programs[program.sig_id] = program
            if program.draws:
                keys = program.draw_keys()
                if keys:
                    ints = (ints or []) + keys
            granularity = scope.granularity
            if granularity == "block" or (granularity == "auto" and not self.auto_inline):
                # One graph node per call (graph.add and the Futures written out here). A block
                # call's outputs are nodes nid.., the flush expanding the call into them.
                if ints is None:
                    if not ids:      # nothing to size a batch by: its ops, as at op granularity
                        return program.replay(scope.record, scope.constant, [])
                    aux = -1
                else:
                    try:
                        program.check_ints(ints)
                    except StepByStep:
                        return program.record_steps(scope, ids, ints)
                    if len(ints) == 1:
                        aux = ints[0]
                    else:
                        aux = len(g.aux_flat)
                        g.aux_flat.extend(ints)
                if g.origin is not None:
                    g.origin.extend([_scope.caller()] * len(program.out_types))
                nid = len(types)
                g.sig.append(program.sig_id)
                types.extend(program.out_types)
                g.aux.append(aux)
                operands = g.args
                operands.extend(ids)
                g.arg_end.append(len(operands))
                if program.container is None:
                    f = _new(Future)
                    f.scope = scope
                    f.id = nid
                    return f
                return program.make_futures(scope, nid)
            if granularity == "auto":
                calls = scope.auto_calls        # inlined, the plan cannot count them
                calls[self] = calls.get(self, 0) + 1
            return program.record_into(scope, ids, ints or ())
        if not self._active or scope is not None:
            return self.forward(*args)      # plain, or inlined into an enclosing trace
        handles, key, ints = [], [], []
        for a in args:
            if isinstance(a, Parameter):
                key.append(a)
            elif isinstance(a, _FLAGS):
                key.append(_flag(a))
            elif isinstance(a, (int, np.integer)):
                key.append(INT)
                ints.append(int(a))
            else:
                h = _as_handle(a, None, self, args)
                handles.append(h)
                key.append(h.sig.out_type)
        program = self._program(tuple(key))
        if program.draws:
            ints += program.draw_keys()
        return program.replay(eager.apply, eager.constant, handles, ints)

    def _program(self, key):
        program = self._programs.get(key)
        if program is None:
            program = self._programs[key] = self._trace(key)
        return program

    def _trace(self, key):
        tracer = _scope.tracing()
        try:
            program = trace(self, key, tracer)
        finally:
            _scope.end_tracing(tracer)
        global _traces_made
        _traced.add(self)
        _traces_made += 1
        object.__setattr__(self, "_modes", self._tree_modes())
        return program


_FLAGS = (bool, np.bool_) + STATIC


def _flag(a):
    """The cache-key entry of a str or None argument. A bool is refused: the un-hybridized
    forward could test it, and hb.lookup refuses it as a row, but a trace saw only an int
    placeholder (a branch on it raised) and hb.lookup read it as row 0 or 1."""
    if isinstance(a, (bool, np.bool_)):
        raise TypeError("a bool argument of a hybridized block is neither a flag its forward can test "
                        "(its value is not known while tracing) nor an op index (hb.lookup and hb.pick "
                        "refuse a bool); pass a str flag (\"train\" / \"eval\") or None, make it a block "
                        "attribute, or pass an int")
    return (STATIC, a)


def _by_position(block, args, kwargs):
    """A hybridized call's arguments by position, keywords put in their places (defaults
    filling the places between), so that a call's trace key is the same either way. A
    keyword-only argument has no place: TypeError."""
    func = type(block).forward
    places = _places.get(func)
    if places is None:
        places = _places[func] = [p for p in list(inspect.signature(func).parameters.values())[1:]
                                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    index = {p.name: i for i, p in enumerate(places) if p.kind == p.POSITIONAL_OR_KEYWORD}
    if any(name not in index or index[name] < len(args) for name in kwargs):
        _bind(block, args, kwargs)
        name = next(name for name in kwargs if name not in index)
        raise TypeError(f"a hybridized block's forward takes its arguments by position, and {name!r} has no "
                        f"position in {type(block).__name__}.forward{inspect.signature(block.forward)}")
    out = list(args)
    for p in places[len(args):max(index[name] for name in kwargs) + 1]:
        if p.name in kwargs:
            out.append(kwargs[p.name])
        elif p.default is p.empty:
            _bind(block, args, kwargs)      # raises: p is missing
        elif isinstance(p.default, (bool, np.bool_)):       # _flag would refuse it, though not passed
            raise TypeError(f"{type(block).__name__}.forward's {p.name!r} comes before a keyword given, so a "
                            f"hybridized call passes its default {p.default!r} by position, and a bool argument "
                            f"is refused: make {p.name!r} a str flag or None, or pass the later ones by position")
        else:
            out.append(p.default)
    return tuple(out)


def _bind(block, args, kwargs):
    """Python's own TypeError where the arguments do not fit forward's, naming the block."""
    try:
        inspect.signature(block.forward).bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{type(block).__name__}.forward() {e}") from None


_places = weakref.WeakKeyDictionary()     # per forward function: its parameters that take a position


def _as_handle(a, scope, block, args):
    """The argument of block's call in args as a value handle of the current mode (arrays
    become constants)."""
    if isinstance(a, Future):
        if scope is None or a.scope is not scope:
            raise ScopeError("a Future was passed to a block outside the batching scope that recorded it; "
                             "read it with .asnumpy() and pass the array instead, or call the block inside "
                             "that scope")
        return a
    try:
        if scope is None:
            return a if isinstance(a, eager.Tensor) else eager.constant(a)
        return scope.constant(a)
    except ValueError as e:
        shapes = _entry_shapes(a)
        if shapes is None or len(set(shapes)) < 2:
            raise
        position = next(k for k, b in enumerate(args) if b is a)
        places = [p.name for p in inspect.signature(block.forward).parameters.values()]
        name = f" ({places[position]!r})" if position < len(places) else ""
        raise ValueError(f"{type(block).__name__} (hybridized): the argument at index {position}{name} is a "
                         f"{type(a).__name__} of arrays of different shapes {shapes}; a hybridized block takes "
                         f"a list or tuple argument as one array, stacked. Pass each array as its own argument, "
                         f"or pad them to one shape") from e


def _entry_shapes(a):
    """The shapes of a list or tuple argument's entries, or None for anything else."""
    if not isinstance(a, (list, tuple)):
        return None
    try:
        return [np.shape(entry) for entry in a]
    except ValueError:          # an entry ragged itself
        return None
