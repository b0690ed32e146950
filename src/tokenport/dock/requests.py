"""One frozen request per kind of dock call, checked once when built: what a backend receives.

``DockBase`` builds a request from a public call's arguments (``PutRequest.checked`` and its
siblings run every check that needs no partition state: row ids, values cast to their columns'
dtypes, counts, timeouts) and hands it to its backend's primitive. A backend trusts a request it
receives only if it is of that frozen type (``trusted``); the checks that need the dock's state
(the partition exists, a cell is not written yet) are the state's own. A request is the whole
wire format: a backend in another process is sent the request, never the raw arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from ..errors import ConfigError
from .arguments import (
    Sampler,
    checked_get,
    checked_put,
    checked_segment,
    checked_version,
    int64,
    row_ids,
    wanted_columns,
)
from .ragged import Packed, Padded
from .schema import Column

__all__ = ["CALLS", "AppendRequest", "GetRequest", "PutRequest", "StateCall", "trusted"]

ColumnOf = Callable[[str], Column]
R = TypeVar("R")

# The calls a StateCall may name: the dock state's methods and properties that take no data.
CALLS = frozenset(
    {
        "columns", "consumers", "partitions", "version", "n_samples_per_prompt", "max_age", "stats",
        "can_admit", "add_column", "add_consumer", "add_partition", "clear", "drop_partition", "close",
        "set_version", "expired", "admit", "ack", "nack", "all_consumed",
    }
)  # fmt: skip


@dataclass(frozen=True)
class PutRequest:
    """A checked ``put``: row ids, each column's values cast to its dtype, a finished flag and
    (optionally) a policy version per row."""

    partition: str
    names: tuple[str, ...]
    ids: np.ndarray
    values: Mapping[str, np.ndarray | Packed | Padded]
    finished: np.ndarray
    versions: np.ndarray | None
    overwrite: bool

    @classmethod
    def checked(
        cls,
        column_of: ColumnOf,
        partition: str,
        columns: Mapping[str, Any],
        rows: Sequence[int] | np.ndarray,
        *,
        overwrite: bool = False,
        completed: bool | Sequence[bool] | np.ndarray = True,
        version: int | Sequence[int] | np.ndarray | None = None,
    ) -> PutRequest:
        """The request of ``put(partition, columns, rows, ...)``, columns looked up with ``column_of``."""
        ids, values, finished = checked_put(column_of, columns, rows, completed)
        versions = checked_version(version, len(ids))
        return cls(partition, tuple(values), ids, values, finished, versions, bool(overwrite))

    @property
    def lengths(self) -> dict[str, np.ndarray]:
        """Items per row of each ragged column written."""
        return {name: v.lengths for name, v in self.values.items() if isinstance(v, (Packed, Padded))}

    def without_values(self) -> PutRequest:
        """The request less its data (what a controller that holds no data is sent)."""
        return replace(self, values={})


@dataclass(frozen=True)
class AppendRequest:
    """A checked ``append``: one segment's items per segmented column, its version and whether it is the last."""

    partition: str
    row: int
    values: Mapping[str, np.ndarray]
    version: int | None
    finished: bool

    @classmethod
    def checked(
        cls,
        column_of: ColumnOf,
        partition: str,
        row: int,
        columns: Mapping[str, Any],
        *,
        version: int | None = None,
        finished: bool = False,
    ) -> AppendRequest:
        """The request of ``append(partition, row, columns, ...)``."""
        row = int64("row", row, 0)
        values = checked_segment(column_of, columns)
        stamp = checked_version(version, 1)
        return cls(partition, row, values, None if stamp is None else int(stamp[0]), bool(finished))


@dataclass(frozen=True)
class GetRequest:
    """A checked ``get``: who asks, for which columns and how many rows, where, how long to wait, and how."""

    consumer: str
    columns: tuple[str, ...]
    count: int
    partition: str | None = None
    rows: np.ndarray | None = None
    timeout: float | None = None
    sampler: Sampler | None = None
    lease: float | None = None
    unfinished: bool = False
    max_staleness: int | None = None

    @classmethod
    def checked(
        cls,
        consumer: str,
        columns: Sequence[str],
        count: int,
        partition: str | None = None,
        *,
        rows: Sequence[int] | np.ndarray | None = None,
        timeout: float | None = None,
        sampler: Sampler | None = None,
        lease: float | None = None,
        unfinished: bool = False,
        max_staleness: int | None = None,
    ) -> GetRequest:
        """The request of ``get(consumer, columns, count, partition, ...)``."""
        wanted = tuple(wanted_columns(columns))
        count = checked_get(count, timeout, sampler, lease)
        limit = None if max_staleness is None else int64("max_staleness", max_staleness, 0)
        ids = None
        if rows is not None:
            if partition is None:
                raise ConfigError("rows= needs partition=: row ids are local to a partition")
            ids = row_ids(rows)
        return cls(consumer, wanted, count, partition, ids, timeout, sampler, lease, bool(unfinished), limit)


@dataclass(frozen=True)
class StateCall:
    """A call of the dock state that carries no data (partitions, consumers, versions, leases, stats)
    or the read of one of its properties: ``method`` (one of ``CALLS``) and its positional ``args``.
    The state checks these arguments itself, the same code on every backend."""

    method: str
    args: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.method not in CALLS:
            raise ConfigError(f"StateCall: {self.method!r} is no dock call; expected one of {sorted(CALLS)}")

    def on(self, target: Any) -> Any:
        """Run this call on ``target`` (a ``DockState``): call the method, or read the property."""
        attribute = getattr(target, self.method)
        return attribute(*self.args) if callable(attribute) else attribute


def trusted(request: object, kind: type[R]) -> R:
    """``request`` if it is a ``kind`` (its checks ran when it was built), else a ConfigError: a
    backend across a wire accepts nothing else."""
    if type(request) is not kind:
        raise ConfigError(
            f"dock backend: expected a {kind.__name__}, got {type(request).__name__}: send the request "
            "DockBase built (its arguments are checked once, there)"
        )
    return request
