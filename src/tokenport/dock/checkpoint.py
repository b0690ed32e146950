"""Save a dock's state to a directory and load it back, so a training restart keeps its rollouts.

A checkpoint is ``dock.json`` (schema, partitions, format) plus one ``.npz`` per partition: the
data (ragged columns compacted to their rows), readiness, consumption, finished flags and ages.
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

_FORMAT = "tokenport.dock-checkpoint/1"


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
                "columns": [_describe(column) for column in state.columns.values()],
                "partitions": [],
            }
            for number, partition in enumerate(state.each_partition()):
                file = f"partition-{number:05d}.npz"
                np.savez(os.path.join(staging, file), **_arrays(state, partition))
                description["partitions"].append({"name": partition.name, "rows": partition.rows, "file": file})
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
    if description.get("format") != _FORMAT:
        raise CorruptStoreError(f"{path}: format {description.get('format')!r}, expected {_FORMAT!r}")
    columns = [Column(c["name"], c["dtype"], tuple(c["shape"]), c["ragged"]) for c in description["columns"]]
    state = DockState(
        columns, description["consumers"], description["n_samples_per_prompt"], max_age=description["max_age"]
    )
    for entry in description["partitions"]:
        partition = Partition(entry["name"], entry["rows"])
        file = os.path.join(source, entry["file"])
        try:
            with np.load(file) as arrays:
                _restore(state, partition, dict(arrays), file)
        except (OSError, ValueError, KeyError) as error:
            raise CorruptStoreError(f"{file}: cannot be read ({error}); the checkpoint is damaged") from None
        state.adopt(partition)
    if description["closed"]:
        state.close()
    return state


def _describe(column: Column) -> dict:
    return {"name": column.name, "dtype": column.dtype.str, "shape": list(column.shape), "ragged": column.ragged}


def _arrays(state: DockState, partition: Partition) -> dict[str, np.ndarray]:
    """Everything of one partition as named arrays (ragged data compacted to row order)."""
    arrays = {"completed": partition.completed, "age": partition.age}
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


def _swap_in(staging: str, target: str) -> None:
    """Put ``staging`` where ``target`` is, keeping the old one until the new one is in place."""
    old = target + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(target):
        os.rename(target, old)
    os.rename(staging, target)
    shutil.rmtree(old, ignore_errors=True)
