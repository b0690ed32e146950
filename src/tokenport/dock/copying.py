"""Byte-range copies in numba: the one kernel behind un-padding, padding and gathering ragged rows.

Every ragged move is "copy these runs of items from there to here". Working in bytes on 1-D
uint8 views makes one compiled kernel serve every dtype and item shape, with no Python loop per
row; each run is one ``llvm.memcpy`` (numba's slice assignment copies byte by byte, ~8x slower).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["as_bytes", "copy_runs", "item_bytes"]


def item_bytes(array: np.ndarray, leading: int = 1) -> int:
    """Bytes of one item: everything after the first ``leading`` axes."""
    return array.itemsize * int(np.prod(array.shape[leading:], dtype=np.int64))


def as_bytes(array: np.ndarray) -> np.ndarray:
    """A 1-D uint8 view of a C-contiguous array (no copy)."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def copy_runs(
    source: np.ndarray,
    source_starts: np.ndarray,
    target: np.ndarray,
    target_starts: np.ndarray,
    lengths: np.ndarray,
    item_bytes: int,
) -> None:
    """``target[t : t + n] = source[s : s + n]`` for every run, positions and lengths counted in items
    of ``item_bytes`` bytes (the target must be C-contiguous: it is written through a view)."""
    if not target.flags.c_contiguous:
        raise ValueError("copy_runs writes through a byte view: the target must be C-contiguous")
    scale = np.int64(item_bytes)
    _copy_runs(as_bytes(source), source_starts * scale, as_bytes(target), target_starts * scale, lengths * scale)


@intrinsic
def _memcpy(typingctx: Any, target: Any, target_start: Any, source: Any, source_start: Any, count: Any) -> Any:
    """``target[target_start : +count] = source[source_start : +count]`` on 1-D uint8 arrays, unchecked."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        target_data = context.make_array(signature.args[0])(context, builder, args[0]).data
        source_data = context.make_array(signature.args[2])(context, builder, args[2]).data
        cgutils.raw_memcpy(
            builder, builder.gep(target_data, [args[1]]), builder.gep(source_data, [args[3]]), args[4], 1
        )
        return context.get_dummy_value()

    return types.void(target, target_start, source, source_start, count), codegen


@numba.njit(cache=True, nogil=True)
def _copy_runs(
    source: np.ndarray, source_starts: np.ndarray, target: np.ndarray, target_starts: np.ndarray, lengths: np.ndarray
) -> None:
    for i in range(lengths.shape[0]):
        n = lengths[i]
        if n > 0:
            s, t = source_starts[i], target_starts[i]
            if s < 0 or t < 0 or s + n > source.shape[0] or t + n > target.shape[0]:
                raise IndexError("copy_runs: a run lies outside its array")
            _memcpy(target, t, source, s, n)  # type: ignore[call-arg]  # numba's intrinsic: typingctx is implicit
