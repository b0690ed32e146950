"""Columns of the dock: a name, a dtype, and a fixed per-row shape or ragged rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import is_int
from ..errors import ConfigError

__all__ = ["BFLOAT16", "OBJECT", "Column", "dtype_name", "named_dtype"]

BFLOAT16 = np.dtype([("bfloat16", "<u2")])
"""How a bfloat16 column holds its values: each one's 16 raw bits (numpy has no bfloat16; a named
record, so no number is ever cast into it by mistake)."""
OBJECT = np.dtype(object)
"""How a column of Python values (strings, metadata: TransferQueue's non-tensor fields) holds them."""


@dataclass(frozen=True)
class Column:
    """One kind of per-row data. Fixed columns hold ``shape`` per row (``()``: a scalar such as a
    reward); ragged columns hold a variable number of items of shape ``shape`` per row (tokens,
    per-token log-probs), stored packed. Segmented columns (``segmented=True``, ragged by
    definition) are written with ``Dock.append``, one segment (a turn) at a time, each with its
    policy version; a get returns each row's concatenation with its segment boundaries.

    ``dtype="bfloat16"`` holds bfloat16 values as their raw bits (arrays of dtype ``BFLOAT16``:
    ``tensor.view(torch.int16).numpy().view(BFLOAT16)``); ``dtype=object`` holds one Python value per
    row (a fixed column of shape ``()``), which a checkpoint keeps when it is JSON (see ``checkpoint``)."""

    name: str
    dtype: Any
    shape: tuple[int, ...] = ()
    ragged: bool = False
    segmented: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"Column name={self.name!r} is invalid: pass a non-empty string")
        try:
            dtype = BFLOAT16 if _is_bfloat16(self.dtype) else np.dtype(self.dtype)
        except TypeError:
            raise ConfigError(f"column {self.name!r}: dtype {self.dtype!r} is not a numpy dtype") from None
        segmented = bool(self.segmented)
        ragged = bool(self.ragged) or segmented
        if dtype == OBJECT and (ragged or tuple(self.shape) != ()):
            raise ConfigError(
                f"column {self.name!r}: a column of Python values (dtype object) holds one value per row: "
                f"it is not ragged and has shape (), not {tuple(self.shape)}; ragged columns hold numbers"
            )
        if dtype.kind not in "biuf" and dtype not in (BFLOAT16, OBJECT):
            raise ConfigError(
                f"column {self.name!r}: dtype {dtype} is not a bool, integer or float type "
                "(or 'bfloat16', or object for Python values)"
            )
        shape = tuple(self.shape)
        if any(not is_int(d) or d < 1 for d in shape):
            raise ConfigError(f"column {self.name!r}: shape {self.shape!r} must be a tuple of positive integers")
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        object.__setattr__(self, "segmented", segmented)
        object.__setattr__(self, "ragged", ragged)


def _is_bfloat16(dtype: Any) -> bool:
    """Whether ``dtype`` names bfloat16 ("bfloat16", ``BFLOAT16`` or torch's)."""
    if isinstance(dtype, str):
        return dtype == "bfloat16"
    return str(dtype) == "torch.bfloat16" or (isinstance(dtype, np.dtype) and dtype == BFLOAT16)


def dtype_name(dtype: np.dtype) -> str:
    """A column dtype as a checkpoint spells it: numpy's string, or "bfloat16", or "object"."""
    if dtype == BFLOAT16:
        return "bfloat16"
    return "object" if dtype == OBJECT else dtype.str


def named_dtype(name: str) -> np.dtype:
    """The dtype ``dtype_name`` spelled ``name``."""
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)
