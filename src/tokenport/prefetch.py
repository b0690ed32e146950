"""``prefetch(array, index)``: a numba intrinsic that starts loading an element read soon.

Random reads over arrays larger than the caches (Fisher-Yates swaps, gathers through a
permutation) otherwise wait on memory nearly one at a time; issuing LLVM's prefetch hint a few
dozen iterations ahead keeps several loads in flight. It is a hint: results never change.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["prefetch"]

_WRITE = 1  # the element will be written too (a swap), so fetch the line for ownership
_KEEP_IN_ALL_CACHES = 3
_DATA_CACHE = 1


@intrinsic
def prefetch(typingctx: Any, array: Any, index: Any) -> Any:
    """Hint that ``array[index]`` (a 1-D array, an integer index in bounds) is read and written soon."""
    if not (isinstance(array, types.Array) and array.ndim == 1 and isinstance(index, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        byte_pointer = ir.IntType(8).as_pointer()
        int32 = ir.IntType(32)
        function_type = ir.FunctionType(ir.VoidType(), [byte_pointer, int32, int32, int32])
        function = builder.module.declare_intrinsic("llvm.prefetch", [byte_pointer], function_type)
        address = builder.bitcast(builder.gep(data, [args[1]]), byte_pointer)
        hints = [ir.Constant(int32, value) for value in (_WRITE, _KEEP_IN_ALL_CACHES, _DATA_CACHE)]
        builder.call(function, [address, *hints])
        return context.get_dummy_value()

    return types.void(array, index), codegen
