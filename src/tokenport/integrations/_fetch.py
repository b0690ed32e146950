"""How StatefulLoader fetches a micro-batch: one ``get_batch`` call when that equals sample by sample.

torch's DataLoader calls ``dataset.__getitems__(ids)`` when the dataset has one; ``BatchFetch`` is
the object handed to it in place of the dataset, so the user's dataset stays as it is. The batch
path is taken only for dataset kinds that declare ``batch_path`` (``SampleDataset``: tokenport's
GPTDataset, PackedDataset, SFTDataset, and BlendedDataset when its children agree on every field),
whose ``get_batch`` rows are their samples: the batch then
equals torch's default collate of the samples (keys and their order, dtypes, shapes, values), checked
on sample 0; an unpacked SFTDataset's rows are its samples right-padded to the batch's longest.
``fields`` keeps the named fields only, before the batch leaves a worker process.
Without a caller's collate, a worker hands its batch over as one shared buffer (``_handoff``):
torch passes each tensor through its own file descriptor, the dominant cost of a batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ConfigError
from ..samples.base import SampleDataset
from ._handoff import SharedBatch

# (name, dtype, shape of one sample) of each field, in the order a sample lists them
Signature = tuple[tuple[str, str, tuple[int, ...]], ...]


def check_fields(fields: Sequence[str] | None) -> tuple[str, ...] | None:
    """``fields`` as a tuple of distinct names (None: all), or a ConfigError."""
    if fields is None:
        return None
    if isinstance(fields, str) or not all(isinstance(name, str) for name in fields):
        raise ConfigError(f"fields={fields!r}: expected a tuple of field names, e.g. ('tokens', 'labels')")
    names = tuple(fields)
    if not names:
        raise ConfigError("fields=(): name at least one field, or drop fields to keep them all")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"fields: {', '.join(repeated)} named more than once; name each field once")
    return names


def sample_names(dataset: Any) -> tuple[str, ...] | None:
    """The field names of sample 0 in its order (None for an empty dataset), or a ConfigError when
    samples are not dicts."""
    if len(dataset) == 0:
        return None
    sample = dataset[0]
    if not isinstance(sample, Mapping):
        raise ConfigError(
            f"fields=: the samples of {type(dataset).__name__} are {type(sample).__name__}, not dicts of fields; "
            "drop fields"
        )
    return tuple(sample)


def refuse_unknown(fields: tuple[str, ...], names: tuple[str, ...], dataset: Any) -> None:
    """A ConfigError naming the fields ``dataset``'s samples do not have, and the ones they have."""
    unknown = [name for name in fields if name not in names]
    if unknown:
        raise ConfigError(
            f"fields: {', '.join(unknown)} not among the fields of the {type(dataset).__name__}'s samples: "
            f"{', '.join(names)}"
        )


def batch_signature(dataset: Any) -> Signature | None:
    """The fields of ``dataset`` when one ``get_batch`` call per micro-batch equals its samples
    collated by torch's default, else None (keep fetching sample by sample)."""
    # a kind declares batch_path itself (not inherited: a subclass may change __getitem__ without get_batch)
    if not (isinstance(dataset, SampleDataset) and dataset.batch_path) or len(dataset) == 0:
        return None
    if dataset.datasets:  # a blend: its children must all take the batch path with one signature
        children = [batch_signature(child) for child in dataset.datasets if len(child)]
        if not children or children[0] is None or any(child != children[0] for child in children):
            return None  # a child fetched otherwise, or children with other fields: a batch would mix them
    batch = dataset.get_batch([0])
    sample = dataset[0]
    if set(sample) != set(batch):
        return None
    signature = []
    for name, value in sample.items():
        row = batch[name]
        if not (isinstance(row, np.ndarray) and row.shape[:1] == (1,)):
            return None
        one = np.asarray(value)
        if one.dtype != row.dtype or one.shape != row.shape[1:] or not np.array_equal(one, row[0]):
            return None
        signature.append((name, row.dtype.str, one.shape))
    return tuple(signature)


class FieldsOnly:
    """``dataset`` whose samples keep ``names`` only: the per-sample path with ``fields=``."""

    def __init__(self, dataset: Any, names: tuple[str, ...]) -> None:
        self.dataset = dataset
        self.names = names

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        """Sample ``idx`` with ``names`` only, in that order."""
        sample = self.dataset[idx]
        return {name: sample[name] for name in self.names}


class BatchFetch(FieldsOnly):
    """``dataset`` as torch's DataLoader sees it on the batch path: ``__getitems__`` is one
    ``get_batch`` call, keeping ``names`` in that order; ``read_ahead`` (a ReadAhead, set by the
    loader for each ``for``) is told of each batch first."""

    read_ahead: Any = None

    def __getitems__(self, ids: list[int]) -> dict[str, np.ndarray]:
        """Samples ``ids`` stacked on a leading axis, one array per name."""
        if self.read_ahead is not None:
            self.read_ahead.before(ids)
        batch = self.dataset.get_batch(ids)
        return {name: batch[name] for name in self.names}


def as_tensors(batch: dict[str, np.ndarray]) -> Any:
    """The collate of the batch path: in process, the arrays as tensors sharing their memory; in a
    worker process, a ``SharedBatch`` (one buffer to hand over, not one per field)."""
    import torch

    return shared_in_worker({name: torch.from_numpy(array) for name, array in batch.items()})


def collate_samples(samples: list[Any]) -> Any:
    """torch's default collate, its dict of tensors made a ``SharedBatch`` in a worker process:
    the collate of the per-sample path when the caller passes none."""
    import torch

    return shared_in_worker(torch.utils.data.default_collate(samples))


def shared_in_worker(batch: Any) -> Any:
    """``batch`` as a ``SharedBatch`` when it is a dict of CPU tensors made in a worker process, else itself."""
    import torch

    if torch.utils.data.get_worker_info() is None or type(batch) is not dict:
        return batch
    if not all(
        isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.layout == torch.strided for t in batch.values()
    ):
        return batch
    return SharedBatch.pack(batch)


def fetch_plan(dataset: Any, fields: tuple[str, ...] | None, default_collate_wanted: bool) -> tuple[Any, Any]:
    """(what the DataLoader reads, its collate or None for the caller's) for ``dataset``: the batch
    path when ``default_collate_wanted`` and ``batch_signature`` allow, else sample by sample."""
    signature = batch_signature(dataset) if default_collate_wanted else None
    if signature is not None:
        names = tuple(name for name, _, _ in signature)
        if fields is not None:
            refuse_unknown(fields, names, dataset)
        return BatchFetch(dataset, fields or names), as_tensors
    collate = collate_samples if default_collate_wanted else None
    if fields is None:
        return dataset, collate
    names_or_none = sample_names(dataset)
    if names_or_none is not None:
        refuse_unknown(fields, names_or_none, dataset)
    return FieldsOnly(dataset, fields), collate
