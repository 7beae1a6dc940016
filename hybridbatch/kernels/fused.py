"""Fused elementwise kernels for traced block programs (numba, cached on disk).

A run of elementwise steps over equal-length vectors (the gate math of an LSTM after its
matmul: slices, sigmoid, tanh, products, sums) becomes ONE loop over (instance, element)
that reads its inputs once and writes only the values used outside the run. Its backward
recomputes the run's scalars from the inputs and applies the chain rule per element, so
nothing inside the run is stored.

Each op supplies its own math per element (`Op.scalar`: value and local derivatives as
source, beside its numpy forward and backward in ops/); this module only strings those
together, so it needs no table of ops.

Kernels are generated as Python source, written once into the kernel cache directory
(HYBRIDBATCH_CACHE_DIR, default ~/.cache/hybridbatch/kernels) under the hash of their source,
and compiled with numba's `cache=True`: a second process loads the machine code instead of
compiling it. A kernel not in that cache compiles in a worker process while its run's steps
go on unfused (`Kernels`, compiling.py), or at once with `hb.settings.compile_in_background`
off.
"""
import hashlib
import importlib.util
import os
import pathlib
import sys
import threading

import numpy as np
from numba import types
from numba.core.compiler_lock import global_compiler_lock
from numba.np.numpy_support import from_dtype

from ..config import settings
from ..record import signature
from . import compiling
from .vector_width import WIDE_VECTORS, compiled_wide

_FLOAT32 = np.dtype(np.float32)     # compared as a dtype: dtype.name builds its string on every read


# tanh as a rational function x P(x^2) / Q(x^2) on [-9, 9] (|tanh(9)| rounds to 1 in float32),
# fitted for this project by iteratively reweighted least squares on the relative error: max
# relative error 3.4e-7 in float32, clamped to [-1, 1] (so 1 - y^2, its derivative, is never
# negative). Unlike libm's tanh (numba has no SVML here) it vectorizes.
_TANH = """
@njit(inline="always", error_model="numpy", fastmath=FAST)
def _tanh(x):
    c = min(max(x, F(-9.0)), F(9.0))
    s = c * c
    y = c * (F(0.9999999941872977) + s * (F(0.1339428211549594) + s * (F(0.0035112771294632107) + s * (
        F(2.0865152845046354e-05) + s * F(1.3705668534557544e-08))))) / (F(1.0) + s * (F(0.46727603999611844) + s * (
        F(0.025936810154938292) + s * (F(0.0003311200608008736) + s * F(7.921020577202943e-07)))))
    y = min(max(y, F(-1.0)), F(1.0))    # the fit's error would reach 1.0000001 near |x| = 8.8
    return y if x == x else x       # NaN stays NaN
"""
# What lets LLVM vectorize the loops: numpy's error model (no ZeroDivisionError check per
# division), literals in the run's dtype (F) so float32 math is not widened to float64, and
# contraction -- but not 'nnan'/'ninf': NaN and inf propagate as in numpy. Nor 'reassoc':
# the loops are elementwise (nothing to reduce), and reordering 2 * (b * x) into (2 * x) * b
# overflowed to NaN near float32's maximum where the ops' order gives 0 (a Tree-LSTM's kernels
# ran equally fast without it). Nor 'afn' and 'arcp': they made x ** -1.5 overflow through
# x ** -2 (inf for x = 1e-21, where numpy gives 3e31) and 1 / sqrt(x) a reciprocal-root
# estimate (NaN at 0 and inf), and LSTM and division kernels run as fast without them.
_HEADER = """import numpy as np
from numba import njit

F = np.{dtype}
FAST = {{"contract", "nsz"}}
"""
_JIT = '@njit(cache=True, error_model="numpy", fastmath=FAST)'


def _lanes(dtype, n):
    """The vector lanes a kernel of `dtype` over rows of n elements is compiled for (None:
    LLVM's choice). Not for rows shorter than the vector: LLVM would not vectorize those
    loops anyway, and a forced width makes it print a remark to stderr for each."""
    lanes = 64 // dtype.itemsize
    return lanes if WIDE_VECTORS and n >= lanes else None


def cache_dir() -> pathlib.Path:
    d = pathlib.Path(os.environ.get("HYBRIDBATCH_CACHE_DIR", pathlib.Path.home() / ".cache" / "hybridbatch" / "kernels"))
    d.mkdir(parents=True, exist_ok=True)
    return d


class FusedRun:
    """One generated kernel pair for a run of elementwise program steps.

    dtype: its values' dtype; inputs: per kernel argument, ("slot", s) a batched (B, width)
    value or ("param", pid) a shared vector; outputs: program slots the run must
    materialize, each (B, n); write_once: per argument, whether the backward assigns every
    element of its gradient (so the gradient array need not be zeroed first) instead of
    adding into it. reached: per argument, whether the outputs backward gets gradients for
    depend on it. biases: {input slot: pid} of the slots the run reads with a bias added.
    kernels: its compiled kernels, or their state (`Kernels`). spec: build_run's arguments,
    for the backward kernels of fewer outputs.
    """

    def __init__(self, n, dtype, inputs, outputs, write_once, reached, biases, kernels, spec):
        self.n = n
        self.dtype = dtype
        self.inputs = inputs
        self.outputs = outputs
        self.write_once = write_once
        self.reached = reached
        self.biases = biases
        self.kernels = kernels
        self.forward_kernel, self.backward_kernel = kernels.forward, kernels.backward
        self._spec = spec
        self._reading = {}

    def backward_reading(self, read):
        """The run whose backward kernel takes gradients of only the outputs flagged in `read`
        (its `backward_kernel`, `reached`, `kernels`): the kernel takes the same arguments (the
        others' gradients are never read) and leaves their terms out rather than multiplying
        them by a zero gradient (0 times log's derivative at 0 is NaN); an argument no read
        output depends on gets no gradient (None), so the steps that made it are not
        differentiated either."""
        found = self._reading.get(read)
        if found is None:
            found = self._reading[read] = build_run(*self._spec, reading=read)
        return found


def build_run(steps, n, used_later, biases=None, reading=None):
    """A FusedRun for program steps (slot, sig, refs, aux) all of output length n.

    used_later: slots read after the run or returned by the program (must be written out).
    biases: {slot: pid} of input slots that are a product still missing the bias
    Parameter pid: the run reads slot[b, o + j] + bias[o + j] and adds the leaf's gradient
    into both. reading: per output, whether backward gets its gradient (default: all).
    """
    biases = biases or {}
    bias_of = {}          # leaf variable name -> kernel argument index of its bias
    inputs, input_index = [], {}
    leaves = {}           # (input index, column offset) -> leaf variable name
    widths = {}           # input index -> columns of a batched input
    value_of = {}         # program slot -> scalar expression name
    lines, grads = [], []  # forward statements; per statement: (name, [(operand var, local derivative)])

    def arg(kind, key):
        if (kind, key) not in input_index:
            input_index[(kind, key)] = len(inputs)
            inputs.append((kind, key))
        return input_index[(kind, key)]

    def leaf(kind, key, offset, width):
        k = arg(kind, key)
        if kind == "slot":
            widths[k] = width
        name = leaves.get((k, offset))
        if name is None:
            name = leaves[(k, offset)] = f"l{len(leaves)}"
            if kind == "slot" and key in biases:
                bias_of[name] = arg("param", biases[key])
        return name

    def operand(ref, pid, offset=0, width=n):
        if pid is not None:
            return leaf("param", pid, offset, width)
        if ref in value_of and offset == 0:
            return value_of[ref]
        return leaf("slot", ref, offset, width)

    for slot, sig, refs, _ in steps:
        op = sig.op
        if not op.fusable:      # a column range of a vector (_fusable): read in place
            value_of[slot] = operand(refs[0], None, op.columns(sig), sig.in_shapes[0][0])
            continue
        t = f"t{len(lines)}"      # by position, not slot: runs alike in any program share one kernel
        xs = [operand(r, p) for r, p in zip(refs, sig.params)]
        expr, derivs = op.scalar(sig.attrs, t, *xs)
        lines.append(f"{t} = {expr}")
        grads.append((t, list(zip(xs, derivs))))
        value_of[slot] = t

    outputs = [s for s, *_ in steps if s in used_later]
    leaf_reads = []
    for (k, offset), name in leaves.items():
        kind = inputs[k][0]
        read = f"in{k}[j]" if kind == "param" else f"in{k}[b, {offset} + j]"
        if name in bias_of:
            read += f" + in{bias_of[name]}[{offset} + j]"
        leaf_reads.append(f"{name} = {read}")
    ins = ", ".join(f"in{k}" for k in range(len(inputs)))
    outs = ", ".join(f"out{i}" for i in range(len(outputs)))
    gouts = ", ".join(f"gout{i}" for i in range(len(outputs)))
    gins = ", ".join(f"gin{k}" for k in range(len(inputs)))
    body = leaf_reads + lines

    fwd = [f"def forward(B, {ins}, {outs}):", "    for b in range(B):", f"        for j in range({n}):"]
    fwd += [f"            {s}" for s in body]
    fwd += [f"            out{i}[b, j] = {value_of[s]}" for i, s in enumerate(outputs)]

    adj = [f"a_{v} = F(0.0)" for v in [t for t, _ in grads] + list(leaves.values())]
    read = [(i, value_of[s]) for i, (s, r) in enumerate(zip(outputs, reading or [True] * len(outputs))) if r]
    seed = [f"a_{v} += gout{i}[b, j]" for i, v in read]
    back, reached = [], {v for _, v in read}
    for t, parts in reversed(grads):
        if t in reached:            # a value no read output depends on gets no terms
            reached.update(x for x, _ in parts)
            back += [f"a_{x} += a_{t} / {d[1:]}" if d.startswith("/") else f"a_{x} += a_{t} * {d}"
                     for x, d in parts]
    once = _write_once(inputs, leaves, widths, n)
    reached_args = [False] * len(inputs)
    for (k, _), name in leaves.items():
        if name in reached:
            reached_args[k] = True
            if name in bias_of:
                reached_args[bias_of[name]] = True
    writes = []
    for (k, offset), name in leaves.items():
        target = f"gin{k}[j]" if inputs[k][0] == "param" else f"gin{k}[b, {offset} + j]"
        writes.append(f"{target} {'=' if once[k] else '+='} a_{name}")
        if name in bias_of:
            writes.append(f"gin{bias_of[name]}[{offset} + j] += a_{name}")
    bwd = [f"def backward(B, {ins}, {gouts}, {gins}):", "    for b in range(B):", f"        for j in range({n}):"]
    bwd += [f"            {s}" for s in body + adj + seed + back + writes]

    dtype = steps[-1][1].out_dtype
    lanes = _lanes(dtype, n)
    # the lane count is part of the source, so a kernel compiled (and cached) for another has another file
    header = _HEADER.format(dtype=dtype.name) + f"# vector lanes: {lanes or 'LLVM default'}\n"
    source = "\n".join([header, _TANH, "", _JIT] + fwd + ["", "", _JIT] + bwd) + "\n"
    ins = [2 if kind == "slot" else 1 for kind, _ in inputs]       # arrays' dimensions; 0: the row count B
    outs = [2] * len(outputs)
    called = {"backward": [0] + ins + outs + ins}
    if reading is None:          # a run of fewer read outputs only lends its backward
        called["forward"] = [0] + ins + outs
    read_biased = {k: pid for k, pid in biases.items() if ("slot", k) in input_index}
    return FusedRun(n, dtype, inputs, outputs, once, tuple(reached_args), read_biased,
                    _load(source, lanes, dtype.name, called), (steps, n, used_later, biases))


def _write_once(inputs, leaves, widths, n):
    """Per kernel argument: is it a batched input whose leaves read each of its columns
    exactly once? Its gradient is then assigned, not added: no zero fill before the kernel.
    A shared vector's gradient sums over rows, and columns a run does not read stay zero."""
    offsets = {}
    for k, offset in leaves:
        offsets.setdefault(k, []).append(offset)
    return tuple(kind == "slot" and sorted(offsets[k]) == list(range(0, widths[k], n))
                 for k, (kind, _) in enumerate(inputs))


_loaded = {}      # source hash -> Kernels
_loading = threading.Lock()


class Kernels:
    """The kernels of one generated module (shared by every run with its source), and
    whether they run without compiling: `ready` once every kernel it calls is compiled in
    this process.

    called: {function name: argument dimensions} of the kernels a run calls (0: the row
    count B, else a C-ordered array of the run's dtype), as the Composite op calls them.
    Until ready, the op runs the steps unfused; `start` loads the kernels from numba's disk
    cache where they are there (milliseconds), else compiles them now or, with
    settings.compile_in_background, has the worker process compile them (compiling.py),
    and `available` loads them once it has.
    """

    def __init__(self, path, module, lanes, dtype, called):
        self.path, self.lanes, self.dtype, self.called = path, lanes, dtype, called
        self.forward, self.backward = module.forward, module.backward
        self.ready = False
        self.job = None

    def start(self):
        """Load or compile the kernels, or start compiling them in the background: True when
        this call handed them to the worker."""
        with _loading:
            if self.ready or self.job is not None:
                return False
            if all(_load_cached(getattr(self, name), self._types(name)) for name in self.called):
                self.ready = True
                return False
            if not settings.compile_in_background:
                self._compile()
                return False
            self.job = compiling.submit(compiling.Job(self.path, self.lanes, [
                [name, self.dtype, dims] for name, dims in self.called.items()]))
            return True

    def available(self):
        """Whether the kernels can run now: they are ready, or the worker has compiled them
        and this call loads them (or compiles them here, where it failed)."""
        if self.ready:
            return True
        if self.job is None:
            self.start()
            return self.ready
        if not self.job.done.is_set():
            return False
        with _loading:
            if not self.ready:
                if self.job.error is not None:
                    compiling.log.warning("compiling fused kernels in the background failed (%s); compiling "
                                          "them in this process", self.job.error)
                self._compile()
        return True

    def _compile(self):
        """Compile (or load, where the worker put them in the cache) every kernel runs call."""
        for name in self.called:
            getattr(self, name).compile(self._types(name))
        self.ready = True

    def _types(self, name):
        return arg_types(self.dtype, self.called[name])


def arg_types(dtype, dims):
    """numba's argument types for a kernel's arguments of these dimensions (see Kernels)."""
    scalar = from_dtype(np.dtype(dtype))
    return tuple(types.int64 if d == 0 else types.Array(scalar, d, "C") for d in dims)


def _load_cached(kernel, sig):
    """Whether `kernel` now runs for `sig` without compiling: compiled already, or loaded here
    from numba's disk cache (not compiled on a miss). The cache's index says whether it holds
    `sig`, so the kernel is loaded once, by numba's own compile (a load costs 1.5-2 ms)."""
    if sig in kernel.overloads:
        return True
    cache = getattr(kernel, "_cache", None)
    if not getattr(cache, "_enabled", False):       # None, or numba's NullCache: no disk cache
        return False
    with global_compiler_lock:
        kernel.targetctx.refresh()
        try:
            held = cache._index_key(sig, kernel.targetctx.codegen()) in cache._cache_file._load_index()
        except AttributeError:      # numba's cache internals moved: a load says it, at a second load's cost
            held = cache.load_overload(sig, kernel.targetctx) is not None
        if not held:
            return False
        kernel.compile(sig)          # a cache hit, registered as numba's own
    return True


def _load(source, lanes, dtype, called):
    """The Kernels of this source: its module written once under its source hash and
    imported (numba caches beside it), compiling nothing yet."""
    digest = hashlib.sha1(source.encode()).hexdigest()[:16]
    found = _loaded.get(digest)
    if found is not None:
        return found
    path = cache_dir() / f"fused_{digest}.py"
    if not path.exists():
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(source)
        os.replace(tmp, path)     # atomic: concurrent processes never import half a file
    with _loading:
        if digest not in _loaded:
            _loaded[digest] = Kernels(path, _import(path, lanes), lanes, dtype, called)
    return _loaded[digest]


def _import(path, lanes):
    """The kernel module at `path`; its kernels compile with `lanes`-wide vectors when given."""
    name = f"hybridbatch_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if lanes:
        compiled_wide(module.forward, lanes)
        compiled_wide(module.backward, lanes)
    return module


def compile_module(path, lanes, kernels):
    """The worker's job (compiling.serve): compile the module's kernels into numba's disk cache.
    kernels: [function name, dtype, argument dimensions] each."""
    module = _import(pathlib.Path(path), lanes)
    for name, dtype, dims in kernels:
        getattr(module, name).compile(arg_types(dtype, dims))


def compile_stats():
    """(cache hits, compilations) over every fused kernel this process has used."""
    hits = misses = 0
    for kernels in list(_loaded.values()):
        for fn in (kernels.forward, kernels.backward):
            hits += sum(fn.stats.cache_hits.values())
            misses += sum(fn.stats.cache_misses.values())
    return hits, misses


def prepare(units, block):
    """Load the fused runs' kernels among `units`, or start compiling them; say so once for
    `block` (its name) when some go to the worker."""
    started = sum(unit.kernels.start() for unit in units if isinstance(unit, FusedRun))
    if started:
        compiling.log.info("%s: compiling %d fused kernel module%s in the background (first use on this "
                           "machine); its batches run unfused until they are ready",
                           block, started, "" if started == 1 else "s")


def _fusable(step, n, produced):
    """Can this step join a run over length-n vectors? `produced`: slots made inside the run.
    It can when its op is fusable (elementwise, with a scalar rule) and reads length-n
    vectors, or when its value is a column range of a vector made before the run (a slice,
    whose columns the run reads in place).

    float32 only: the kernels' tanh is accurate to float32, not to float64."""
    slot, sig, refs, _ = step
    op = sig.op
    if sig.out_shape != (n,) or sig.out_dtype != _FLOAT32:
        return False
    if op.fusable:
        return all(shape == (n,) for shape in sig.in_shapes)
    return op.columns(sig) is not None and refs[0] is not None and refs[0] not in produced


def _run_spans(steps):
    """(start, end, n) of each fusable run (>= 2 fusable ops, column reads aside), in program order."""
    spans, i = [], 0
    while i < len(steps):
        sig = steps[i][1]
        n = sig.out_shape[0] if len(sig.out_shape) == 1 else None
        j, produced = i, set()
        while n is not None and j < len(steps) and _fusable(steps[j], n, produced):
            produced.add(steps[j][0])
            j += 1
        if sum(s[1].op.fusable for s in steps[i:j]) >= 2:
            spans.append((i, j, n))
            i = j
        else:
            i += 1
    return spans


def _bias_folds(steps, spans, program_outputs):
    """{step index: bias pid} for affine steps (an op with `without_bias`) whose bias the
    fused runs can add.

    Folded: float32 W x + b with b (the last operand) a shared Parameter of the output's own
    1-D shape, W and x not both shared, whose output is read only by steps inside fused runs
    (which read it as leaves, so each can add b[offset + j] to what it reads) and is not a
    program output."""
    in_run = {k for i, j, _ in spans for k in range(i, j)}
    readers = {}
    for k, (_, _, refs, _) in enumerate(steps):
        for r in refs:
            if r is not None:
                readers.setdefault(r, set()).add(k)
    folds = {}
    for k, (slot, sig, refs, _) in enumerate(steps):
        if (sig.op.without_bias is not None and sig.out_dtype == _FLOAT32 and len(sig.out_shape) == 1
                and sig.params[-1] is not None and sig.in_shapes[-1] == sig.out_shape
                and not all(sig.shared[:-1]) and slot not in program_outputs
                and readers.get(slot) and readers[slot] <= in_run):
            folds[k] = sig.params[-1]
    return folds


def plan_units(steps, program_outputs):
    """Split program steps into single steps and FusedRuns (runs with >= 2 fused ops).

    An affine step whose output only feeds fused runs becomes a bias-free matmul step, and
    the runs add its bias where they read the output (and sum its gradient). Every run has
    a value read after it: a program keeps no dead steps (hybrid/program.py)."""
    runs = [(span, _run_outputs(steps, span, program_outputs)) for span in _run_spans(steps)]
    spans = [span for span, _ in runs]
    folds = _bias_folds(steps, spans, program_outputs)
    steps = list(steps)
    biases = {}
    for k, pid in folds.items():
        slot, sig, refs, _ = steps[k]
        steps[k] = steps[k]._replace(sig=signature.intern(sig.op.without_bias, sig.attrs, sig.codes[:-1]),
                                     refs=refs[:-1])
        biases[slot] = pid
    units, i = [], 0
    for (start, end, n), outs in runs:
        units += steps[i:start]
        run = steps[start:end]
        fused = build_run(run, n, outs, biases)
        fused.steps = run
        units.append(fused)
        i = end
    return units + steps[i:]


def _run_outputs(steps, span, program_outputs):
    """The slots a run (start, end, n) makes that later steps or the program's outputs read."""
    start, end, _ = span
    produced = {s[0] for s in steps[start:end]}
    later = {r for s in steps[end:] for r in s[2] if r is not None} | set(program_outputs)
    return later & produced
