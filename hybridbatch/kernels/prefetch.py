"""A software prefetch for compiled kernels that stream a weight from memory.

A few-rows product does enough arithmetic per weight row that the hardware prefetcher falls
behind: a 256 x 256 float32 weight of 8 rows read from memory took 24 us against 7 us from
the cache, 11 GB/s where a plain pass reads 36-42 GB/s on this project's machine. Asking for
the rows two groups ahead while the current ones are in use brought it to 13 us for x @ W.T
and 16.6 us for g @ W (a mixture of experts streams 128 such weights a step, forward and
backward). The hardware does not follow from a row's first line: every line must be asked
for.

`prefetch_row(a, i)` emits a loop of LLVM prefetches (reads, kept in every cache level) over
the cache lines of row i of a C-contiguous 2-D array. The loop is marked for the vectorizer
to leave alone: a kernel compiled with forced 512-bit vectors (vector_width.py) would
otherwise print a remark for it on every compile. A prefetch is a hint, never a fault; the
callers ask for rows in range only.
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LINE = 64       # bytes in a cache line
_READ, _KEEP, _DATA = 0, 3, 1       # llvm.prefetch's rw, locality (every level), cache type


def _unvectorized_loop(module):
    """A loop ID telling LLVM's vectorizer to keep this loop scalar (width 1)."""
    hint = module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.width"), ir.IntType(32)(1)])
    loop = module.add_metadata([hint, hint])        # operand 0 becomes the node itself
    loop.operands = (loop, hint)
    return loop


@intrinsic
def prefetch_row(typingctx, array, i):
    """Prefetch every cache line of row i (in range) of a C-contiguous 2-D array."""
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
        base = builder.bitcast(start, byte)
        fn = builder.module.declare_intrinsic("llvm.prefetch", [byte],
                                              ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]))
        entry = builder.block
        head = builder.append_basic_block("prefetch.head")
        body = builder.append_basic_block("prefetch.body")
        done = builder.append_basic_block("prefetch.done")
        builder.branch(head)
        builder.position_at_end(head)
        offset = builder.phi(intp)
        offset.add_incoming(intp(0), entry)
        builder.cbranch(builder.icmp_signed("<", offset, size), body, done)
        builder.position_at_end(body)
        builder.call(fn, [builder.gep(base, [offset]), i32(_READ), i32(_KEEP), i32(_DATA)])
        step = builder.add(offset, intp(LINE))
        offset.add_incoming(step, body)
        back = builder.branch(head)
        back.set_metadata("llvm.loop", _unvectorized_loop(builder.module))
        builder.position_at_end(done)
        return context.get_dummy_value()
    return sig, codegen
