"""The experience dock: a thread-safe store between RL stages, by partition, row and column.

Producers ``put`` columns for rows; a consumer ``get``s a batch of rows whose requested columns
are all ready and which it has not consumed yet, and those rows become consumed for it (other
consumers still see them). One lock guards everything: a put checks and converts all its input
first (before taking the lock), then writes the data, then flips readiness, so a reader never
sees half a put, and a rejected put changes nothing. A value the column's dtype cannot hold
(2**40 in an int32 column, -1 in a uint8 one, 1e300 in a float32 one) is refused, never wrapped.
Getters wait on a condition variable (no polling) that every put, ack, nack, clear and lease
expiry notifies.

Leases: ``get(..., lease=seconds)`` hands rows out without consuming them; ``ack`` consumes them,
``nack`` or the lease running out (the consumer died) makes them available again, so a stage
that crashes mid-batch loses no rows and the same stage never consumes a row twice.
"""

from __future__ import annotations

import asyncio
import math
import numbers
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import ConfigError, DockTimeout
from .batch import Batch
from .casting import as_array, fitted
from .checkpoint import load_dock, save_dock
from .ragged import Packed, Padded, as_ragged
from .samplers import SampleRequest, Selection, Sequential
from .schema import Column
from .storage import Partition

__all__ = ["Dock"]

Sampler = Callable[[SampleRequest], Selection]


@dataclass
class _Lease:
    consumer: str
    partition: str
    rows: np.ndarray
    deadline: float


@dataclass
class _ConsumerStats:
    rows: int = 0
    batches: int = 0
    bytes: int = 0
    wait_seconds: float = 0.0
    timeouts: int = 0
    redelivered: int = 0


class Dock:
    """Experience store: ``columns`` of per-row data, ``consumers`` (stage names), rows grouped by prompt.

    Partitions (e.g. one per training step) are added with ``add_partition`` and cleared or
    dropped independently; row ids are local to a partition, ``0 .. rows - 1``, and row ``r``
    belongs to prompt ``r // n_samples_per_prompt``. Columns and consumers can be added at any time.

    Partial rollout: a put with ``completed=False`` marks rows unfinished. Consumers do not see
    them; the rollout stage takes them back with ``get(..., unfinished=True)``, continues them and
    puts again (``overwrite=True``). Each unfinished put adds one to the row's age
    (``Batch.ages``); past ``max_age`` unfinished puts the row counts as completed anyway, so no
    row goes stale for ever.
    """

    def __init__(
        self, columns: Sequence[Column], consumers: Sequence[str], n_samples_per_prompt: int = 1, *,
        max_age: int | None = None,
    ) -> None:
        self._lock = threading.Condition()
        self._columns: dict[str, Column] = {}
        self._consumers: dict[str, _ConsumerStats] = {}
        self._partitions: dict[str, Partition] = {}
        self._leases: dict[int, _Lease] = {}
        self._next_lease = 1
        self._closed = False
        self.n_samples_per_prompt = _positive("n_samples_per_prompt", n_samples_per_prompt)
        self.max_age = None if max_age is None else _positive("max_age", max_age)
        for column in columns:
            self.add_column(column)
        for consumer in consumers:
            self.add_consumer(consumer)

    # -- schema -------------------------------------------------------------------------------------

    def add_column(self, column: Column) -> None:
        """Add a column; existing partitions get it with no row ready."""
        if not isinstance(column, Column):
            raise ConfigError(f"columns: expected tokenport.dock.Column objects, got {type(column).__name__}")
        with self._lock:
            if column.name in self._columns:
                raise ConfigError(f"column {column.name!r} exists already")
            self._columns[column.name] = column

    def add_consumer(self, name: str) -> None:
        """Add a consumer (a stage); it has consumed nothing yet."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"consumer name={name!r} is invalid: pass a non-empty string")
        with self._lock:
            if name in self._consumers:
                raise ConfigError(f"consumer {name!r} exists already")
            self._consumers[name] = _ConsumerStats()

    @property
    def columns(self) -> dict[str, Column]:
        """The dock's columns by name (a copy)."""
        return dict(self._columns)

    @property
    def consumers(self) -> list[str]:
        """The names of the consumers whose consumption the dock tracks."""
        return list(self._consumers)

    @property
    def partitions(self) -> dict[str, int]:
        """Partition names, oldest first, with their row counts."""
        with self._lock:
            return {name: p.rows for name, p in self._partitions.items()}

    def add_partition(self, name: str, num_prompts: int) -> None:
        """Add a partition of ``num_prompts * n_samples_per_prompt`` rows."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"partition name={name!r} is invalid: pass a non-empty string")
        rows = _positive("num_prompts", num_prompts) * self.n_samples_per_prompt
        with self._lock:
            if name in self._partitions:
                raise ConfigError(f"partition {name!r} exists already: clear() or drop_partition() it first")
            self._partitions[name] = Partition(name, rows)
            self._lock.notify_all()

    def clear(self, partition: str) -> None:
        """Forget a partition's data, readiness, consumption and leases; its rows stay, empty."""
        with self._lock:
            self._partition(partition).clear()
            self._drop_leases(partition)
            self._lock.notify_all()

    def drop_partition(self, partition: str) -> None:
        """Remove a partition and everything in it."""
        with self._lock:
            self._partition(partition)
            del self._partitions[partition]
            self._drop_leases(partition)
            self._lock.notify_all()

    def close(self) -> None:
        """No partitions will be added: a ``get`` without a partition returns None once all are consumed."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()

    # -- put ----------------------------------------------------------------------------------------

    def put(self, partition: str, columns: Mapping[str, Any], rows: Sequence[int] | np.ndarray, *,
            overwrite: bool = False, completed: bool | Sequence[bool] | np.ndarray = True) -> None:
        """Write ``columns`` (name -> values) for ``rows`` of ``partition``, then mark those cells ready.

        Fixed columns take an array of shape ``(len(rows), *shape)``; ragged ones a list of arrays,
        ``Packed(values, lengths)`` or ``Padded(values, lengths)``, of any dtype whose values the
        column's dtype holds (floats are rounded; see ``casting``). Putting a ready cell again is
        an error unless ``overwrite=True``. ``completed`` (one flag, or one per row) marks rows
        finished or not (see the class docstring). On any error nothing is written.
        """
        ids, checked, finished = _checked_put(self._column, columns, rows, completed)
        with self._lock:
            target = self._partition(partition)
            _in_range(ids, target)
            self._check_unwritten(target, list(checked), ids, overwrite)
            for name, value in checked.items():
                target.write(self._columns[name], ids, value)
            self._mark_ready(target, list(checked), ids, finished)

    async def aput(self, partition: str, columns: Mapping[str, Any], rows: Sequence[int] | np.ndarray,
                   **options: Any) -> None:
        """``put`` from asyncio code (runs in a worker thread)."""
        await asyncio.to_thread(self.put, partition, columns, rows, **options)

    # -- get ----------------------------------------------------------------------------------------

    def get(
        self,
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
    ) -> Batch | None:
        """Return ``count`` rows whose ``columns`` are ready and that ``consumer`` has not consumed.

        Blocks until the sampler (``Sequential`` by default) finds them, raising DockTimeout
        after ``timeout`` seconds. ``rows`` asks for exactly those rows instead. Returns None when
        the consumer has consumed the whole partition (without ``partition``: every partition,
        once the dock is ``close``d); a partition's last batch may be short. Without ``lease``
        the rows are consumed at once; with it they come back unless ``ack``ed within ``lease`` s.
        ``unfinished=True`` (the rollout stage) returns up to ``count`` unfinished rows without
        waiting, or None when there are none.
        """
        wanted = _wanted(columns)
        with self._lock:
            taken = self._take(consumer, wanted, count, partition, rows, timeout, sampler, lease, unfinished)
            if taken is None:
                return None
            target, give, lease_id = taken
            data = {name: target.read(self._columns[name], give) for name in wanted}
            self._consumers[consumer].bytes += sum(
                v.values.nbytes if isinstance(v, Packed) else v.nbytes for v in data.values()
            )
            return Batch(target.name, give, data, lease_id, self.n_samples_per_prompt, target.age[give])

    async def aget(self, consumer: str, columns: Sequence[str], count: int, partition: str | None = None,
                   **options: Any) -> Batch | None:
        """``get`` from asyncio code (the wait happens in a worker thread, not on the event loop)."""
        return await asyncio.to_thread(self.get, consumer, columns, count, partition, **options)

    def ack(self, lease_id: int) -> None:
        """Consume the rows of a lease."""
        with self._lock:
            held = self._take_lease(lease_id)
            target = self._partitions[held.partition]
            target.consumed_of(held.consumer)[held.rows] = True
            target.leased_of(held.consumer)[held.rows] = 0
            self._lock.notify_all()

    def nack(self, lease_id: int) -> None:
        """Give the rows of a lease back unconsumed: the next get of that consumer may return them."""
        with self._lock:
            held = self._take_lease(lease_id)
            self._release(held)
            self._lock.notify_all()

    # -- state --------------------------------------------------------------------------------------

    def all_consumed(self, consumer: str, partition: str) -> bool:
        """Whether ``consumer`` has consumed every row of ``partition``."""
        with self._lock:
            self._consumer(consumer)
            return self._partition(partition).remaining(consumer) == 0

    def stats(self) -> dict[str, Any]:
        """Per consumer: rows and batches served, bytes, wait time; per partition: ready and consumed rows."""
        with self._lock:
            consumers = {name: dict(vars(s)) for name, s in self._consumers.items()}
            partitions = {}
            for name, p in self._partitions.items():
                partitions[name] = {
                    "rows": p.rows,
                    "bytes": p.nbytes,
                    "ready": {c: int(np.count_nonzero(p.ready_of(c))) for c in self._columns},
                    "consumed": {c: int(np.count_nonzero(p.consumed_of(c))) for c in self._consumers},
                    "leased": {c: int(np.count_nonzero(p.leased_of(c))) for c in self._consumers},
                }
            return {"consumers": consumers, "partitions": partitions, "leases": len(self._leases)}

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Checkpoint the dock to ``directory`` atomically (data, readiness, consumption; not leases)."""
        save_dock(self, directory)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> "Dock":
        """The dock saved in ``directory``; rows that were out on lease are available again."""
        return load_dock(directory)

    # -- internals ----------------------------------------------------------------------------------

    def _partition(self, name: str) -> Partition:
        try:
            return self._partitions[name]
        except (KeyError, TypeError):
            raise ConfigError(
                f"partition {name!r} does not exist; the dock has {list(self._partitions)} (add_partition first)"
            ) from None

    def _column(self, name: str) -> Column:
        try:
            return self._columns[name]
        except (KeyError, TypeError):
            raise ConfigError(f"unknown column {name!r}; the dock has {list(self._columns)}") from None

    def _consumer(self, name: str) -> _ConsumerStats:
        try:
            return self._consumers[name]
        except (KeyError, TypeError):
            raise ConfigError(f"unknown consumer {name!r}; the dock has {list(self._consumers)}") from None

    def _targets(self, partition: str | None, count: int) -> list[Partition]:
        """The partition asked for (checked against ``count``), or every partition."""
        if partition is None:
            return list(self._partitions.values())
        target = self._partition(partition)
        if count > target.rows:
            raise ConfigError(
                f"count={count} is more than partition {partition!r} holds ({target.rows} rows): ask for fewer"
            )
        return [target]

    def _select(self, consumer: str, wanted: list[str], count: int, partition: str | None,
                sampler: Sampler, unfinished: bool = False) -> Any:
        """``(partition, give, consume)``, None at the end, or _WAIT."""
        targets = [self._partition(partition)] if partition is not None else list(self._partitions.values())
        for target in targets:
            leased = target.leased_of(consumer)
            request = SampleRequest(
                consumer=consumer, partition=target.name, count=min(count, target.rows), rows=target.rows,
                group_size=self.n_samples_per_prompt, eligible=target.eligible(consumer, wanted, unfinished),
                unconsumed=target.remaining(consumer), leased=int(np.count_nonzero(leased)),
                consumed=_read_only(target.consumed_of(consumer)),
                lengths=lambda name, ids, target=target: _lengths(target, self._column(name), ids),
            )
            selection = sampler(request)
            if selection is None:
                if partition is not None:
                    return _WAIT
                continue
            trusted = getattr(sampler, "trusted", False)  # tokenport's own samplers pick eligible rows only
            if trusted:
                give, consume = (np.asarray(part, dtype=np.int64) for part in selection)
            else:
                give, consume = _selected(selection, sampler)
            if len(give) == 0:
                if partition is not None:
                    return None
                continue
            if not trusted:
                _check_selection(give, consume, request)
            return target, give, consume
        if unfinished or (partition is None and self._closed and all(
            t.remaining(consumer) == 0 for t in self._partitions.values()
        )):
            return None
        return _WAIT

    def _take(self, consumer: str, wanted: list[str], count: int, partition: str | None,
              rows: Sequence[int] | np.ndarray | None, timeout: float | None, sampler: Sampler | None,
              lease: float | None, unfinished: bool = False) -> tuple[Partition, np.ndarray, int | None] | None:
        """Wait for the sampler's rows, mark them consumed (or leased); ``(partition, rows, lease id)``
        or None at the end. The caller holds the lock."""
        count = _checked_get(count, timeout, sampler, lease)
        stats = self._consumer(consumer)
        for name in wanted:
            self._column(name)
        targets = self._targets(partition, count)
        sampler = sampler or (_Unfinished() if unfinished else Sequential())
        if rows is not None:
            if partition is None:
                raise ConfigError("rows= needs partition=: row ids are local to a partition")
            sampler = _exact_rows(_in_range(_row_ids(rows), targets[0]), partition)
        began = time.monotonic()
        deadline = None if timeout is None else began + timeout
        while True:
            now = time.monotonic()
            self._expire_leases(now)
            found = self._select(consumer, wanted, count, partition, sampler, unfinished)
            if found is not _WAIT:
                break
            if deadline is not None and now >= deadline:
                stats.wait_seconds += now - began
                stats.timeouts += 1
                where = f"partition {partition!r}" if partition else "any partition"
                raise DockTimeout(
                    f"consumer {consumer!r} waited {timeout} s for {count} rows of {where} with columns "
                    f"{wanted} ready; increase timeout, or check that the producing stage is running"
                )
            self._lock.wait(self._wait_time(now, deadline))
        stats.wait_seconds += time.monotonic() - began
        if found is None:
            return None
        target, give, consume = found
        lease_id = None
        if lease is None:
            target.consumed_of(consumer)[consume] = True
        else:
            lease_id = self._next_lease
            self._next_lease += 1
            self._leases[lease_id] = _Lease(consumer, target.name, consume, now + lease)
            target.leased_of(consumer)[consume] = lease_id
        stats.rows += len(give)
        stats.batches += 1
        return target, give, lease_id

    def _check_unwritten(self, target: Partition, names: list[str], ids: np.ndarray, overwrite: bool) -> None:
        """Unless ``overwrite``, raise ConfigError if any of the cells is written already."""
        if overwrite:
            return
        for name in names:
            again = ids[target.ready_of(name)[ids]]
            if len(again):
                raise ConfigError(
                    f"partition {target.name!r} row {int(again[0])}: column {name!r} is already written; "
                    "pass overwrite=True to replace it"
                )

    def _mark_ready(self, target: Partition, names: list[str], ids: np.ndarray, finished: np.ndarray) -> None:
        """Make the cells visible, record which rows are finished, wake the waiting getters.

        Rows put unfinished age by one and go back to every consumer unconsumed (the rollout
        stage takes them again with ``unfinished=True``); past ``max_age`` they count as finished.
        """
        for name in names:
            target.ready_of(name)[ids] = True
        pending = ids[~finished]
        if len(pending):
            target.age[pending] += 1
            if self.max_age is not None:
                pending = pending[target.age[pending] <= self.max_age]
            for consumer in self._consumers:
                target.consumed_of(consumer)[pending] = False
        target.completed[ids] = True
        target.completed[pending] = False
        self._lock.notify_all()

    def _take_lease(self, lease_id: int) -> _Lease:
        try:
            return self._leases.pop(lease_id)
        except (KeyError, TypeError):
            raise ConfigError(
                f"lease {lease_id!r} is not held: it was acknowledged, returned, or expired (its rows were "
                "handed out again)"
            ) from None

    def _release(self, held: _Lease) -> None:
        if held.partition in self._partitions:
            self._partitions[held.partition].leased_of(held.consumer)[held.rows] = 0

    def _expire_leases(self, now: float) -> None:
        expired = [lease_id for lease_id, held in self._leases.items() if held.deadline <= now]
        for lease_id in expired:
            held = self._leases.pop(lease_id)
            self._release(held)
            self._consumers[held.consumer].redelivered += len(held.rows)
        if expired:
            self._lock.notify_all()

    def _drop_leases(self, partition: str) -> None:
        for lease_id in [i for i, held in self._leases.items() if held.partition == partition]:
            del self._leases[lease_id]

    def _wait_time(self, now: float, deadline: float | None) -> float | None:
        """Sleep until the deadline or the next lease expiry, whichever is first (None: until notified)."""
        times = [held.deadline for held in self._leases.values()]
        if deadline is not None:
            times.append(deadline)
        return max(0.0, min(times) - now) if times else None


_WAIT = object()


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name}={value!r} is invalid: pass an integer >= 1")
    return int(value)


def _completed_flags(completed: bool | Sequence[bool] | np.ndarray, rows: int) -> np.ndarray:
    """One finished flag per row, from one flag or a sequence of them."""
    flags = np.asarray(completed)
    if flags.dtype != bool or flags.shape not in ((), (rows,)):
        raise ConfigError(f"completed: expected True/False or {rows} booleans, one per row, got {completed!r:.60}")
    return np.broadcast_to(flags, (rows,))


class _Unfinished:
    """Up to ``count`` unfinished rows, lowest ids first; nothing (not a wait) when there are none."""

    trusted = True

    def __call__(self, request: SampleRequest) -> Selection:
        chosen = request.eligible[: request.count]
        return chosen, chosen


def _checked_put(column_of: Callable[[str], Column], columns: Mapping[str, Any], rows: Sequence[int] | np.ndarray,
                 completed: bool | Sequence[bool] | np.ndarray) -> tuple[np.ndarray, dict[str, Any], np.ndarray]:
    """The checks of a put that need no partition (Dock and RayDock both run them, so they fail
    alike): ``(row ids, each column's values cast to its dtype, finished flags)``."""
    if not isinstance(columns, Mapping) or not columns:
        raise ConfigError("columns: expected a non-empty dict of column name -> values")
    ids = _row_ids(rows)
    checked = {name: _checked_values(column_of(name), value, len(ids)) for name, value in columns.items()}
    return ids, checked, _completed_flags(completed, len(ids))


def _wanted(columns: Sequence[str]) -> list[str]:
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


def _checked_get(count: int, timeout: float | None, sampler: Sampler | None, lease: float | None) -> int:
    """The checks of a get that need no partition (shared with RayDock); returns ``count``."""
    count = _positive("count", count)
    if timeout is not None and not (_seconds(timeout) and timeout >= 0):
        raise ConfigError(f"timeout={timeout!r} is invalid: pass None (wait forever) or seconds >= 0")
    if lease is not None and not (_seconds(lease) and lease > 0):
        raise ConfigError(f"lease={lease!r} is invalid: pass None (consume at once) or seconds > 0")
    if sampler is not None and not callable(sampler):
        raise ConfigError(f"sampler={sampler!r:.60} is not callable: pass a SampleRequest -> rows function")
    return count


def _seconds(value: object) -> bool:
    """Whether ``value`` is a finite real number (not a bool)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _row_ids(rows: Sequence[int] | np.ndarray) -> np.ndarray:
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


def _in_range(ids: np.ndarray, target: Partition) -> np.ndarray:
    """``ids``, checked to be rows of ``target``."""
    bad = np.flatnonzero((ids < 0) | (ids >= target.rows))
    if bad.size:
        raise ConfigError(
            f"row {int(ids[bad[0]])} is out of range: partition {target.name!r} has rows 0..{target.rows - 1}"
        )
    return ids


def _checked_values(column: Column, value: Any, rows: int) -> np.ndarray | Packed | Padded:
    """A column's values for ``rows`` rows, converted to its dtype, or a ConfigError naming it."""
    if column.ragged:
        return as_ragged(value, column.name, rows, column.dtype, column.shape)
    what = f"column {column.name!r}"
    if isinstance(value, (Packed, Padded)) or (isinstance(value, (list, tuple)) and value and
                                     {as_array(v, what).shape for v in value} - {column.shape}):
        raise ConfigError(f"{what} is not ragged: pass one array of shape (rows, *{column.shape})")
    array = as_array(value, what)
    if array.shape != (rows, *column.shape):
        raise ConfigError(
            f"column {column.name!r}: values of shape {array.shape}, expected {(rows, *column.shape)} "
            f"({rows} rows of shape {column.shape})"
        )
    return fitted(array, column.dtype, f"column {column.name!r}")


def _lengths(target: Partition, column: Column, ids: np.ndarray) -> np.ndarray:
    """Items per row of a ragged column, for balancing samplers."""
    if not column.ragged:
        raise ConfigError(f"column {column.name!r} is not ragged: balance on a ragged column's lengths")
    if column.name not in target.ragged:
        return np.zeros(len(ids), dtype=np.int64)
    return target.ragged[column.name].lengths[ids]


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.setflags(write=False)
    return view


def _exact_rows(ids: np.ndarray, partition: str) -> Sampler:
    """A sampler that returns exactly ``ids`` once they are all eligible."""

    def sample(request: SampleRequest) -> Selection:
        if request.consumed[ids].any():
            row = int(ids[request.consumed[ids]][0])
            raise ConfigError(f"row {row} of partition {partition!r} is already consumed by {request.consumer!r}")
        return (ids, ids) if np.isin(ids, request.eligible).all() else None

    sample.trusted = True  # type: ignore[attr-defined]
    return sample


def _selected(selection: Any, sampler: Sampler) -> tuple[np.ndarray, np.ndarray]:
    """A sampler's ``(rows to return, rows to consume)`` as int64 arrays; anything else is refused."""
    if isinstance(selection, (tuple, list)) and len(selection) == 2:
        try:
            give, consume = np.asarray(selection[0]), np.asarray(selection[1])
        except (ValueError, TypeError):  # not regular arrays
            give = consume = np.zeros((0, 0))
        if all(p.ndim == 1 and (p.dtype.kind in "iu" or not p.size) for p in (give, consume)):
            return give.astype(np.int64, copy=False), consume.astype(np.int64, copy=False)
    name = getattr(sampler, "__qualname__", None) or type(sampler).__qualname__
    raise ConfigError(
        f"sampler {name} returned {selection!r:.80}: return None (wait) or a pair (rows to return, "
        "rows to consume) of 1-D integer row ids"
    )


def _check_selection(give: np.ndarray, consume: np.ndarray, request: SampleRequest) -> None:
    """A sampler may only return and consume eligible rows."""
    for name, part in (("returned", give), ("consumed", consume)):
        outside = part[~np.isin(part, request.eligible)]
        if len(outside):
            raise ConfigError(
                f"sampler {name} row {int(outside[0])} of partition {request.partition!r}, which is not ready, "
                f"already consumed or leased for {request.consumer!r}"
            )
