"""TransferQueue's ``TransferQueueClient`` over a dock: put, get_meta, get_data, clear, status, key-value
and their asyncio twins (see `tokenport.dock.transferqueue` for how its concepts map onto the dock)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from typing import Any

from ..errors import ConfigError, DockTimeout, InputDataError
from .arguments import int64
from .transferqueue_bookkeeping import READER, Bookkeeping
from .transferqueue_config import TransferQueueTimeout
from .transferqueue_meta import batch_meta, checked_batch_meta, kv_keys, names_of, partition_name
from .transferqueue_state import Field, LowestGlobal, TQPartition
from .transferqueue_values import Value, column_value, gathered, row_list, select_rows

__all__ = ["TransferQueueClient"]

_MODES = ("fetch", "force_fetch", "insert")
_RESET = "transferqueue-reset-"  # consumer names under which a task fetches after reset_consumption


class TransferQueueClient(Bookkeeping):
    """TransferQueue's ``TransferQueueClient`` calls over a ``DockAPI``: put, get_meta, get_data, clear."""

    # -- get_meta --------------------------------------------------------------------------------

    def get_meta(
        self,
        data_fields: list[str],
        batch_size: int,
        partition_id: str,
        mode: str = "fetch",
        task_name: str | None = None,
        sampling_config: dict[str, Any] | None = None,
    ) -> Any:
        """A ``BatchMeta``: new samples (``insert``), ready samples ``task_name`` has not consumed, which
        become consumed (``fetch``), or every sample of the partition (``force_fetch``)."""
        if mode not in _MODES:
            raise ConfigError(f"mode={mode!r} is invalid: pass one of {_MODES}")
        if sampling_config is not None and not isinstance(sampling_config, dict):
            raise ConfigError(f"sampling_config={sampling_config!r:.60} must be a dict or None")
        # sampling_config goes to TransferQueue's sampler as keywords; SequentialSampler ignores them
        fields = names_of(data_fields, "data_fields")
        partition_name(partition_id)
        if mode == "insert":
            int64("batch_size", batch_size)
            with self._lock:
                part = self._with_room(partition_id, batch_size)
                indexes = self._allocate(part, batch_size)
                return batch_meta(part, indexes, fields, mode)
        if mode == "force_fetch":
            with self._lock:
                part_or_none = self._partitions.get(partition_id)
                if part_or_none is None:
                    raise ConfigError(f"Partition {partition_id} not found: put data into it first")
                return batch_meta(part_or_none, self._indexes.of(partition_id), fields, mode)
        return self._fetch(fields, batch_size, partition_id, task_name)

    def _fetch(self, fields: list[str], batch_size: int, partition_id: str, task_name: str | None) -> Any:
        """``get_meta(mode="fetch")``: the lowest ready global indexes ``task_name`` has not consumed, which
        become consumed; waiting up to ``get_meta_timeout`` s for them (polling mode: not at all)."""
        from transfer_queue.metadata import BatchMeta

        if not isinstance(task_name, str) or not task_name:
            raise ConfigError(f"task_name={task_name!r}: fetch needs the consuming task's name")
        if not fields:
            raise ConfigError("data_fields is empty: fetch needs the fields the task reads")
        int64("batch_size", batch_size)
        deadline = time.monotonic() + (0.0 if self.config.polling_mode else self.config.get_meta_timeout)
        while True:
            target, consumer = self._fetch_target(fields, batch_size, partition_id, task_name)
            left = deadline - time.monotonic()
            if target is not None:
                try:
                    batch = self.dock.get(
                        consumer, [target.fields[f].column for f in fields], batch_size, partition_id,
                        sampler=LowestGlobal(target.global_of), timeout=max(0.0, min(left, 0.25)),
                    )  # fmt: skip
                except DockTimeout:
                    batch = None
                if batch is not None:
                    with self._lock:
                        indexes = [int(target.global_of[s]) for s in batch.rows]
                        target.consumed.setdefault(task_name, set()).update(indexes)
                        return batch_meta(target, indexes, fields, "fetch")
            elif left > 0:
                time.sleep(min(left, 0.05))
            if time.monotonic() >= deadline:
                if self.config.polling_mode:
                    return BatchMeta.empty()
                raise TransferQueueTimeout(
                    f"task {task_name!r} waited {self.config.get_meta_timeout} s for {batch_size} samples of "
                    f"partition {partition_id!r} with fields {fields} ready; put more data, ask for fewer, or "
                    "raise TransferQueueConfig.get_meta_timeout"
                )

    def _fetch_target(
        self, fields: list[str], batch_size: int, partition_id: str, task_name: str
    ) -> tuple[TQPartition | None, str]:
        """(the partition, once it exists and knows every field in ``fields``, else None; the dock consumer
        ``task_name`` fetches under, added to the dock then); a batch larger than the partition refused."""
        with self._lock:
            target = self._partitions.get(partition_id)
            if target is not None and batch_size > target.rows:
                raise ConfigError(
                    f"batch_size={batch_size} is more than partition {partition_id!r} can hold "
                    f"({target.rows} samples): ask for fewer"
                )
            known = target is not None and all(f in target.fields for f in fields)
            consumer = task_name if target is None else target.consumer_of.get(task_name, task_name)
            if known and consumer not in self.dock.consumers:
                self.dock.add_consumer(consumer)
            return (target if known else None), consumer

    # -- put -------------------------------------------------------------------------------------

    def put(self, data: Any, metadata: Any = None, partition_id: str | None = None, data_parser: Any = None) -> Any:
        """Write ``data`` (a TensorDict) as new samples of ``partition_id``, or as fields of the samples
        of ``metadata``; returns the ``BatchMeta`` with the written fields added, ready."""
        from transfer_queue.metadata import extract_field_schema

        if data_parser is not None:
            raise ConfigError("data_parser is a SimpleStorage feature the dock does not offer: parse before put")
        converted = self.checked_data(data)  # before insert allocates: a refused put changes nothing
        schema = extract_field_schema(data)
        if metadata is None:
            if partition_id is None:
                raise ConfigError("partition_id must be provided if metadata is not given")
            partition_id = partition_name(partition_id)
        else:
            checked_batch_meta(metadata)
            if metadata.size == 0:
                raise ConfigError("metadata cannot be empty: put with partition_id= or a non-empty BatchMeta")
            if data.batch_size[0] != metadata.size:
                raise InputDataError(f"data has {data.batch_size[0]} samples but metadata {metadata.size}")
        with self._lock:
            if metadata is None:
                self._placed(str(partition_id), converted)  # refused here, before insert allocates
                metadata = self.get_meta(list(converted), data.batch_size[0], str(partition_id), mode="insert")
            groups = self._slots_by_partition(metadata)
            placed = {pid: self._placed(pid, converted) for pid in groups}  # every check before any write
            for pid, (positions, slots) in groups.items():
                columns: dict[str, Any] = {}
                for name, value in converted.items():
                    column, mixed = placed[pid][name]
                    if mixed:
                        columns[column] = self._mixing(pid, name, value, column, positions)
                    else:
                        self._own(name, value, column)
                        columns[column] = select_rows(value.rows, positions)
                self.dock.put(pid, columns, slots, overwrite=True)
                part = self._partitions[pid]
                indexes = [metadata.global_indexes[p] for p in positions]
                for name, meta in schema.items():
                    sub = dict(meta)
                    if meta["is_nested"]:
                        sub["per_sample_shapes"] = [meta["per_sample_shapes"][p] for p in positions]
                    field = part.fields.get(name)
                    if field is None or not field.indexes:  # a new (or emptied) field: the column placed for it
                        field = part.fields[name] = Field(placed[pid][name][0], converted[name].kind)
                    field.update(sub, indexes)
                    part.registered.add(name)
                for p, index in zip(positions, indexes, strict=True):
                    part.custom_meta[index] = dict(metadata.custom_meta[p])
        return metadata.add_fields(data)

    def checked_data(self, data: Any, partition_id: str | None = None) -> dict[str, Value]:
        """``data`` (a TensorDict of one batch dimension) as dock rows, checked against what the fields
        hold in ``partition_id`` (if given); InputDataError naming the field otherwise."""
        from tensordict import TensorDict

        if not isinstance(data, TensorDict):
            raise InputDataError(f"data is a {type(data).__name__}: pass a TensorDict with a batch dimension")
        if len(data.batch_size) != 1 or data.batch_size[0] == 0:
            raise InputDataError(f"data has batch size {list(data.batch_size)}: pass a TensorDict of samples (n,)")
        batch = int(data.batch_size[0])
        converted = {name: column_value(name, value, batch) for name, value in data.items()}
        if not converted:
            raise InputDataError("data has no fields: put at least one")
        if partition_id is not None:
            with self._lock:
                self._placed(partition_id, converted)
        return converted

    def set_custom_meta(self, metadata: Any) -> None:
        """Store ``metadata.custom_meta`` per sample (it travels with later BatchMetas of those samples)."""
        checked_batch_meta(metadata)
        with self._lock:
            for index, pid, meta in zip(metadata.global_indexes, metadata.partition_ids, metadata.custom_meta,
                                        strict=True):  # fmt: skip
                if (part := self._partitions.get(pid)) is not None:
                    part.custom_meta[index] = dict(meta)

    # -- get_data --------------------------------------------------------------------------------

    def get_data(self, metadata: Any) -> Any:
        """The samples of ``metadata``, its fields, in its order, as a TensorDict (nothing is consumed):
        packed as TransferQueue packs them (see ``transferqueue_values.gathered``)."""
        from tensordict import TensorDict

        if metadata is None or checked_batch_meta(metadata).size == 0 or not metadata.field_names:
            return TensorDict({}, batch_size=0)
        names = list(metadata.field_names)
        reader = f"{READER}{threading.get_ident()}"
        missing = InputDataError(
            f"samples of metadata do not all have fields {names} produced: get_meta in fetch mode (ready "
            "samples only), or put the missing fields first"
        )
        with self._lock:
            groups = self._slots_by_partition(metadata)
            if reader not in self.dock.consumers:
                self.dock.add_consumer(reader)
            held = {pid: [self._partitions[pid].fields.get(n) for n in names] for pid in groups}
        if any(field is None for fields in held.values() for field in fields):
            raise missing
        rows: dict[str, list[Any]] = {n: [None] * metadata.size for n in names}
        kinds: dict[str, set[tuple[Any, ...]]] = defaultdict(set)
        for pid, (positions, slots) in groups.items():
            fields = [field for field in held[pid] if field is not None]
            try:
                batch = self.dock.get(reader, [f.column for f in fields], len(slots), pid, rows=slots, timeout=0,
                                      lease=60.0)  # fmt: skip
            except DockTimeout:
                raise missing from None
            assert batch is not None and batch.lease_id is not None
            self.dock.nack(batch.lease_id)
            for name, field in zip(names, fields, strict=True):
                value = batch[field.column]
                kinds[name].add(field.kind)
                for position, row in zip(positions, row_list(value, field.kind), strict=True):
                    rows[name][position] = (field.kind[0], row)
        out = {name: gathered(rows[name], kinds[name], name) for name in names}
        return TensorDict(out, batch_size=metadata.size)

    # -- clear -----------------------------------------------------------------------------------

    def clear_partition(self, partition_id: str) -> None:
        """Forget a partition: its samples, consumption, tags and keys; its indexes go back to the pool."""
        if not isinstance(partition_id, str):
            raise ConfigError(f"partition_id={partition_id!r:.60} must be a string")
        with self._lock:
            if self._partitions.pop(partition_id, None) is None:
                return
            self._indexes.release_partition(partition_id)
            self.dock.drop_partition(partition_id)

    def clear_samples(self, metadata: Any) -> None:
        """Forget the samples of ``metadata`` (their slots are retired); their indexes go back to the pool."""
        if metadata is None or checked_batch_meta(metadata).size == 0:
            return
        with self._lock:
            grouped: dict[str, list[int]] = defaultdict(list)
            for pid, index in sorted(zip(metadata.partition_ids, metadata.global_indexes, strict=True)):
                grouped[pid].append(index)
            for pid, asked in grouped.items():
                part = self._partitions.get(pid)
                if part is None:
                    continue
                indexes = list(set(asked) & part.active)
                if not indexes:
                    continue
                for index in indexes:
                    part.global_of[part.slot_of.pop(index)] = -1
                    part.custom_meta.pop(index, None)
                    if (key := part.key_of.pop(index, None)) is not None:
                        del part.keys[key]
                part.active.difference_update(indexes)
                for consumed in part.consumed.values():
                    consumed.difference_update(indexes)
                for name in list(part.fields):
                    part.fields[name].remove(indexes)
                    if not part.fields[name].indexes:
                        del part.fields[name]
                self._indexes.release(pid, indexes)

    # -- status ----------------------------------------------------------------------------------

    def get_partition_list(self) -> list[str]:
        """The partitions, in creation order."""
        with self._lock:
            return list(self._partitions)

    def get_consumption_status(self, task_name: str, partition_id: str) -> tuple[Any, Any]:
        """The partition's global indexes (pre-allocated ones included) and 1 for each ``task_name`` has
        consumed, as torch tensors; ``(None, None)`` for an unknown partition."""
        import torch

        if not isinstance(task_name, str) or not isinstance(partition_id, str):
            raise ConfigError(f"task_name={task_name!r:.40}, partition_id={partition_id!r:.40}: pass two strings")
        with self._lock:
            part = self._partitions.get(partition_id)
            if part is None:
                return None, None
            indexes = sorted(part.active | part.pre_allocated)
            consumed = part.consumed.get(task_name, set())
            status = torch.tensor([i in consumed for i in indexes], dtype=torch.int8)
            return torch.tensor(indexes, dtype=torch.long), status

    def check_consumption_status(self, task_name: str, partition_id: str) -> bool:
        """Whether ``task_name`` has consumed every sample of the partition (False when it has none)."""
        _, status = self.get_consumption_status(task_name, partition_id)
        return status is not None and status.numel() > 0 and bool((status == 1).all())

    def get_production_status(self, data_fields: list[str], partition_id: str) -> tuple[Any, Any]:
        """The partition's global indexes (pre-allocated ones included) and, per index and asked field,
        1 when produced (an int8 tensor ``(samples, fields)``); ``(None, None)`` for an unknown
        partition, no fields, or a field never put into the partition (as TransferQueue answers)."""
        import torch

        fields = names_of(data_fields, "data_fields")
        if not isinstance(partition_id, str):
            raise ConfigError(f"partition_id={partition_id!r:.60} must be a string")
        with self._lock:
            part = self._partitions.get(partition_id)
            if part is None or not fields or any(f not in part.registered for f in fields):
                return None, None
            indexes = sorted(part.active | part.pre_allocated)
            status = torch.zeros(len(indexes), len(fields), dtype=torch.int8)
            for column, name in enumerate(fields):
                have = part.fields[name].indexes if name in part.fields else set()
                status[:, column] = torch.tensor([i in have for i in indexes], dtype=torch.int8)
            return torch.tensor(indexes, dtype=torch.long), status

    def check_production_status(self, data_fields: list[str], partition_id: str) -> bool:
        """Whether every sample of the partition has all ``data_fields`` produced (False when the
        partition or a field is unknown; True for a partition with no samples, as TransferQueue)."""
        _, status = self.get_production_status(data_fields, partition_id)
        return status is not None and bool((status == 1).all())

    def reset_consumption(self, partition_id: str, task_name: str | None = None) -> bool:
        """Forget what ``task_name`` (every task when None) consumed of the partition, so fetches serve
        its samples again; True, also for an unknown partition (TransferQueue only logs that)."""
        if not isinstance(partition_id, str):
            raise ConfigError(f"partition_id={partition_id!r:.60} must be a string")
        if task_name is not None and (not isinstance(task_name, str) or not task_name):
            raise ConfigError(f"task_name={task_name!r:.60} must be a non-empty string or None (every task)")
        with self._lock:
            part = self._partitions.get(partition_id)
            if part is None:
                return True
            tasks = list(part.consumed) if task_name is None else [t for t in [task_name] if t in part.consumed]
            for task in tasks:
                # the dock's consumption bits cannot be unset: later fetches read under a fresh consumer
                self._resets += 1
                part.consumer_of[task] = f"{_RESET}{self._resets}-{task}"
                part.consumed[task] = set()
            return True

    # -- key-value -------------------------------------------------------------------------------

    def kv_retrieve_meta(self, keys: list[str] | str, partition_id: str, create: bool = False) -> Any:
        """The ``BatchMeta`` of ``keys`` (new keys get samples when ``create``), with the fields all have."""
        from transfer_queue.metadata import BatchMeta

        keys = kv_keys(keys, distinct=create)
        partition_name(partition_id)
        with self._lock:
            found_part = self._partitions.get(partition_id)
            if found_part is None and not create:
                return BatchMeta.empty()
            known = {} if found_part is None else found_part.keys
            missing = [k for k, key in enumerate(keys) if key not in known]
            part = self._with_room(partition_id, len(missing) if create else 0)
            indexes: list[int | None] = [part.keys.get(k) for k in keys]
            if missing and create:
                new = self._allocate(part, len(missing))
                for k, index in zip(missing, new, strict=True):
                    indexes[k] = index
                    part.keys[keys[k]] = index
                    part.key_of[index] = keys[k]
            found = [i for i in indexes if i is not None]
            fields = [n for n, f in part.fields.items() if found and all(i in f.indexes for i in found)]
            return batch_meta(part, found, fields, "force_fetch")

    def kv_list(self, partition_id: str | None = None) -> dict[str, dict[str, Any]]:
        """Per partition, its keys and their tags."""
        if partition_id is not None and not isinstance(partition_id, str):
            raise ConfigError(f"partition_id={partition_id!r:.60} must be a string or None")
        with self._lock:
            pids = list(self._partitions) if partition_id is None else [partition_id]
            out = {}
            for pid in pids:
                if (part := self._partitions.get(pid)) is not None:
                    out[pid] = {k: dict(part.custom_meta.get(i, {})) for k, i in part.keys.items()}
            return out

    # -- asyncio twins ---------------------------------------------------------------------------

    async def async_get_meta(self, *args: Any, **kwargs: Any) -> Any:
        """``get_meta`` from asyncio code (the wait runs in a worker thread)."""
        return await asyncio.to_thread(self.get_meta, *args, **kwargs)

    async def async_put(self, *args: Any, **kwargs: Any) -> Any:
        """``put`` from asyncio code."""
        return await asyncio.to_thread(self.put, *args, **kwargs)

    async def async_get_data(self, metadata: Any) -> Any:
        """``get_data`` from asyncio code."""
        return await asyncio.to_thread(self.get_data, metadata)

    async def async_clear_partition(self, partition_id: str) -> None:
        """``clear_partition`` from asyncio code."""
        await asyncio.to_thread(self.clear_partition, partition_id)

    async def async_clear_samples(self, metadata: Any) -> None:
        """``clear_samples`` from asyncio code."""
        await asyncio.to_thread(self.clear_samples, metadata)

    async def async_set_custom_meta(self, metadata: Any) -> None:
        """``set_custom_meta`` from asyncio code."""
        await asyncio.to_thread(self.set_custom_meta, metadata)

    async def async_kv_retrieve_meta(self, *args: Any, **kwargs: Any) -> Any:
        """``kv_retrieve_meta`` from asyncio code."""
        return await asyncio.to_thread(self.kv_retrieve_meta, *args, **kwargs)

    async def async_kv_list(self, partition_id: str | None = None) -> dict[str, dict[str, Any]]:
        """``kv_list`` from asyncio code."""
        return await asyncio.to_thread(self.kv_list, partition_id)

    async def async_get_consumption_status(self, task_name: str, partition_id: str) -> tuple[Any, Any]:
        """``get_consumption_status`` from asyncio code."""
        return await asyncio.to_thread(self.get_consumption_status, task_name, partition_id)

    async def async_check_consumption_status(self, task_name: str, partition_id: str) -> bool:
        """``check_consumption_status`` from asyncio code."""
        return await asyncio.to_thread(self.check_consumption_status, task_name, partition_id)

    async def async_get_production_status(self, data_fields: list[str], partition_id: str) -> tuple[Any, Any]:
        """``get_production_status`` from asyncio code."""
        return await asyncio.to_thread(self.get_production_status, data_fields, partition_id)

    async def async_check_production_status(self, data_fields: list[str], partition_id: str) -> bool:
        """``check_production_status`` from asyncio code."""
        return await asyncio.to_thread(self.check_production_status, data_fields, partition_id)

    async def async_reset_consumption(self, partition_id: str, task_name: str | None = None) -> bool:
        """``reset_consumption`` from asyncio code."""
        return await asyncio.to_thread(self.reset_consumption, partition_id, task_name)

    async def async_get_partition_list(self) -> list[str]:
        """``get_partition_list`` from asyncio code."""
        return await asyncio.to_thread(self.get_partition_list)

    def close(self) -> None:
        """Nothing to release (the dock outlives the client); kept for TransferQueue's API."""
