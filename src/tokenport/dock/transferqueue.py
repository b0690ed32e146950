"""TransferQueue's client API (the ``transferqueue`` package, 0.1.11) spoken by a dock.

verl, NeMo-RL and ROLL move RL data through ``transfer_queue``: ``tq.init()``,
``client = tq.get_client()``, ``client.put(data=TensorDict, partition_id=...)``,
``client.get_meta(...)``, ``client.get_data(meta)``, ``client.clear_*`` and ``tq.kv_*``. This module
offers the same calls over any ``DockAPI`` (``Dock`` in process), so such code runs on the dock by
changing its import: ``import tokenport.dock.transferqueue as tq``. It returns TransferQueue's own
``BatchMeta`` and ``KVBatchMeta`` objects and TensorDicts shaped as TransferQueue returns them.

How TransferQueue's concepts map onto the dock:

- a partition (``partition_id``) is a dock partition of ``TransferQueueConfig.partition_rows``
  rows (slots), added when TransferQueue would create the partition and dropped by
  ``clear_partition``;
- a global index is a slot of that partition; indexes are allocated exactly as TransferQueue's
  controller allocates them (one pre-allocated per new partition, cleared ones reused first in
  first-out order), so the same calls return the same indexes; a slot is never reused while its
  partition lives (a cleared sample's slot is retired, its index goes back to the pool);
- a field is a dock column: a 1-D field ``(batch,)`` a scalar column, any other tensor field (dense,
  or nested whose samples differ in their first dimension only) a ragged column whose rows are the
  per-sample tensors' first dimension; bfloat16 is held as its bits; other nested tensors (samples
  differing in more dimensions) and non-tensor data (lists of strings, ``NonTensorData``,
  ``NonTensorStack``) an object column of per-sample values. ``get_data`` packs them as
  TransferQueue's storage does: scalars dense, tensors jagged nested (strided where jagged cannot
  hold them), Python values a ``NonTensorStack``;
- a field's dtype and layout belong to its partition, as in TransferQueue's controller: free in a
  new partition, forgotten when the partition is cleared or all of the field's samples are; each
  (field, dtype and layout) has its own dock column (``name``, then ``name~1``...);
- a ``task_name`` is a dock consumer; ``get_meta(mode="fetch")`` is a dock ``get`` that consumes
  the lowest ready global indexes (TransferQueue's ``SequentialSampler``), ``get_data`` a read
  under a lease that is given back (nothing consumed); a fetch waits on the dock's readiness bits.

Where the adapter differs from TransferQueue, on purpose: bad calls raise tokenport errors naming
what to fix (``ConfigError`` is a ValueError, as TransferQueue's are; a fetch timeout is a
``TransferQueueTimeout``, a RuntimeError like TransferQueue's); ``get_data`` of samples whose fields
were never put raises ``InputDataError`` (TransferQueue: ``StorageKeyNotFoundError``); a put the dock
refuses changes nothing (TransferQueue has already allocated the indexes by then); a put of a field
of another dtype while its partition holds samples of it is refused (TransferQueue's controller
refuses that "dtype mismatch" too, but only logs it and serves the mixed data). Samples of one dtype
(or Python values) in another layout -- a scalar where tensors are, tensors where strings are --
join the field as TransferQueue's storage holds them: per sample (the field's samples in that
partition move to an object column once), and come back packed as TransferQueue packs them.
The adapter's bookkeeping lives in the process that made it (the dock's ``save`` does not hold it;
``save_checkpoint`` saves both).
Where Ray runs and ``init`` gets no dock, that process is a controller actor named as TransferQueue's
(``transferqueue_ray``): the first ``init`` starts it over a ``RayDock``, every later one (a Ray
worker's too) joins it, so all processes share one dock, as they share TransferQueue's controller.

TransferQueue's own client tests (its wheel's ``tests/e2e``) run against this adapter in our suite
(``tests/dock/peer_transferqueue``): of the kv file's 56, the 16 that read the controller's partition
snapshot are left out; of the lifecycle file's 10, two need CUDA and Mooncake (the peer skips them);
of the checkpoint file's 14, 6 run and pass, the 8 that read TransferQueue's own checkpoint layout,
its controller's snapshot or module globals, or mock its storage dump are left out.

Covered and not (the issue 17 table; ``c.`` is the client):

| TransferQueue API | here | notes |
|---|---|---|
| ``init``, ``get_client``, ``close`` | yes | ``init(conf, dock=...)``: a ``DockAPI``; on Ray the named controller's |
| ``c.put(data, metadata, partition_id)`` | yes | new samples, or fields of a ``BatchMeta`` |
| ``c.get_meta`` fetch, force_fetch, insert | yes | too few ready: empty (polling) or timeout |
| ``c.get_data`` | yes | 1-D fields dense, the others jagged nested |
| ``c.clear_partition``, ``c.clear_samples`` | yes | |
| ``c.set_custom_meta``, ``c.get_partition_list`` | yes | |
| ``async_`` twins of all the above | yes | the sync call in a worker thread |
| ``kv_put``, ``kv_batch_put``, ``kv_batch_get`` | yes | tags are ``custom_meta`` |
| ``kv_batch_get_by_meta``, ``kv_list``, ``kv_clear`` | yes | and their ``async_`` twins |
| ``StreamingDataset``, ``StreamingDataLoader`` | yes | ``transferqueue_loader``; ``num_workers=0`` |
| samplers but Sequential | no | refused; ``sampling_config`` ignored as Sequential does |
| bfloat16, non-tensor fields | yes | bits; Python values (a checkpoint keeps JSON ones only) |
| jagged, strided nested tensors | yes | returned jagged, or strided as TransferQueue does |
| ``save_checkpoint``, ``load_checkpoint`` | yes | dock + bookkeeping; not strided nested, non-JSON values |
| metrics endpoint | no | the dock has metrics |
| ``c.get_consumption_status``, ``c.check_*`` | yes | and async twins |
| ``c.get_production_status``, ``c.reset_consumption`` | yes | reset: later fetches use a fresh dock consumer |
| storage backends, ``data_parser`` | no | the dock is the storage; refused |
"""

from __future__ import annotations

import asyncio
import copy
import functools
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .._checks import check_int, is_int
from .._schema import Count, Document, NonNegativeFinite, Positive, decode, to_builtins
from ..errors import ConfigError, DockTimeout, InputDataError
from .api import DockAPI
from .arguments import int64, python_values
from .ragged import Packed
from .schema import BFLOAT16, OBJECT, Column
from .transferqueue_state import Field, Indexes, LowestGlobal, TQPartition

__all__ = [
    "TransferQueueClient",
    "TransferQueueConfig",
    "TransferQueueTimeout",
    "async_kv_batch_get",
    "async_kv_batch_get_by_meta",
    "async_kv_batch_put",
    "async_kv_clear",
    "async_kv_list",
    "async_kv_put",
    "close",
    "get_client",
    "init",
    "kv_batch_get",
    "kv_batch_get_by_meta",
    "kv_batch_put",
    "kv_clear",
    "kv_list",
    "kv_put",
    "load_checkpoint",
    "save_checkpoint",
]

_MODES = ("fetch", "force_fetch", "insert")
# the DockAPI members the adapter uses (a dock needs these, not the whole protocol)
_USED = ("columns", "consumers", "n_samples_per_prompt", "add_column", "add_consumer", "add_partition",
         "drop_partition", "put", "get", "nack")  # fmt: skip
_READER = "transferqueue-reader-"  # consumer names under which get_data reads (never consumes)
_RESET = "transferqueue-reset-"  # consumer names under which a task fetches after reset_consumption


class TransferQueueTimeout(DockTimeout, RuntimeError):
    """``get_meta(mode="fetch")`` waited ``get_meta_timeout`` s for too few ready samples (TransferQueue
    raises a RuntimeError there; this is both that and the dock's ``DockTimeout``)."""


@dataclass(frozen=True)
class TransferQueueConfig:
    """How the adapter behaves: TransferQueue's ``controller.polling_mode``, how long a fetch waits
    for enough ready samples (TransferQueue's default waits one 5 s check interval), and the
    samples a partition can hold over its life (slots; ``clear_partition`` frees them)."""

    polling_mode: bool = False
    get_meta_timeout: float = 5.0
    partition_rows: int = 65536
    pre_allocated: int = 1  # TransferQueue's TQ_PRE_ALLOC_SAMPLE_NUM

    def __post_init__(self) -> None:
        if not isinstance(self.polling_mode, bool):
            raise ConfigError(f"polling_mode={self.polling_mode!r} must be True or False")
        timeout = self.get_meta_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout < float("inf"):
            raise ConfigError(f"get_meta_timeout={timeout!r} must be seconds >= 0")
        int64("partition_rows", self.partition_rows)
        check_int("pre_allocated", self.pre_allocated, 0, self.partition_rows, "at most partition_rows")

    @classmethod
    def from_conf(cls, conf: Any) -> TransferQueueConfig:
        """The settings from a TransferQueue-style config (``{"controller": {"polling_mode": ...}}``,
        plus an optional ``"dock"`` section with this class's fields), read through its typed schema."""
        if conf is not None and not isinstance(conf, Mapping):
            raise ConfigError(f"init(conf={conf!r:.60}): pass a dict of sections (controller, dock, ...) or None")
        settings = decode(_plain(conf or {}), _Conf, where="init(conf)", remedy=_CONF_REMEDY, error=ConfigError)
        options = to_builtins(settings.dock) if settings.dock is not None else {}
        if settings.controller is not None and settings.controller.polling_mode is not None:
            options["polling_mode"] = settings.controller.polling_mode
        return cls(**options)


_CONF_REMEDY = "fix the TransferQueue configuration (the dock speaks only SequentialSampler; it is the storage)"


class _Controller(Document, frozen=True, kw_only=True):
    """``conf.controller``: the settings of TransferQueue's controller the dock speaks."""

    polling_mode: bool | None = None
    sampler: Literal["SequentialSampler"] = "SequentialSampler"  # only it is spoken by the dock
    zmq_info: Any = None  # TransferQueue's transport: nothing to do on a dock


class _DockSection(Document, frozen=True, kw_only=True):
    """``conf.dock``: the adapter's own settings (`TransferQueueConfig`'s fields)."""

    polling_mode: bool = False
    get_meta_timeout: NonNegativeFinite = 5.0
    partition_rows: Positive = 65536
    pre_allocated: Count = 1


class _Conf(Document, frozen=True, kw_only=True):
    """A TransferQueue configuration: the sections the dock reads; storage and metrics are the dock's own."""

    controller: _Controller | None = None
    dock: _DockSection | None = None
    backend: Any = None
    metrics: Any = None


def _plain(value: Any) -> Any:
    """``value`` with mappings (an OmegaConf DictConfig, say) as dicts and sequences as lists."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


# -- data in and out ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Value:
    """A put's field as the dock holds it: a column spec (named after the field; the client picks the
    dock column per partition), its rows, and its ``kind`` -- layout and torch dtype -- which samples of
    one field in a live partition share."""

    column: Column
    rows: np.ndarray | Packed
    kind: tuple[Any, ...]


def _column_value(name: str, value: Any, batch: int) -> _Value:
    """A TensorDict field as dock rows: a 1-D tensor a scalar column; a tensor of more dimensions or a
    nested one whose samples differ in their first dimension only a ragged column; other nested
    tensors per-sample tensors (an object column); non-tensor data (lists of strings, NonTensorData,
    NonTensorStack) per-sample Python values. bfloat16 is held as its bits."""
    import torch
    from tensordict.tensorclass import is_non_tensor

    if is_non_tensor(value):
        held = python_values(_copied(_python_samples(value, batch), name), batch, f"field {name!r}")
        return _Value(Column(name, OBJECT), held, ("python",))
    if not isinstance(value, torch.Tensor):
        raise InputDataError(
            f"field {name!r} is a {type(value).__name__}: pass tensors, or Python values as a list or "
            "NonTensorStack (one per sample)"
        )
    if value.is_complex() or (value.dtype != torch.bfloat16 and not _numpy_holds(value.dtype)):
        raise InputDataError(f"field {name!r} has dtype {value.dtype}, which the dock cannot hold: cast it first")
    dtype = "bfloat16" if value.dtype == torch.bfloat16 else None
    if value.is_nested:
        if value.layout == torch.jagged and value._ragged_idx == 1:  # type: ignore[attr-defined]
            values = _numpy(value.values())
            lengths = np.diff(value.offsets().cpu().numpy()).astype(np.int64)  # type: ignore[attr-defined]
            column = Column(name, dtype or values.dtype, tuple(values.shape[1:]), ragged=True)
            return _Value(column, Packed(values, lengths), ("ragged", value.dtype, column.shape))
        samples = [sample.detach().cpu() for sample in value.unbind()]
        inner = {tuple(sample.shape[1:]) for sample in samples}
        if len(inner) == 1 and all(sample.dim() >= 1 for sample in samples):
            values = _numpy(torch.cat(samples))
            lengths = np.array([len(sample) for sample in samples], dtype=np.int64)
            column = Column(name, dtype or values.dtype, tuple(values.shape[1:]), ragged=True)
            return _Value(column, Packed(values, lengths), ("ragged", value.dtype, column.shape))
        rows = python_values([sample.clone() for sample in samples], batch, f"field {name!r}")
        return _Value(Column(name, OBJECT), rows, ("tensors", value.dtype))
    array = _numpy(value)
    if array.ndim == 1:
        return _Value(Column(name, dtype or array.dtype), array, ("scalar", value.dtype))
    rows_, length = array.shape[:2]
    packed = Packed(array.reshape(rows_ * length, *array.shape[2:]), np.full(rows_, length, dtype=np.int64))
    column = Column(name, dtype or array.dtype, tuple(array.shape[2:]), ragged=True)
    return _Value(column, packed, ("ragged", value.dtype, column.shape))


def _python_samples(value: Any, batch: int) -> list[Any]:
    """Each sample's Python value, as TransferQueue's storage splits a non-tensor field: a NonTensorStack
    item by item; a NonTensorData holding a list, tuple or array of one item per sample item by item
    (TransferQueue indexes it per sample), any other one value for every sample (where TransferQueue
    would index into it: a dict fails there, a string gives each sample a character)."""
    from tensordict import NonTensorData

    if isinstance(value, NonTensorData):
        data = value.data
        if isinstance(data, (list, tuple)) or (isinstance(data, np.ndarray) and data.ndim > 0):
            if len(data) == batch:
                return [data[i] for i in range(batch)]
        return [data] * batch
    return list(value.tolist())


def _copied(values: list[Any], name: str) -> list[Any]:
    """Deep copies of Python values: TransferQueue serializes them, so what a put gave and what a get
    returns never share state with what is stored (a later change to either changes neither)."""
    try:
        return copy.deepcopy(list(values))
    except Exception as error:  # any object's own __deepcopy__/__reduce__ may raise anything
        raise InputDataError(
            f"field {name!r}: a value cannot be copied ({type(error).__name__}: {error}); TransferQueue pickles "
            "Python values: put values that can be copied"
        ) from None


def _numpy(tensor: Any) -> np.ndarray:
    """A CPU tensor's values as numpy (bfloat16 as ``BFLOAT16`` bits)."""
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        return tensor.contiguous().view(torch.int16).numpy().view(BFLOAT16)
    return tensor.numpy()


def _torch(array: np.ndarray) -> Any:
    """numpy values as a tensor (``BFLOAT16`` bits as bfloat16), in memory of its own."""
    import torch

    if array.dtype == BFLOAT16:
        return torch.from_numpy(np.array(array).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.array(array))


def _numpy_holds(dtype: Any) -> bool:
    """Whether numpy has the torch ``dtype`` (float8 and other torch-only types it has not)."""
    import torch

    try:
        torch.empty(0, dtype=dtype).numpy()
    except TypeError:
        return False
    return True


def _tensor(value: np.ndarray | Packed) -> Any:
    """A dock column's rows as TransferQueue returns them: dense for scalars, jagged otherwise."""
    import torch

    if isinstance(value, Packed):
        return torch.nested.nested_tensor_from_jagged(_torch(value.values), torch.from_numpy(value.offsets))
    return _torch(value)


def _packed_like_transferqueue(values: list[Any]) -> Any:
    """Per-sample values packed as TransferQueue's storage packs them on the way out: scalar tensors
    stacked, other tensors a jagged nested tensor, else a strided one, else (and for Python values)
    a NonTensorStack."""
    import torch
    from tensordict import NonTensorStack

    if values and all(isinstance(v, torch.Tensor) for v in values):
        if all(v.dim() == 0 for v in values):
            return torch.stack(values)
        for layout in (torch.jagged, torch.strided):
            try:
                return torch.nested.as_nested_tensor(values, layout=layout)
            except (RuntimeError, TypeError):
                continue
    return NonTensorStack(*values)


def _partition_name(partition_id: Any) -> str:
    """``partition_id``, checked to be a non-empty string."""
    if not isinstance(partition_id, str) or not partition_id:
        raise ConfigError(f"partition_id={partition_id!r:.60} must be a non-empty string")
    return partition_id


def _names(values: Any, what: str) -> list[str]:
    """A list of non-empty names (a string is one name's letters, not a list: refused)."""
    if values is None:
        return []
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) and v for v in values):
        raise ConfigError(f"{what}={values!r:.60}: pass a list of non-empty names")
    return list(values)


def _keys(keys: Any, distinct: bool = True) -> list[str]:
    """Keys of a kv call: one key or a list of them (distinct ones where new keys get samples)."""
    keys = [keys] if isinstance(keys, str) else _names(keys, "keys")
    if not keys or (distinct and len(set(keys)) != len(keys)):
        raise ConfigError(f"keys={keys!r:.60}: pass at least one key{', each once' if distinct else ''}")
    return keys


def _batch_meta(metadata: Any) -> Any:
    """``metadata``, checked to be TransferQueue's ``BatchMeta`` of integer indexes and partition names."""
    from transfer_queue.metadata import BatchMeta

    if not isinstance(metadata, BatchMeta):
        raise ConfigError(f"metadata is a {type(metadata).__name__}: pass the BatchMeta get_meta or put returned")
    indexes, pids = list(metadata.global_indexes), list(metadata.partition_ids)
    if len(indexes) != len(pids) or not all(is_int(i) for i in indexes) or not all(isinstance(p, str) for p in pids):
        raise ConfigError("metadata: expected one integer global index and one partition name per sample")
    return metadata


# -- the client ----------------------------------------------------------------------------------------


class TransferQueueClient:
    """TransferQueue's ``TransferQueueClient`` calls over a ``DockAPI``: put, get_meta, get_data, clear."""

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

    # -- partitions ---------------------------------------------------------------------------------

    def _new_prompts(self) -> int:
        """Prompts of a new partition: ``partition_rows`` rounded up to whole prompts of the dock."""
        return -(-self.config.partition_rows // self.dock.n_samples_per_prompt)

    def _with_room(self, partition_id: str, count: int) -> TQPartition:
        """The partition ``partition_id`` (created if new) once it is known to have room for ``count``
        new samples: a refused call creates no partition and allocates no index."""
        part = self._partitions.get(_partition_name(partition_id))
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
        self.dock.add_partition(_partition_name(partition_id), prompts)
        part = TQPartition(partition_id, prompts * self.dock.n_samples_per_prompt)
        if self.config.pre_allocated:
            part.pre_allocated.update(self._indexes.allocate(partition_id, self.config.pre_allocated))
        self._partitions[partition_id] = part
        return part

    def get_partition_list(self) -> list[str]:
        """The partitions, in creation order."""
        with self._lock:
            return list(self._partitions)

    def _allocate(self, part: TQPartition, count: int) -> list[int]:
        """``count`` indexes for new samples of ``part`` (pre-allocated first, then the pool)."""
        part.check_room(count)
        indexes = part.activate(count)
        if len(indexes) < count:
            indexes.extend(self._indexes.allocate(part.name, count - len(indexes)))
        part.give_slots([i for i in indexes if i not in part.slot_of])
        part.active.update(indexes)
        return indexes

    def _meta(self, part: TQPartition, indexes: list[int], fields: list[str], mode: str) -> Any:
        from transfer_queue.metadata import BatchMeta

        schema = {f: part.fields[f].schema(indexes) for f in fields if f in part.fields}
        if mode == "insert":
            for name in fields:
                schema.setdefault(name, {"dtype": None, "shape": None, "is_nested": False, "is_non_tensor": False})
            status = np.zeros(len(indexes), dtype=np.int8)
        elif mode == "fetch":
            status = np.ones(len(indexes), dtype=np.int8)
        else:
            status = part.ready(indexes, fields)
        return BatchMeta(
            global_indexes=indexes,
            partition_ids=[part.name] * len(indexes),
            field_schema=schema,
            production_status=status,
            custom_meta=[part.custom_meta.get(i, {}) for i in indexes],
        )

    # -- get_meta -----------------------------------------------------------------------------------

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
        from transfer_queue.metadata import BatchMeta

        if mode not in _MODES:
            raise ConfigError(f"mode={mode!r} is invalid: pass one of {_MODES}")
        if sampling_config is not None and not isinstance(sampling_config, dict):
            raise ConfigError(f"sampling_config={sampling_config!r:.60} must be a dict or None")
        # sampling_config goes to TransferQueue's sampler as keywords; SequentialSampler ignores them
        fields = _names(data_fields, "data_fields")
        _partition_name(partition_id)
        if mode == "insert":
            int64("batch_size", batch_size)
            with self._lock:
                part = self._with_room(partition_id, batch_size)
                indexes = self._allocate(part, batch_size)
                return self._meta(part, indexes, fields, mode)
        if mode == "force_fetch":
            with self._lock:
                part_or_none = self._partitions.get(partition_id)
                if part_or_none is None:
                    raise ConfigError(f"Partition {partition_id} not found: put data into it first")
                return self._meta(part_or_none, self._indexes.of(partition_id), fields, mode)
        if not isinstance(task_name, str) or not task_name:
            raise ConfigError(f"task_name={task_name!r}: fetch needs the consuming task's name")
        if not fields:
            raise ConfigError("data_fields is empty: fetch needs the fields the task reads")
        int64("batch_size", batch_size)
        deadline = time.monotonic() + (0.0 if self.config.polling_mode else self.config.get_meta_timeout)
        while True:
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
            left = deadline - time.monotonic()
            if known and target is not None:
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
                        return self._meta(target, indexes, fields, mode)
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

    # -- put ----------------------------------------------------------------------------------------

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
            partition_id = _partition_name(partition_id)
        else:
            _batch_meta(metadata)
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
                        columns[column] = _select(value.rows, positions)
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

    def checked_data(self, data: Any, partition_id: str | None = None) -> dict[str, _Value]:
        """``data`` (a TensorDict of one batch dimension) as dock rows, checked against what the fields
        hold in ``partition_id`` (if given); InputDataError naming the field otherwise."""
        from tensordict import TensorDict

        if not isinstance(data, TensorDict):
            raise InputDataError(f"data is a {type(data).__name__}: pass a TensorDict with a batch dimension")
        if len(data.batch_size) != 1 or data.batch_size[0] == 0:
            raise InputDataError(f"data has batch size {list(data.batch_size)}: pass a TensorDict of samples (n,)")
        batch = int(data.batch_size[0])
        converted = {name: _column_value(name, value, batch) for name, value in data.items()}
        if not converted:
            raise InputDataError("data has no fields: put at least one")
        if partition_id is not None:
            with self._lock:
                self._placed(partition_id, converted)
        return converted

    def _placed(self, partition_id: str, converted: dict[str, _Value]) -> dict[str, tuple[str, bool]]:
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
            incoming = value.kind[1] if value.kind[0] in _TENSORS else None
            if held.dtype is not None and incoming is not None and held.dtype != incoming:
                have = str(held.dtype).removeprefix("torch.")
                raise InputDataError(
                    f"field {name!r} comes as {_describe(value.kind)}, but its samples in partition "
                    f"{partition_id!r} are {have} (a dtype mismatch, which TransferQueue's controller "
                    f"refuses too): put it as {have}, or clear those samples (or the partition) first, "
                    "or use another partition"
                )
            if held.kind == value.kind:
                out[name] = (held.column, False)
            else:
                out[name] = (held.column if held.kind == _MIXED else self._column_for(name, _mixed(name)), True)
        return out

    def _mixing(self, pid: str, name: str, value: _Value, column: str, positions: np.ndarray) -> np.ndarray:
        """The put's samples of field ``name`` as per-sample values for its mixed ``column``; the field's
        samples already in ``pid`` move there first (once), so the field reads from one column."""
        self._own(name, _mixed(name), column)
        held = self._partitions[pid].fields[name]
        if held.kind != _MIXED:
            part = self._partitions[pid]
            slots = np.array([part.slot_of[i] for i in sorted(held.indexes)], dtype=np.int64)
            reader = f"{_READER}{threading.get_ident()}"
            if reader not in self.dock.consumers:
                self.dock.add_consumer(reader)
            batch = self.dock.get(reader, [held.column], len(slots), pid, rows=slots, timeout=0, lease=60.0)
            assert batch is not None and batch.lease_id is not None
            self.dock.nack(batch.lease_id)
            moved = _samples(batch[held.column], held.kind)
            self.dock.put(pid, {column: python_values(moved, len(slots), f"field {name!r}")}, slots, overwrite=True)
            held.column, held.kind = column, _MIXED
        return python_values(_samples(_select(value.rows, positions), value.kind), len(positions), f"field {name!r}")

    def _column_for(self, name: str, value: _Value) -> str:
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
            if candidate not in owned and (have is None or have == _renamed(value.column, candidate)):
                return candidate
        raise AssertionError("unreachable: more candidates than owned names")

    def _own(self, name: str, value: _Value, column: str) -> None:
        """Record that ``column`` holds field ``name`` of ``value.kind`` (adding it to the dock if new)."""
        self._column_of.setdefault((name, value.kind), column)
        if column not in self.dock.columns:
            self.dock.add_column(_renamed(value.column, column))

    def _slots_by_partition(self, metadata: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Positions in ``metadata`` and dock slots, grouped by partition; unknown samples refused."""
        groups: dict[str, tuple[list[int], list[int]]] = {}
        _batch_meta(metadata)
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

    def set_custom_meta(self, metadata: Any) -> None:
        """Store ``metadata.custom_meta`` per sample (it travels with later BatchMetas of those samples)."""
        _batch_meta(metadata)
        with self._lock:
            for index, pid, meta in zip(metadata.global_indexes, metadata.partition_ids, metadata.custom_meta,
                                        strict=True):  # fmt: skip
                if (part := self._partitions.get(pid)) is not None:
                    part.custom_meta[index] = dict(meta)

    # -- get_data -----------------------------------------------------------------------------------

    def get_data(self, metadata: Any) -> Any:
        """The samples of ``metadata``, its fields, in its order, as a TensorDict (nothing is consumed):
        packed as TransferQueue packs them (see ``_packed_like_transferqueue``)."""
        from tensordict import TensorDict

        if metadata is None or _batch_meta(metadata).size == 0 or not metadata.field_names:
            return TensorDict({}, batch_size=0)
        names = list(metadata.field_names)
        reader = f"{_READER}{threading.get_ident()}"
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
                for position, row in zip(positions, _rows(value, field.kind), strict=True):
                    rows[name][position] = (field.kind[0], row)
        out = {name: _gathered(rows[name], kinds[name], name) for name in names}
        return TensorDict(out, batch_size=metadata.size)

    # -- clear --------------------------------------------------------------------------------------

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
        if metadata is None or _batch_meta(metadata).size == 0:
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

    # -- status -------------------------------------------------------------------------------------

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

    # -- production status and consumption reset ---------------------------------------------------

    def get_production_status(self, data_fields: list[str], partition_id: str) -> tuple[Any, Any]:
        """The partition's global indexes (pre-allocated ones included) and, per index and asked field,
        1 when produced (an int8 tensor ``(samples, fields)``); ``(None, None)`` for an unknown
        partition, no fields, or a field never put into the partition (as TransferQueue answers)."""
        import torch

        fields = _names(data_fields, "data_fields")
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

    # -- key-value ----------------------------------------------------------------------------------

    def kv_retrieve_meta(self, keys: list[str] | str, partition_id: str, create: bool = False) -> Any:
        """The ``BatchMeta`` of ``keys`` (new keys get samples when ``create``), with the fields all have."""
        from transfer_queue.metadata import BatchMeta

        keys = _keys(keys, distinct=create)
        _partition_name(partition_id)
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
            return self._meta(part, found, fields, "force_fetch")

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

    # -- asyncio twins ------------------------------------------------------------------------------

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


_ARRAYS = ("scalar", "ragged")  # kinds whose rows the dock holds as numpy arrays
_TENSORS = ("scalar", "ragged", "tensors")  # kinds of tensor fields (their second item: the torch dtype)
_MIXED = ("mixed",)  # a field whose samples in a partition came in several layouts: per-sample values


def _mixed(name: str) -> _Value:
    """The column spec and kind of field ``name`` held as per-sample values of several layouts."""
    return _Value(Column(name, OBJECT), np.empty(0, dtype=OBJECT), _MIXED)


def _samples(value: np.ndarray | Packed, kind: tuple[Any, ...]) -> list[Any]:
    """A column's rows as per-sample values: tensors for tensor kinds, the values themselves otherwise."""
    if isinstance(value, Packed):
        return [_torch(row) for row in value.to_list()]
    if kind[0] == "scalar":
        return [_torch(value[i : i + 1])[0] for i in range(len(value))]
    return list(value)


def _rows(value: np.ndarray | Packed, kind: tuple[Any, ...]) -> list[Any]:
    """A column's rows: arrays (views) for tensor kinds, the values themselves for Python ones."""
    if isinstance(value, Packed):
        return value.to_list()
    if kind[0] == "scalar":
        return list(value)
    return value.tolist()


def _gathered(rows: list[tuple[str, Any]], kinds: set[tuple[Any, ...]], name: str) -> Any:
    """One field's rows (each with its kind's layout, in the batch's order) as TransferQueue returns them."""
    from tensordict import NonTensorStack

    kind = next(iter(kinds))[0] if len(kinds) == 1 else None
    values = [row for _, row in rows]
    if kind == "scalar":
        return _torch(np.stack(values))
    if kind == "ragged":
        return _tensor(Packed(np.concatenate(values), np.array([len(r) for r in values], dtype=np.int64)))
    if kind == "python":
        return NonTensorStack(*_copied(values, name))
    return _packed_like_transferqueue([_torch(np.asarray(r)) if k in _ARRAYS else copy.deepcopy(r) for k, r in rows])


def _renamed(column: Column, name: str) -> Column:
    """``column`` under another name."""
    return Column(name, column.dtype, column.shape, column.ragged, column.segmented)


def _describe(kind: tuple[Any, ...]) -> str:
    """A field kind in words: "python values", "float32 scalars", "int64 rows of items of shape (2,)"..."""
    dtype = str(kind[1]).removeprefix("torch.") if len(kind) > 1 else ""
    if kind[0] == "python":
        return "Python values (non-tensor data)"
    if kind[0] == "scalar":
        return f"{dtype} scalars"
    if kind[0] == "tensors":
        return f"{dtype} tensors of varying shapes"
    if kind[0] == "mixed":
        return "samples of several layouts"
    return f"{dtype} tensors of shape {('length', *kind[2])} per sample".replace("'length'", "length")


def _select(value: np.ndarray | Packed, positions: np.ndarray) -> np.ndarray | Packed:
    """Rows ``positions`` of a column value."""
    from .ragged import take_rows

    return take_rows(value, positions) if isinstance(value, Packed) else value[positions]


# -- module-level API (``transfer_queue``'s functions) -------------------------------------------------

_CLIENT: Any = None  # this process's client: a TransferQueueClient, or a RemoteClient of the named controller


def init(conf: Any = None, *, dock: DockAPI | None = None) -> TransferQueueConfig:
    """Start the adapter (once per process): over ``dock``; else, where Ray runs, as a client of the
    dock of the controller named as TransferQueue's (``transferqueue_ray``: the first process starts
    it, later ones, Ray workers included, join it); else over a new in-process ``Dock``. Later calls
    return the running adapter's settings (TransferQueue ignores ``conf`` then, too)."""
    global _CLIENT
    config = TransferQueueConfig.from_conf(conf)
    if _CLIENT is not None and dock is not None and dock is not getattr(_CLIENT, "dock", None):
        raise ConfigError("init(dock=...): the adapter already runs over another dock; close() it first")
    if _CLIENT is None:
        if dock is None and _ray_running():
            from .transferqueue_ray import join

            _CLIENT = join(functools.partial(_start_on_ray_dock, conf), get_client, _kv_functions())
        else:
            if dock is None:
                from .dock import Dock

                dock = Dock([], [])
            _CLIENT = TransferQueueClient(dock, config)
    return _CLIENT.config


def _start_on_ray_dock(conf: Any) -> None:
    """In the named controller's process: the adapter over a new ``RayDock``."""
    from .ray import RayDock

    close()
    init(conf, dock=RayDock([], []))
    _CLIENT.owns_dock = True


def _kv_functions() -> dict[str, Callable[..., Any]]:
    """The kv functions the named controller runs whole for a remote client (one round trip a call)."""
    functions = (kv_put, kv_batch_put, kv_batch_get, kv_batch_get_by_meta, kv_list, kv_clear, save_checkpoint,
                 load_checkpoint)  # fmt: skip
    return {f.__name__: f for f in functions}


def _ray_running() -> bool:
    """Whether this process is connected to Ray (without importing Ray where nobody has)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def get_client() -> Any:
    """The client ``init`` made (a ``TransferQueueClient``, or a ``RemoteClient`` on Ray)."""
    if _CLIENT is None:
        raise ConfigError("TransferQueue is not initialized: call init() first")
    return _CLIENT


def close() -> None:
    """Forget the client (the next ``init`` starts afresh); on Ray, the process that started the named
    controller ends it (and its dock)."""
    global _CLIENT
    client, _CLIENT = _CLIENT, None
    if getattr(client, "remote", False) and client.owner:
        from .transferqueue_ray import end

        end(client)


def _forwarded(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` run by the named controller when this process's client is remote (one call there)."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        client = _CLIENT
        if getattr(client, "remote", False):
            return client.run(function.__name__, args, kwargs)
        return function(*args, **kwargs)

    return wrapper


@_forwarded
def kv_put(key: str, partition_id: str, fields: Any = None, tag: dict[str, Any] | None = None) -> Any:
    """Put one sample under ``key``: ``fields`` (a TensorDict of one sample or a dict of unbatched
    tensors) and/or a ``tag``; returns its ``KVBatchMeta``."""
    import torch
    from tensordict import NonTensorStack, TensorDict

    if fields is None and tag is None:
        raise ConfigError("Please provide at least one parameter of `fields` or `tag`.")
    if isinstance(fields, dict):  # as TransferQueue: tensors get a batch dimension, other values are one sample's
        if nested := [k for k, v in fields.items() if isinstance(v, torch.Tensor) and v.is_nested]:
            raise ConfigError(f"fields {nested} are nested tensors: use kv_batch_put for a batch of samples")
        batch = {k: v.unsqueeze(0) if isinstance(v, torch.Tensor) else NonTensorStack(v) for k, v in fields.items()}
        fields = TensorDict(batch, batch_size=1)
    elif fields is not None and not isinstance(fields, TensorDict):
        raise ConfigError(f"fields is a {type(fields).__name__}: pass a dict of one sample's values or a TensorDict")
    return kv_batch_put([key], partition_id, fields, None if tag is None else [tag])


@_forwarded
def kv_batch_put(keys: list[str], partition_id: str, fields: Any = None, tags: list[dict] | None = None) -> Any:
    """Put samples under ``keys`` (new keys get new samples): ``fields`` (a TensorDict) and/or ``tags``."""

    if fields is None and tags is None:
        raise ConfigError("Please provide at least one parameter of `fields` or `tags`.")
    client = get_client()
    with client._lock:  # the checks and the put as one step: no other put changes the fields in between
        return _kv_batch_put(client, keys, partition_id, fields, tags)


def _kv_batch_put(client: TransferQueueClient, keys: Any, partition_id: str, fields: Any, tags: Any) -> Any:
    from transfer_queue.metadata import KVBatchMeta

    keys = _keys(keys)  # every check before kv_retrieve_meta allocates: a refused call leaves no key
    _partition_name(partition_id)
    if fields is not None:
        client.checked_data(fields, partition_id)
        if fields.batch_size[0] != len(keys):
            batch = fields.batch_size[0]
            raise ConfigError(f"`keys` with length {len(keys)} does not match the `fields` batch {batch}")
    if tags is not None:
        if not isinstance(tags, (list, tuple)) or not all(isinstance(tag, dict) for tag in tags):
            raise ConfigError(f"tags={tags!r:.60}: pass a list of dicts, one per key")
        if len(tags) != len(keys):
            raise ConfigError(f"keys with length {len(keys)} does not match length of tags {len(tags)}")
    meta = client.kv_retrieve_meta(keys, partition_id, create=True)
    if tags is not None:
        meta.update_custom_meta(list(tags))
    if fields is not None:
        meta = client.put(fields, meta)
    else:
        client.set_custom_meta(meta)
    return KVBatchMeta(
        keys=keys, tags=meta.custom_meta, partition_id=partition_id, fields=meta.field_names,
        extra_info=meta.extra_info,
    )  # fmt: skip


@_forwarded
def kv_batch_get(keys: list[str] | str, partition_id: str, select_fields: list[str] | str | None = None) -> Any:
    """The samples under ``keys`` (all their common fields, or ``select_fields``) as a TensorDict."""
    client = get_client()
    meta = client.kv_retrieve_meta(keys, partition_id, create=False)
    if meta.size == 0:
        raise ConfigError("keys or partition were not found!")
    if select_fields is not None:
        meta = meta.select_fields([select_fields] if isinstance(select_fields, str) else select_fields)
    if not meta.is_ready:
        raise ConfigError("Some fields are not ready in all the requested keys!")
    return client.get_data(meta)


@_forwarded
def kv_batch_get_by_meta(meta: Any, select_fields: list[str] | str | None = None) -> Any:
    """``kv_batch_get`` of a ``KVBatchMeta`` (its keys, partition and fields)."""
    if meta.partition_id is None:
        raise ConfigError("Must provide partition_id in the input KVBatchMeta.")
    if select_fields is None:
        return kv_batch_get(meta.keys, meta.partition_id, meta.fields)
    wanted = [select_fields] if isinstance(select_fields, str) else select_fields
    if meta.fields is None or any(f not in meta.fields for f in wanted):
        raise ConfigError(f"Some fields assigned in select_fields not found in the metadata: {wanted}")
    return kv_batch_get(meta.keys, meta.partition_id, wanted)


@_forwarded
def kv_list(partition_id: str | None = None) -> dict[str, dict[str, Any]]:
    """Per partition (or the one asked for), its keys and their tags."""
    return get_client().kv_list(partition_id)


@_forwarded
def kv_clear(keys: list[str] | str, partition_id: str) -> None:
    """Forget the samples under ``keys``."""
    client = get_client()
    meta = client.kv_retrieve_meta([keys] if isinstance(keys, str) else keys, partition_id, create=False)
    if meta.size > 0:
        client.clear_samples(meta)


async def async_kv_put(*args: Any, **kwargs: Any) -> Any:
    """``kv_put`` from asyncio code."""
    return await asyncio.to_thread(kv_put, *args, **kwargs)


async def async_kv_batch_put(*args: Any, **kwargs: Any) -> Any:
    """``kv_batch_put`` from asyncio code."""
    return await asyncio.to_thread(kv_batch_put, *args, **kwargs)


async def async_kv_batch_get(*args: Any, **kwargs: Any) -> Any:
    """``kv_batch_get`` from asyncio code."""
    return await asyncio.to_thread(kv_batch_get, *args, **kwargs)


async def async_kv_batch_get_by_meta(*args: Any, **kwargs: Any) -> Any:
    """``kv_batch_get_by_meta`` from asyncio code."""
    return await asyncio.to_thread(kv_batch_get_by_meta, *args, **kwargs)


async def async_kv_list(partition_id: str | None = None) -> dict[str, dict[str, Any]]:
    """``kv_list`` from asyncio code."""
    return await asyncio.to_thread(kv_list, partition_id)


async def async_kv_clear(keys: list[str] | str, partition_id: str) -> None:
    """``kv_clear`` from asyncio code."""
    await asyncio.to_thread(kv_clear, keys, partition_id)


@_forwarded
def save_checkpoint(
    checkpoint_dir: Any, *, include_storage: bool = True, metadata: dict[str, Any] | None = None
) -> None:
    """Save the adapter's whole state (the dock's data and the bookkeeping) to ``checkpoint_dir``, published
    atomically as TransferQueue does; ``metadata``: JSON values kept in its ``metadata.json``. The dock is
    the storage, so its data is always saved (as TransferQueue forces it for SimpleStorage)."""
    from .transferqueue_checkpoint import NotInitialized, save

    if _CLIENT is None:
        raise NotInitialized("TransferQueue is not initialized. Call tq.init() first.")
    save(_CLIENT, checkpoint_dir, include_storage, metadata)


@_forwarded
def load_checkpoint(checkpoint_dir: Any) -> None:
    """Restore the state ``save_checkpoint`` wrote to ``checkpoint_dir``, whole; a missing checkpoint is a
    FileNotFoundError (``CheckpointNotFound``), a damaged one a CorruptStoreError, and either changes nothing."""
    from .transferqueue_checkpoint import NotInitialized, load

    if _CLIENT is None:
        raise NotInitialized("TransferQueue is not initialized. Call tq.init() first.")
    load(_CLIENT, checkpoint_dir)
