"""The dock's state: columns, consumers, the partition table, leases, and the lock that guards them.

One ``DockState`` is what a ``Dock`` is, what its checkpoint saves and loads, and what a
``RayDock``'s controller keeps (there with ragged row lengths only, no data). Every method takes
the lock (a re-entrant condition variable); hold ``lock`` around a sequence of calls that must
be atomic, such as check, write, mark ready. Getters wait on it (no polling); every change that
can make rows available (put, ack, nack, clear, lease expiry, close) notifies it.

Versions and staleness: every row records the span of policy versions that wrote it (oldest and
newest; ``set_version`` moves the current one forward). A consumer with a staleness limit (its own,
or the dock's ``max_staleness``) is never served a row whose oldest version is more than the limit
behind the current one. Such a row, once no consumer still holding it on lease, expires exactly
once by the dock's ``on_stale`` policy: ``"requeue"`` forgets the row (data, readiness, consumption,
versions) and queues its id for ``expired()``, so the rollout stage regenerates that prompt's row
and puts it again; ``"drop"`` marks it consumed by every consumer and counts it. Both counts are
in ``stats()["expired"]``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from ..errors import ConfigError, DockTimeout
from .arguments import Sampler, checked_get, in_range, int64
from .requests import GetRequest
from .samplers import SampleRequest, Selection, Sequential
from .storage import Partition
from .table import STALE_POLICIES, ConsumerStats, DockTable, Lease, counts

__all__ = ["STALE_POLICIES", "DockState"]


class DockState(DockTable):
    """A dock's tables (``DockTable``) and the rules of its puts, appends, gets, leases and versions."""

    last_consumed: np.ndarray | None = None  # the rows the last take consumed or leased (RayDock's journal)

    # -- put ----------------------------------------------------------------------------------------

    def check_put(
        self, partition: str, names: Sequence[str], ids: np.ndarray, overwrite: bool, version: np.ndarray | None = None
    ) -> Partition:
        """The partition a put of ``names`` for rows ``ids`` writes to, once checked: the rows exist, the
        columns exist and are not segmented, (unless ``overwrite``) no cell is written already, and the
        rows have a version no newer than the current one (given, or from an earlier put)."""
        with self.lock:
            target = self.partition(partition)
            in_range(ids, target)
            self.check_version(version, target, ids)
            dropped = ids[target.dropped[ids]]
            if len(dropped) and (not overwrite or version is None):
                raise ConfigError(
                    f"partition {target.name!r} row {int(dropped[0])} was dropped as stale (counted in "
                    "stats()['expired']): rewrite it as a new row with overwrite=True and version= (the policy "
                    "that produced it), or clear the partition"
                )
            for name in names:
                if self.column(name).segmented:
                    raise ConfigError(
                        f"column {name!r} is segmented: write it with append(partition, row, columns, version=...)"
                    )
                if not overwrite:
                    again = ids[target.ready_of(name)[ids]]
                    if len(again):
                        raise ConfigError(
                            f"partition {target.name!r} row {int(again[0])}: column {name!r} is already written; "
                            "pass overwrite=True to replace it"
                        )
            return target

    def check_version(self, version: np.ndarray | None, target: Partition, ids: np.ndarray) -> None:
        """Refuse a version newer than the current one, and a write without one to rows that have none
        when the dock tracks versions."""
        if version is not None:
            if len(version) and int(version.max()) > self.version:
                raise ConfigError(
                    f"version={int(version.max())} is newer than the dock's current version {self.version}: "
                    "call set_version first (rows are produced by a policy the trainer has published)"
                )
        elif self.tracks_versions:
            unversioned = ids[target.version_first[ids] < 0]
            if len(unversioned):
                raise ConfigError(
                    f"partition {target.name!r} row {int(unversioned[0])} has no version and this dock limits "
                    "staleness or admission by version: pass version= (the policy version that produced it)"
                )

    def set_version(self, version: int) -> None:
        """Make ``version`` the current policy version (never backwards); rows now too stale expire."""
        version = int64("version", version, 0)
        with self.lock:
            if version < self.version:
                raise ConfigError(
                    f"version={version} is older than the current version {self.version}: versions only move forward"
                )
            self.version = version
            for target in self._partitions.values():
                self._expire(target)
            self.lock.notify_all()

    def expired(self, partition: str | None = None) -> dict[str, np.ndarray]:
        """The rows expired under ``"requeue"`` since the last call, by partition (each row once)."""
        with self.lock:
            names = list(self._requeue) if partition is None else [self.partition(partition).name]
            handed: dict[str, np.ndarray] = {}
            for name in names:
                parts = self._requeue.pop(name, [])
                if parts:
                    handed[name] = np.sort(np.concatenate(parts))
            return handed

    def requeue(self, partition: str, rows: np.ndarray) -> None:
        """Queue expired ``rows`` of ``partition`` for ``expired()`` again (a checkpoint keeps them)."""
        with self.lock:
            self._requeue.setdefault(self.partition(partition).name, []).append(rows)

    def can_admit(self) -> bool:
        """Whether a rollout may start now without more than ``max_inflight_versions`` versions in flight."""
        with self.lock:
            if self.max_inflight_versions is None:
                return True
            oldest = self.oldest_in_flight()
            return oldest is None or self.version - oldest < self.max_inflight_versions

    def admit(self, timeout: float | None = None) -> None:
        """Wait until ``can_admit``; DockTimeout after ``timeout`` seconds."""
        checked_get(1, timeout, None, None)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while not self.can_admit():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    raise DockTimeout(
                        f"admit waited {timeout} s: rows of version {self.oldest_in_flight()} are still unconsumed "
                        f"at version {self.version} (max_inflight_versions={self.max_inflight_versions}); "
                        "check that the training stage is consuming, or raise the limit"
                    )
                self.lock.wait(None if deadline is None else deadline - now)

    def oldest_in_flight(self) -> int | None:
        """The oldest version of a written row some consumer has not consumed (None: there is none)."""
        with self.lock:
            oldest = None
            for target in self._partitions.values():
                pending = target.version_first >= 0
                if not self._consumers:
                    break
                pending &= ~np.logical_and.reduce([target.consumed_view(c) for c in self._consumers])
                if pending.any():
                    least = int(target.version_first[pending].min())
                    oldest = least if oldest is None else min(oldest, least)
            return oldest

    def append(
        self, partition: str, row: int, checked: Mapping[str, np.ndarray], version: int | None, finished: bool
    ) -> None:
        """Append one segment (equal item counts, already checked) to segmented columns of ``row``."""
        with self.lock:
            target = self.partition(partition)
            ids = in_range(np.array([row], dtype=np.int64), target)
            if version is None and self.tracks_versions:
                raise ConfigError(
                    "append: this dock limits staleness or admission by version: pass version= (the policy "
                    "version that produced the segment)"
                )
            stamp = np.array([self.version if version is None else version], dtype=np.int64)
            self.check_version(stamp, target, ids)
            names = tuple(sorted(checked))
            for name in names:
                if not self.column(name).segmented:
                    raise ConfigError(f"column {name!r} is not segmented: write it with put")
            if target.completed[row]:
                raise ConfigError(
                    f"partition {target.name!r} row {row} is finished (or was dropped as stale): append to rows "
                    "put with completed=False (or never put), and pass finished=True with the last segment"
                )
            known = target.segment_columns.get(row, names)
            if known != names:
                raise ConfigError(
                    f"partition {target.name!r} row {row}: its segments hold columns {list(known)}, this append "
                    f"{list(names)}: every segment of a row writes the same columns"
                )
            for name in names:
                target.extend(self.column(name), row, checked[name])
                target.ready_of(name)[row] = True
            target.segment_columns[row] = names
            target.segments.setdefault(row, []).append((len(checked[names[0]]), int(stamp[0])))
            target.stamp(ids, stamp, np.zeros(1, dtype=bool))
            target.completed[row] = finished
            if not finished:
                target.unconsume(ids)
            self._expire(target, ids)
            self.lock.notify_all()

    def mark_ready(
        self,
        target: Partition,
        names: Sequence[str],
        ids: np.ndarray,
        finished: np.ndarray,
        version: np.ndarray | None = None,
        overwrite: bool = False,
    ) -> None:
        """Make the cells visible, record which rows are finished and their versions, wake the getters.

        Rows put unfinished age by one and go back to every consumer unconsumed (the rollout
        stage takes them again with ``unfinished=True``); past ``max_age`` they count as finished.
        ``version`` (one per row) widens the rows' version span (a finished row overwritten starts
        a new one); without it, rows with no version yet get the current one.
        """
        with self.lock:
            if version is None:
                fresh = ids[target.version_first[ids] < 0]
                target.stamp(fresh, np.full(len(fresh), self.version, dtype=np.int64), np.ones(len(fresh), bool))
            else:
                target.stamp(ids, version, (target.completed[ids] & overwrite) | target.dropped[ids])
            target.dropped[ids] = False  # a dropped row rewritten (checked above) is a new row
            for name in names:
                target.ready_of(name)[ids] = True
            pending = ids[~finished]
            if len(pending):
                target.age[pending] += 1
                if self.max_age is not None:
                    pending = pending[target.age[pending] <= self.max_age]
                target.unconsume(pending)
            target.completed[ids] = True
            target.completed[pending] = False
            self._expire(target, ids)
            self.lock.notify_all()

    def restore(
        self,
        partition: str,
        consumed: Mapping[str, np.ndarray],
        completed: np.ndarray,
        age: np.ndarray,
        versions: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """Set a partition's consumption, finished flags, ages and (oldest, newest) versions per row
        (copying a dock); without ``versions``, written rows that have none get the current one. The
        copy's leases are renumbered: no id of the dock copied names one of them."""
        with self.lock:
            self.renumber_leases()
            target = self.partition(partition)
            for consumer, bits in consumed.items():
                target.consumed_of(consumer)[:] = bits
            target.completed[:] = completed
            target.age[:] = age
            if versions is not None:
                target.version_first[:], target.version_last[:] = versions
            else:
                written = np.logical_or.reduce([*target.ready.values(), np.zeros(target.rows, dtype=bool)])
                fresh = np.flatnonzero(written & (target.version_first < 0))
                target.stamp(fresh, np.full(len(fresh), self.version, dtype=np.int64), np.ones(len(fresh), bool))
            self.lock.notify_all()

    # -- get ----------------------------------------------------------------------------------------

    def take(self, request: GetRequest) -> tuple[Partition, np.ndarray, int | None] | None:
        """Wait for the sampler's rows, mark them consumed (or leased) and count them (rows, batches)
        for the request's consumer; ``(partition, rows, lease id)``, or None at the end. The caller
        reads the data and reports its size with ``served``. Rows more than ``max_staleness``
        (default: the consumer's limit) versions behind are not served."""
        with self.lock:
            stats = self._consumer(request.consumer)
            limit = self.staleness_limit(request.consumer) if request.max_staleness is None else request.max_staleness
            for name in request.columns:
                self.column(name)
            targets = self._targets(request.partition, request.count)
            sampler = request.sampler or (_Unfinished() if request.unfinished else Sequential())
            if request.rows is not None:
                sampler = _exact_rows(in_range(request.rows, targets[0]), targets[0].name)
            found, now = self._wait_for(request, sampler, limit, stats)
            if found is None:
                return None
            target, give, consume = found
            self.last_consumed = consume
            return target, give, self._claim(request, target, give, consume, now, stats)

    def reclaim(
        self, consumer: str, partition: str, give: np.ndarray, consume: np.ndarray, lease: tuple[int, float] | None
    ) -> None:
        """Claim exactly these rows again, as a get did (a RayDock controller replaying its journal): consumed,
        or leased under ``lease`` = (its id, its wall-clock deadline)."""
        with self.lock:
            stats = self._consumer(consumer)
            target = self.partition(partition)
            if lease is None:
                target.consumed_of(consumer)[consume] = True
            else:
                lease_id, deadline = lease
                self._next_lease = max(self._next_lease, lease_id + 1)
                left = max(0.0, deadline - time.time())
                self._leases[lease_id] = Lease(consumer, target.name, consume, time.monotonic() + left)
                target.leased_of(consumer)[consume] = True
            self._count(stats, target, give)
            self.lock.notify_all()

    def _count(self, stats: ConsumerStats, target: Partition, give: np.ndarray) -> None:
        """Count a batch served: its rows, and the rows by how many versions behind they are."""
        stats.rows += len(give)
        stats.batches += 1
        versions = target.version_first[give]
        for lag, served in counts(self.version - versions[versions >= 0]).items():
            stats.staleness[lag] = stats.staleness.get(lag, 0) + served

    def _wait_for(
        self, request: GetRequest, sampler: Sampler, limit: int | None, stats: ConsumerStats
    ) -> tuple[Any, float]:
        """``(the sampler's choice or None at the end, when it was made)``, waiting for it; DockTimeout
        after the request's timeout."""
        wanted = list(request.columns)
        began = time.monotonic()
        deadline = None if request.timeout is None else began + request.timeout
        while True:
            now = time.monotonic()
            self._expire_leases(now)
            oldest = None if limit is None else self.version - limit
            found = self._select(
                request.consumer, wanted, request.count, request.partition, sampler, request.unfinished, oldest
            )
            if found is not _WAIT:
                stats.wait_seconds += time.monotonic() - began
                return found, now
            if deadline is not None and now >= deadline:
                stats.wait_seconds += now - began
                stats.timeouts += 1
                where = f"partition {request.partition!r}" if request.partition else "any partition"
                raise DockTimeout(
                    f"consumer {request.consumer!r} waited {request.timeout} s for {request.count} rows of {where} "
                    f"with columns {wanted} ready; increase timeout, or check that the producing stage is running"
                )
            self.lock.wait(self._wait_time(now, deadline))

    def _claim(
        self,
        request: GetRequest,
        target: Partition,
        give: np.ndarray,
        consume: np.ndarray,
        now: float,
        stats: ConsumerStats,
    ) -> int | None:
        """Consume (or lease) the chosen rows and count them; the lease id, if any."""
        lease_id = None
        if request.lease is None:
            target.consumed_of(request.consumer)[consume] = True
        else:
            lease_id = self._next_lease
            self._next_lease += 1
            self._leases[lease_id] = Lease(request.consumer, target.name, consume, now + request.lease)
            target.leased_of(request.consumer)[consume] = True
        self._count(stats, target, give)
        if self.max_inflight_versions is not None:
            self.lock.notify_all()  # consumption can admit rollouts
        return lease_id

    def ack(self, lease_id: int) -> None:
        """Consume the rows of a lease."""
        with self.lock:
            held = self._take_lease(lease_id)
            target = self._partitions[held.partition]
            target.consumed_of(held.consumer)[held.rows] = True
            target.release(held.consumer, held.rows)
            self.lock.notify_all()

    def nack(self, lease_id: int) -> None:
        """Give the rows of a lease back unconsumed: the next get of that consumer may return them."""
        with self.lock:
            held = self._take_lease(lease_id)
            self._release(held)
            if held.partition in self._partitions:
                self._expire(self._partitions[held.partition], held.rows)
            self.lock.notify_all()

    # -- internals ----------------------------------------------------------------------------------

    def _expire(self, target: Partition, rows: np.ndarray | None = None) -> None:
        """Expire (by ``on_stale``) the written ``rows`` (default: all) that some consumer that has not
        consumed them may no longer be served, unless a consumer holds them on lease."""
        gone = self._too_stale(target, np.arange(target.rows) if rows is None else rows)
        if not len(gone):
            return
        if self.on_stale == "drop":
            for consumer in self._consumers:
                target.consumed_of(consumer)[gone] = True
            target.completed[gone] = True  # settled: an append may not revive it (and count it twice)
            target.dropped[gone] = True  # nor a put, unless it rewrites the row as a new one (check_put)
            self.expired_dropped += len(gone)
        else:
            target.reset_rows(gone)
            queued = self._requeue.setdefault(target.name, [])
            again = np.isin(gone, np.concatenate(queued)) if queued else np.zeros(len(gone), dtype=bool)
            if not again.all():  # a row rewritten and expired again before expired() is handed out once
                queued.append(gone[~again].copy())
            self.expired_requeued += len(gone)
        self.lock.notify_all()

    def _too_stale(self, target: Partition, ids: np.ndarray) -> np.ndarray:
        """The written rows among ``ids`` (in their order) too stale for a consumer that has not consumed
        them and leased to none. Walks the consumers only for rows past the loosest limit, and a consumer
        that consumed nothing here only once per limit (10^3 consumers: a put of fresh rows walks none)."""
        limits = {consumer: self.staleness_limit(consumer) for consumer in self._consumers}
        loosest = min((limit for limit in limits.values() if limit is not None), default=None)
        if loosest is None:
            return ids[:0]
        first = target.version_first[ids]
        late = (first >= 0) & (self.version - first > loosest)  # only these can be too stale for someone
        if not late.any():
            return ids[:0]
        ids, first = ids[late], first[late]
        stale = np.zeros(len(ids), dtype=bool)
        leased = np.zeros(len(ids), dtype=bool)
        unread: set[int] = set()  # limits of consumers that consumed nothing here: one pass per limit
        for consumer, limit in limits.items():
            if (held := target.leased.get(consumer)) is not None:
                leased |= held[ids]
            if limit is not None:
                if (bits := target.consumed.get(consumer)) is None:
                    unread.add(limit)
                else:
                    stale |= (self.version - first > limit) & ~bits[ids]
        for limit in unread:
            stale |= self.version - first > limit
        return ids[stale & ~leased]

    def _select(
        self,
        consumer: str,
        wanted: list[str],
        count: int,
        partition: str | None,
        sampler: Sampler,
        unfinished: bool = False,
        oldest: int | None = None,
    ) -> Any:
        """``(partition, give, consume)``, None at the end, or _WAIT."""
        targets = [self.partition(partition)] if partition is not None else list(self._partitions.values())
        for target in targets:
            request = SampleRequest(
                consumer=consumer,
                partition=target.name,
                count=min(count, target.rows),
                rows=target.rows,
                group_size=self.n_samples_per_prompt,
                eligible=target.eligible(consumer, wanted, unfinished, oldest),
                unconsumed=target.remaining(consumer),
                leased=target.leased_rows(consumer),
                consumed=_read_only(target.consumed_view(consumer)),
                lengths=partial(self._ragged_lengths, target),
                versions=_read_only(target.version_first),
                latest_versions=_read_only(target.version_last),
                current_version=self.version,
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
        if unfinished or (
            partition is None and self.closed and all(t.remaining(consumer) == 0 for t in self._partitions.values())
        ):
            return None
        return _WAIT

    def _take_lease(self, lease_id: int) -> Lease:
        try:
            return self._leases.pop(lease_id)
        except (KeyError, TypeError):
            raise ConfigError(
                f"lease {lease_id!r} is not held: it was acknowledged, returned, or expired (its rows were "
                "handed out again)"
            ) from None

    def _release(self, held: Lease) -> None:
        if held.partition in self._partitions:
            self._partitions[held.partition].release(held.consumer, held.rows)

    def _expire_leases(self, now: float) -> None:
        expired = [lease_id for lease_id, held in self._leases.items() if held.deadline <= now]
        for lease_id in expired:
            held = self._leases.pop(lease_id)
            self._release(held)
            self._consumers[held.consumer].redelivered += len(held.rows)
            if held.partition in self._partitions:
                self._expire(self._partitions[held.partition], held.rows)
        self.leases_expired += len(expired)
        if expired:
            self.lock.notify_all()

    def _wait_time(self, now: float, deadline: float | None) -> float | None:
        """Sleep until the deadline or the next lease expiry, whichever is first (None: until notified)."""
        times = [held.deadline for held in self._leases.values()]
        if deadline is not None:
            times.append(deadline)
        return max(0.0, min(times) - now) if times else None


_WAIT = object()


class _Unfinished:
    """Up to ``count`` unfinished rows, lowest ids first; nothing (not a wait) when there are none."""

    trusted = True

    def __call__(self, request: SampleRequest) -> Selection:
        chosen = request.eligible[: request.count]
        return chosen, chosen


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
