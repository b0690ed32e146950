"""Save a dock's state to a directory and load it back, so a training restart keeps its rollouts.

A checkpoint is ``dock.json`` (schema, partitions, format) plus one ``.npz`` per partition: the
data (ragged columns compacted to their rows), readiness, consumption, finished flags, ages, each
row's version span and segments; ``dock.json`` also keeps the current version, the staleness
policy, the expiry counters and the requeued rows not yet handed back. Checkpoints of format 1
(before versions) still load: their written rows get version 0.
Leases are not saved: rows out on lease at save time come back unconsumed, as if the lease had
expired, so a restarted stage gets them again. Writing goes to a fresh sibling directory that
then replaces the old checkpoint by renames; a crash leaves either the old or the new one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np

from ..errors import ConfigError, CorruptStoreError
from .ragged import Packed
from .schema import Column
from .state import DockState
from .storage import Partition

__all__ = ["load_state", "save_state"]

_FORMAT = "tokenport.dock-checkpoint/2"
_FORMAT_1 = "tokenport.dock-checkpoint/1"  # before versions and segments


def save_state(state: DockState, directory: str | os.PathLike[str]) -> None:
    """Write a dock's ``state`` to ``directory`` (replaced whole if it exists)."""
    target = os.path.abspath(os.fspath(directory))
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=os.path.basename(target) + ".saving-", dir=parent)
    try:
        with state.lock:
            description = {
                "format": _FORMAT,
                "n_samples_per_prompt": state.n_samples_per_prompt,
                "max_age": state.max_age,
                "closed": state.closed,
                "consumers": state.consumers,
                "consumer_limits": state.consumer_limits,
                "version": state.version,
                "max_staleness": state.max_staleness,
                "on_stale": state.on_stale,
                "max_inflight_versions": state.max_inflight_versions,
                "expired": {"requeued": state.expired_requeued, "dropped": state.expired_dropped},
                "columns": [_describe(column) for column in state.columns.values()],
                "partitions": [],
            }
            requeue = state.expired()  # handed back below, into the live state too
            for name, rows in requeue.items():
                state.requeue(name, rows)
            for number, partition in enumerate(state.each_partition()):
                file = f"partition-{number:05d}.npz"
                np.savez(os.path.join(staging, file), **_arrays(state, partition))
                description["partitions"].append(
                    {
                        "name": partition.name,
                        "rows": partition.rows,
                        "file": file,
                        "requeue": requeue.get(partition.name, np.zeros(0, np.int64)).tolist(),
                        "segment_columns": [[row, list(names)] for row, names in partition.segment_columns.items()],
                    }
                )
        with open(os.path.join(staging, "dock.json"), "w", encoding="utf-8") as f:
            json.dump(description, f, indent=1)
        _swap_in(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def load_state(directory: str | os.PathLike[str]) -> DockState:
    """The dock state ``save_state`` wrote to ``directory`` (leases returned, stats reset)."""
    source = os.path.abspath(os.fspath(directory))
    if not os.path.isdir(source) and os.path.isdir(source + ".old"):
        source += ".old"  # a save was interrupted between its two renames
    path = os.path.join(source, "dock.json")
    try:
        with open(path, encoding="utf-8") as f:
            description = json.load(f)
    except FileNotFoundError:
        raise ConfigError(
            f"{directory}: no dock checkpoint here (dock.json is missing); pass the directory given to Dock.save"
        ) from None
    except json.JSONDecodeError as error:
        raise CorruptStoreError(f"{path}: not valid JSON ({error}); the checkpoint is damaged") from None
    if description.get("format") not in (_FORMAT, _FORMAT_1):
        raise CorruptStoreError(
            f"{path}: format {description.get('format')!r}, expected {_FORMAT!r} (or the older {_FORMAT_1!r})"
        )
    try:
        columns = [
            Column(c["name"], c["dtype"], tuple(c["shape"]), c["ragged"], c.get("segmented", False))
            for c in description["columns"]
        ]
        state = DockState(
            columns,
            [],
            description["n_samples_per_prompt"],
            max_age=description["max_age"],
            max_staleness=description.get("max_staleness"),
            on_stale=description.get("on_stale", "requeue"),
            max_inflight_versions=description.get("max_inflight_versions"),
        )
        limits = description.get("consumer_limits", {})
        for consumer in description["consumers"]:
            state.add_consumer(consumer, limits.get(consumer))
        state.version = int(description.get("version", 0))
        expired = description.get("expired", {})
        state.expired_requeued = int(expired.get("requeued", 0))
        state.expired_dropped = int(expired.get("dropped", 0))
    except (KeyError, TypeError, ValueError) as error:
        raise CorruptStoreError(f"{path}: {error!r} in the dock description; the checkpoint is damaged") from None
    for entry in description["partitions"]:
        partition = Partition(entry["name"], entry["rows"])
        file = os.path.join(source, entry["file"])
        try:
            with np.load(file) as arrays:
                _restore(state, partition, dict(arrays), file)
            for row, names in entry.get("segment_columns", []):
                partition.segment_columns[int(row)] = tuple(names)
        except (OSError, ValueError, KeyError) as error:
            raise CorruptStoreError(f"{file}: cannot be read ({error}); the checkpoint is damaged") from None
        state.adopt(partition)
        if entry.get("requeue"):
            state.requeue(partition.name, np.array(entry["requeue"], dtype=np.int64))
    if description["closed"]:
        state.close()
    return state


def _describe(column: Column) -> dict:
    return {
        "name": column.name,
        "dtype": column.dtype.str,
        "shape": list(column.shape),
        "ragged": column.ragged,
        "segmented": column.segmented,
    }


def _arrays(state: DockState, partition: Partition) -> dict[str, np.ndarray]:
    """Everything of one partition as named arrays (ragged data compacted to row order)."""
    arrays = {
        "completed": partition.completed,
        "age": partition.age,
        "version_first": partition.version_first,
        "version_last": partition.version_last,
    }
    rows = sorted(partition.segments)
    table = np.array([pair for row in rows for pair in partition.segments[row]], dtype=np.int64).reshape(-1, 2)
    arrays["segments/rows"] = np.array(rows, dtype=np.int64)
    arrays["segments/counts"] = np.array([len(partition.segments[row]) for row in rows], dtype=np.int64)
    arrays["segments/lengths"] = table[:, 0].copy()
    arrays["segments/versions"] = table[:, 1].copy()
    for name, ready in partition.ready.items():
        arrays[f"ready/{name}"] = ready
    for name, consumed in partition.consumed.items():
        arrays[f"consumed/{name}"] = consumed
    for name, data in partition.fixed.items():
        arrays[f"fixed/{name}"] = data
    everything = np.arange(partition.rows)
    for name in partition.ragged:
        packed = partition.read(state.column(name), everything)
        arrays[f"ragged/{name}/values"] = packed.values
        arrays[f"ragged/{name}/lengths"] = packed.lengths
    return arrays


def _restore(state: DockState, partition: Partition, arrays: dict[str, np.ndarray], file: str) -> None:
    """Fill ``partition`` from its saved arrays, each checked to have the dtype and shape it was saved
    with (assigning another dtype would cast, and could wrap, silently)."""
    rows = (partition.rows,)
    columns = state.columns  # a name not among them is a KeyError: a damaged checkpoint

    def saved(key: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        array = arrays[key]
        if array.dtype != dtype or array.shape != shape:
            raise CorruptStoreError(
                f"{file}: {key} has dtype {array.dtype} and shape {array.shape}, the dock saves dtype {dtype} "
                f"and shape {shape}; the checkpoint is damaged"
            )
        return array

    partition.completed[:] = saved("completed", np.dtype(bool), rows)
    partition.age[:] = saved("age", np.dtype(np.int64), rows)
    if "version_first" in arrays:
        partition.version_first[:] = saved("version_first", np.dtype(np.int64), rows)
        partition.version_last[:] = saved("version_last", np.dtype(np.int64), rows)
        segment_rows = arrays["segments/rows"]
        counts = saved("segments/counts", np.dtype(np.int64), segment_rows.shape)
        total = (int(counts.sum()),)
        lengths = saved("segments/lengths", np.dtype(np.int64), total)
        versions = saved("segments/versions", np.dtype(np.int64), total)
        ends = np.cumsum(counts)
        for row, end, count in zip(segment_rows.tolist(), ends.tolist(), counts.tolist()):
            pairs = zip(lengths[end - count : end].tolist(), versions[end - count : end].tolist())
            partition.segments[int(row)] = list(pairs)
    everything = np.arange(partition.rows)
    for key in arrays:
        kind, _, name = key.partition("/")
        if kind == "ready":
            partition.ready_of(name)[:] = saved(key, np.dtype(bool), rows)
        elif kind == "consumed":
            partition.consumed_of(name)[:] = saved(key, np.dtype(bool), rows)
        elif kind == "fixed":
            column = columns[name]
            partition.write(column, everything, saved(key, column.dtype, rows + column.shape))
        elif kind == "ragged" and name.endswith("/values"):
            column = columns[name[: -len("/values")]]
            lengths = saved(f"ragged/{column.name}/lengths", np.dtype(np.int64), rows)
            values = saved(key, column.dtype, (len(arrays[key]), *column.shape))
            partition.write(column, everything, Packed(values, lengths))
    if "version_first" not in arrays:  # format 1: no versions were kept, so written rows count as version 0
        written = np.logical_or.reduce([partition.ready_of(name) for name in partition.ready] or [np.zeros(rows, bool)])
        partition.version_first[written] = 0
        partition.version_last[written] = 0


def _swap_in(staging: str, target: str) -> None:
    """Put ``staging`` where ``target`` is, keeping the old one until the new one is in place."""
    old = target + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(target):
        os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)
