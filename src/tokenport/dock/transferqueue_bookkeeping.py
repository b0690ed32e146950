"""The TransferQueue adapter's bookkeeping over a dock: partitions and their slots, global indexes, and
the dock column that holds each field's samples (`Bookkeeping`, the base of `TransferQueueClient`).

Every method here runs under the client's lock (its callers hold it)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..errors import ConfigError, InputDataError
from .api import DockAPI
from .arguments import python_values
from .transferqueue_config import TransferQueueConfig
from .transferqueue_meta import checked_batch_meta, partition_name
from .transferqueue_state import Indexes, TQPartition
from .transferqueue_values import (
    MIXED,
    TENSOR_KINDS,
    Value,
    describe_kind,
    mixed_value,
    per_sample,
    renamed,
    select_rows,
)

__all__ = ["READER", "Bookkeeping"]

# the DockAPI members the adapter uses (a dock needs these, not the whole protocol)
_USED = ("columns", "consumers", "n_samples_per_prompt", "add_column", "add_consumer", "add_partition",
         "drop_partition", "put", "get", "nack")  # fmt: skip
READER = "transferqueue-reader-"  # consumer names under which get_data reads (never consumes)


class Bookkeeping:
    """What the adapter knows besides the dock's data: partitions (slots, indexes, fields), the index
    pool, consumption resets, and per (field, kind) its dock column."""

    def __init__(self, dock: DockAPI, config: TransferQueueConfig | None = None) -> None:
        if missing := [name for name in _USED if not hasattr(dock, name)]:
            raise ConfigError(f"dock={dock!r:.60} lacks the DockAPI members {missing}: pass a Dock or RayDock")
        self.dock = dock
        self.config = config or TransferQueueConfig()
        self._lock = threading.RLock()
        self._indexes = Indexes()
        self._partitions: dict[str, TQPartition] = {}
        self._resets = 0  # consumption resets so far (each names a fresh dock consumer)
        self._column_of: dict[tuple[str, tuple[Any, ...]], str] = {}  # (field, kind) -> its dock column
        self.owns_dock = False  # whether the adapter made the dock (a load may then shut it down)

    def _new_prompts(self) -> int:
        """Prompts of a new partition: ``partition_rows`` rounded up to whole prompts of the dock."""
        return -(-self.config.partition_rows // self.dock.n_samples_per_prompt)

    def _with_room(self, partition_id: str, count: int) -> TQPartition:
        """The partition ``partition_id`` (created if new) once it is known to have room for ``count``
        new samples: a refused call creates no partition and allocates no index."""
        part = self._partitions.get(partition_name(partition_id))
        if part is not None:
            part.check_room(count)
            return part
        rows = self._new_prompts() * self.dock.n_samples_per_prompt
        if count > rows:
            raise ConfigError(
                f"partition {partition_id!r} can hold {rows} samples, not {count}: put fewer, or raise "
                "TransferQueueConfig.partition_rows"
            )
        return self._create(partition_id)

    def _create(self, partition_id: str) -> TQPartition:
        prompts = self._new_prompts()
        self.dock.add_partition(partition_name(partition_id), prompts)
        part = TQPartition(partition_id, prompts * self.dock.n_samples_per_prompt)
        if self.config.pre_allocated:
            part.pre_allocated.update(self._indexes.allocate(partition_id, self.config.pre_allocated))
        self._partitions[partition_id] = part
        return part

    def _allocate(self, part: TQPartition, count: int) -> list[int]:
        """``count`` indexes for new samples of ``part`` (pre-allocated first, then the pool)."""
        part.check_room(count)
        indexes = part.activate(count)
        if len(indexes) < count:
            indexes.extend(self._indexes.allocate(part.name, count - len(indexes)))
        part.give_slots([i for i in indexes if i not in part.slot_of])
        part.active.update(indexes)
        return indexes

    def _slots_by_partition(self, metadata: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Positions in ``metadata`` and dock slots, grouped by partition; unknown samples refused."""
        groups: dict[str, tuple[list[int], list[int]]] = {}
        checked_batch_meta(metadata)
        pairs = list(zip(metadata.global_indexes, metadata.partition_ids, strict=True))
        if len(set(pairs)) != len(pairs):
            index, pid = next(pair for k, pair in enumerate(pairs) if pair in pairs[:k])
            raise ConfigError(f"metadata names sample {index} of partition {pid!r} twice: each sample once")
        for position, (index, pid) in enumerate(pairs):
            part = self._partitions.get(pid) if isinstance(pid, str) else None
            if part is None or index not in part.slot_of or part.global_of[part.slot_of[index]] != index:
                raise ConfigError(
                    f"sample {index} of partition {pid!r} does not exist (cleared, or never put): get a fresh BatchMeta"
                )
            positions, slots = groups.setdefault(pid, ([], []))
            positions.append(position)
            slots.append(part.slot_of[index])
        return {pid: (np.asarray(p), np.asarray(s)) for pid, (p, s) in groups.items()}

    def _placed(self, partition_id: str, converted: dict[str, Value]) -> dict[str, tuple[str, bool]]:
        """Per field, the dock column that holds it in ``partition_id`` and whether its samples there are
        mixed (per-sample values): the column its samples there use, or (a field with no samples there:
        a new partition, or one cleared) the column for its kind. A field with samples keeps their dtype,
        as TransferQueue's controller keeps it (another dtype is a "dtype mismatch" there, refused here
        naming what to do); samples of the same dtype (or Python values) in another layout join them as
        TransferQueue's storage holds them, per sample."""
        part = self._partitions.get(partition_id)
        out = {}
        for name, value in converted.items():
            held = None if part is None else part.fields.get(name)
            if held is None or not held.indexes:
                out[name] = (self._column_for(name, value), False)
                continue
            incoming = value.kind[1] if value.kind[0] in TENSOR_KINDS else None
            if held.dtype is not None and incoming is not None and held.dtype != incoming:
                have = str(held.dtype).removeprefix("torch.")
                raise InputDataError(
                    f"field {name!r} comes as {describe_kind(value.kind)}, but its samples in partition "
                    f"{partition_id!r} are {have} (a dtype mismatch, which TransferQueue's controller "
                    f"refuses too): put it as {have}, or clear those samples (or the partition) first, "
                    "or use another partition"
                )
            if held.kind == value.kind:
                out[name] = (held.column, False)
            else:
                out[name] = (held.column if held.kind == MIXED else self._column_for(name, mixed_value(name)), True)
        return out

    def _mixing(self, pid: str, name: str, value: Value, column: str, positions: np.ndarray) -> np.ndarray:
        """The put's samples of field ``name`` as per-sample values for its mixed ``column``; the field's
        samples already in ``pid`` move there first (once), so the field reads from one column."""
        self._own(name, mixed_value(name), column)
        held = self._partitions[pid].fields[name]
        if held.kind != MIXED:
            part = self._partitions[pid]
            slots = np.array([part.slot_of[i] for i in sorted(held.indexes)], dtype=np.int64)
            reader = f"{READER}{threading.get_ident()}"
            if reader not in self.dock.consumers:
                self.dock.add_consumer(reader)
            batch = self.dock.get(reader, [held.column], len(slots), pid, rows=slots, timeout=0, lease=60.0)
            assert batch is not None and batch.lease_id is not None
            self.dock.nack(batch.lease_id)
            moved = per_sample(batch[held.column], held.kind)
            self.dock.put(pid, {column: python_values(moved, len(slots), f"field {name!r}")}, slots, overwrite=True)
            held.column, held.kind = column, MIXED
        samples = per_sample(select_rows(value.rows, positions), value.kind)
        return python_values(samples, len(positions), f"field {name!r}")

    def _column_for(self, name: str, value: Value) -> str:
        """The dock column that holds field ``name`` of ``value.kind``: the field's name for the first
        kind (or a dock column of that name and spec made elsewhere), ``name~1``, ``name~2``... for others."""
        key = (name, value.kind)
        if key in self._column_of:
            return self._column_of[key]
        existing = self.dock.columns
        owned = set(self._column_of.values())
        for k in range(len(owned) + 2):
            candidate = name if k == 0 else f"{name}~{k}"
            have = existing.get(candidate)
            if candidate not in owned and (have is None or have == renamed(value.column, candidate)):
                return candidate
        raise AssertionError("unreachable: more candidates than owned names")

    def _own(self, name: str, value: Value, column: str) -> None:
        """Record that ``column`` holds field ``name`` of ``value.kind`` (adding it to the dock if new)."""
        self._column_of.setdefault((name, value.kind), column)
        if column not in self.dock.columns:
            self.dock.add_column(renamed(value.column, column))
