"""TransferQueue's ``save_checkpoint`` / ``load_checkpoint`` for the adapter: the dock's data and the
adapter's bookkeeping, written and restored together.

A checkpoint directory holds ``metadata.json`` (TransferQueue's keys: ``storage_saved``, always true
since the dock is the storage, and ``user_metadata``, JSON only), ``transferqueue.json`` (the
bookkeeping, `transferqueue_checkpoint_schema`) and ``dock/`` (``Dock.save``'s checkpoint). A save is
published as TransferQueue publishes it: written whole into ``NAME.tmp``, the old checkpoint moved
to ``NAME.old``, ``NAME.tmp`` renamed to ``NAME``, ``NAME.old`` removed. An interrupted save is
finished or rolled back by the next save or load of ``NAME``: a ``NAME.old`` without ``NAME`` is the
valid checkpoint (renamed back), a ``NAME.old`` beside ``NAME`` is removed, a ``NAME.tmp`` is
removed. A directory that is not such a checkpoint is never replaced or removed.

A load reads and checks everything (both documents through the typed schema layer, the dock's
arrays, the bookkeeping against the dock's partitions and readiness) before the adapter changes: a
refused load changes nothing. The adapter then holds the checkpoint's state whole; an in-process
``Dock`` takes the loaded state in place, a ``RayDock`` is replaced by a new one.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from typing import Any

import msgspec
import numpy as np

from .._files import KillPoints, publish_mode
from .._schema import decode, encode
from ..errors import ConfigError, CorruptStoreError, StorageError
from .checkpoint import checkpoint_path, load_state
from .checkpoint_values import json_problem
from .dock import Dock
from .schema import BFLOAT16, OBJECT, Column
from .state import DockState
from .swap import swap_in
from .transferqueue_checkpoint_schema import Metadata, bookkeeping_of, restored

__all__ = ["KILL_AT", "CheckpointNotFound", "NotInitialized", "load", "save"]

log = logging.getLogger(__name__)

KILL_AT = "TOKENPORT_TQ_CHECKPOINT_KILL_AT"
"""Directed-kill tests set this to N: the process ends (``os._exit``) at the N-th step of a save."""
_kill_point = KillPoints(KILL_AT)

METADATA = "metadata.json"
BOOKKEEPING = "transferqueue.json"
DOCK = "dock"
_REMEDY = "the checkpoint is damaged: load an earlier one, or start afresh"


class NotInitialized(ConfigError, RuntimeError):
    """A checkpoint call before ``init`` (TransferQueue raises a RuntimeError there)."""


class CheckpointNotFound(StorageError, FileNotFoundError):
    """No checkpoint (or no ``metadata.json``) where a load looked (TransferQueue: FileNotFoundError)."""


def save(client: Any, directory: Any, include_storage: bool = True, metadata: Any = None) -> None:
    """Write the adapter's dock and bookkeeping to ``directory`` (see the module docstring)."""
    target = checkpoint_path(directory, "checkpoint_dir")
    user = _user_metadata(metadata)
    if not isinstance(include_storage, bool):
        raise ConfigError(f"include_storage={include_storage!r:.40} must be True or False")
    if not include_storage:
        log.warning("include_storage=False has no effect: the dock is the storage, and its data is always saved")
    if not hasattr(client.dock, "save"):
        raise ConfigError(f"the adapter's dock {client.dock!r:.60} has no save(): checkpoints need a Dock or RayDock")
    tmp, old = target + ".tmp", target + ".old"
    with client._lock:  # the bookkeeping and the dock captured together; one save or load at a time
        _refuse_foreign(target)
        _recover(target)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            os.mkdir(tmp)
            publish_mode(tmp, directory=True)
            _kill_point()
            book = bookkeeping_of(client._indexes, client._partitions, client._resets, client._column_of)
            client.dock.save(os.path.join(tmp, DOCK))
            _kill_point()
            _write(os.path.join(tmp, BOOKKEEPING), encode(book))
            _kill_point()
            text = msgspec.json.format(encode(Metadata(storage_saved=True, user_metadata=user)), indent=2)
            _write(os.path.join(tmp, METADATA), text)
            _kill_point()
            swap_in(tmp, target, _kill_point)  # _recover left no NAME.old: the same steps as before
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            if os.path.isdir(old) and not os.path.exists(target):
                os.rename(old, target)
            raise


def load(client: Any, directory: Any) -> None:
    """Give the adapter the state saved in ``directory`` (everything checked first; see the module docstring)."""
    target = checkpoint_path(directory, "checkpoint_dir")
    with client._lock:
        ray_dock = _ray_dock_class(client.dock)
        if not isinstance(client.dock, Dock) and ray_dock is None:
            raise ConfigError(f"the adapter's dock {client.dock!r:.60} cannot load a checkpoint: use a Dock or RayDock")
        _refuse_foreign(target)
        _recover(target)
        if not os.path.isdir(target):
            raise CheckpointNotFound(
                f"Checkpoint directory not found: {target}; pass the directory save_checkpoint wrote"
            )
        meta_path = os.path.join(target, METADATA)
        try:
            with open(meta_path, "rb") as f:
                meta = decode(f.read(), Metadata, where=meta_path, remedy=_REMEDY, error=CorruptStoreError)
            with open(os.path.join(target, BOOKKEEPING), "rb") as f:
                book = f.read()
        except FileNotFoundError as error:
            raise CheckpointNotFound(
                f"{os.path.basename(str(error.filename))} not found in {target}: pass a directory save_checkpoint "
                "wrote (TransferQueue's own checkpoints hold its controller's pickle, which the adapter never loads)"
            ) from None
        except OSError as error:
            raise CorruptStoreError(f"{target}: cannot be read ({error.strerror}); {_REMEDY}") from None
        if not meta.storage_saved:
            raise CorruptStoreError(f"{meta_path}: storage_saved is false, so it holds no data; {_REMEDY}")
        try:
            state = load_state(os.path.join(target, DOCK))
        except ConfigError as error:
            raise CorruptStoreError(f"{target}: {error}") from None
        book_path = os.path.join(target, BOOKKEEPING)
        parts = restored(book, book_path, state.partitions, lambda p, c, slots: _ready(state, p, c, slots))
        held = [*parts.column_of.items(), *(((n, f.kind), f.column) for p in parts.partitions.values()
                                             for n, f in p.fields.items())]  # fmt: skip
        columns = state.columns
        for (name, kind), column in held:
            if column in columns and not _fits(kind, columns[column]):
                raise CorruptStoreError(
                    f"{book_path}: field {name!r} is {kind[0]} {kind[1:]}, but the dock checkpoint's column "
                    f"{column!r} holds {columns[column].dtype}{' ragged' if columns[column].ragged else ''}; {_REMEDY}"
                )
        if unknown := sorted(set(parts.column_of.values()) - set(state.columns)):
            raise CorruptStoreError(
                f"{book_path}: columns: {unknown} are not columns of the dock checkpoint; {_REMEDY}"
            )
        old_dock = client.dock
        if ray_dock is not None:
            client.dock = ray_dock.from_dock(Dock.from_state(state))  # the last step that may fail
            if client.owns_dock:
                old_dock.shutdown()
        else:
            old_dock.adopt_state(state)
        client._indexes, client._partitions = parts.indexes, parts.partitions
        client._resets, client._column_of = parts.resets, parts.column_of


def _ready(state: DockState, partition: str, column: str, slots: np.ndarray) -> bool:
    """Whether ``column`` holds data at ``slots`` of ``partition`` in the loaded dock state."""
    ready = state.partition(partition).ready.get(column)
    return ready is not None and bool(ready[slots].all())


def _fits(kind: tuple[Any, ...], column: Column) -> bool:
    """Whether a dock ``column`` holds samples of ``kind`` as the adapter lays them out (a tampered
    dtype would otherwise come back as the column's, silently)."""
    if kind[0] not in ("scalar", "ragged"):
        return column.dtype == OBJECT
    import torch

    dtype = BFLOAT16 if kind[1] == torch.bfloat16 else torch.empty(0, dtype=kind[1]).numpy().dtype
    shape = kind[2] if kind[0] == "ragged" else ()
    return column.dtype == dtype and column.ragged == (kind[0] == "ragged") and tuple(column.shape) == tuple(shape)


def _ray_dock_class(dock: Any) -> Any:
    """``RayDock`` if ``dock`` is one (without importing Ray where nobody has), else None."""
    if "ray" not in sys.modules:
        return None
    from .ray import RayDock

    return RayDock if isinstance(dock, RayDock) else None


def _user_metadata(metadata: Any) -> dict[str, Any]:
    """``metadata`` checked to be JSON data keyed by strings (a copy), or ConfigError naming the key."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ConfigError(f"metadata={metadata!r:.60}: pass a dict of JSON values (or None)")
    for key, value in metadata.items():
        if not isinstance(key, str):
            raise ConfigError(f"metadata key {key!r:.40} is not a str: metadata.json keeps string keys only")
        if (problem := json_problem(value)) is not None:
            raise ConfigError(f"metadata[{key!r}]: {problem} is not JSON data; metadata.json keeps JSON values only")
    return json.loads(json.dumps(metadata))


def _ours(path: str) -> bool:
    """Whether ``path`` is a directory holding nothing but a checkpoint's files (some may be missing)."""
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    try:
        return set(os.listdir(path)) <= {METADATA, BOOKKEEPING, DOCK}
    except OSError:
        return False


def _refuse_foreign(target: str) -> None:
    """Refuse to touch ``target`` (or its ``.tmp``/``.old``) when it exists and is not a checkpoint."""
    for path in (target, target + ".tmp", target + ".old"):
        if os.path.lexists(path) and not _ours(path):
            raise ConfigError(
                f"{path} exists and is not a TransferQueue checkpoint of the adapter (only {METADATA}, "
                f"{BOOKKEEPING}, {DOCK}/): save_checkpoint never replaces it; pass another directory"
            )


def _recover(target: str) -> None:
    """Finish or roll back a save of ``target`` that was cut short (see the module docstring)."""
    tmp, old = target + ".tmp", target + ".old"
    if os.path.isdir(old):
        if os.path.exists(target):
            shutil.rmtree(old)  # cut after the new checkpoint was in place
        else:
            os.rename(old, target)  # cut between the renames: the old checkpoint is the valid one
    if os.path.isdir(tmp):
        shutil.rmtree(tmp)  # cut before it was published: rolled back


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
