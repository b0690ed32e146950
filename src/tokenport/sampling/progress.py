"""How far training has gone through each dataset: epochs per child of a blend, and where each ended.

A blend mixes datasets of very different sizes, so "epoch" means little for the whole: a small
dataset may be on its fifth pass while a large one is a tenth through. Given the global sample
ids consumed so far, in consumption order (``consumed_stream()`` of ``PretrainingSampler``,
``RandomSampler`` or ``StreamSampler``), ``dataset_epochs`` counts each dataset's samples and finds
the consumed-sample count at which each of its epochs completed. It needs no state of its own:
a resumed run reports the same boundaries as an uninterrupted one.

Datasets are read by duck typing (this module imports nothing above numpy): a blend is anything
with ``datasets`` and a ``dataset_index`` (``BlendedDataset``); a dataset's epoch is its
``samples_per_epoch`` (``GPTDataset``: samples one pass over its tokens makes) or else its length.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._checks import check_sample_ids, is_int
from ..errors import ConfigError

__all__ = ["DatasetEpochs", "dataset_epochs"]


@dataclass(frozen=True)
class DatasetEpochs:
    """One dataset's share of the consumed samples.

    ``dataset`` is its position in the blend (0 for a dataset that is not a blend);
    ``boundaries[e]`` is the global consumed-sample count at which its epoch ``e + 1`` completed.
    """

    dataset: int
    samples: int
    samples_per_epoch: int
    boundaries: tuple[int, ...]

    @property
    def epochs(self) -> float:
        """Passes over this dataset so far, e.g. 2.25."""
        return self.samples / self.samples_per_epoch

    @property
    def completed_epochs(self) -> int:
        """Whole passes over this dataset so far."""
        return len(self.boundaries)


def dataset_epochs(dataset: Any, consumed: Iterable[np.ndarray]) -> tuple[DatasetEpochs, ...]:
    """Epochs per dataset after consuming the global sample ids ``consumed`` (chunks, in order)."""
    children, dataset_index = _children(dataset)
    per_epoch = np.array([_samples_per_epoch(child, position) for position, child in enumerate(children)])
    counts = np.zeros(len(children), dtype=np.int64)
    boundaries: list[list[int]] = [[] for _ in children]
    offset = 0
    for ids in consumed:
        ids = check_sample_ids(ids, len(dataset) if dataset_index is None else len(dataset_index))
        owners = np.zeros(len(ids), dtype=np.int64) if dataset_index is None else dataset_index[ids].astype(np.int64)
        added = np.bincount(owners, minlength=len(children))
        before, after = counts // per_epoch, (counts + added) // per_epoch
        crossing = np.flatnonzero(after > before)
        if len(crossing):
            order = np.argsort(owners, kind="stable")  # positions grouped by dataset, in stream order
            starts = np.concatenate(([0], np.cumsum(added)))
            for child in crossing.tolist():
                positions = order[starts[child] : starts[child + 1]]
                for epoch in range(int(before[child]) + 1, int(after[child]) + 1):
                    nth = epoch * int(per_epoch[child]) - int(counts[child])  # 1-based within this chunk
                    boundaries[child].append(offset + int(positions[nth - 1]) + 1)
        counts += added
        offset += len(ids)
    return tuple(
        DatasetEpochs(position, int(counts[position]), int(per_epoch[position]), tuple(boundaries[position]))
        for position in range(len(children))
    )


def _children(dataset: Any) -> tuple[list[Any], np.ndarray | None]:
    """The datasets to report on and, for a blend, the array mapping a sample id to its dataset."""
    if hasattr(dataset, "datasets") and hasattr(dataset, "dataset_index"):
        return list(dataset.datasets), np.asarray(dataset.dataset_index)
    return [dataset], None


def _samples_per_epoch(dataset: Any, position: int) -> int:
    """Samples in one epoch of ``dataset``: its ``samples_per_epoch``, else its length."""
    value = getattr(dataset, "samples_per_epoch", None)
    value = len(dataset) if value is None else value
    if not is_int(value) or value < 1:
        raise ConfigError(f"dataset {position} has samples_per_epoch={value!r}: an epoch must hold at least one sample")
    return int(value)
