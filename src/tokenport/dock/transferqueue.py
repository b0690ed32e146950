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

This module holds the module-level calls (``init``, ``kv_*``, checkpoints); the rest is split by job:
``transferqueue_client`` (the client's calls), ``transferqueue_bookkeeping`` (partitions, indexes, the
dock column of each field), ``transferqueue_values`` (fields as dock rows and back),
``transferqueue_meta`` (``BatchMeta`` in and out), ``transferqueue_config`` (settings), with
``transferqueue_state``, ``_checkpoint``, ``_ray`` and ``_loader`` beside them.

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
import functools
import sys
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from .api import DockAPI
from .transferqueue_client import TransferQueueClient
from .transferqueue_config import TransferQueueConfig, TransferQueueTimeout
from .transferqueue_meta import kv_keys, partition_name

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

    keys = kv_keys(keys)  # every check before kv_retrieve_meta allocates: a refused call leaves no key
    partition_name(partition_id)
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
