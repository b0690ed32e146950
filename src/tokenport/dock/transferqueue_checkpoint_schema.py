"""The TransferQueue adapter's bookkeeping as a persisted document (``transferqueue.json``) and back.

A dock checkpoint holds the data; this document holds what the adapter keeps beside it: per
partition its slots and global indexes (pre-allocated, active), fields (dtype, shapes, the dock
column and layout kind), tags, keys and each task's consumption and reset consumer; the index pool
(reusable indexes, counter), the reset counter and which dock column holds each (field, kind). It is
read through the typed schema layer, and `restored` checks what the types cannot (every index owned
by one partition or the pool, keys and slots of live samples only...), so a damaged or inconsistent
document is one CorruptStoreError naming the file and field, before anything live changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._schema import Count, Document, Positive, Text, decode
from ..errors import ConfigError, CorruptStoreError
from .checkpoint_values import json_problem
from .transferqueue_state import Field, Indexes, TQPartition

__all__ = ["FORMAT", "Bookkeeping", "Metadata", "Restored", "bookkeeping_of", "restored"]

FORMAT: Literal["tokenport.transferqueue-checkpoint/1"] = "tokenport.transferqueue-checkpoint/1"
_REMEDY = "the checkpoint is damaged: load an earlier one, or start afresh"
_LAYOUTS = ("scalar", "ragged", "tensors", "python", "mixed")


class Metadata(Document, frozen=True, kw_only=True):
    """``metadata.json``, TransferQueue's keys: whether the data is saved (always, the dock is the
    storage), and the user's own JSON values."""

    storage_saved: bool
    user_metadata: dict[str, Any]


class KindEntry(Document, frozen=True, kw_only=True):
    """How a field's samples are laid out on the dock: the layout, the torch dtype (tensor layouts),
    the per-item shape (ragged)."""

    layout: Literal["scalar", "ragged", "tensors", "python", "mixed"]
    dtype: Text | None = None
    shape: list[Count] | None = None

    def __post_init__(self) -> None:
        tensor = self.layout in ("scalar", "ragged", "tensors")
        if (self.dtype is not None) != tensor or (self.shape is not None) != (self.layout == "ragged"):
            raise ValueError(f"kind: layout {self.layout!r} does not go with dtype {self.dtype!r}, shape {self.shape}")
        if self.dtype is not None:
            _torch_dtype(self.dtype)


class FieldEntry(Document, frozen=True, kw_only=True):
    """One field of a partition: TransferQueue's field schema and where the dock holds it."""

    name: Text
    column: Text
    kind: KindEntry
    indexes: list[Count]
    dtype: Text | None = None
    shape: list[Count] | None = None
    is_nested: bool | None = None
    is_non_tensor: bool = False
    per_sample: list[tuple[Count, list[Count]]] = []

    def __post_init__(self) -> None:
        if self.dtype is not None:
            _torch_dtype(self.dtype)
        _unique(self.indexes, f"fields: {self.name!r} indexes")
        if not {i for i, _ in self.per_sample} <= set(self.indexes):
            raise ValueError(f"fields: {self.name!r} per_sample names samples the field does not have")


class PartitionEntry(Document, frozen=True, kw_only=True):
    """One partition: rows (dock slots), the slot of each active global index, pre-allocated indexes,
    fields, tags, keys, and per task the consumed indexes and the dock consumer it fetches as."""

    name: Text
    rows: Positive
    next_slot: Count
    slots: list[tuple[Count, Count]]
    active: list[Count] = []  # sets in their iteration order, which decides the order indexes are reused
    owned: list[Count] = []
    pre_allocated: list[Count] = []
    fields: list[FieldEntry] = []
    registered: list[Text] = []
    custom_meta: list[tuple[Count, dict[str, Any]]] = []
    keys: list[tuple[Text, Count]] = []
    consumed: dict[str, list[Count]] = {}
    consumer_of: dict[str, Text] = {}

    def __post_init__(self) -> None:
        where = f"partitions: {self.name!r}"
        if self.next_slot > self.rows:
            raise ValueError(f"{where} next_slot {self.next_slot} is past its {self.rows} rows")
        active = [i for i, _ in self.slots]
        _unique(active, f"{where} slots (indexes)")
        _unique([s for _, s in self.slots], f"{where} slots")
        if any(s >= self.next_slot for _, s in self.slots):
            raise ValueError(f"{where} slots: a slot at or past next_slot {self.next_slot}")
        if sorted(self.active) != sorted(active) or sorted(self.owned) != sorted(active + self.pre_allocated):
            raise ValueError(f"{where} active/owned: not the indexes of the slots (and pre_allocated)")
        _unique(self.pre_allocated, f"{where} pre_allocated")
        if set(self.pre_allocated) & set(active):
            raise ValueError(f"{where} pre_allocated: an index that is also active")
        _unique([f.name for f in self.fields], f"{where} fields")
        _unique(self.registered, f"{where} registered")
        for entry in self.fields:
            if entry.name not in self.registered or not entry.indexes or not set(entry.indexes) <= set(active):
                raise ValueError(f"{where} fields: {entry.name!r} is unregistered, empty, or has inactive samples")
        _unique([i for i, _ in self.custom_meta], f"{where} custom_meta")
        _unique([k for k, _ in self.keys], f"{where} keys")
        _unique([i for _, i in self.keys], f"{where} keys (indexes)")
        if not {i for _, i in self.keys} <= set(active):
            raise ValueError(f"{where} keys: a key of an inactive sample")
        for task, indexes in self.consumed.items():
            _unique(indexes, f"{where} consumed[{task!r}]")
            if not set(indexes) <= set(active):
                raise ValueError(f"{where} consumed[{task!r}]: an inactive sample")
        if not set(self.consumer_of) <= set(self.consumed):
            raise ValueError(f"{where} consumer_of: a task that has consumed nothing")


class ColumnOf(Document, frozen=True, kw_only=True):
    """The dock column holding field ``field`` of ``kind``."""

    field: Text
    kind: KindEntry
    column: Text


class Bookkeeping(Document, frozen=True, kw_only=True):
    """``transferqueue.json``: the adapter's bookkeeping (see the module docstring)."""

    format: Literal["tokenport.transferqueue-checkpoint/1"]
    partitions: list[PartitionEntry]
    reusable: list[Count]
    counter: Count
    resets: Count
    columns: list[ColumnOf]

    def __post_init__(self) -> None:
        _unique([p.name for p in self.partitions], "partitions")
        owned = list(self.reusable)
        for part in self.partitions:
            owned += [i for i, _ in part.slots] + list(part.pre_allocated)
        if sorted(owned) != list(range(self.counter)):
            raise ValueError(
                f"counter/reusable/partitions: the indexes below counter {self.counter} are not each owned by "
                "exactly one partition or the reusable pool"
            )
        _unique(
            [(c.field, c.kind.layout, c.kind.dtype, str(c.kind.shape)) for c in self.columns], "columns (field, kind)"
        )
        _unique([c.column for c in self.columns], "columns (dock column)")


@dataclass(frozen=True)
class Restored:
    """The adapter's bookkeeping built from a ``Bookkeeping`` document."""

    indexes: Indexes
    partitions: dict[str, TQPartition]
    resets: int
    column_of: dict[tuple[str, tuple[Any, ...]], str]


def bookkeeping_of(
    indexes: Indexes, partitions: dict[str, TQPartition], resets: int, column_of: dict[tuple[str, tuple], str]
) -> Bookkeeping:
    """The live bookkeeping as a document; a tag that is not JSON data is refused (ConfigError naming it)."""
    entries = []
    for part in partitions.values():
        for index, meta in part.custom_meta.items():
            if (problem := json_problem(meta)) is not None:
                key = part.key_of.get(index)
                raise ConfigError(
                    f"partition {part.name!r} sample {index}{f' (key {key!r})' if key else ''}: its tag (custom_meta) "
                    f"holds {problem}, which is not JSON data; a checkpoint keeps tags as JSON only (it never "
                    "pickles): set JSON tags, or clear that sample before saving"
                )
        entries.append(
            PartitionEntry(
                name=part.name,
                rows=part.rows,
                next_slot=part.next_slot,
                slots=list(part.slot_of.items()),
                active=list(part.active),
                owned=list(indexes.by_partition.get(part.name, ())),
                pre_allocated=list(part.pre_allocated),
                fields=[_field_entry(name, f) for name, f in part.fields.items()],
                registered=sorted(part.registered),
                custom_meta=sorted(part.custom_meta.items()),
                keys=list(part.keys.items()),
                consumed={task: list(done) for task, done in part.consumed.items()},
                consumer_of=dict(part.consumer_of),
            )
        )
    return Bookkeeping(
        format=FORMAT,
        partitions=entries,
        reusable=list(indexes.reusable),
        counter=indexes.counter,
        resets=resets,
        columns=[ColumnOf(field=f, kind=_kind_entry(k), column=c) for (f, k), c in column_of.items()],
    )


def restored(data: bytes, path: str, dock_partitions: dict[str, int], ready: Any) -> Restored:
    """The bookkeeping in ``data`` (the file ``path``), checked against the dock checkpoint's
    partitions (name -> rows) and ``ready(partition, column, slots)`` (whether those rows hold data):
    a CorruptStoreError naming ``path`` and the field if anything disagrees."""
    document = decode(data, Bookkeeping, where=path, remedy=_REMEDY, error=CorruptStoreError)

    def refuse(problem: str) -> CorruptStoreError:
        return CorruptStoreError(f"{path}: {problem}; {_REMEDY}")

    if {p.name: p.rows for p in document.partitions} != dock_partitions:
        raise refuse("partitions: not the dock checkpoint's partitions (names and rows)")
    indexes = Indexes()
    indexes.reusable, indexes.counter = list(document.reusable), document.counter
    partitions: dict[str, TQPartition] = {}
    for entry in document.partitions:
        part = TQPartition(entry.name, entry.rows)
        part.next_slot = entry.next_slot
        part.slot_of = dict(entry.slots)
        for index, slot in entry.slots:
            part.global_of[slot] = index
        part.active = set(entry.active)
        part.pre_allocated = set(entry.pre_allocated)
        if entry.owned:
            indexes.by_partition[entry.name] = set(entry.owned)
        for item in entry.fields:
            slots = np.array([part.slot_of[i] for i in item.indexes], dtype=np.int64)
            if not ready(entry.name, item.column, slots):
                raise refuse(
                    f"partitions: {entry.name!r} fields: {item.name!r} names samples the dock holds no data of"
                )
            part.fields[item.name] = Field(
                column=item.column,
                kind=_kind(item.kind),
                indexes=set(item.indexes),
                dtype=None if item.dtype is None else _torch_dtype(item.dtype),
                shape=None if item.shape is None else tuple(item.shape),
                is_nested=item.is_nested,
                is_non_tensor=item.is_non_tensor,
                per_sample={i: tuple(s) for i, s in item.per_sample},
            )
        part.registered = set(entry.registered)
        part.custom_meta = {i: dict(meta) for i, meta in entry.custom_meta}
        part.keys = dict(entry.keys)
        part.key_of = {i: k for k, i in entry.keys}
        part.consumed = {task: set(done) for task, done in entry.consumed.items()}
        part.consumer_of = dict(entry.consumer_of)
        partitions[entry.name] = part
    column_of = {(c.field, _kind(c.kind)): c.column for c in document.columns}
    return Restored(indexes, partitions, document.resets, column_of)


def _field_entry(name: str, field: Field) -> FieldEntry:
    return FieldEntry(
        name=name,
        column=field.column,
        kind=_kind_entry(field.kind),
        indexes=sorted(field.indexes),
        dtype=None if field.dtype is None else _dtype_name(field.dtype),
        shape=None if field.shape is None else list(field.shape),
        is_nested=field.is_nested,
        is_non_tensor=field.is_non_tensor,
        per_sample=[(i, list(s)) for i, s in sorted(field.per_sample.items())],
    )


def _kind_entry(kind: tuple[Any, ...]) -> KindEntry:
    """A kind tuple (``("ragged", torch.float32, (2,))``, ``("python",)``...) as its entry."""
    return KindEntry(
        layout=kind[0],
        dtype=_dtype_name(kind[1]) if len(kind) > 1 else None,
        shape=list(kind[2]) if len(kind) > 2 else None,
    )


def _kind(entry: KindEntry) -> tuple[Any, ...]:
    """The kind tuple of an entry (``_kind_entry``'s inverse)."""
    if entry.dtype is None:
        return (entry.layout,)
    dtype = _torch_dtype(entry.dtype)
    return (entry.layout, dtype) if entry.shape is None else (entry.layout, dtype, tuple(entry.shape))


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _torch_dtype(name: str) -> Any:
    """The torch dtype named ``name`` ("float32", "bfloat16"...), or ValueError."""
    import torch

    dtype = getattr(torch, name, None) if name.isidentifier() else None
    if not isinstance(dtype, torch.dtype) or _dtype_name(dtype) != name:
        raise ValueError(f"dtype: {name!r} is not a torch dtype")
    return dtype


def _unique(values: list, field: str) -> None:
    if len(set(values)) != len(values):
        raise ValueError(f"{field}: a value appears twice")
