"""Variable-length rows without Python lists of small arrays: packed (flat + lengths) and padded forms.

RL experience is ragged (responses of 12 to 4096 tokens). Moving it as a list of per-row arrays
costs a Python object per row at every hop, and padding it before transport moves the padding
too. ``Packed`` keeps one flat buffer and the row lengths; ``Padded`` is the 2-D form a model
consumes. Conversions are single vectorized copies. Rows may hold vectors (``values`` of shape
``(total, *inner)``), e.g. top-k log-probs per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import check_choice, check_int, is_int
from .._schema import INT64_MAX
from ..errors import ConfigError
from .casting import as_array, fitted
from .copying import copy_runs, item_bytes
from .schema import BFLOAT16

__all__ = ["Packed", "Padded", "as_ragged", "gather_runs", "pack", "pad", "take_rows", "truncate"]


@dataclass(frozen=True, eq=False)
class Packed:
    """Rows laid end to end: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``."""

    values: np.ndarray
    lengths: np.ndarray

    def __post_init__(self) -> None:
        lengths = np.asarray(self.lengths)
        if lengths.ndim != 1 or (lengths.size and lengths.dtype.kind not in "iu"):
            raise ConfigError(f"lengths: expected a 1-D integer array, got shape {lengths.shape} dtype {lengths.dtype}")
        lengths = lengths.astype(np.int64, copy=False)
        if lengths.size and int(lengths.min()) < 0:
            raise ConfigError(f"lengths: row {int(np.argmin(lengths))} has a negative length {int(lengths.min())}")
        values = np.asarray(self.values)
        if values.ndim == 0:
            raise ConfigError("values: expected a flat array of the rows' items laid end to end, got a scalar")
        if int(lengths.sum()) != len(values):
            raise ConfigError(f"values holds {len(values)} items but the lengths add up to {int(lengths.sum())}")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "lengths", lengths)

    @property
    def offsets(self) -> np.ndarray:
        """Row starts plus the end: ``len(self) + 1`` int64 offsets into ``values``."""
        offsets = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=offsets[1:])
        return offsets

    def __len__(self) -> int:
        return len(self.lengths)

    def row(self, i: int) -> np.ndarray:
        """Row ``i`` as a view of ``values``."""
        start = int(self.lengths[:i].sum())
        return self.values[start : start + int(self.lengths[i])]

    def to_list(self) -> list[np.ndarray]:
        """The rows as views of ``values``, one array per row."""
        return np.split(self.values, self.offsets[1:-1])

    def padded(self, pad_value: Any = 0, *, multiple_of: int = 1, length: int | None = None) -> Padded:
        """The rows as a 2-D array padded to the longest row (rounded up to ``multiple_of``) or to ``length``."""
        return pad(self, pad_value, multiple_of=multiple_of, length=length)

    def __repr__(self) -> str:
        return f"Packed({len(self)} rows, {len(self.values)} items of {self.values.dtype})"


@dataclass(frozen=True, eq=False)
class Padded:
    """Rows as a ``(rows, width, *inner)`` array; row ``i`` is ``values[i, :lengths[i]]``, the rest padding."""

    values: np.ndarray
    lengths: np.ndarray

    def __post_init__(self) -> None:
        values = np.asarray(self.values)
        lengths = np.asarray(self.lengths)
        if values.ndim < 2:
            raise ConfigError(f"values: expected a 2-D (rows, width) array, got shape {values.shape}")
        if lengths.shape != (values.shape[0],) or (lengths.size and lengths.dtype.kind not in "iu"):
            raise ConfigError(
                f"lengths: expected {values.shape[0]} integer lengths, one per row, got shape {lengths.shape}"
            )
        lengths = lengths.astype(np.int64, copy=False)
        if lengths.size and (int(lengths.min()) < 0 or int(lengths.max()) > values.shape[1]):
            bad = int(np.flatnonzero((lengths < 0) | (lengths > values.shape[1]))[0])
            raise ConfigError(f"lengths[{bad}] = {int(lengths[bad])} is outside [0, width = {values.shape[1]}]")
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "lengths", lengths)

    @property
    def mask(self) -> np.ndarray:
        """``(rows, width)`` bool, True on real items (an attention mask)."""
        return np.arange(self.values.shape[1]) < self.lengths[:, None]

    def __len__(self) -> int:
        return len(self.lengths)

    def packed(self) -> Packed:
        """The rows without their padding, end to end."""
        rows, width = self.values.shape[:2]
        items = self.values.reshape(rows * width, *self.values.shape[2:])  # row i starts at item i * width
        return gather_runs(items, np.arange(rows, dtype=np.int64) * width, self.lengths)

    def __repr__(self) -> str:
        return f"Padded({self.values.shape} of {self.values.dtype})"


def pack(rows: Sequence[Any], dtype: Any = None) -> Packed:
    """Lay a sequence of arrays (rows of any lengths, equal inner shapes) end to end, cast to
    ``dtype`` if given (a value that does not fit it is refused)."""
    try:
        arrays = [np.asarray(row) for row in rows]
    except (ValueError, TypeError):  # a row that is no regular array: name it
        arrays = [as_array(row, f"rows[{i}]") for i, row in enumerate(rows)]
    for i, array in enumerate(arrays):
        if array.ndim == 0:
            raise ConfigError(f"rows[{i}] is a scalar: each row must be an array of items")
    lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    if not arrays:
        return Packed(np.zeros(0, dtype=dtype or np.float64), lengths)
    inner = {a.shape[1:] for a in arrays}
    if len(inner) > 1:
        raise ConfigError(f"rows have different item shapes {sorted(inner)}: every row's items must share one shape")
    values = np.concatenate(arrays)
    if dtype is None:
        return Packed(values, lengths)
    target = BFLOAT16 if isinstance(dtype, str) and dtype == "bfloat16" else np.dtype(dtype)
    return Packed(fitted(values, target, "pack(rows, dtype)"), lengths)


def pad(rows: Packed | Sequence[Any], pad_value: Any = 0, *, multiple_of: int = 1, length: int | None = None) -> Padded:
    """Pad rows to the longest, rounded up to ``multiple_of`` (tensor/context parallel sizes), or to ``length``."""
    packed = rows if isinstance(rows, Packed) else pack(rows)
    multiple_of = check_int("multiple_of", multiple_of, 1, INT64_MAX)
    longest = int(packed.lengths.max()) if len(packed) else 0
    if length is None:
        width = -(-longest // multiple_of) * multiple_of
    elif not is_int(length) or length < longest or length > INT64_MAX:
        raise ConfigError(
            f"length={length!r} is invalid: pass at least the longest row ({longest} items; or truncate first) "
            "and at most 2**63 - 1"
        )
    else:
        width = int(length)
    if packed.values.dtype == BFLOAT16 and isinstance(pad_value, int) and pad_value == 0:
        fill = np.zeros((), dtype=BFLOAT16)  # bfloat16 zero is all bits zero
    else:
        fill = fitted(np.asarray(pad_value), packed.values.dtype, "pad_value")
    shape = (len(packed), width, *packed.values.shape[1:])
    try:
        values = np.full(shape, fill, dtype=packed.values.dtype)
    except (ValueError, MemoryError):  # more items than numpy can index, or than memory holds
        raise ConfigError(f"pad: a padded array of shape {shape} is too large; pass a smaller length") from None
    starts = np.arange(len(packed), dtype=np.int64) * width
    copy_runs(packed.values, packed.offsets[:-1], values, starts, packed.lengths, item_bytes(packed.values))
    return Padded(values, packed.lengths)


def truncate(packed: Packed, max_length: int, *, keep: str = "head") -> Packed:
    """Cut every row to at most ``max_length`` items, keeping its ``"head"`` or its ``"tail"``."""
    max_length = check_int("max_length", max_length, 0, INT64_MAX)
    check_choice("keep", keep, ("head", "tail"))
    lengths = np.minimum(packed.lengths, max_length)
    offsets = packed.offsets
    starts = offsets[:-1] if keep == "head" else offsets[1:] - lengths
    return gather_runs(packed.values, starts, lengths)


def take_rows(packed: Packed, positions: np.ndarray) -> Packed:
    """The rows at ``positions`` (any order, repeats allowed), as a new Packed."""
    positions = np.asarray(positions, dtype=np.int64)
    return gather_runs(packed.values, packed.offsets[positions], packed.lengths[positions])


def as_ragged(value: Any, name: str, rows: int, dtype: np.dtype, inner: tuple[int, ...] = ()) -> Packed | Padded:
    """``value`` (Packed, Padded, or a sequence of arrays) checked against a ragged column and cast
    to its ``dtype``; Padded stays padded (the store un-pads it straight into place)."""
    cast: type[Packed] | type[Padded]
    if isinstance(value, Padded):
        shape, cast = value.values.shape[2:], Padded
    else:
        if not isinstance(value, Packed):
            if isinstance(value, np.ndarray) and value.dtype != object:
                raise ConfigError(
                    f"column {name!r} is ragged: pass a list of arrays, Packed(values, lengths) or "
                    f"Padded(values, lengths), not one {value.ndim}-D array"
                )
            try:
                value = pack(list(value))
            except TypeError:
                raise ConfigError(
                    f"column {name!r} is ragged: pass a list of arrays, Packed(values, lengths) or "
                    f"Padded(values, lengths), not {type(value).__name__}"
                ) from None
            except ConfigError as error:
                raise ConfigError(f"column {name!r}: {error}") from None
        shape, cast = value.values.shape[1:], Packed
    if len(value) != rows:
        raise ConfigError(f"column {name!r}: {len(value)} rows of data for {rows} row ids")
    if shape != inner:
        raise ConfigError(f"column {name!r}: items of shape {shape}, the column's are {inner}")
    if value.values.dtype != dtype:
        value = cast(
            fitted(value.values, dtype, f"column {name!r}", lengths=value.lengths if cast is Padded else None),
            value.lengths,
        )
    return value


def gather_runs(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> Packed:
    """Runs ``values[start : start + length]`` (first axis) laid end to end, as a new Packed."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out = np.empty((int(offsets[-1]), *values.shape[1:]), dtype=values.dtype)
    copy_runs(values, starts, out, offsets[:-1], lengths, item_bytes(values))
    return Packed(out, lengths)
