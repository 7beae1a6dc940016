"""Tracing a hybrid block's forward into a Program.

`trace` runs the Python forward once per call key, in a throw-away tracing scope, on
placeholders (arguments.py); the ops it records become the program's steps. Later calls
with that key only replay the program or run it as one node.
"""
from ..errors import HybridBatchError, ShapeError
from ..ops.shape import Input, ParamRead
from ..record import signature
from ..record.future import Future
from ..train.parameter import Parameter
from .arguments import INT, BlockInt
from .program import Program, Step


def trace(block, key, tracer):
    """Run block.forward once on placeholders recorded in `tracer` (a fresh scope).

    key: per argument, its type id, INT for an integer, the Parameter itself (baked in), or
    (STATIC, value) for a flag (a pair: the str "int" alone would read as INT).
    """
    inputs = []
    n_ints = 0
    for a in key:
        if isinstance(a, Parameter):
            inputs.append(a)
            continue
        if a is INT:
            inputs.append(BlockInt(n_ints))
            n_ints += 1
            continue
        if a.__class__ is tuple:
            inputs.append(a[1])
            continue
        sig = signature.intern(Input, (a,), ())
        tracer.graph.origin.append("<block input>")     # origins stay aligned with node ids
        inputs.append(Future(tracer, tracer.graph.add(sig.id, (sig.out_type,), (), -1)))
    graph = tracer.graph
    n_inputs = len(graph)
    tracer.trace_ints = tracer.first_draw = n_ints     # random draws take the integer columns after these
    tracer.draw_events = None           # or the draws and stream changes in order (arguments.draw_event)
    try:
        out = block.forward(*inputs)
    except (ShapeError, IndexError, TypeError) as e:    # name the block: the op alone may not say whose
        e.add_note(f"while tracing {type(block).__name__}.forward for arguments {_described(key)}")
        raise
    container = list if isinstance(out, list) else tuple if isinstance(out, tuple) else None
    outs = [out] if container is None else list(out)
    if not outs:
        raise HybridBatchError(f"{type(block).__name__}.forward must return at least one value")
    for k, o in enumerate(outs):
        if isinstance(o, Parameter):    # a learned value returned as it is (an initial state): its read
            outs[k] = o = tracer.record(ParamRead, (o,), (), 0)
        if isinstance(o, (tuple, list)):
            raise HybridBatchError(f"{type(block).__name__}.forward returned a {type(o).__name__} inside its "
                                   f"{container.__name__}: a hybridized forward returns one value, or one flat "
                                   f"tuple or list of values")
        if not (isinstance(o, Future) and o.scope is tracer):
            raise HybridBatchError(f"{type(block).__name__}.forward must return values computed with hb ops "
                                   f"from its inputs, or Parameters (got {type(o).__name__})")
    outputs = tuple(o.id for o in outs)
    return Program(name=type(block).__name__, steps=_steps(graph, n_inputs), n_inputs=n_inputs,
                   n_slots=len(graph), in_types=tuple(graph.type[:n_inputs]),
                   consts=list(graph.constants.items()), outputs=outputs,
                   out_types=tuple(graph.type[o] for o in outputs), container=container,
                   n_ints=tracer.trace_ints, n_draws=tracer.trace_ints - n_ints,
                   draw_events=None if tracer.draw_events is None else tuple(tracer.draw_events),
                   origins=dict(enumerate(graph.origin or ())), owner=block)


def _described(key):
    """A call key as the user passed it: shapes and dtypes, int, flags, Parameter names."""
    parts = []
    for a in key:
        if isinstance(a, Parameter):
            parts.append(f"Parameter {a.name!r}")
        elif a is INT:
            parts.append("an int")
        elif a.__class__ is tuple:
            parts.append(repr(a[1]))
        else:
            shape, dtype = signature.TYPES[a]
            parts.append(f"{shape} {dtype}")
    return "(" + ", ".join(parts) + ")"


def _steps(graph, n_inputs):
    """The traced graph's executed nodes as Steps: a trace records ops (a nested block runs
    inline), so each of its calls is one node, the slot its node id."""
    assert len(graph.sig) == len(graph), "a traced graph holds a multi-output call"
    steps = []
    for slot in range(n_inputs, len(graph)):
        sig = signature.SIGS[graph.sig[slot]]
        if not sig.op.executed:
            continue
        operands = iter(graph.args[(graph.arg_end[slot - 1] if slot else 0):graph.arg_end[slot]])
        refs = tuple(next(operands) if pid is None else None for pid in sig.params)
        steps.append(Step(slot, sig, refs, graph.aux[slot]))
    return steps
