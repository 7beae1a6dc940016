"""hb.map: per-instance code that reads values, run so that its ops still batch.

Inside a batching scope each instance runs as a greenlet. A read of a value still pending
(`asnumpy()`, `item()`, `int()`, `float()`, `bool()`, `<`, ...) switches from the reading
instance back to the map's driver instead of flushing. Once every live instance has
suspended or finished, the driver flushes once, which computes all their pending nodes
together, and resumes each suspended instance, whose read then finds its value computed.
A read in an instance thus costs one flush per round of reads, not one per instance.

The driver of a map nested in an instance is itself an instance of the outer map: its
flush suspends to the outer driver, so the inner instances batch with the outer ones.

The greenlets are pooled per thread: starting a fresh greenlet and letting it end costs
about 7 us, handing a parked one its next instance about 0.3 us, and a map of one read
per instance would otherwise spend most of its suspension cost there.
"""
import reprlib
import threading

from .scope import current
from ..hybrid.arguments import draw_event
from ..ops import random

try:
    from greenlet import greenlet, getcurrent
except ImportError:         # an optional extra: hb.map outside a scope is a plain loop
    greenlet = None


def map(fn, instances):
    """[fn(x) for x in instances], with reads inside fn suspending instead of flushing.

    Outside a batching scope (or inside a traced block forward) it is that plain loop.
    Inside one, every instance's reads of pending values are served by shared flushes
    (module docstring). An exception raised by an instance is raised here, at its own
    line, once the other instances have run to their end; a note names the instance, and
    the exception's `map_results` holds every instance's result (None where one raised)
    and `map_errors` every failing instance's exception by index. An exception that is
    not an Exception (KeyboardInterrupt, SystemExit, a greenlet's kill), or a failed flush,
    stops every other instance (GreenletExit raised at its suspended read) and is raised at
    once; inside a scope, where each instance runs on a greenlet of its own, an instance
    that raises GreenletExit itself ends its greenlet with it, and that is kept as the
    instance's exception.
    Where several instances raise, the one of lowest index is raised, in both modes. Each
    instance draws its random keys (hb.dropout) from a stream of its own, in both modes, so
    its masks do not depend on the order instances record in.

    >>> def label(x):
    ...     return "pos" if hb.sum(hb.array(x)) > 0 else "neg"     # a read of a value
    >>> with hb.batching() as scope:
    ...     labels = hb.map(label, [[1.0, 2.0], [-3.0, 1.0], [0.5, 0.5]])
    >>> labels, scope.stats.flushes               # three reads, one flush
    (['pos', 'neg', 'pos'], 1)
    """
    scope = current()
    instances = list(instances)
    if scope is None:
        results, errors = _loop(fn, instances)
    elif scope.tracing:
        results, errors = _traced(scope, fn, instances)
    else:
        results, errors = each(fn, instances)
    if errors:
        raise _first_error(errors, results, instances)
    return results


def _traced(tracer, fn, instances):
    """The map in a traced forward: the plain loop (reads are refused there), its stream
    changes noted in the trace, so that each call of the block gives each instance's draws
    the keys the plain forward's map gives them (hybrid/arguments.py, draw_event)."""
    draw_event(tracer, ("split", len(instances)))
    try:
        return _in_turn(fn, instances, lambda i: draw_event(tracer, ("use", i)))
    finally:
        draw_event(tracer, ("end",))


def _loop(fn, instances):
    """The map outside a scope: each instance in turn, on a random stream of its own (its
    dropout masks as in a scope)."""
    streams = random.split(len(instances))
    outer = random.stream()
    try:
        return _in_turn(fn, instances, lambda i: random.use(streams[i]))
    finally:
        random.use(outer)


def _in_turn(fn, instances, enter):
    """fn over the instances one after another, enter(i) before instance i: (results,
    {index: exception}), as the scope's map returns them."""
    results, errors = [None] * len(instances), {}
    for i, x in enumerate(instances):
        enter(i)
        try:
            results[i] = fn(x)
        except Exception as e:
            errors[i] = e
    return results, errors


def each(fn, instances):
    """hb.map's work inside the open scope over a list of instances, their exceptions
    returned, not raised: (results, {index: exception}), None the result of each instance
    that raised. A failed flush, or a BaseException that is not an Exception, is raised as
    in hb.map."""
    if greenlet is None:
        raise ImportError("hb.map inside a batching scope runs each instance as a greenlet, and greenlet is not "
                          "installed: pip install hybridbatch[map]")
    return _run(current(), fn, instances, random.split(len(instances)))


class _Instance(greenlet if greenlet is not None else object):
    """A greenlet that runs map instances one after another (`_serve`). `driver` is the
    greenlet its reads and its finished instances switch to; `outcome` the finished
    instance's (True, result) or (False, exception), taken by the driver."""


_DONE = object()        # what an instance greenlet switches to its driver when fn(x) has ended
POOL_LIMIT = 1024       # parked greenlets kept per thread (about 8 KB each)
_parked = threading.local()


def _serve(fn, x):
    """An instance greenlet's run: fn(x) for each (fn, x) its driver hands it, its outcome
    left on the greenlet rather than in a local, so that a parked greenlet holds no result
    (and through it no scope); ends when handed (None, None). No local holds the greenlet
    itself: a suspended frame's references are invisible to the garbage collector, so such
    a cycle would keep every greenlet the pool drops (and a finished thread's pool) alive."""
    while fn is not None:
        try:
            getcurrent().outcome = True, fn(x)
        except Exception as e:
            getcurrent().outcome = False, e
        fn = x = None
        fn, x = getcurrent().driver.switch(_DONE)


def _suspend():
    """The scope's read hook while a map runs (batching.await_flush): switch the reading
    instance to its driver, back once the driver has flushed. False when the reader is
    not a map instance (the caller flushes itself)."""
    current = getcurrent()
    if current.__class__ is not _Instance:
        return False
    current.driver.switch()
    return True


def _start(driver, pool, fn, x):
    """Run fn(x) on a parked greenlet (a new one if none is parked) until it first suspends
    or ends; returns the greenlet and what it switched back."""
    g = pool.pop() if pool else _Instance(_serve)
    g.driver = g.parent = driver        # a BaseException that ends it is raised in the driver
    g.gr_context = None                 # each instance starts in an empty context, as a new greenlet
    return g, g.switch(fn, x)


def _run(scope, fn, instances, streams):
    """The driver: run every ready instance until it finishes or suspends, flush once for
    all the suspended ones, resume them; until none is left. Each instance runs on its own
    random stream, the driver on the one it had. Returns (results, {index: exception})."""
    enclosing, scope.suspend = scope.suspend, _suspend
    outer = random.stream()
    driver = getcurrent()
    pool = getattr(_parked, "pool", None)
    if pool is None:
        pool = _parked.pool = []
    running = [None] * len(instances)       # the greenlet of each instance started and not ended
    results = [None] * len(instances)
    errors = {}
    try:
        ready = range(len(instances))
        while ready:
            suspended = []
            for i in ready:
                random.use(streams[i])
                try:
                    g = running[i]
                    if g is None:
                        g, signal = _start(driver, pool, fn, instances[i])
                    else:
                        signal = g.switch()
                finally:
                    random.use(outer)
                if signal is not _DONE:
                    if not g.dead:
                        running[i] = g
                        suspended.append(i)
                        continue
                    # fn raised GreenletExit, which ends a greenlet quietly: its parent gets
                    # the exception as the switch's value. Kept as the instance's exception.
                    running[i] = None
                    errors[i] = signal
                    continue
                running[i] = None
                ok, value = g.outcome
                # a parked greenlet keeps no result and no context (a contextvar fn set
                # could hold a value of the scope, and through it the scope)
                g.outcome = g.driver = g.gr_context = None
                if ok:
                    results[i] = value
                else:
                    errors[i] = value
                if len(pool) < POOL_LIMIT:
                    pool.append(g)
                else:
                    g.switch(None, None)
            if suspended:
                scope.await_flush()
            ready = suspended
    except BaseException:
        for g in running:
            if g is not None and not g.dead:
                try:
                    g.throw()       # GreenletExit at its read: its `finally` blocks run
                except Exception:   # a cleanup's failure: the exception that stopped the map is raised
                    pass
        raise
    finally:
        scope.suspend = enclosing
    return results, dict(sorted(errors.items()))     # by index, as a plain loop meets them


def _first_error(errors, results, instances):
    """The exception of the failing instance of lowest index (what a plain loop would meet
    first, however the rounds ran), with notes naming it and the others."""
    (i, e), *others = errors.items()
    e.add_note(f"raised by hb.map instance {i} of {len(instances)}: {_short(instances[i])}")
    note = ("the other instances ran to their end: this exception's map_results holds every result "
            "(None where an instance raised), map_errors each failing instance's exception by index")
    if others:
        note += f"; instances {', '.join(str(j) for j, _ in others)} raised too"
    e.add_note(note)
    e.map_results, e.map_errors = results, errors
    return e


def _short(x, limit=80):
    try:
        text = reprlib.repr(x)      # a huge list is not written out whole
    except Exception:               # the instance's own error matters more than its repr's
        text = f"<{type(x).__name__} object>"
    return text if len(text) <= limit else text[:limit - 3] + "..."
