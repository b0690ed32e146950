"""Save a dock's state to a directory and load it back, so a training restart keeps its rollouts.

A checkpoint is ``dock.json`` (schema, partitions, format) plus one ``.npz`` per partition: the
data (ragged columns compacted to their rows; bfloat16 columns as their raw bits; object columns as
one JSON text per row, refused at save when a value is not JSON data: nothing is pickled),
readiness, consumption, finished flags, ages, the rows dropped as stale, each row's version span
and segments; ``dock.json`` also keeps the current version, the staleness
policy, the expiry counters and the requeued rows not yet handed back. Checkpoints of format 1
(before versions) still load: their written rows get version 0.
Leases are not saved: rows out on lease at save time come back unconsumed, as if the lease had
expired, so a restarted stage gets them again; the loaded dock numbers its leases from a random
point, so an id a holder kept from before the restart names no lease of it (its ack is refused).
Writing goes to a fresh sibling directory (``NAME.saving-PID-*``) that then replaces the old
checkpoint by renames; a crash leaves either the old or the new one, and the next save or load
removes the folders of saves whose process is dead.

Loading trusts nothing: ``dock.json`` is read through its typed schema (``checkpoint_schema``) and
every array is checked (its key, dtype, shape and values) before a partition is built from it; a
damaged checkpoint is one CorruptStoreError naming the file and the field, and builds no dock.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from .._files import KillPoints, process_alive, publish_mode
from ..errors import ConfigError, CorruptStoreError
from .checkpoint_schema import (
    FORMAT,
    PARTITION_FILE,
    ColumnEntry,
    Description,
    Expired,
    PartitionEntry,
    description_bytes,
    description_of,
)
from .checkpoint_values import json_texts, json_values
from .ragged import Packed
from .schema import OBJECT, Column, dtype_name
from .state import DockState
from .storage import Partition
from .swap import swap_in

__all__ = ["KILL_AT", "checkpoint_path", "load_state", "save_state"]

KILL_AT = "TOKENPORT_DOCK_KILL_AT"
"""Directed-kill tests set this to N: the process ends (``os._exit``) at the N-th step of a save."""
_kill_point = KillPoints(KILL_AT)

_SEGMENT_ARRAYS = ("rows", "counts", "lengths", "versions")
_DAMAGED = "the checkpoint is damaged: load an earlier one, or start the dock afresh"


def save_state(state: DockState, directory: str | os.PathLike[str]) -> None:
    """Write a dock's ``state`` to ``directory`` (an earlier checkpoint there is replaced whole; anything
    else there is refused, never replaced)."""
    target = checkpoint_path(directory)
    parent = os.path.dirname(target)
    for path in (target, target + ".old"):
        if os.path.lexists(path) and not _holds_checkpoint(path):
            raise ConfigError(
                f"{path} exists and is not a dock checkpoint (only dock.json and partition-*.npz): Dock.save "
                "replaces a checkpoint whole, so pass a new directory or one Dock.save wrote"
            )
    os.makedirs(parent, exist_ok=True)
    _remove_stale_saves(target)
    staging = tempfile.mkdtemp(prefix=f"{os.path.basename(target)}.saving-{os.getpid()}-", dir=parent)
    try:
        publish_mode(staging, directory=True)
        _kill_point()
        with state.lock:
            requeue = state.expired()  # handed back below, into the live state too
            for name, rows in requeue.items():
                state.requeue(name, rows)
            partitions = []
            for number, partition in enumerate(state.each_partition()):
                file = f"partition-{number:05d}.npz"
                np.savez(os.path.join(staging, file), **cast(dict[str, Any], _arrays(state, partition)))
                _kill_point()
                partitions.append(
                    PartitionEntry(
                        name=partition.name,
                        rows=partition.rows,
                        file=file,
                        requeue=requeue.get(partition.name, np.zeros(0, np.int64)).tolist(),
                        segment_columns=[(row, list(names)) for row, names in partition.segment_columns.items()],
                    )
                )
            description = Description(
                format=FORMAT,
                n_samples_per_prompt=state.n_samples_per_prompt,
                max_age=state.max_age,
                closed=state.closed,
                consumers=state.consumers,
                consumer_limits=state.consumer_limits,
                version=state.version,
                max_staleness=state.max_staleness,
                on_stale=state.on_stale,  # type: ignore[arg-type]
                max_inflight_versions=state.max_inflight_versions,
                expired=Expired(requeued=state.expired_requeued, dropped=state.expired_dropped),
                columns=[_describe(column) for column in state.columns.values()],
                partitions=partitions,
            )
        with open(os.path.join(staging, "dock.json"), "wb") as f:
            f.write(description_bytes(description))
        _kill_point()
        swap_in(staging, target, _kill_point)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def load_state(directory: str | os.PathLike[str]) -> DockState:
    """The dock state ``save_state`` wrote to ``directory`` (leases returned, stats reset)."""
    source = checkpoint_path(directory)
    _remove_stale_saves(source)
    if not os.path.isdir(source) and os.path.isdir(source + ".old"):
        source += ".old"  # a save was interrupted between its two renames
    path = os.path.join(source, "dock.json")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except (FileNotFoundError, NotADirectoryError):
        raise ConfigError(
            f"{directory}: no dock checkpoint here (dock.json is missing); pass the directory given to Dock.save"
        ) from None
    except OSError as error:
        raise CorruptStoreError(f"{path}: cannot be read ({error.strerror}); {_DAMAGED}") from None
    description = description_of(data, path)
    try:
        columns = [Column(c.name, c.dtype, tuple(c.shape), c.ragged, c.segmented) for c in description.columns]
        state = DockState(
            columns,
            [],
            description.n_samples_per_prompt,
            max_age=description.max_age,
            max_staleness=description.max_staleness,
            on_stale=description.on_stale,
            max_inflight_versions=description.max_inflight_versions,
        )
        for consumer in description.consumers:
            state.add_consumer(consumer, description.consumer_limits.get(consumer))
    except ConfigError as error:
        raise CorruptStoreError(f"{path}: {error}; {_DAMAGED}") from None
    state.version = description.version
    state.expired_requeued = description.expired.requeued
    state.expired_dropped = description.expired.dropped
    for entry in description.partitions:
        file = os.path.join(source, entry.file)
        partition = _restore(state, description, entry, _read_arrays(file), file)
        state.adopt(partition)
        if entry.requeue:
            state.requeue(partition.name, np.array(entry.requeue, dtype=np.int64))
    if description.closed:
        state.close()
    state.renumber_leases()  # the saved dock's holders may still hold its lease ids
    return state


def checkpoint_path(directory: Any, name: str = "directory") -> str:
    """The absolute path of a checkpoint directory given as argument ``name`` (never a root or "")."""
    try:
        path = os.fspath(directory)
    except TypeError:
        raise ConfigError(f"{name}={directory!r:.60}: pass the path of a checkpoint directory") from None
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"{name}={directory!r:.60}: pass the path of a checkpoint directory as a non-empty str")
    target = os.path.abspath(path)
    if os.path.dirname(target) == target:
        raise ConfigError(f"{name}={directory!r}: a filesystem root cannot be a checkpoint; pass a directory in it")
    return target


def _holds_checkpoint(path: str) -> bool:
    """Whether ``path`` is a directory holding nothing but a checkpoint's files (some may be missing:
    an interrupted save or removal), so replacing or removing it loses nothing else."""
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    try:
        names = os.listdir(path)
    except OSError:
        return False
    return all(name == "dock.json" or PARTITION_FILE.fullmatch(name) for name in names)


def _describe(column: Column) -> ColumnEntry:
    return ColumnEntry(
        name=column.name,
        dtype=dtype_name(column.dtype),
        shape=list(column.shape),
        ragged=column.ragged,
        segmented=column.segmented,
    )


def _arrays(state: DockState, partition: Partition) -> dict[str, np.ndarray]:
    """Everything of one partition as named arrays (ragged data compacted to row order)."""
    arrays = {
        "completed": partition.completed,
        "age": partition.age,
        "dropped": partition.dropped,
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
        if data.dtype == OBJECT:  # Python values: as JSON text, never pickled
            arrays[f"json/{name}"] = json_texts(data, name)
        else:
            arrays[f"fixed/{name}"] = data
    everything = np.arange(partition.rows)
    for name in partition.ragged:
        packed = cast(Packed, partition.read(state.column(name), everything))  # a ragged column reads as Packed
        arrays[f"ragged/{name}/values"] = packed.values
        arrays[f"ragged/{name}/lengths"] = packed.lengths
    return arrays


def _read_arrays(file: str) -> dict[str, np.ndarray]:
    """Every array of a partition's ``.npz`` (no pickles), or a CorruptStoreError naming it."""
    try:
        loaded = np.load(file, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # one .npy array, not an archive
            raise ValueError("not an .npz archive")
        with loaded as archive:
            return {key: archive[key] for key in archive.files}
    except FileNotFoundError:
        raise CorruptStoreError(f"{file}: missing; {_DAMAGED}") from None
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as error:
        raise CorruptStoreError(f"{file}: cannot be read ({error}); {_DAMAGED}") from None


class _Saved:
    """A partition's saved arrays, each handed out checked: present, of the dtype and shape the dock
    saves (assigning another dtype would cast, and could wrap, silently), at least its least value."""

    def __init__(self, arrays: dict[str, np.ndarray], file: str) -> None:
        self.arrays, self.file = arrays, file

    def refuse(self, key: str, problem: str) -> CorruptStoreError:
        return CorruptStoreError(f"{self.file}: {key} {problem}; {_DAMAGED}")

    def __call__(self, key: str, dtype: np.dtype, shape: tuple[int, ...], minimum: int | None = None) -> np.ndarray:
        if key not in self.arrays:
            raise self.refuse(key, "is missing")
        array = self.arrays[key]
        if array.dtype != dtype or array.shape != shape:
            raise self.refuse(
                key,
                f"has dtype {array.dtype} and shape {array.shape}, the dock saves dtype {dtype} and shape {shape}",
            )
        if minimum is not None and array.size and int(array.min()) < minimum:
            raise self.refuse(key, f"holds {int(array.min())}, below its least value {minimum}")
        return array


def _restore(
    state: DockState, description: Description, entry: PartitionEntry, arrays: dict[str, np.ndarray], file: str
) -> Partition:
    """A partition built from its saved arrays, each checked first: its key names a field the dock
    saves, its dtype and shape are those it was saved with, its values are in range and agree with
    ``dock.json``."""
    saved = _Saved(arrays, file)
    versioned = description.format == FORMAT
    expected = _expected_keys(state, versioned)
    for key in arrays:
        if key not in expected:
            raise saved.refuse(key, "is no field of this dock's checkpoint (unknown column, consumer or array)")
    partition = Partition(entry.name, entry.rows)
    _restore_rows(state, partition, entry, saved, versioned)
    _restore_data(state, partition, saved)
    _check_agreement(partition, saved)
    if not versioned:  # format 1: no versions were kept, so written rows count as version 0
        written = np.logical_or.reduce([*partition.ready.values(), np.zeros(entry.rows, bool)])
        partition.version_first[written] = 0
        partition.version_last[written] = 0
    return partition


def _expected_keys(state: DockState, versioned: bool) -> set[str]:
    """The arrays a partition of this dock's checkpoint may hold."""
    expected = {"completed", "age", "dropped"}  # "dropped": optional (checkpoints before it dropped none)
    if versioned:
        expected |= {"version_first", "version_last", *(f"segments/{k}" for k in _SEGMENT_ARRAYS)}
    for name, column in state.columns.items():
        expected.add(f"ready/{name}")
        if column.ragged:
            expected |= {f"ragged/{name}/values", f"ragged/{name}/lengths"}
        else:
            expected.add(f"json/{name}" if column.dtype == OBJECT else f"fixed/{name}")
    return expected | {f"consumed/{name}" for name in state.consumers}


def _restore_rows(
    state: DockState, partition: Partition, entry: PartitionEntry, saved: _Saved, versioned: bool
) -> None:
    """Per row: finished flags, ages, the rows dropped as stale, version spans and segments."""
    rows = (entry.rows,)
    completed = saved("completed", np.dtype(bool), rows)
    partition.completed[:] = completed
    partition.age[:] = saved("age", np.dtype(np.int64), rows, 0)
    if "dropped" in saved.arrays:
        dropped = saved("dropped", np.dtype(bool), rows)
        if np.any(dropped & ~completed):
            raise saved.refuse("dropped", f"marks row {int(np.argmax(dropped & ~completed))} dropped but not finished")
        partition.dropped[:] = dropped
    if versioned:
        first = saved("version_first", np.dtype(np.int64), rows, -1)
        last = saved("version_last", np.dtype(np.int64), rows, -1)
        if np.any((first < 0) != (last < 0)) or np.any(first > last) or (last.size and int(last.max()) > state.version):
            raise saved.refuse(
                "version_first/version_last",
                f"do not describe version spans (-1 for none, oldest <= newest <= the current {state.version})",
            )
        partition.version_first[:] = first
        partition.version_last[:] = last
        _restore_segments(partition, entry, saved, saved.refuse, state.version)


def _restore_data(state: DockState, partition: Partition, saved: _Saved) -> None:
    """Readiness, consumption and every column's data."""
    rows, columns, everything = (partition.rows,), state.columns, np.arange(partition.rows)
    for key, texts in saved.arrays.items():
        kind, _, name = key.partition("/")
        if kind == "ready":
            partition.ready_of(name)[:] = saved(key, np.dtype(bool), rows)
        elif kind == "consumed":
            partition.consumed_of(name)[:] = saved(key, np.dtype(bool), rows)
        elif kind == "fixed":
            partition.write(columns[name], everything, saved(key, columns[name].dtype, rows + columns[name].shape))
        elif kind == "json":
            if texts.dtype.kind != "U" or texts.shape != rows:
                raise saved.refuse(
                    key, f"has dtype {texts.dtype} and shape {texts.shape}, the dock saves text, shape {rows}"
                )
            partition.write(columns[name], everything, json_values(texts, f"{saved.file}: {key}", _DAMAGED))
    for name, column in columns.items():
        values_key, lengths_key = f"ragged/{name}/values", f"ragged/{name}/lengths"
        if values_key not in saved.arrays and lengths_key not in saved.arrays:
            continue
        lengths = saved(lengths_key, np.dtype(np.int64), rows, 0)
        total = int(lengths.sum(dtype=np.uint64)) if lengths.size else 0
        values = saved(values_key, column.dtype, (total, *column.shape))
        partition.write(column, everything, Packed(values, lengths))


def _check_agreement(partition: Partition, saved: _Saved) -> None:
    """Every ready cell has data, and an appended row's items are its segments' items."""
    for name, ready in partition.ready.items():
        if ready.any() and name not in partition.fixed and name not in partition.ragged:
            raise saved.refuse(
                f"ready/{name}", f"marks row {int(np.argmax(ready))} ready, but the column's data is missing"
            )
    for row, names in partition.segment_columns.items():
        items = sum(length for length, _ in partition.segments[row])
        for name in names:
            held = int(partition.ragged[name].lengths[row]) if name in partition.ragged else 0
            if held != items:
                raise saved.refuse(f"ragged/{name}/lengths", f"gives row {row} {held} items, its segments {items}")


def _restore_segments(
    partition: Partition,
    entry: PartitionEntry,
    saved: Callable[..., np.ndarray],
    refuse: Callable[[str, str], CorruptStoreError],
    version: int,
) -> None:
    """The segments of appended rows: (items, version) per segment, in the order appended."""
    int64 = np.dtype(np.int64)
    count = len(entry.segment_columns)
    segment_rows = saved("segments/rows", int64, (count,), 0)
    if sorted(segment_rows.tolist()) != sorted(row for row, _ in entry.segment_columns):
        raise refuse("segments/rows", "are not the rows dock.json lists under segment_columns")
    counts = saved("segments/counts", int64, (count,), 1)
    total = (int(counts.sum()),)
    lengths = saved("segments/lengths", int64, total, 1)
    versions = saved("segments/versions", int64, total, 0)
    if versions.size and int(versions.max()) > version:
        raise refuse("segments/versions", f"holds {int(versions.max())}, newer than the current version {version}")
    ends = np.cumsum(counts)
    for row, end, n in zip(segment_rows.tolist(), ends.tolist(), counts.tolist()):
        partition.segments[row] = list(zip(lengths[end - n : end].tolist(), versions[end - n : end].tolist()))
    for row, names in entry.segment_columns:
        partition.segment_columns[row] = tuple(names)


def _remove_stale_saves(target: str) -> None:
    """Remove the staging folders of saves to ``target`` whose process is dead (a killed save)."""
    parent, base = os.path.split(target)
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        owner = re.fullmatch(re.escape(base) + r"\.saving-(\d+)-[^/]*", name)
        path = os.path.join(parent, name)
        if owner and int(owner[1]) != os.getpid() and not process_alive(int(owner[1])) and _holds_checkpoint(path):
            shutil.rmtree(path, ignore_errors=True)
