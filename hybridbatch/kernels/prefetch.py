"""A software prefetch for compiled kernels that stream a weight from memory.

A few-rows product does enough arithmetic per weight row that the hardware prefetcher falls
behind: a 256 x 256 float32 weight of 8 rows read from memory took 24 us against 7 us from
the cache, 11 GB/s where a plain pass reads 36-42 GB/s on this project's machine. Asking for
the rows two groups ahead while the current ones are in use brought it to 13 us for x @ W.T
and 16.6 us for g @ W (a mixture of experts streams 128 such weights a step, forward and
backward). The hardware does not follow from a row's first line: every line must be asked
for.

`prefetch_row(a, i)` emits a loop of LLVM prefetches (reads, kept in every cache level) over
the cache lines of row i of a C-contiguous 2-D array, from the line the row starts in. The
loop is marked for the vectorizer to leave alone: a kernel compiled with forced 512-bit
vectors (vector_width.py) would otherwise print a remark for it on every compile. A prefetch
is a hint, never a fault; the callers ask for rows in range only. numba's cache keys a
compiled kernel on its own file: after a change here, clear the callers' caches (the
`__pycache__` index files of few_rows.py and scatter.py, or NUMBA_CACHE_DIR).
"""
import itertools

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LINE = 64       # bytes in a cache line
_READ, _KEEP, _DATA = 0, 3, 1       # llvm.prefetch's rw, locality (every level), cache type
_loop_ids = itertools.count()


def _unvectorized_loop(module):
    """A loop ID of its own (llvmlite reuses a node of equal operands: a numbered one keeps
    each loop's apart) telling LLVM's vectorizer to keep the loop scalar (width 1)."""
    hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.width"), ir.IntType(32)(1)])
    own = module.add_metadata([ir.MetaDataString(module, "hybridbatch.prefetch"), ir.IntType(32)(next(_loop_ids))])
    loop = module.add_metadata([own, hint])
    loop.operands = (loop, hint, own)       # operand 0 is the node itself, as a loop ID's is
    return loop


@intrinsic
def prefetch_row(typingctx, array, i):
    """Prefetch every cache line holding part of row i (in range) of a C-contiguous 2-D array."""
    if not (isinstance(array, types.Array) and array.ndim == 2 and array.layout == "C"
            and isinstance(i, types.Integer)):
        return None
    sig = types.void(array, i)

    def codegen(context, builder, signature, args):
        arraytype = signature.args[0]
        arr = context.make_array(arraytype)(context, builder, args[0])
        row = context.cast(builder, args[1], signature.args[1], types.intp)
        zero = context.get_constant(types.intp, 0)
        start = cgutils.get_item_pointer(context, builder, arraytype, arr, [row, zero], wraparound=False)
        byte, i32, intp = ir.IntType(8).as_pointer(), ir.IntType(32), context.get_value_type(types.intp)
        width = cgutils.unpack_tuple(builder, arr.shape, 2)[1]
        size = builder.mul(width, intp(context.get_abi_sizeof(context.get_data_type(arraytype.dtype))))
        address = builder.ptrtoint(start, intp)
        first = builder.and_(address, intp(-LINE))      # the line the row starts in
        end = builder.add(address, size)
        fn = builder.module.declare_intrinsic("llvm.prefetch", [byte],
                                              ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]))
        entry = builder.block
        head = builder.append_basic_block("prefetch.head")
        body = builder.append_basic_block("prefetch.body")
        done = builder.append_basic_block("prefetch.done")
        builder.branch(head)
        builder.position_at_end(head)
        line = builder.phi(intp)
        line.add_incoming(first, entry)
        builder.cbranch(builder.icmp_unsigned("<", line, end), body, done)
        builder.position_at_end(body)
        builder.call(fn, [builder.inttoptr(line, byte), i32(_READ), i32(_KEEP), i32(_DATA)])
        line.add_incoming(builder.add(line, intp(LINE)), body)
        back = builder.branch(head)
        back.set_metadata("llvm.loop", _unvectorized_loop(builder.module))
        builder.position_at_end(done)
        return context.get_dummy_value()
    return sig, codegen
