"""Columns of the dock: a name, a dtype, and a fixed per-row shape or ragged rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import is_int
from ..errors import ConfigError

__all__ = ["Column"]


@dataclass(frozen=True)
class Column:
    """One kind of per-row data. Fixed columns hold ``shape`` per row (``()``: a scalar such as a
    reward); ragged columns hold a variable number of items of shape ``shape`` per row (tokens,
    per-token log-probs), stored packed. Segmented columns (``segmented=True``, ragged by
    definition) are written with ``Dock.append``, one segment (a turn) at a time, each with its
    policy version; a get returns each row's concatenation with its segment boundaries."""

    name: str
    dtype: Any
    shape: tuple[int, ...] = ()
    ragged: bool = False
    segmented: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"Column name={self.name!r} is invalid: pass a non-empty string")
        try:
            dtype = np.dtype(self.dtype)
        except TypeError:
            raise ConfigError(f"column {self.name!r}: dtype {self.dtype!r} is not a numpy dtype") from None
        if dtype.kind not in "biuf":
            raise ConfigError(f"column {self.name!r}: dtype {dtype} is not a bool, integer or float type")
        shape = tuple(self.shape)
        if any(not is_int(d) or d < 1 for d in shape):
            raise ConfigError(f"column {self.name!r}: shape {self.shape!r} must be a tuple of positive integers")
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        object.__setattr__(self, "segmented", bool(self.segmented))
        object.__setattr__(self, "ragged", bool(self.ragged) or self.segmented)
