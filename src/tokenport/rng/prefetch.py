"""``prefetch(array, index)``: a numba intrinsic that starts loading an element read soon.

Random reads over arrays larger than the caches (Fisher-Yates swaps, gathers through a
permutation) otherwise wait on memory nearly one at a time; issuing LLVM's prefetch hint a few
dozen iterations ahead keeps several loads in flight. It is a hint: results never change.
``swap_block`` is the Fisher-Yates inner loop both shuffle twins share, prefetching its targets.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

__all__ = ["prefetch", "swap_block"]

_AHEAD = 32  # swaps between prefetching a target and swapping it

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


@numba.njit(cache=True, inline="always")
def swap_block(array: np.ndarray, position: int, step: int, targets: np.ndarray, count: int) -> int:
    """Swap ``array[position]`` with ``array[targets[k]]`` for ``k < count``, moving ``position`` by
    ``step`` after each swap; returns the final position. Targets are prefetched ``_AHEAD`` swaps early."""
    for k in range(min(_AHEAD, count)):
        prefetch(array, targets[k])  # type: ignore[call-arg]  # numba's intrinsic stub wants typingctx
    for k in range(count):
        if k + _AHEAD < count:
            prefetch(array, targets[k + _AHEAD])  # type: ignore[call-arg]  # numba's intrinsic stub wants typingctx
        j = targets[k]
        swap = array[position]
        array[position] = array[j]
        array[j] = swap
        position += step
    return position
