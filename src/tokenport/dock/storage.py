"""One partition's data and bits: fixed columns as arrays, ragged columns packed, readiness per cell.

Not thread-safe on its own: its owner serializes the calls (a ``DockState`` by its lock, a RayDock
shard by running one call at a time). Ragged columns grow one flat buffer per partition (doubling,
so appends cost amortized O(1)) with a start and a length per row; rewriting a row (``overwrite``)
appends its new items and abandons the old ones until the partition is cleared.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from .copying import copy_runs, item_bytes
from .ragged import Packed, Padded, gather_runs
from .schema import OBJECT, Column

__all__ = ["Partition"]


class _RaggedColumn:
    """Packed rows of one ragged column of one partition, in an append-only buffer.

    Items once written are never written again (a rewrite appends), so a read of rows that lie
    end to end in the buffer returns a read-only view instead of a copy: later writes, growth
    (a new buffer) and clears leave it intact.
    """

    def __init__(self, column: Column, rows: int) -> None:
        self.buffer = np.empty((0, *column.shape), dtype=column.dtype)
        self.used = 0
        self.starts = np.zeros(rows, dtype=np.int64)
        self.lengths = np.zeros(rows, dtype=np.int64)

    def write(self, rows: np.ndarray, value: Packed | Padded) -> None:
        """Append the rows' items and point the rows at them."""
        lengths = value.lengths
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        needed = self.used + int(offsets[-1])
        if needed > len(self.buffer):
            self._grow(needed, int(offsets[-1]) / max(1, len(rows)))
        if isinstance(value, Packed):
            self.buffer[self.used : needed] = value.values
        else:
            width = value.values.shape[1]
            starts = np.arange(len(lengths), dtype=np.int64) * width
            copy_runs(value.values, starts, self.buffer, self.used + offsets[:-1], lengths, item_bytes(value.values, 2))
        self.starts[rows] = self.used + offsets[:-1]
        self.lengths[rows] = lengths
        self.used = needed

    def extend(self, row: int, values: np.ndarray) -> None:
        """Append ``values`` to the end of one row: in place when the row is the buffer's last run, else
        the row moves to the end (its old items are abandoned, never rewritten)."""
        start, length, added = int(self.starts[row]), int(self.lengths[row]), len(values)
        at_end = start + length == self.used and length > 0
        moved = 0 if at_end else length
        needed = self.used + moved + added
        if needed > len(self.buffer):
            self._grow(needed, (length + added) * 2.0 / max(1, len(self.starts)))
        if not at_end:
            self.buffer[self.used : self.used + length] = self.buffer[start : start + length]
            self.starts[row] = self.used
        self.buffer[self.used + moved : needed] = values
        self.lengths[row] = length + added
        self.used = needed

    def record(self, rows: np.ndarray, lengths: np.ndarray) -> None:
        """Point the rows at items held elsewhere (lengths only; ``used`` counts them as appended)."""
        self.lengths[rows] = lengths
        self.used += int(lengths.sum())

    def _grow(self, needed: int, mean_length: float) -> None:
        """A larger buffer: room for every row at this put's mean length, at least double, at least ``needed``."""
        estimate = int(mean_length * len(self.starts) * 1.25)
        capacity = max(needed, 2 * len(self.buffer), estimate, 1024)
        grown = np.empty((capacity, *self.buffer.shape[1:]), dtype=self.buffer.dtype)
        grown[: self.used] = self.buffer[: self.used]
        self.buffer = grown

    def read(self, rows: np.ndarray) -> Packed:
        """The rows' items in the order of ``rows``: a read-only view when they lie end to end, else a copy."""
        starts, lengths = self.starts[rows], self.lengths[rows]
        if len(rows) and np.array_equal(starts[1:], starts[:-1] + lengths[:-1]):
            view = self.buffer[starts[0] : starts[0] + int(lengths.sum())]
            view.flags.writeable = False
            return Packed(view, lengths)
        return gather_runs(self.buffer, starts, lengths)


class Partition:
    """Rows ``0 .. rows - 1`` of one partition: data, readiness per column, consumption per consumer."""

    def __init__(self, name: str, rows: int) -> None:
        self.name = name
        self.rows = rows
        self.fixed: dict[str, np.ndarray] = {}
        self.ragged: dict[str, _RaggedColumn] = {}
        self.ready: dict[str, np.ndarray] = {}
        self.consumed: dict[str, np.ndarray] = {}
        self.leased: dict[str, np.ndarray] = {}  # True where a row is out on lease (made by a consumer's first lease)
        self.completed = np.zeros(rows, dtype=bool)  # set by puts; unfinished rollouts are False
        self.age = np.zeros(rows, dtype=np.int64)  # times a row was put unfinished
        self.dropped = np.zeros(rows, dtype=bool)  # expired as stale under "drop": settled until rewritten
        self.version_first = np.full(rows, -1, dtype=np.int64)  # oldest policy version in a row, -1: unwritten
        self.version_last = np.full(rows, -1, dtype=np.int64)  # newest policy version in a row
        self.segments: dict[int, list[tuple[int, int]]] = {}  # row -> (items, version) per appended segment
        self.segment_columns: dict[int, tuple[str, ...]] = {}  # row -> the segmented columns it appends to

    def ready_of(self, name: str) -> np.ndarray:
        """The readiness bits of a column (created empty on first use)."""
        if name not in self.ready:
            self.ready[name] = np.zeros(self.rows, dtype=bool)
        return self.ready[name]

    def consumed_of(self, consumer: str) -> np.ndarray:
        """The consumption bits of a consumer (created empty on first use)."""
        if consumer not in self.consumed:
            self.consumed[consumer] = np.zeros(self.rows, dtype=bool)
        return self.consumed[consumer]

    def consumed_view(self, consumer: str) -> np.ndarray:
        """The consumption bits of a consumer to read: all False, and not kept, for one that consumed nothing
        here (a get, even a refused one, leaves no bits behind; a claim makes them)."""
        bits = self.consumed.get(consumer)
        return np.zeros(self.rows, dtype=bool) if bits is None else bits

    def unconsume(self, rows: np.ndarray) -> None:
        """Give ``rows`` back to every consumer unconsumed (a consumer with no bits here has consumed none)."""
        for bits in self.consumed.values():
            bits[rows] = False

    def leased_of(self, consumer: str) -> np.ndarray:
        """The lease bits of a consumer (created empty on first use): one byte a row, and none at all
        for a consumer that never leases (most), where a lease id per row cost eight for every consumer."""
        if consumer not in self.leased:
            self.leased[consumer] = np.zeros(self.rows, dtype=bool)
        return self.leased[consumer]

    def leased_rows(self, consumer: str) -> int:
        """Rows out on lease to ``consumer`` (no bits made for a consumer that never leased)."""
        bits = self.leased.get(consumer)
        return 0 if bits is None else int(np.count_nonzero(bits))

    def consumed_rows(self, consumer: str) -> int:
        """Rows ``consumer`` has consumed (no bits made for a consumer that never read here)."""
        bits = self.consumed.get(consumer)
        return 0 if bits is None else int(np.count_nonzero(bits))

    def release(self, consumer: str, rows: np.ndarray) -> None:
        """Take ``rows`` off ``consumer``'s lease (a clear since dropped its bits: nothing to take)."""
        bits = self.leased.get(consumer)
        if bits is not None:
            bits[rows] = False

    def write(self, column: Column, rows: np.ndarray, value: np.ndarray | Packed | Padded) -> None:
        """Store a column's data for ``rows`` (already checked); readiness is flipped by the caller."""
        if column.ragged:
            if column.name not in self.ragged:
                self.ragged[column.name] = _RaggedColumn(column, self.rows)
            self.ragged[column.name].write(rows, cast(Packed | Padded, value))  # a ragged column's checked values
        else:
            if column.name not in self.fixed:
                make = np.empty if column.dtype == OBJECT else np.zeros  # object: None in every row
                self.fixed[column.name] = make((self.rows, *column.shape), dtype=column.dtype)
            self.fixed[column.name][rows] = value

    def extend(self, column: Column, row: int, values: np.ndarray) -> None:
        """Append one segment's items to a segmented column of ``row`` (already checked)."""
        if column.name not in self.ragged:
            self.ragged[column.name] = _RaggedColumn(column, self.rows)
        self.ragged[column.name].extend(row, values)

    def stamp(self, rows: np.ndarray, version: np.ndarray, replace: np.ndarray) -> None:
        """Record that ``version`` (one per row) wrote ``rows``: the span restarts where ``replace``
        (a row never written, or a finished row overwritten), else it widens."""
        first, last = self.version_first[rows], self.version_last[rows]
        replace = replace | (first < 0)
        self.version_first[rows] = np.where(replace, version, np.minimum(first, version))
        self.version_last[rows] = np.where(replace, version, np.maximum(last, version))

    def segments_of(self, rows: np.ndarray) -> tuple[Packed, Packed]:
        """Per row: the item counts of its segments and their versions (rows never appended to: none)."""
        counts = np.array([len(self.segments.get(int(r), ())) for r in rows], dtype=np.int64)
        pairs = [pair for r in rows for pair in self.segments.get(int(r), ())]
        table = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        return Packed(table[:, 0].copy(), counts), Packed(table[:, 1].copy(), counts)

    def reset_rows(self, rows: np.ndarray) -> None:
        """Forget ``rows``: no cell ready, nobody has consumed them, no versions, no segments (their
        prompt goes back to the rollout stage; ragged items are abandoned until the partition is cleared)."""
        for bits in (*self.ready.values(), *self.consumed.values()):
            bits[rows] = False
        for column in self.ragged.values():
            column.lengths[rows] = 0
        self.completed[rows] = False
        self.age[rows] = 0
        self.dropped[rows] = False
        self.version_first[rows] = -1
        self.version_last[rows] = -1
        for row in rows.tolist():
            self.segments.pop(row, None)
            self.segment_columns.pop(row, None)

    def record_lengths(self, column: Column, rows: np.ndarray, lengths: np.ndarray) -> None:
        """Keep only the row lengths of a ragged column (a dock that holds metadata, not data)."""
        if column.name not in self.ragged:
            self.ragged[column.name] = _RaggedColumn(column, self.rows)
        self.ragged[column.name].record(rows, lengths)

    def read(self, column: Column, rows: np.ndarray) -> np.ndarray | Packed:
        """A copy of a column's data for ``rows``, in their order."""
        if column.ragged:
            return self.ragged[column.name].read(rows)
        return self.fixed[column.name][rows]

    def eligible(
        self, consumer: str, columns: list[str], unfinished: bool = False, oldest: int | None = None
    ) -> np.ndarray:
        """Rows whose ``columns`` are all ready, not consumed by ``consumer``, not leased to it,
        completed (or, with ``unfinished``, not completed), and no older than version ``oldest``."""
        mask = ~self.consumed_view(consumer)
        if (held := self.leased.get(consumer)) is not None:
            mask &= ~held
        mask &= ~self.completed if unfinished else self.completed
        if oldest is not None:
            mask &= self.version_first >= oldest
        for name in columns:
            mask &= self.ready_of(name)
        return np.flatnonzero(mask)

    def remaining(self, consumer: str) -> int:
        """Rows ``consumer`` has not consumed (leased ones included)."""
        return self.rows - self.consumed_rows(consumer)

    def clear(self) -> None:
        """Forget all data and bits."""
        self.completed[:] = False
        self.age[:] = 0
        self.dropped[:] = False
        self.version_first[:] = -1
        self.version_last[:] = -1
        self.segments.clear()
        self.segment_columns.clear()
        self.fixed.clear()
        self.ragged.clear()
        self.ready.clear()
        self.consumed.clear()
        self.leased.clear()
