"""A hybrid block call's arguments as its trace sees them.

A call's cache key has one entry per argument: its type id for a value, the Parameter
itself, INT for an integer, (STATIC, value) for a flag. While tracing, the j-th integer is a
BlockInt, which ops record as the aux code -2 - j; each call's own integers then travel with
its node (`int_column` maps a step's code back to j). A random draw inside forward
(hb.dropout) takes the next integer column after the arguments' (`draw_placeholder`), which
each call fills with a fresh key.
"""

INT = "int"   # an integer argument in a program's cache key
# Arguments that are flags, not values: forward gets each as it is, so it may test them
# (`mode == "train"`, `mask is None`; as placeholders both tests were silently False), and
# each value has its own trace.
STATIC = (str, type(None))


class BlockInt:
    """Placeholder for the j-th integer argument of a block call being traced.

    It may only serve as an op's index (lookup row, pick index, label); each call's own
    integers then travel with its node, so calls with different integers still batch.
    """

    __slots__ = ("code",)

    def __init__(self, j):
        self.code = -2 - j

    def __repr__(self):
        """Which argument it stands for (for a debugger; str() and format() refuse)."""
        return f"BlockInt({int_column(self.code)})"

    def _not_a_value(self, *other, **kwargs):
        """Its value differs per call, so forward cannot read it. Every use of the value
        raises, as int() does: a truth test, ==, <, a hash (a set or dict lookup matched no
        key) or text would pick one branch for every later call, arithmetic would compute
        with no value, and np.asarray (an operand such as `x * n`) would make an object array."""
        raise TypeError("an integer argument of a hybridized block can only be used as an op index "
                        "(hb.lookup, hb.pick, a label) inside forward; its value is not known "
                        "while tracing, so forward cannot branch on it, compute with it or print it")

    __index__ = __int__ = __float__ = __complex__ = __bool__ = __hash__ = __array__ = _not_a_value
    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _not_a_value
    __str__ = __format__ = __bytes__ = _not_a_value
    __neg__ = __pos__ = __abs__ = __invert__ = __round__ = __trunc__ = __floor__ = __ceil__ = _not_a_value
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __matmul__ = __rmatmul__ = _not_a_value
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _not_a_value
    __divmod__ = __rdivmod__ = __pow__ = __rpow__ = __lshift__ = __rlshift__ = __rshift__ = _not_a_value
    __rrshift__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _not_a_value


def int_column(code):
    """The integer argument a step's aux code names (j for -2 - j), or None for a constant."""
    return -code - 2 if code <= -2 else None


def draw_placeholder(tracer):
    """The key of a random draw made while `tracer` traces a forward: a BlockInt for the
    next integer column after the call's own integers. Each call of the block fills it with
    a fresh key (HybridBlock's call sites), so the trace keeps no mask for later calls."""
    code = BlockInt(tracer.trace_ints)
    tracer.trace_ints += 1
    if tracer.draw_events is not None:
        tracer.draw_events.append(("key",))
    return code


def draw_event(tracer, event):
    """Note a change of random stream in a traced forward (hb.map giving its instances
    streams of their own; ops/random.py, `replay_draws`): from the first one on, the trace
    keeps every draw in order, so that a call draws its keys as the plain forward would."""
    if tracer.draw_events is None:
        tracer.draw_events = [("key",)] * (tracer.trace_ints - tracer.first_draw)
    tracer.draw_events.append(event)
