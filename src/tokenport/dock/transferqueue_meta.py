"""TransferQueue's metadata on the adapter's side: names and keys of calls checked, ``BatchMeta``
checked on the way in and built from a partition's bookkeeping on the way out."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._checks import is_int
from ..errors import ConfigError
from .transferqueue_state import TQPartition

__all__ = ["batch_meta", "checked_batch_meta", "kv_keys", "names_of", "partition_name"]


def partition_name(partition_id: Any) -> str:
    """``partition_id``, checked to be a non-empty string."""
    if not isinstance(partition_id, str) or not partition_id:
        raise ConfigError(f"partition_id={partition_id!r:.60} must be a non-empty string")
    return partition_id


def names_of(values: Any, what: str) -> list[str]:
    """A list of non-empty names (a string is one name's letters, not a list: refused)."""
    if values is None:
        return []
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) and v for v in values):
        raise ConfigError(f"{what}={values!r:.60}: pass a list of non-empty names")
    return list(values)


def kv_keys(keys: Any, distinct: bool = True) -> list[str]:
    """Keys of a kv call: one key or a list of them (distinct ones where new keys get samples)."""
    keys = [keys] if isinstance(keys, str) else names_of(keys, "keys")
    if not keys or (distinct and len(set(keys)) != len(keys)):
        raise ConfigError(f"keys={keys!r:.60}: pass at least one key{', each once' if distinct else ''}")
    return keys


def checked_batch_meta(metadata: Any) -> Any:
    """``metadata``, checked to be TransferQueue's ``BatchMeta`` of integer indexes and partition names."""
    from transfer_queue.metadata import BatchMeta

    if not isinstance(metadata, BatchMeta):
        raise ConfigError(f"metadata is a {type(metadata).__name__}: pass the BatchMeta get_meta or put returned")
    indexes, pids = list(metadata.global_indexes), list(metadata.partition_ids)
    if len(indexes) != len(pids) or not all(is_int(i) for i in indexes) or not all(isinstance(p, str) for p in pids):
        raise ConfigError("metadata: expected one integer global index and one partition name per sample")
    return metadata


def batch_meta(part: TQPartition, indexes: list[int], fields: list[str], mode: str) -> Any:
    """TransferQueue's ``BatchMeta`` of samples ``indexes`` of ``part``: their schema of ``fields``, status as
    ``mode`` gives it (insert: none produced; fetch: all; force_fetch: what is), and their custom meta."""
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
