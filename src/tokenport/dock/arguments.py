"""The checks of a dock call that need no partition state: row ids, column values, counts, timeouts.

``Dock`` and ``RayDock`` both run them (RayDock in the calling process, before any actor call), so
a bad call fails alike on both.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._checks import check_int, check_positive
from .._schema import INT64_MAX
from ..errors import ConfigError
from .casting import as_array, fitted
from .ragged import Packed, Padded, as_ragged
from .samplers import SampleRequest, Selection
from .schema import OBJECT, Column
from .storage import Partition

__all__ = [
    "Sampler",
    "checked_get",
    "checked_put",
    "checked_segment",
    "checked_version",
    "in_range",
    "int64",
    "python_values",
    "row_ids",
    "wanted_columns",
]

Sampler = Callable[[SampleRequest], Selection]


def int64(name: str, value: object, minimum: int = 1) -> int:
    """``value`` as an int in [minimum, 2**63 - 1], or a ConfigError naming ``name``: every integer the
    dock keeps (versions, rows, counts, limits) lives in int64 arrays, where a larger one would wrap."""
    return check_int(name, value, minimum, INT64_MAX)


def _completed_flags(completed: bool | Sequence[bool] | np.ndarray, rows: int) -> np.ndarray:
    """One finished flag per row, from one flag or a sequence of them."""
    flags = np.asarray(completed)
    if flags.dtype != bool or flags.shape not in ((), (rows,)):
        raise ConfigError(f"completed: expected True/False or {rows} booleans, one per row, got {completed!r:.60}")
    return np.broadcast_to(flags, (rows,))


def checked_put(
    column_of: Callable[[str], Column],
    columns: Mapping[str, Any],
    rows: Sequence[int] | np.ndarray,
    completed: bool | Sequence[bool] | np.ndarray,
) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
    """The checks of a put that need no partition (Dock and RayDock both run them, so they fail
    alike): ``(row ids, each column's values cast to its dtype, finished flags)``."""
    if not isinstance(columns, Mapping) or not columns:
        raise ConfigError("columns: expected a non-empty dict of column name -> values")
    ids = row_ids(rows)
    checked = {name: _checked_values(column_of(name), value, len(ids)) for name, value in columns.items()}
    return ids, checked, _completed_flags(completed, len(ids))


def checked_version(version: int | Sequence[int] | np.ndarray | None, rows: int) -> np.ndarray | None:
    """One policy version per row (int64, >= 0), from one version or one per row; None stays None."""
    if version is None:
        return None
    versions = as_array(version, "version")
    if versions.shape not in ((), (rows,)) or (versions.size and versions.dtype.kind not in "iu"):
        raise ConfigError(f"version: expected an integer or {rows} integers, one per row, got {version!r:.60}")
    if versions.size and int(versions.min()) < 0:
        raise ConfigError(f"version: {int(versions.min())} is negative; policy versions count from 0")
    if versions.size and int(versions.max()) > INT64_MAX:
        raise ConfigError(f"version: {int(versions.max())} is out of range; policy versions are at most 2**63 - 1")
    return np.broadcast_to(versions.astype(np.int64), (rows,))


def checked_segment(column_of: Callable[[str], Column], columns: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """One segment's values per segmented column, cast to its dtype, all with the same number of items."""
    if not isinstance(columns, Mapping) or not columns:
        raise ConfigError("columns: expected a non-empty dict of segmented column name -> one segment's items")
    checked = {}
    for name, value in columns.items():
        column = column_of(name)
        if not column.segmented:
            raise ConfigError(f"column {name!r} is not segmented: write it with put, or declare it segmented=True")
        array = as_array(value, f"column {name!r}")
        if array.ndim == 0 or array.shape[1:] != column.shape:
            raise ConfigError(f"column {name!r}: a segment of shape {array.shape}, expected (items, *{column.shape})")
        checked[name] = fitted(array, column.dtype, f"column {name!r}")
    lengths = {name: len(array) for name, array in checked.items()}
    if len(set(lengths.values())) > 1 or 0 in lengths.values():
        raise ConfigError(
            f"segment item counts {lengths}: every column of a segment holds the same number (> 0) of items"
        )
    return checked


def wanted_columns(columns: Sequence[str]) -> list[str]:
    """The column names a get asks for (a list, not one name: a string would be read letter by letter)."""
    try:
        wanted = None if isinstance(columns, str) else list(columns)
    except TypeError:
        wanted = None
    if wanted is None:
        raise ConfigError(f"columns={columns!r:.60}: pass a list of column names")
    if not wanted:
        raise ConfigError("columns: ask for at least one column")
    return wanted


def checked_get(count: int, timeout: float | None, sampler: Sampler | None, lease: float | None) -> int:
    """The checks of a get that need no partition (shared with RayDock); returns ``count``."""
    count = int64("count", count)
    if timeout is not None and not (_seconds(timeout) and timeout >= 0):
        raise ConfigError(f"timeout={timeout!r} is invalid: pass None (wait forever) or seconds >= 0")
    if lease is not None:
        check_positive("lease", lease, what="None (consume at once) or seconds")
    if sampler is not None and not callable(sampler):
        raise ConfigError(f"sampler={sampler!r:.60} is not callable: pass a SampleRequest -> rows function")
    return count


def _seconds(value: object) -> bool:
    """Whether ``value`` is a finite real number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def row_ids(rows: Sequence[int] | np.ndarray) -> np.ndarray:
    """Row ids as int64, checked: 1-D integers, no repeats."""
    ids = as_array(rows, "rows")
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise ConfigError(f"rows: expected a 1-D sequence of integer row ids, got shape {ids.shape} dtype {ids.dtype}")
    if ids.size == 0:
        raise ConfigError("rows is empty: name at least one row")
    if ids.dtype.kind == "u" and int(ids.max()) > np.iinfo(np.int64).max:
        raise ConfigError(f"row {int(ids.max())} is out of range: row ids are at most 2**63 - 1")
    ids = ids.astype(np.int64, copy=False)
    if len(np.unique(ids)) != len(ids):
        raise ConfigError("rows holds a row id twice: each row is written once per put")
    return ids


def in_range(ids: np.ndarray, target: Partition) -> np.ndarray:
    """``ids``, checked to be rows of ``target``."""
    bad = np.flatnonzero((ids < 0) | (ids >= target.rows))
    if bad.size:
        raise ConfigError(
            f"row {int(ids[bad[0]])} is out of range: partition {target.name!r} has rows 0..{target.rows - 1}"
        )
    return ids


def python_values(value: Any, rows: int, what: str) -> np.ndarray:
    """One Python value per row (a list, tuple or 1-D object array of ``rows`` items) as an object array."""
    if isinstance(value, np.ndarray) and value.dtype == OBJECT and value.shape == (rows,):
        return value.copy()
    if not isinstance(value, (list, tuple)) or len(value) != rows:
        raise ConfigError(
            f"{what} holds Python values: pass a list of {rows} values, one per row, not {type(value).__name__}"
        )
    array = np.empty(rows, dtype=OBJECT)
    for i, item in enumerate(value):
        array[i] = item
    return array


def _checked_values(column: Column, value: Any, rows: int) -> np.ndarray | Packed | Padded:
    """A column's values for ``rows`` rows, converted to its dtype, or a ConfigError naming it."""
    if column.ragged:
        return as_ragged(value, column.name, rows, column.dtype, column.shape)
    what = f"column {column.name!r}"
    if column.dtype == OBJECT:
        return python_values(value, rows, what)
    if isinstance(value, (Packed, Padded)) or (
        isinstance(value, (list, tuple)) and value and {as_array(v, what).shape for v in value} - {column.shape}
    ):
        raise ConfigError(f"{what} is not ragged: pass one array of shape (rows, *{column.shape})")
    array = as_array(value, what)
    if array.shape != (rows, *column.shape):
        raise ConfigError(
            f"column {column.name!r}: values of shape {array.shape}, expected {(rows, *column.shape)} "
            f"({rows} rows of shape {column.shape})"
        )
    return fitted(array, column.dtype, f"column {column.name!r}")
