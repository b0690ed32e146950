"""The dock's tables: columns, consumers with their counters, partitions, leases, and the lock.

``DockTable`` holds what a dock is made of and answers what needs no rule of puts, gets or
versions (the schema, the partition table, stats); ``state.DockState`` adds those rules.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._checks import check_choice
from .._schema import INT64_MAX
from ..errors import ConfigError
from .arguments import int64
from .schema import Column
from .storage import Partition

__all__ = ["STALE_POLICIES", "ConsumerStats", "DockTable", "Lease", "counts", "row_bytes"]

STALE_POLICIES = ("requeue", "drop")  # what becomes of a row that falls too stale (see state's docstring)


@dataclass
class Lease:
    consumer: str
    partition: str
    rows: np.ndarray
    deadline: float


@dataclass
class ConsumerStats:
    rows: int = 0
    batches: int = 0
    bytes: int = 0
    wait_seconds: float = 0.0
    timeouts: int = 0
    redelivered: int = 0
    staleness: dict[int, int] = field(default_factory=dict)  # rows served by how many versions behind


class DockTable:
    """Columns, consumers (with their counters), partitions oldest first, leases, and ``lock``."""

    def __init__(
        self,
        columns: Sequence[Column],
        consumers: Sequence[str],
        n_samples_per_prompt: int = 1,
        *,
        max_age: int | None = None,
        max_staleness: int | None = None,
        on_stale: str = "requeue",
        max_inflight_versions: int | None = None,
    ) -> None:
        self.lock = threading.Condition()
        self._columns: dict[str, Column] = {}
        self._consumers: dict[str, ConsumerStats] = {}
        self._partitions: dict[str, Partition] = {}
        self._leases: dict[int, Lease] = {}
        self._next_lease = 1
        self.leases_expired = 0
        self.closed = False
        self.n_samples_per_prompt = int64("n_samples_per_prompt", n_samples_per_prompt)
        self.max_age = None if max_age is None else int64("max_age", max_age)
        self.max_staleness = None if max_staleness is None else int64("max_staleness", max_staleness, 0)
        self.on_stale = str(check_choice("on_stale", on_stale, STALE_POLICIES))
        self.max_inflight_versions = (
            None if max_inflight_versions is None else int64("max_inflight_versions", max_inflight_versions)
        )
        self.version = 0
        self.expired_requeued = 0
        self.expired_dropped = 0
        self._limits: dict[str, int | None] = {}  # a consumer's own max_staleness
        self._requeue: dict[str, list[np.ndarray]] = {}  # expired rows not yet handed back, by partition
        for what, given in (("columns", columns), ("consumers", consumers)):
            if isinstance(given, (str, bytes)) or not isinstance(given, Iterable):
                raise ConfigError(f"{what}={given!r:.60}: pass a list (of Column objects, of consumer names)")
        for column in columns:
            self.add_column(column)
        for consumer in consumers:
            self.add_consumer(consumer)

    # -- schema and partitions ----------------------------------------------------------------------

    def renumber_leases(self) -> None:
        """Number the leases handed out from now on from a random point (one of 2**30 blocks of 2**32
        ids): a dock loaded from a checkpoint or copied never reuses an id a holder of the original may
        still hold, so an ack of that stale id is refused instead of consuming another holder's rows."""
        with self.lock:
            self._next_lease = (secrets.randbits(30) + 1) << 32

    def add_column(self, column: Column) -> None:
        """Add a column; existing partitions get it with no row ready."""
        if not isinstance(column, Column):
            raise ConfigError(f"columns: expected tokenport.dock.Column objects, got {type(column).__name__}")
        with self.lock:
            if column.name in self._columns:
                raise ConfigError(f"column {column.name!r} exists already")
            self._columns[column.name] = column

    def add_consumer(self, name: str, max_staleness: int | None = None) -> None:
        """Add a consumer (a stage); it has consumed nothing yet. ``max_staleness`` (versions) overrides
        the dock's for it."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"consumer name={name!r} is invalid: pass a non-empty string")
        limit = None if max_staleness is None else int64("max_staleness", max_staleness, 0)
        with self.lock:
            if name in self._consumers:
                raise ConfigError(f"consumer {name!r} exists already")
            self._consumers[name] = ConsumerStats()
            self._limits[name] = limit

    def staleness_limit(self, consumer: str) -> int | None:
        """The versions ``consumer``'s rows may lag the current one (its own limit, else the dock's)."""
        own = self._limits.get(consumer)
        return self.max_staleness if own is None else own

    @property
    def consumer_limits(self) -> dict[str, int | None]:
        """Each consumer's own max_staleness (None: the dock's)."""
        with self.lock:
            return dict(self._limits)

    @property
    def tracks_versions(self) -> bool:
        """Whether staleness or admission depends on versions (then every written row must carry one)."""
        limits = self.max_staleness is not None or any(v is not None for v in self._limits.values())
        return limits or self.max_inflight_versions is not None

    @property
    def columns(self) -> dict[str, Column]:
        with self.lock:
            return dict(self._columns)

    @property
    def consumers(self) -> list[str]:
        with self.lock:
            return list(self._consumers)

    @property
    def partitions(self) -> dict[str, int]:
        """Partition names, oldest first, with their row counts."""
        with self.lock:
            return {name: p.rows for name, p in self._partitions.items()}

    def each_partition(self) -> Iterator[Partition]:
        """The partitions, oldest first (hold ``lock`` while using them)."""
        return iter(list(self._partitions.values()))

    def add_partition(self, name: str, num_prompts: int) -> Partition:
        """Add an empty partition of ``num_prompts * n_samples_per_prompt`` rows."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"partition name={name!r} is invalid: pass a non-empty string")
        prompts = int64("num_prompts", num_prompts)
        if prompts * self.n_samples_per_prompt > INT64_MAX:
            raise ConfigError(
                f"num_prompts={prompts} is invalid: times n_samples_per_prompt={self.n_samples_per_prompt} it is "
                "more rows than int64 holds; pass fewer prompts"
            )
        rows = prompts * self.n_samples_per_prompt
        return self.adopt(Partition(name, rows))

    def adopt(self, partition: Partition) -> Partition:
        """Add a partition built elsewhere (a loaded checkpoint, a copy); it becomes the newest."""
        with self.lock:
            if partition.name in self._partitions:
                raise ConfigError(f"partition {partition.name!r} exists already: clear() or drop_partition() it first")
            self._partitions[partition.name] = partition
            self.lock.notify_all()
            return partition

    def clear(self, partition: str) -> None:
        """Forget a partition's data, readiness, consumption and leases; its rows stay, empty."""
        with self.lock:
            self.partition(partition).clear()
            self._requeue.pop(partition, None)
            self._drop_leases(partition)
            self.lock.notify_all()

    def drop_partition(self, partition: str) -> None:
        """Remove a partition and everything in it."""
        with self.lock:
            self.partition(partition)
            del self._partitions[partition]
            self._requeue.pop(partition, None)
            self._drop_leases(partition)
            self.lock.notify_all()

    def close(self) -> None:
        """No partitions will be added: a get without a partition ends once all are consumed."""
        with self.lock:
            self.closed = True
            self.lock.notify_all()

    def partition(self, name: str) -> Partition:
        """The partition ``name``, or a ConfigError listing those there are."""
        try:
            return self._partitions[name]
        except (KeyError, TypeError):
            raise ConfigError(
                f"partition {name!r} does not exist; the dock has {list(self._partitions)} (add_partition first)"
            ) from None

    def column(self, name: str) -> Column:
        """The column ``name``, or a ConfigError listing those there are."""
        try:
            return self._columns[name]
        except (KeyError, TypeError):
            raise ConfigError(f"unknown column {name!r}; the dock has {list(self._columns)}") from None

    def _consumer(self, name: str) -> ConsumerStats:
        try:
            return self._consumers[name]
        except (KeyError, TypeError):
            raise ConfigError(f"unknown consumer {name!r}; the dock has {list(self._consumers)}") from None

    def served(self, consumer: str, nbytes: int) -> None:
        """Count ``nbytes`` of data handed to ``consumer`` by a get."""
        with self.lock:
            self._consumer(consumer).bytes += nbytes

    def batch_bytes(self, target: Partition, wanted: list[str], give: np.ndarray) -> int:
        """Bytes of the data of rows ``give`` in columns ``wanted``, from the row lengths alone (what a
        RayDock's controller, which holds no data, reports as served)."""
        with self.lock:
            total = 0
            for name in wanted:
                column = self._columns[name]
                items = int(target.ragged[name].lengths[give].sum()) if column.ragged else len(give)
                total += items * row_bytes(column)
            return total

    # -- progress -----------------------------------------------------------------------------------

    def all_consumed(self, consumer: str, partition: str) -> bool:
        """Whether ``consumer`` has consumed every row of ``partition``."""
        with self.lock:
            self._consumer(consumer)
            return self.partition(partition).remaining(consumer) == 0

    def stats(self) -> dict[str, Any]:
        """Per consumer: rows, batches and bytes served, wait time, rows served by staleness; per
        partition: bytes held, ready, consumed and leased rows, written rows by (oldest) version;
        leases out and expired; the current version and the rows expired as stale by policy."""
        with self.lock:
            consumers = {name: {**vars(s), "staleness": dict(s.staleness)} for name, s in self._consumers.items()}
            partitions = {}
            for name, p in self._partitions.items():
                partitions[name] = {
                    "rows": p.rows,
                    "bytes": self._held_bytes(p),
                    "ready": {c: int(np.count_nonzero(p.ready_of(c))) for c in self._columns},
                    "consumed": {c: p.consumed_rows(c) for c in self._consumers},
                    "leased": {c: p.leased_rows(c) for c in self._consumers},
                    "versions": counts(p.version_first[p.version_first >= 0]),
                }
            return {
                "consumers": consumers,
                "partitions": partitions,
                "leases": len(self._leases),
                "leases_expired": self.leases_expired,
                "version": self.version,
                "expired": {
                    "requeued": self.expired_requeued,
                    "dropped": self.expired_dropped,
                    "pending": sum(len(part) for parts in self._requeue.values() for part in parts),
                },
            }

    # -- internals ----------------------------------------------------------------------------------

    def _held_bytes(self, target: Partition) -> int:
        """Bytes of data a partition holds: fixed columns whole once written, ragged items appended."""
        total = 0
        for name, column in self._columns.items():
            if column.ragged:
                total += target.ragged[name].used * row_bytes(column) if name in target.ragged else 0
            elif name in target.ready and target.ready[name].any():
                total += target.rows * row_bytes(column)
        return total

    def _targets(self, partition: str | None, count: int) -> list[Partition]:
        """The partition asked for (checked against ``count``), or every partition."""
        if partition is None:
            return list(self._partitions.values())
        target = self.partition(partition)
        if count > target.rows:
            raise ConfigError(
                f"count={count} is more than partition {partition!r} holds ({target.rows} rows): ask for fewer"
            )
        return [target]

    def _ragged_lengths(self, target: Partition, name: str, ids: np.ndarray) -> np.ndarray:
        """Items per row ``ids`` of the ragged column ``name`` in ``target`` (SampleRequest.lengths)."""
        return _lengths(target, self.column(name), ids)

    def _drop_leases(self, partition: str) -> None:
        for lease_id in [i for i, held in self._leases.items() if held.partition == partition]:
            del self._leases[lease_id]


def row_bytes(column: Column) -> int:
    """Bytes of one row of a fixed column, or of one item of a ragged one."""
    return column.dtype.itemsize * int(np.prod(column.shape, dtype=np.int64))


def _lengths(target: Partition, column: Column, ids: np.ndarray) -> np.ndarray:
    """Items per row of a ragged column, for balancing samplers."""
    if not column.ragged:
        raise ConfigError(f"column {column.name!r} is not ragged: balance on a ragged column's lengths")
    if column.name not in target.ragged:
        return np.zeros(len(ids), dtype=np.int64)
    return target.ragged[column.name].lengths[ids]


def counts(values: np.ndarray) -> dict[int, int]:
    """How many times each value occurs, as plain ints."""
    return {int(v): int(n) for v, n in zip(*np.unique(values, return_counts=True))}
