"""The TransferQueue adapter's bookkeeping: TransferQueue's controller state (global indexes, field
schemas, tags, keys, consumption) mirrored per partition, and the dock sampler that serves fetches."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError
from .samplers import SampleRequest

__all__ = ["Field", "Indexes", "LowestGlobal", "TQPartition"]


class Indexes:
    """Global indexes per partition, allocated and reused exactly as TransferQueue's controller does."""

    def __init__(self) -> None:
        self.by_partition: dict[str, set[int]] = defaultdict(set)
        self.reusable: list[int] = []
        self.counter = 0

    def allocate(self, partition: str, count: int) -> list[int]:
        """``count`` indexes for ``partition``: released ones first (oldest first), then new ones."""
        indexes = self.reusable[:count]
        del self.reusable[:count]
        if len(indexes) < count:
            start = self.counter
            self.counter += count - len(indexes)
            indexes.extend(range(start, self.counter))
        self.by_partition[partition].update(indexes)
        return indexes

    def release_partition(self, partition: str) -> None:
        """Give all of a partition's indexes back to the pool."""
        self.reusable.extend(self.by_partition.pop(partition, set()))

    def release(self, partition: str, indexes: list[int]) -> None:
        """Give ``indexes`` of ``partition`` back to the pool."""
        owned = self.by_partition.get(partition)
        if owned is None:
            return
        owned.difference_update(indexes)
        self.reusable.extend(indexes)
        if not owned:
            self.by_partition.pop(partition, None)

    def of(self, partition: str) -> list[int]:
        """The partition's indexes, pre-allocated ones included, in set order (as TransferQueue lists them)."""
        return list(self.by_partition.get(partition, set()).copy())


@dataclass
class Field:
    """One field's schema in one partition (TransferQueue's FieldMeta), and where the dock holds it:
    ``column`` (a dock column, chosen per partition) and ``kind`` (how its samples are laid out there:
    the adapter's signature of dtype and layout, which a live partition keeps)."""

    column: str
    kind: tuple[Any, ...]
    indexes: set[int] = field(default_factory=set)
    dtype: Any = None
    shape: tuple[int, ...] | None = None
    is_nested: bool | None = None
    is_non_tensor: bool = False
    per_sample: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def update(self, schema: dict[str, Any], indexes: list[int]) -> None:
        """Record a put's schema for ``indexes``; differing shapes make the field nested."""
        if self.dtype is None:
            self.dtype = schema["dtype"]
        elif schema["dtype"] is not None and self.dtype != schema["dtype"]:
            raise ConfigError(f"dtype mismatch: existing={self.dtype}, incoming={schema['dtype']}")
        if schema["is_non_tensor"]:  # Python values: no shape (TransferQueue keeps none)
            if not self.indexes:
                self.is_nested, self.shape, self.is_non_tensor, self.per_sample = False, None, True, {}
            self.indexes.update(indexes)
            return
        if not self.indexes:  # new (or emptied) field
            self.is_nested, self.shape = schema["is_nested"], tuple(schema["shape"])  # nested: the first row's
            self.is_non_tensor, self.per_sample = False, {}
        if schema["is_nested"]:
            if self.is_nested is False:
                if self.shape is not None:
                    self.per_sample.update(dict.fromkeys(self.indexes, self.shape))
                self.is_nested, self.shape = True, None
            self.per_sample.update({i: tuple(s) for i, s in zip(indexes, schema["per_sample_shapes"], strict=True)})
        else:
            shape = tuple(schema["shape"])
            if self.is_nested:
                self.per_sample.update(dict.fromkeys(indexes, shape))
            elif self.indexes and self.shape is not None and self.shape != shape:
                self.per_sample.update(dict.fromkeys(self.indexes, self.shape))
                self.per_sample.update(dict.fromkeys(indexes, shape))
                self.is_nested, self.shape = True, None
        self.indexes.update(indexes)

    def remove(self, indexes: list[int]) -> None:
        """Forget ``indexes``; a nested field whose remaining shapes agree becomes plain again."""
        for i in indexes:
            self.per_sample.pop(i, None)
            self.indexes.discard(i)
        if self.is_nested and self.indexes:
            shapes = set(self.per_sample.values())
            if len(shapes) == 1:
                self.is_nested, self.shape = False, next(iter(shapes))
                self.per_sample.clear()

    def schema(self, indexes: list[int]) -> dict[str, Any]:
        """The field as a ``BatchMeta.field_schema`` entry for the samples ``indexes``."""
        out: dict[str, Any] = {
            "dtype": self.dtype,
            "shape": None if self.shape is None else list(self.shape),
            "is_nested": self.is_nested,
            "is_non_tensor": self.is_non_tensor,
        }
        if self.is_nested and self.per_sample:
            out["per_sample_shapes"] = [None if (s := self.per_sample.get(i)) is None else list(s) for i in indexes]
        return out


@dataclass
class TQPartition:
    """A TransferQueue partition on the dock: slots for its global indexes, fields, tags, keys."""

    name: str
    rows: int
    slot_of: dict[int, int] = field(default_factory=dict)
    global_of: np.ndarray = field(init=False)  # global index per slot, -1: free or retired
    next_slot: int = 0
    pre_allocated: set[int] = field(default_factory=set)
    active: set[int] = field(default_factory=set)
    fields: dict[str, Field] = field(default_factory=dict)
    registered: set[str] = field(default_factory=set)  # every field ever put (TransferQueue keeps them)
    custom_meta: dict[int, dict[str, Any]] = field(default_factory=dict)
    keys: dict[str, int] = field(default_factory=dict)  # kv key -> global index
    key_of: dict[int, str] = field(default_factory=dict)
    consumed: dict[str, set[int]] = field(default_factory=dict)  # per task, the indexes fetch gave it
    consumer_of: dict[str, str] = field(default_factory=dict)  # per reset task, the dock consumer it fetches as

    def __post_init__(self) -> None:
        self.global_of = np.full(self.rows, -1, dtype=np.int64)

    def activate(self, count: int) -> list[int]:
        """Pre-allocated indexes first (TransferQueue's ``activate_pre_allocated_indexes``)."""
        if len(self.pre_allocated) < count:
            taken = list(self.pre_allocated)
        else:
            taken = sorted(self.pre_allocated)[:count]
        self.active.update(taken)
        self.pre_allocated.difference_update(taken)
        return taken

    def check_room(self, count: int) -> None:
        """Refuse ``count`` new samples when the partition's slots cannot hold them."""
        if self.next_slot + count > self.rows:
            raise ConfigError(
                f"partition {self.name!r} has used {self.next_slot} of its {self.rows} slots and cannot take "
                f"{count} more samples: clear_partition it, or raise TransferQueueConfig.partition_rows"
            )

    def give_slots(self, indexes: list[int]) -> None:
        """Slots for newly activated indexes (room checked by ``check_room``)."""
        for index in indexes:
            self.slot_of[index] = self.next_slot
            self.global_of[self.next_slot] = index
            self.next_slot += 1

    def ready(self, indexes: list[int], names: list[str]) -> np.ndarray:
        """1 per index whose ``names`` are all produced (TransferQueue's production status)."""
        out = np.zeros(len(indexes), dtype=np.int8)
        known = [n for n in names if n in self.registered]
        if known:
            for k, index in enumerate(indexes):
                out[k] = all(n in self.fields and index in self.fields[n].indexes for n in known)
        return out


@dataclass(frozen=True)
class LowestGlobal:
    """Dock sampler: the ``count`` eligible slots of the lowest global indexes, or wait (TransferQueue's
    fetch never returns a short batch)."""

    global_of: np.ndarray
    trusted = True

    def __call__(self, request: SampleRequest) -> tuple[np.ndarray, np.ndarray] | None:
        globals_ = self.global_of[request.eligible]
        live = globals_ >= 0
        if int(live.sum()) < request.count:
            return None
        slots = request.eligible[live][np.argsort(globals_[live], kind="stable")[: request.count]]
        return slots, slots
